"""The config file (``qex.toml``): where it is, and the config it gives.

A missing file means the defaults. A file that exists but cannot be used (a
directory, a FIFO, unreadable, not UTF-8, not TOML, an unknown table or key, a
bad value) raises ``ConfigError`` naming the file, the key and the remedy; it
never falls back to the defaults and never blocks (a FIFO is never opened).

The config is made of these modules, none of which this one imports until it
is needed:

- ``keys``: every key, declared once (its field, parser, default, words, doc),
  and the values they hold (``Percent``, ``PoolDef``, the peer directory);
- ``model``: ``Config``, its fields and defaults made from the keys;
- ``text``: the file's text, read without blocking, parsed as TOML;
- ``parse`` and ``read``: each value checked, each table and key known;
- ``cache``: the parsed-config cache (a hit imports neither tomlkit nor the reader),
  whose entries' body is made here (``_cache_body``, ``_from_cache_body``);
- ``show``: ``qex config show`` and the key lines of ``qex help config``.
"""

import os

from qex.base.paths import config_path
from qex.config.keys import KEYS, SOURCE_KEYS, Percent, PoolDef
from qex.config.model import Config, assemble


def load_config(path: str | None = None, env=os.environ) -> Config:
    """Read and check the config at ``path`` (default: ``config_path(env)``).

    A file unchanged since a command of this user read it comes from the
    parsed-config cache (``qex.config.cache``) without parsing TOML."""
    from qex.config import cache as config_cache

    path = config_path(env) if path is None else os.path.abspath(path)
    known = _CACHED.get(path)
    if known is not None and config_cache.key_of(path) == known[0]:
        return known[1]  # a supervisor reloads it at each job's start and end: one stat
    found: list = []
    body = config_cache.lookup(path, env, found)
    if body is not None:
        try:
            config = _from_cache_body(path, body)
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
    config_cache.store(path, stat_out[0], _cache_body(values, keys), env)
    return config


_READ: dict[str, tuple[str, Config]] = {}  # path -> (text, the Config it gave) in this process
_CACHED: dict[str, tuple[dict, Config]] = {}  # path -> (config_cache key, the Config of that entry)


# -- the parsed-config cache (qex.config.cache): the checked values as JSON ----

_CACHED_FIELDS = frozenset(k.attr for k in KEYS)  # the fields a file sets: a Config's but path, exists, sources


def _cache_body(values: dict, keys: list[str]) -> dict:
    def plain(value):
        if isinstance(value, Percent):
            return {"percent": value.value}
        if isinstance(value, PoolDef):
            return {"pool": [value.name, value.count, list(value.devices), value.size_label, value.env]}
        if isinstance(value, tuple):
            return [plain(v) for v in value]
        return value

    return {"values": {attr: plain(v) for attr, v in values.items()}, "keys": list(keys)}


def _from_cache_body(path: str, body: dict) -> Config:
    """The Config a cache entry holds; raises (KeyError, TypeError, ValueError) on a damaged one."""
    values = {}
    for attr, value in body["values"].items():
        if attr not in _CACHED_FIELDS:
            raise KeyError(attr)
        if isinstance(value, dict):
            value = Percent(value["percent"])
        elif attr == "pools":
            value = tuple(PoolDef(name=n, count=c, devices=tuple(d), size_label=z, env=e)
                          for n, c, d, z, e in (p["pool"] for p in value))
        elif isinstance(value, list):
            value = tuple(value)
        values[attr] = value
    keys = body["keys"]
    if not isinstance(keys, list) or not all(k in SOURCE_KEYS for k in keys):
        raise ValueError("keys")
    config = assemble(path, values, keys)
    object.__setattr__(config, "from_cache", True)
    return config
