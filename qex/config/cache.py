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
give a config its meaning (``MEANING``). Any write to the file moves its ctime (which no user can set back), a replaced file has
another inode. On a miss, or any doubt (a damaged or foreign cache, a failed
read), the file is parsed as it always was, with the same error messages.

An entry is written only after the file parsed and every value was checked
(a bad config is never cached), only when its timestamps are older than the
clock's granularity (``RACY_NS``, or ``COARSE_RACY_NS`` on a file system that
keeps whole seconds: a second write in the same tick would leave the stat
unchanged), and atomically (temp file, rename). It is not fsynced: after a
crash a torn cache is a miss, nothing more. No failure to read or write the
cache ever fails a command.
"""

import json
import os
import stat

FILE = "config.json"
FORMAT = 1
MAX_ENTRIES = 8
MAX_BYTES = 256 * 1024
RACY_NS = 100_000_000            # 0.1 s: a clock tick is at most 10 ms on Linux
COARSE_RACY_NS = 3_000_000_000   # timestamps in whole seconds (FAT keeps 2 s)
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def directory(env=os.environ) -> str:
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


def stat_key(st) -> list:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def lookup(path: str, env=os.environ, out: list | None = None) -> dict | None:
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


def store(path: str, st, body: dict, env=os.environ, now_ns: int | None = None) -> None:
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
    entries = [e for e in old.get("entries", ()) if isinstance(e, dict)
               and isinstance(e.get("key"), dict) and e["key"].get("path") != path]
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
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o7077
                or st.st_nlink != 1 or st.st_size > MAX_BYTES):
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


# The files of the modules that give a config its meaning (named, not imported):
# the table of keys, the Config, the reader, the cache's body (file.py), units.
MEANING = ("config/keys.py", "config/model.py", "config/text.py", "config/parse.py", "config/read.py",
           "config/file.py", "base/units.py")
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
