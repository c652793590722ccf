"""Processes: how a qex process detaches, reaps the first child of a double
fork, and gives a stopped group its grace before SIGKILL."""

import os
import stat

KILL_GRACE = float(os.environ.get("QEX_KILL_GRACE", "5"))  # seconds from SIGTERM to SIGKILL (a job, a hook)


def detach_stdio(log_path: str | None, signals: bool = True) -> None:
    """Leave the caller's terminal and pipes: stdin from /dev/null, output to a log.
    ``signals=False``: keep the signal handlers (a supervisor moving on to its next job)."""
    import _signal as signal  # the C module: signal.py builds enums, ~3 ms in a just-forked supervisor

    null = os.open(os.devnull, os.O_RDWR)
    out = null
    if log_path:
        try:
            out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
            st = os.fstat(out)
            if st.st_uid != os.getuid() or st.st_nlink != 1 or not stat.S_ISREG(st.st_mode):
                os.close(out)  # another user's file (a shared directory): never write into it
                out = null
        except OSError:
            out = null
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    for fd in {null, out}:
        if fd > 2:
            os.close(fd)
    if not signals:
        return
    signal.set_wakeup_fd(-1)  # a supervisor's wake-up pipe is not this process's
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


_UNREAPED: list[int] = []


def reap_later(pid: int) -> None:
    """The first child of a double fork (it forks and exits at once): reaped later,
    not waited for. Waiting for it cost a submission a few milliseconds per fork
    (a supervisor, a waker); a command exits before it would matter, and a
    supervisor or a waker reaps its earlier ones at each new fork."""
    still = []
    for old in _UNREAPED:
        try:
            done, _ = os.waitpid(old, os.WNOHANG)
        except ChildProcessError:
            continue
        except InterruptedError:
            done = 0
        if not done:
            still.append(old)
    _UNREAPED[:] = still + [pid]


def close_quietly(fd: int) -> None:
    if fd < 0:
        return
    try:
        os.close(fd)
    except OSError:
        pass


def max_fd() -> int:
    try:
        return min(os.sysconf("SC_OPEN_MAX"), 1 << 16)
    except (OSError, ValueError):
        return 1024


def signal_group(pgid: int, sig: int) -> None:
    """``kill(-pgid, sig)``; a group already gone is no error."""
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass
