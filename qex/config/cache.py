"""The parsed-config cache: the checked config as JSON, so that a command
does not import tomlkit and parse TOML (7-20 ms) while the file is unchanged.

Where: ``$XDG_CACHE_HOME/qex/config.json``, else ``~/.cache/qex/config.json``.
The directory must be a real directory of this user with mode 0700 and the
file a regular file of this user with mode 0600 (one link): anything else and
the cache is not read (a directory that fails the test is not written either).
It holds the last ``MAX_ENTRIES`` configs read, one per path.

An entry is used only when all of its key matches: the config's path as given
and its real path, the file's ``(st_dev, st_ino, st_size, st_mtime_ns,
st_ctime_ns)``, the qex version and the modification times of the modules that
give a config its meaning (``MEANING``: the table of keys, the reader, the
Config, this body, ``qex/base/units.py``). Any write to the file moves its
ctime (which no user can set back), a replaced file has another inode. On a
miss, or any doubt (a damaged or foreign cache, a failed read), the file is
parsed as it always was, with the same error messages.

An entry is written only after the file parsed and every value was checked
(a bad config is never cached), only when its timestamps are older than the
clock's granularity (``RACY_NS``, or ``COARSE_RACY_NS`` on a file system that
keeps whole seconds: a second write in the same tick would leave the stat
unchanged), and atomically (temp file, rename). It is not fsynced: after a
crash a torn cache is a miss, nothing more. No failure to read or write the
cache ever fails a command.

The body of an entry is the checked values the file sets, by Config field,
and the keys it sets (``body_of``, ``config_of``); each value must have the
type the table of keys (qex/config/keys.py) gives its field.

The file is written with its own temp file and rename, not with the state
directory's ``qex.store.fs.write_atomic``: each write of that one is a crash
point of the crash tests (``QEX_CRASH_AT`` counts them, and whether a command
writes the cache depends on the config file's age, so the counts would depend
on timing), and its failure is a ``StoreError``, where a failed cache write
is nothing.
"""

from __future__ import annotations

import json
import os
import stat

from qex.config.keys import KEYS, Percent, PoolDef
from qex.config.model import Config, assemble

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Mapping

FILE = "config.json"
FORMAT = 1
MAX_ENTRIES = 8
MAX_BYTES = 256 * 1024
RACY_NS = 100_000_000  # 0.1 s: a clock tick is at most 10 ms on Linux
COARSE_RACY_NS = 3_000_000_000  # timestamps in whole seconds (FAT keeps 2 s)
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def directory(env: Mapping[str, str] = os.environ) -> str:
    base = env.get("XDG_CACHE_HOME")
    if not base or not os.path.isabs(base):
        home = env.get("HOME") or os.path.expanduser("~")
        base = os.path.join(home, ".cache")
    return os.path.join(base, "qex")


def key_of(path: str) -> dict | None:
    """The key of the config at ``path`` as it is now; None when there is no
    regular file there (the caller reads it and says what is wrong)."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return {"path": path, "real": real, "stat": stat_key(st), "code": _code_stamp()}


def stat_key(st: os.stat_result) -> list:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def lookup(path: str, env: Mapping[str, str] = os.environ, out: list | None = None) -> dict | None:
    """The cached body for the config at ``path``, or None (then parse it).
    ``out`` receives the key the body was found under."""
    key = key_of(path)
    if key is None:
        return None
    if out is not None:
        out.append(key)
    data = _read(directory(env))
    if data is None:
        return None
    for entry in data.get("entries", ()):
        if isinstance(entry, dict) and entry.get("key") == key and isinstance(entry.get("body"), dict):
            if not os.access(key["real"], os.R_OK):
                return None  # the file says why: let the reader fail as it always does
            return entry["body"]
    return None


def store(
    path: str, st: os.stat_result, body: dict, env: Mapping[str, str] = os.environ, now_ns: int | None = None
) -> None:
    """Remember ``body`` (JSON values) for the config at ``path`` read with
    stat ``st``; quietly does nothing when it cannot or should not."""
    import time

    now_ns = time.time_ns() if now_ns is None else now_ns
    whole_seconds = st.st_mtime_ns % 1_000_000_000 == 0 and st.st_ctime_ns % 1_000_000_000 == 0
    margin = COARSE_RACY_NS if whole_seconds else RACY_NS
    if max(st.st_mtime_ns, st.st_ctime_ns) > now_ns - margin:
        return  # changed too recently: another change in the same tick would look the same
    key = key_of(path)
    if key is None or key["stat"] != stat_key(st):
        return  # changed while it was read
    where = directory(env)
    if not _ensure_dir(where):
        return
    old = _read(where) or {}
    entries = [
        e
        for e in old.get("entries", ())
        if isinstance(e, dict) and isinstance(e.get("key"), dict) and e["key"].get("path") != path
    ]
    data = {"format": FORMAT, "entries": [{"key": key, "body": body}] + entries[: MAX_ENTRIES - 1]}
    _write(where, json.dumps(data, separators=(",", ":")).encode())


# ---- the files ------------------------------------------------------------------


def _trusted_dir(where: str) -> bool:
    try:
        st = os.lstat(where)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and st.st_mode & 0o077 == 0


def _ensure_dir(where: str) -> bool:
    try:
        os.makedirs(os.path.dirname(where), mode=0o700, exist_ok=True)
        os.mkdir(where, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    return _trusted_dir(where)


def _read(where: str) -> dict | None:
    """The cache file's content, if it is ours alone and whole."""
    if not _trusted_dir(where):
        return None
    try:
        fd = os.open(os.path.join(where, FILE), _OPEN)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (
            not stat.S_ISREG(st.st_mode)
            or st.st_uid != os.geteuid()
            or st.st_mode & 0o7077
            or st.st_nlink != 1
            or st.st_size > MAX_BYTES
        ):
            return None
        raw = os.read(fd, MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), list):
        return None
    return data


