"""The config file (``qex.toml``): where it is, and the config it gives.

A missing file means the defaults. A file that exists but cannot be used (a
directory, a FIFO, unreadable, not UTF-8, not TOML, an unknown table or key, a
bad value, a file or directory that another user could change) raises
``ConfigError`` naming the file, the key and the remedy; it never falls back
to the defaults and never blocks (a FIFO is never opened).

The config is made of these modules, none of which this one imports until it
is needed:

- ``keys``: every key, declared once (its field, parser, default, words, doc),
  and the values they hold (``Percent``, ``PoolDef``, the peer directory);
- ``model``: ``Config``, its fields and defaults made from the keys;
- ``trust``: who could change the file: only the user or root, else refused;
- ``text``: the file's text, read without blocking, parsed as TOML;
- ``parse`` and ``read``: each value checked, each table and key known;
- ``cache``: the parsed-config cache (a hit imports neither tomlkit nor the reader);
- ``show``: ``qex config show`` and the key lines of ``qex help config``.
"""

from __future__ import annotations

import os

from qex.base.paths import config_path
from qex.config.model import Config, assemble

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Mapping


def load_config(path: str | None = None, env: Mapping[str, str] = os.environ) -> Config:
    """Read and check the config at ``path`` (default: ``config_path(env)``).

    A file that anyone but this user or root could change is refused
    (``qex.config.trust``), from the cache or not. A file unchanged since a
    command of this user read it comes from the parsed-config cache
    (``qex.config.cache``) without parsing TOML."""
    from qex.config import cache as config_cache
    from qex.config import trust

    path = config_path(env) if path is None else os.path.abspath(path)
    trust.check_path(path)  # on every load: a cached config too (a chmod of a directory moves no key)
    known = _CACHED.get(path)
    if known is not None and config_cache.key_of(path) == known[0]:
        return known[1]  # a supervisor reloads it at each job's start and end: one stat
    found: list = []
    body = config_cache.lookup(path, env, found)
    if body is not None:
        try:
            config = config_cache.config_of(path, body)
        except (KeyError, TypeError, ValueError, AttributeError):
            pass  # a damaged entry: parse the file
        else:
            _CACHED[path] = (found[0], config)  # the cache only holds a file that was not changing
            return config
    return _parse(path, env)


def _parse(path: str, env) -> Config:
    """The config at ``path``, read and checked (not from the cache), and cached."""
    from qex.config import cache as config_cache
    from qex.config import text as config_text

    stat_out: list = []
    text = config_text.read_text(path, stat_out)
    if text is None:
        return Config.default(path)
    known = _READ.get(path)
    if known is not None and known[0] == text:
        return known[1]  # a supervisor reads it at each job's start and end: parse a text once
    from qex.config import read

    values, keys = read.read(path, config_text.parse_toml(path, text))
    config = assemble(path, values, keys)
    _READ[path] = (text, config)
    config_cache.store(path, stat_out[0], config_cache.body_of(values, keys), env)
    return config


_READ: dict[str, tuple[str, Config]] = {}  # path -> (text, the Config it gave) in this process
_CACHED: dict[str, tuple[dict, Config]] = {}  # path -> (config_cache key, the Config of that entry)
