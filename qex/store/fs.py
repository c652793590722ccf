"""Safe file operations for a directory other people may write into.

Every write is temp -> fsync -> rename -> fsync(dir), so a reader sees the
old file or the new one, never a part. Every open refuses symlinks
(``O_NOFOLLOW``) and non-regular files, and never blocks on a FIFO.

When the writes become durable (the syncs left to a lock's release or to
``settle``, the syncer thread, ``syncfs``) is ``qex.store.syncs``'s: its calls
are named here too (``fs.settle``), as their callers know them.
"""

from __future__ import annotations

import errno
import json
import os
import stat

from qex.base.errors import StoreError
from qex.store.syncs import (  # noqa: F401 (their home: qex.store.syncs; callers name them fs.X)
    defer_syncs,
    describe_write_failure,
    free_deferred,
    free_later,
    free_replaced,
    libc_call,
    replacing,
    settle,
    sync_at_release,
    sync_in_background,
    syncfs,
    syncfs_in_background,
)

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from typing import Any

_CRASH = "QEX_CRASH_AT" in os.environ  # crash points for tests (qex.base.faults); off in normal use
if _CRASH:
    from qex.base import faults

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class NotRegular(OSError):
    """A path that is a FIFO, a directory, a device or a symlink."""


def open_regular(path: str, flags: int = _READ_FLAGS, mode: int = 0o600) -> int:
    """Open ``path`` as a regular file; refuse symlinks, FIFOs and devices."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegular(errno.ELOOP, "is a symbolic link", path) from None
        raise
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        os.close(fd)  # (ESTALE on NFS: the caller may try again, with no descriptor left behind)
        raise
    if not regular:
        os.close(fd)
        raise NotRegular(errno.EINVAL, "is not a regular file", path)
    return fd


def read_bytes(path: str, limit: int | None = None, owner: int | None = None) -> bytes:
    """The content of a regular file, at most ``limit`` bytes (+1 to detect more).

    With ``owner``: the file must belong to that uid, have one link, and be
    writable by nobody else (what it says must be that user's word alone).

    On NFS a file that another machine replaced (a record's rename) while this one
    held its name answers ESTALE (its ``fstat``): the name is looked up afresh and the
    file opened again, a few times. An open at once often finds the same stale file
    again (in the NFS guest of tests/vm/test_nfs.py, against a record rewritten every
    ~10 ms: 21 reads in 118 met it 8 opens in a row); a ``stat`` of the path first
    makes the kernel look the name up again on the server (its own retry of a path's
    ESTALE): then 3 opens at most in 203 reads.
    """
    for _ in range(STALE_TRIES - 1):
        try:
            return _read_bytes(path, limit, owner)
        except OSError as exc:
            if exc.errno != errno.ESTALE:
                raise
        try:
            os.stat(path, follow_symlinks=False)
        except OSError:
            pass  # (the next open says what is wrong)
    return _read_bytes(path, limit, owner)  # (the last try: its ESTALE is the caller's)


STALE_TRIES = 5


def _read_bytes(path: str, limit: int | None, owner: int | None) -> bytes:
    fd = open_regular(path)
    try:
        if owner is not None:
            st = os.fstat(fd)
            if st.st_uid != owner or st.st_nlink != 1 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise NotRegular(errno.EPERM, "is not owned by the job's owner alone (replaced by another user?)", path)
        chunks, total = [], 0
        while True:
            want = 1 << 20 if limit is None else min(1 << 20, limit + 1 - total)
            if want <= 0:
                break
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_json(path: str, limit: int = 16 << 20, owner: int | None = None) -> Any:
    """Parse a JSON file; raises OSError or ValueError (never hangs)."""
    data = read_bytes(path, limit, owner)
    if len(data) > limit:
        raise ValueError(f"larger than {limit} bytes")
    return json.loads(data)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(
    path: str, data: bytes, mode: int = 0o600, sync_dir: bool = True, sync: bool = True, exchange: bool = False
) -> None:
    """Write ``data`` so that readers see the old file or the new one, never a part.

    ``sync=False`` leaves the fsync to the caller, who must ``syncfs`` before
    anything depends on the file being durable (a bulk write: one flush for all).
    ``exchange`` (with ``sync=False``: a record a lazy commit rewrites, fsynced
    later if at all, ``Store.save_index_locked``): the new file takes the old one's
    place by ``renameat2(RENAME_EXCHANGE)``, and the old one, now at the temporary
    name, is removed. A rename over an existing file makes ext4 (``auto_da_alloc``)
    allocate and start writing the new file's blocks at once, and freeing the old
    one then frees allocated blocks (a discard, where the file system is mounted
    with ``discard``): ~0.2 of the ~0.3 ms of each such write here, under the state
    lock, for a record that the next state of the job replaces a moment later,
    never written out. An exchange is the same atomic swap for a reader.
    """
    directory, base = os.path.split(path)
    tmp = os.path.join(directory, f".{base}.{os.getpid()}.tmp")
    try:
        fd = _create_exclusive(tmp, mode)
        try:
            os.fchmod(fd, mode)  # the mode asked for, whatever the umask (a shared directory needs it)
            write_all(fd, data)
            if _CRASH:
                faults.hit("fs.after_write")
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if _CRASH:
            faults.hit("fs.after_fsync")
        if exchange and not sync and _exchanged(tmp, path):
            replacing(tmp)  # the old file, freed once the lock is let go
            os.unlink(tmp)
        else:
            replacing(path)
            os.rename(tmp, path)
        if _CRASH:
            faults.hit("fs.after_rename")
    except OSError as exc:
        unlink_quietly(tmp)
        raise StoreError(describe_write_failure(path, exc)) from None
    if sync_dir:
        fsync_dir(directory)


_RENAMEAT2 = None  # libc's renameat2, False where there is none (then a plain rename)
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def _exchanged(tmp: str, path: str) -> bool:
    """Swap ``tmp`` and ``path`` atomically; False (nothing done) where the kernel,
    the file system or libc cannot, or ``path`` is not a regular file (not there
    yet, or a link or directory planted there: the rename replaces or refuses it)."""
    global _RENAMEAT2
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
    except OSError:
        return False
    if _RENAMEAT2 is None:
        _RENAMEAT2 = libc_call("renameat2")
    if _RENAMEAT2 is False:
        return False
    return _RENAMEAT2(_AT_FDCWD, os.fsencode(tmp), _AT_FDCWD, os.fsencode(path), _RENAME_EXCHANGE) == 0


from qex.store.room import COMMIT_ROOM, LOG_ROOM, SUBMIT_ROOM  # noqa: E402,F401 (their home: qex.store.room)


def free_bytes(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def ensure_room(path: str, need: int) -> None:
    """Refuse (StoreError, disk full) when the disk of ``path`` has less than ``need`` bytes free."""
    free = free_bytes(path)
    if free is not None and free < need:
        raise StoreError(
            f"cannot write in {path}: the disk is full ({free >> 10} KiB free, qex keeps "
            f"{need >> 10} KiB for the records of running jobs); free some space "
            "(qex clean --auto removes old records)"
        )


def _create_exclusive(tmp: str, mode: int) -> int:
    """A new file at ``tmp``; a leftover (or planted) file there is removed first."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(tmp, flags, mode)
    except FileExistsError:
        os.unlink(tmp)
        return os.open(tmp, flags, mode)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` (``os.write`` may write less than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def json_bytes(obj: object) -> bytes:
    """The bytes of a JSON file qex writes: compact, keys sorted, one line."""
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode() + b"\n"


def write_json(path: str, obj: object, mode: int = 0o600, sync_dir: bool = True, sync: bool = True) -> None:
    write_atomic(path, json_bytes(obj), mode, sync_dir, sync)


def unlink_quietly(path: str) -> None:
    """Remove ``path`` if it can be; a file already gone (or not ours) is no error."""
    try:
        os.unlink(path)
    except OSError:
        pass


def ensure_private_dir(path: str, mode: int = 0o700) -> None:
    """Create ``path`` (and parents) if missing; refuse a symlink or a non-directory."""
    try:
        os.makedirs(path, mode=mode, exist_ok=True)
        st = os.lstat(path)
    except OSError as exc:
        raise StoreError(
            f"cannot create the state directory {path}: {exc.strerror}; set QEX_STATE_DIR to a directory you can write"
        ) from None
    if not stat.S_ISDIR(st.st_mode):
        raise StoreError(f"{path} is not a directory; set QEX_STATE_DIR to a directory qex can own")


def check_state_dir(path: str) -> os.stat_result:
    """Refuse a state directory that someone else could change under us; returns its lstat.

    A private one must belong to this user and be writable by nobody else. A
    shared one (``qex init --shared``: setgid and group-writable) may belong to
    another member and be group-writable (each member's pass then works in a
    directory of its own in it: ``qex.store.members``). None may be world-writable.
    """
    st = os.lstat(path)
    mode = stat.S_IMODE(st.st_mode)
    from qex.store.layout import is_shared

    shared = is_shared(st)
    if mode & stat.S_IWOTH:
        raise StoreError(
            f"the state directory {path} is writable by every user (mode {mode:o}), so anyone "
            f"could change the queue; make it private with chmod 700 {path}"
        )
    if shared:
        return st
    if st.st_uid != os.getuid():
        from qex.base.paths import user_name

        raise StoreError(
            f"the state directory {path} belongs to {user_name(st.st_uid)}, not to you "
            f"({user_name()}); set QEX_STATE_DIR to a directory of your own "
            "(a queue several users share is made with qex init --shared DIR)"
        )
    if mode & stat.S_IWGRP:
        raise StoreError(
            f"the state directory {path} is group-writable (mode {mode:o}) but is not a shared "
            f"queue; make it private with chmod 700 {path} "
            "(a queue several users share is made with qex init --shared DIR)"
        )
    return st