def _write(where: str, raw: bytes) -> None:
    tmp = os.path.join(where, f".{FILE}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    try:
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            os.write(fd, raw)
        finally:
            os.close(fd)
        os.rename(tmp, os.path.join(where, FILE))
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


# ---- the body: a file's checked values as JSON -----------------------------------

_TYPES = {k.attr: k.type for k in KEYS}
_KEYS = frozenset(k.key for k in KEYS)


def body_of(values: dict, keys: list[str]) -> dict:
    """The entry's body for a file that sets ``values`` (checked, by Config field) under ``keys``."""
    return {"values": {attr: _plain(v) for attr, v in values.items()}, "keys": list(keys)}


def config_of(path: str, body: dict) -> Config:
    """The Config an entry's body holds; raises (KeyError, TypeError, ValueError) on a damaged one."""
    values = {}
    for attr, value in body["values"].items():
        value = _held(value)
        if not _fits(value, _TYPES[attr]):  # (KeyError: not a field of the table)
            raise TypeError(attr)
        values[attr] = value
    keys = body["keys"]
    if not isinstance(keys, list) or not all(k in _KEYS for k in keys):
        raise ValueError("keys")
    config = assemble(path, values, keys)
    object.__setattr__(config, "from_cache", True)
    return config


def _plain(value):
    if isinstance(value, Percent):
        return {"percent": value.value}
    if isinstance(value, PoolDef):
        return {
            "pool": [
                value.name,
                value.count,
                list(value.devices),
                value.size_label,
                _plain(value.env),
                value.fence,
                list(value.ids),
                list(value.names),
            ]
        }
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _held(value):
    if isinstance(value, dict):
        if "percent" in value:
            return Percent(value["percent"])
        name, count, devices, size_label, env, fence, ids, names = value["pool"]
        return PoolDef(
            name=name,
            count=count,
            devices=tuple(devices),
            size_label=size_label,
            env=tuple(env) if isinstance(env, list) else env,
            fence=fence,
            ids=tuple(ids),
            names=tuple(names),
        )
    if isinstance(value, list):
        return tuple(_held(v) for v in value)
    return value


def _fits(value, kind) -> bool:
    """Whether ``value`` is of ``kind``, a type as the table writes one (``int | None``, ``tuple[str, ...]``)."""
    if getattr(kind, "__origin__", None) is tuple:
        return isinstance(value, tuple) and all(_fits(v, kind.__args__[0]) for v in value)
    if hasattr(kind, "__args__"):  # X | Y
        return any(_fits(value, k) for k in kind.__args__)
    if kind is int or kind is float:
        return isinstance(value, (int, float) if kind is float else int) and not isinstance(value, bool)
    return value is None if kind is type(None) else isinstance(value, kind)


# ---- the code: a cache made by other code is a miss --------------------------------

# The files of the modules that give a config its meaning (named, not imported):
# the table of keys and the values it holds, the reader, the Config, this body.
MEANING = (
    "config/keys.py",
    "config/text.py",
    "config/parse.py",
    "config/read.py",
    "config/model.py",
    "config/cache.py",
    "base/units.py",
)
_STAMP: list | None = None


def _code_stamp() -> list:
    """The qex version and the mtimes of the modules that give a config its
    meaning: a cache made by other code (an upgrade, an edit) is a miss."""
    global _STAMP
    if _STAMP is None:
        from qex.base.version import VERSION

        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        stamp: list = [VERSION]
        for name in MEANING:
            try:
                stamp.append(os.stat(os.path.join(package, name)).st_mtime_ns)
            except OSError:
                stamp.append(None)
        _STAMP = stamp
    return _STAMP
