"""The admission turn: one admission at a time across the queues of the
machine (``admission``), by a lock on ``<peer dir>/.admit.lock`` that a pass
which may start something holds from reading the peers to publishing its
record, with a bounded wait.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time

from qex.users.peer_dir import ADMIT_LOCK, directory, open_dir

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context

ADMIT_WAIT = 0.5


class admission:
    """Held around read peers -> admit -> commit -> publish of a pass that may
    start something, so that two queues never admit against each other's old
    records (two 3-core jobs in a 4-core budget). Taken after the state lock,
    never before. Anyone can hold this file's lock (it must be readable to be
    lockable): after ``ADMIT_WAIT`` seconds a pass goes on without it, so a
    hostile holder slows passes down but never stops a queue."""

    def __init__(self, ctx: Context, wanted: bool):
        self.ctx, self.wanted, self.fd = ctx, wanted, None

    def __enter__(self):
        if self.wanted:
            try:
                self.fd = _take_admit_lock(directory(self.ctx))
            except OSError:
                self.fd = None
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _take_admit_lock(path: str) -> int | None:
    dfd, _problem, _ = open_dir(path, create=True)
    if dfd is None:
        return None
    try:
        fd = _open_admit_file(dfd)
    finally:
        os.close(dfd)
    if fd is None:
        return None
    deadline = time.monotonic() + ADMIT_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN) or time.monotonic() >= deadline:
                os.close(fd)
                return None
        time.sleep(0.002)


def _open_admit_file(dfd: int) -> int | None:
    """Open (or make) the lock file read-only: O_CREAT on another user's file in
    a sticky directory is refused where fs.protected_regular is set."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _ in range(3):
        try:
            fd = os.open(ADMIT_LOCK, flags, dir_fd=dfd)
        except FileNotFoundError:
            try:
                fd = os.open(ADMIT_LOCK, flags | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=dfd)
                os.fchmod(fd, 0o644)
            except FileExistsError:
                continue
        except OSError:
            return None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            return None
        return fd
    return None
