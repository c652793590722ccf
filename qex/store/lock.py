"""The state lock and the liveness locks, both plain ``flock``.

We call ``fcntl.flock`` directly instead of portalocker: on Linux portalocker
makes this same call, and importing it costs ~40 ms per command (its version
lookup imports importlib.metadata), which every agent command would pay.

An flock belongs to the open file description, which a forked child shares.
A child that must not hold a lock closes the descriptor; it never unlocks it
(unlocking in the child would release the parent's lock too).
"""

import errno
import fcntl
import os
import stat

from qex.base.errors import StoreError


class Busy(Exception):
    """``StateLock(wait=False)``: another process holds the lock."""


class StateLock:
    """The exclusive lock a pass holds on ``<state>/lock`` for milliseconds.
    ``wait=False``: raise ``Busy`` instead of waiting for it. ``outer``: the lock of
    the shared directory the state directory is in (``qex.store.members``), taken
    first and let go last: every member's pass holds it, so they admit one at a
    time. It is opened read-only (the members read it; only its maker writes it)."""

    def __init__(self, path: str, on_hold=None, wait: bool = True, outer: str | None = None):
        self.path = path
        self.fd: int | None = None
        self.outer_fd: int | None = None
        self.on_hold = on_hold  # called with the fd once held, and with None once let go
        self.wait = wait
        self.outer = outer

    def __enter__(self) -> "StateLock":
        if self.outer is not None:
            self.outer_fd = self._outer()
        try:
            return self._inner()
        except BaseException:
            self._let_outer_go()
            raise

    def _outer(self) -> int:
        try:
            fd = os.open(self.outer, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise StoreError(f"cannot open the shared queue's lock {self.outer}: {exc.strerror}; its owner "
                             f"repairs it with qex init --shared {os.path.dirname(self.outer)}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise StoreError(f"the shared queue's lock {self.outer} is not a regular file; its owner "
                             f"repairs it with qex init --shared {os.path.dirname(self.outer)}")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if self.wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise Busy(self.outer) from None
        return fd

    def _let_outer_go(self) -> None:
        fd, self.outer_fd = self.outer_fd, None
        if fd is not None:
            os.close(fd)

    def fds(self) -> tuple[int, ...]:
        """The descriptors this hold keeps (a child forked under it closes them)."""
        return tuple(fd for fd in (self.fd, self.outer_fd) if fd is not None)

    def _inner(self) -> "StateLock":
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o660)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StoreError(f"the queue lock {self.path} is a symbolic link; remove it "
                                 "(qex makes a new one)") from None
            raise StoreError(f"cannot open the queue lock {self.path}: {exc.strerror}; "
                             "check that the state directory is yours and writable") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise StoreError(f"the queue lock {self.path} is not a regular file; remove it "
                             "(qex makes a new one)")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if self.wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise Busy(self.path) from None
        self.fd = fd
        if self.on_hold is not None:
            self.on_hold(fd)
        return self

    def __exit__(self, *exc) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor releases the lock
            if self.on_hold is not None:
                self.on_hold(None)
        self._let_outer_go()


def hold(path: str, mode: int = 0o600) -> int | None:
    """Take an exclusive lock on ``path`` without waiting; return the fd, or None if held.

    ``O_NONBLOCK``: a FIFO planted at ``path`` (a shared directory) never hangs the open.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    try:
        if mode != 0o600:  # (others read it: the mode asked for, whatever the umask)
            st = os.fstat(fd)
            if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) != mode:
                os.fchmod(fd, mode)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    return fd


def is_held(path: str) -> bool:
    """True while some process holds ``path`` locked (a live supervisor or waker).

    A missing file means nobody ever held it: not held.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    finally:
        os.close(fd)
    return False
