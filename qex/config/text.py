"""The config file's text: read without ever blocking, then parsed as TOML.

A file that exists but cannot be used (a directory, a FIFO, unreadable, not
UTF-8, not TOML, another user's or writable by others: ``qex.config.trust``)
raises ``ConfigError`` naming the file and the remedy; a FIFO is never
opened. tomlkit is imported only when there is a text to parse.
"""

from __future__ import annotations

import errno
import os
import stat

from qex.base import units
from qex.base.errors import ConfigError
from qex.config import trust

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from typing import NoReturn

MAX_CONFIG_BYTES = 1024 * 1024  # a config larger than this is a mistake, not a config


def fail_file(path: str, message: str) -> NoReturn:
    """Refuse the file as a whole: ``PATH is a directory, ...; remedy``."""
    raise ConfigError(f"{path} {message}")


class _Replaced(Exception):
    """The file at the path was replaced while it was read: read it again."""


def _again_if_stale(e: OSError, last: bool) -> None:
    if e.errno == errno.ESTALE and not last:
        raise _Replaced from None


def read_text(path: str, stat_out: list | None = None) -> str | None:
    """The file's text, or None when nothing is at ``path``. Never opens a
    FIFO or a device: the type is checked with ``stat`` first, and the open is
    non-blocking and re-checked with ``fstat``. ``stat_out`` receives the
    stat of the file read, taken before the read (the parsed-config cache
    stores only when the file still has it after the parse).

    A file replaced under its name meanwhile (an editor's save: a new file
    renamed over the old; on NFS, another machine's, whose old file then
    answers ESTALE) is read again from its name, as ``fs.read_bytes`` does
    for records, a few times before the command is refused."""
    from qex.store.fs import STALE_TRIES

    for _ in range(STALE_TRIES - 1):
        try:
            return _read_text(path, stat_out, last=False)
        except _Replaced:
            pass
    return _read_text(path, stat_out, last=True)


def _read_text(path: str, stat_out: list | None, last: bool) -> str | None:
    where = "set QEX_CONFIG to another file, or move this one away to use the defaults"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            fail_file(path, "is a symbolic link to a missing file; fix the link or remove it to use the defaults")
        return None
    except NotADirectoryError:
        fail_file(path, f"cannot be reached: a part of the path is a file, not a directory; {where}")
    except OSError as e:
        fail_file(path, f"cannot be examined ({e.strerror}); {where}")
    if stat.S_ISDIR(st.st_mode):
        fail_file(path, f"is a directory, not a file; write the config as a file at this path, or {where}")
    if not stat.S_ISREG(st.st_mode):
        kind = _file_kind(st.st_mode)
        fail_file(path, f"is a {kind}, not a regular file; replace it with a regular file, or {where}")
    if st.st_size > MAX_CONFIG_BYTES:
        fail_file(path, f"is {units.format_size(st.st_size)}, too large for a config (at most 1MB); {where}")
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    try:
        # The symlink (a dotfile manager's) is followed on purpose, once, by
        # realpath; O_NOFOLLOW then refuses a link swapped in after the stat.
        fd = os.open(os.path.realpath(path), flags)
    except PermissionError:
        fail_file(path, f"cannot be read (permission denied); make it readable (chmod u+r), or {where}")
    except OSError as e:
        _again_if_stale(e, last)
        fail_file(path, f"cannot be opened ({e.strerror}); {where}")
    try:
        st2 = os.fstat(fd)
        if not stat.S_ISREG(st2.st_mode) or (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino):
            if not last:
                raise _Replaced
            fail_file(path, "changed while qex was reading it; run the command again")
        trust.check_file(path, st2)  # the file read: the caller's or root's, and only theirs to write
        chunks, size = [], 0
        while size <= MAX_CONFIG_BYTES:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        _again_if_stale(e, last)
        fail_file(path, f"cannot be read ({e.strerror}); {where}")
    finally:
        os.close(fd)
    if stat_out is not None:
        stat_out.append(st2)
    if size > MAX_CONFIG_BYTES:
        fail_file(path, f"is too large for a config (at most 1MB); {where}")
    raw = b"".join(chunks)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        fail_file(path, f"is not UTF-8 text (byte {e.start + 1}, line {line}); save it as UTF-8")
    return text.removeprefix("\ufeff")


def printable(text: str) -> str:
    """What a parser's message echoes of the file, safe for a terminal (``qex.base.text``)."""
    from qex.base.text import plain

    return plain(text, limit=None)


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def parse_toml(path: str, text: str) -> dict:
    import tomlkit

    try:
        return tomlkit.parse(text).unwrap()
    except Exception as e:  # tomlkit raises ParseError, and others on odd input
        detail = printable(str(e))[:160] or type(e).__name__
        fail_file(path, f"is not valid TOML ({detail}); fix the syntax (see `qex help config`)")
