"""Processes: how a qex process detaches (the descriptors it keeps), reaps the
first child of a double fork, gives a stopped group its grace before SIGKILL,
and becomes a child subreaper (a job's supervisor, while its job runs:
``qex.linux.tree``). What ps calls it: ``qex.linux.title``."""

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
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a follower's FIFO whose reader left is EPIPE, not death


def keep_only(keep: "tuple[int, ...]" = ()) -> None:
    """First thing in a process qex leaves running (a supervisor, the waker, the hook
    runner), right after its fork: close every descriptor above 2 but ``keep``, its
    own. What goes: the caller's (a script's ``flock`` lock, the write end of a pipe
    it waits to see closed), and qex's that are not this process's (the state lock,
    another job's locks, the pipes of a ``qex run`` it was forked from). 0, 1 and 2
    are ``detach_stdio``'s. The store forgets the descriptors it would have closed
    or synced for the parent (``syncs.forget_inherited``)."""
    low = 3
    for fd in sorted({fd for fd in keep if fd is not None and fd > 2}):
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 30)  # (close_range(2): one call, however many there are)
    from qex.store.syncs import forget_inherited

    forget_inherited()


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


def forked_children() -> tuple[int, ...]:
    """The first children of this process's double forks that ``reap_later`` has not reaped yet."""
    return tuple(_UNREAPED)


def close_quietly(fd: int) -> None:
    if fd < 0:
        return
    try:
        os.close(fd)
    except OSError:
        pass


def signal_group(pgid: int, sig: int) -> None:
    """``kill(-pgid, sig)``; a group already gone is no error."""
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass


def holders(path: str) -> list[int]:
    """The processes of this user that hold ``path`` open (one of their ``/proc/PID/fd``
    is that file), by pid: a lost job's, through the copy of its peer lock it was given.
    A walk of every process of this user (~1 ms per hundred): for the rare case only."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return []
    me, found = os.geteuid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != me:
                continue
            with os.scandir(f"/proc/{name}/fd") as fds:
                for entry in fds:
                    try:
                        it = entry.stat()  # (follows the link: the open file itself)
                    except OSError:
                        continue
                    if (it.st_dev, it.st_ino) == (st.st_dev, st.st_ino):
                        found.append(int(name))
                        break
        except OSError:
            continue  # gone meanwhile, or not ours to look at
    return found


_PRCTL: list = []  # libc's prctl, looked up once per process (False where there is none)
PR_SET_CHILD_SUBREAPER = 36


def child_subreaper(on: bool) -> bool:
    """``prctl(PR_SET_CHILD_SUBREAPER)``: while it is on, what this process's
    descendants orphan becomes its child, not init's (``qex.linux.tree``). A job's
    supervisor turns it on before the spawn and off when the job has ended, before
    it forks anything (another supervisor, a hook runner, a waker would be its
    child too). Survives an exec (the minimal watcher). False if the kernel
    refused (Linux before 3.4): the job's group and its tree are all that is stopped."""
    call = look_up_prctl()
    return bool(call) and call(PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0) == 0


def look_up_prctl() -> object:
    """libc's prctl (the os module has none), or False (``qex.linux.libc``). An early supervisor binds it
    while its commit's fsyncs run (``qex.supervisor.run.prepare_early``), a drain's
    supervisor once for all its jobs."""
    if not _PRCTL:
        _PRCTL.append(_bind_prctl())
    return _PRCTL[0]


def _bind_prctl() -> object:
    from qex.linux import libc

    return libc.function("prctl", "int", ("int", "ulong", "ulong", "ulong", "ulong"))
