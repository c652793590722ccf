"""The state lock and the liveness locks, both plain ``flock``.

We call ``fcntl.flock`` directly instead of portalocker: on Linux portalocker
makes this same call, and importing it costs ~40 ms per command (its version
lookup imports importlib.metadata), which every agent command would pay.

An flock belongs to the open file description, which a forked child shares.
A child that must not hold a lock closes the descriptor; it never unlocks it
(unlocking in the child would release the parent's lock too).

A held lock never hangs a command silently (``wait_lock``): after ``NOTICE``
seconds of waiting it says on stderr who holds it, and it gives up after
``timeout`` seconds with ``LockTimeout`` (121).
"""

import errno
import fcntl
import os
import stat

from qex.base.errors import LockTimeout, StoreError

NOTICE = 2.0  # seconds of waiting for a lock before qex says who holds it
DEFAULT_TIMEOUT = 60.0
ENV = "QEX_LOCK_TIMEOUT"
FOREVER = float("inf")
# Seconds a process waits for a lock before it gives up: --lock-timeout (the command
# line sets it, ``set_timeout``), else QEX_LOCK_TIMEOUT, else 60; None: not read yet.
# A background process (a supervisor, the waker) sets FOREVER: only it can write its
# job's end, and a pass it gave up would leave that end to reconcile, as "lost".
timeout: float | None = None


NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)  # a file system without flock (no_flock)


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
            raise StoreError(
                f"cannot open the shared queue's lock {self.outer}: {exc.strerror}; its owner "
                f"repairs it with qex init --shared {os.path.dirname(self.outer)}"
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise StoreError(
                f"the shared queue's lock {self.outer} is not a regular file; its owner "
                f"repairs it with qex init --shared {os.path.dirname(self.outer)}"
            )
        self._take(fd, self.outer, "the shared directory's lock")
        return fd

    def _take(self, fd: int, path: str, what: str) -> None:
        """Lock ``fd`` (waiting, or ``Busy``); on any failure the descriptor is closed."""
        try:
            if self.wait:
                wait_lock(fd, path, what=what)
            else:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise Busy(path) from None
        except OSError as exc:
            os.close(fd)
            if exc.errno in NO_FLOCK:
                raise no_flock(exc, path, what) from None
            raise
        except BaseException:
            os.close(fd)
            raise

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
                raise StoreError(
                    f"the queue lock {self.path} is a symbolic link; remove it (qex makes a new one)"
                ) from None
            raise StoreError(
                f"cannot open the queue lock {self.path}: {exc.strerror}; "
                "check that the state directory is yours and writable"
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise StoreError(f"the queue lock {self.path} is not a regular file; remove it (qex makes a new one)")
        self._take(fd, self.path, "the queue lock")
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


def no_flock(exc: OSError, path: str, what: str = "the lock") -> StoreError:
    """The refusal of a file system that gives no ``flock`` (an NFS mount with ``nolock``, or
    NFSv3 without its lock manager: ENOLCK; some FUSE file systems: EOPNOTSUPP, ENOSYS).
    qex never goes on unlocked: two passes at once would admit past the budget and lose
    records (docs/assumptions.md, "NFS")."""
    return StoreError(
        f"{what} {path} cannot be locked: {exc.strerror or exc} (flock); qex never runs "
        "unlocked, so nothing was done. Put the state directory on a local disk or an NFSv4 "
        "mount, whose flock is a lock the server keeps (QEX_STATE_DIR; docs/assumptions.md)"
    )


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
        if exc.errno in NO_FLOCK:
            raise no_flock(exc, path) from None
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
        if exc.errno in NO_FLOCK:
            raise no_flock(exc, path) from None
        raise
    finally:
        os.close(fd)
    return False


# ---- waiting for a lock: who holds it, and for how long qex waits -------------------------


def wait_lock(fd: int, path: str, what: str = "the queue lock") -> None:
    """Take an exclusive flock on ``fd`` (open on ``path``), waiting for it.

    A free lock costs one ``flock`` call, as a plain blocking one did. A held one is
    waited for in a blocking ``flock`` (no polling: a drain contends for the state
    lock all the time), cut by a timer after ``NOTICE`` seconds to say on stderr who
    holds it (``what`` names the lock), then waited for up to ``timeout`` seconds in
    all; then ``LockTimeout``. Off the main thread (no signal handler can be set) it
    waits without a limit and says nothing.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    import time

    limit = current_timeout()
    start = time.monotonic()
    if _flock_within(fd, min(NOTICE, limit)):
        return
    if limit > NOTICE:
        then = (
            "waiting as long as it takes (a supervisor or waker never gives up)"
            if limit == FOREVER
            else f"giving up after {_secs(limit)} (--lock-timeout SECONDS, or {ENV}, to change it)"
        )
        _say(f"waiting for {what} {path}, held by {holder(fd)}; {then}")
        if _flock_within(fd, limit - (time.monotonic() - start)):
            return
    raise LockTimeout(
        f"{what} {path} is still held by {holder(fd)} after {_secs(limit)} of waiting, "
        "so nothing was done; ask its holder to let it go, or wait longer with "
        f"--lock-timeout SECONDS (or {ENV})"
    )


def current_timeout() -> float:
    """The seconds ``wait_lock`` waits in all (see ``timeout``)."""
    global timeout
    if timeout is None:
        set_timeout(None)
    return timeout


def never_give_up() -> None:
    """A background process (a supervisor, the waker) waits for a lock as long as it
    takes: its stderr is a log nobody reads in time, and a supervisor that gave up
    a pass would leave its job's end unrecorded (reconcile would say "lost")."""
    global timeout
    timeout = FOREVER


def set_timeout(text: str | None) -> None:
    """``timeout`` from ``--lock-timeout``'s ``text``, else from QEX_LOCK_TIMEOUT, else
    60 s. A bad value is refused with a sentence that names where it came from."""
    global timeout
    if text is not None:
        timeout = parse_timeout(text, "--lock-timeout")
        return
    env = os.environ.get(ENV, "").strip()
    timeout = parse_timeout(env, ENV) if env else DEFAULT_TIMEOUT


def parse_timeout(text: str, source: str) -> float:
    """Seconds from ``text`` (``60``, ``2.5``, ``90s``, ``5m``), more than 0. ``source``
    is the option or the variable it came from: --lock-timeout is a bad command
    line (``SpecError``), QEX_LOCK_TIMEOUT a bad setting (``ConfigError``)."""
    from qex.base.errors import ConfigError, SpecError
    from qex.base.units import parse_duration, safe_text

    try:
        seconds = parse_duration(text.strip(), source)
    except SpecError:
        seconds = 0.0
    if seconds > 0:
        return seconds
    error = SpecError if source.startswith("-") else ConfigError
    raise error(
        f"{source}: '{safe_text(text, 60)}' is not a time to wait for a lock; use a number of "
        "seconds greater than 0 (60, 2.5) or a number with ms, s, m or h (90s, 5m)"
    )


def holder(fd: int) -> str:
    """Who holds the lock on ``fd``'s file, in words: its pid, user and command, from
    ``/proc/locks`` (``1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF``: pid, then
    the file's device, major:minor in hex, and inode; a waiter's line has ``->``)."""
    st = os.fstat(fd)
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    try:
        with open("/proc/locks", "rb") as fh:
            lines = fh.read().decode("ascii", "replace").splitlines()
    except OSError:
        lines = []
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] == "->":
            continue
        try:
            major, minor, ino = fields[5].split(":")
            found = (int(major, 16), int(minor, 16), int(ino))
            pid = int(fields[4])
        except ValueError:
            continue
        if found == want and pid > 0:
            return _process(pid)
    return "a process qex cannot see"


def _process(pid: int) -> str:
    """``pid 1234 (user mallory, command flock)``."""
    from qex.base.units import safe_text

    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return f"pid {pid}, which has ended (a process it started holds the lock now)"
    try:
        import pwd

        user = pwd.getpwuid(uid).pw_name
    except (KeyError, ImportError):
        user = str(uid)
    try:
        with open(f"/proc/{pid}/comm", "rb") as fh:
            command = fh.read().decode("utf-8", "replace").strip()
    except OSError:
        command = "?"
    return f"pid {pid} (user {safe_text(user, 32)}, command {safe_text(command, 32)})"


def _secs(seconds: float) -> str:
    return f"{seconds:g} s"


def _say(line: str) -> None:
    from qex.base import say
    from qex.base.text import plain

    say.notice(plain(line, None))  # (no stderr to say it on: it waits all the same)


class _Alarm(Exception):
    """The timer of ``_flock_within`` went off."""


def _flock_within(fd: int, seconds: float) -> bool:
    """A blocking exclusive flock, cut after ``seconds`` by ITIMER_REAL (SIGALRM), whose
    handler and timer are put back after. True once held. Off the main thread: a
    blocking flock without a limit. ``seconds`` FOREVER: no timer."""
    import _signal as signal  # the C module (signal.py builds enums at import)
    import time

    if seconds == FOREVER:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True
    if seconds <= 0:
        return _try(fd)
    armed = [True]  # the handler raises only while the flock may still be waiting

    def on_alarm(signum: int, frame: object) -> None:
        if armed[0]:
            armed[0] = False
            raise _Alarm

    try:
        before = signal.signal(signal.SIGALRM, on_alarm)
    except ValueError:  # not the main thread
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True
    began = time.monotonic()
    prior = (0.0, 0.0)
    try:
        try:
            prior = signal.setitimer(signal.ITIMER_REAL, seconds)
            fcntl.flock(fd, fcntl.LOCK_EX)
            return True
        finally:
            armed[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Alarm:
        return _try(fd)  # (it may have gone off just after the flock got the lock)
    finally:
        signal.signal(signal.SIGALRM, before)  # (checks for a signal due first, under on_alarm)
        if prior[0] > 0:  # someone's timer: what was left of it
            signal.setitimer(signal.ITIMER_REAL, max(prior[0] - (time.monotonic() - began), 1e-6), prior[1])


def _try(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
