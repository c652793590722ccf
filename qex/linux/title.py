"""What ``ps`` calls a process qex leaves running: ``qex: supervisor of ID``,
``qex: waker for uid UID ...``, instead of the command that forked it.

``posix`` only (no ``os``): the minimal watcher (``qex.supervisor.watch``) sets
its title too, and imports nothing that is not builtin (see there).
"""

import posix

SUPERVISOR = "qex: supervisor"  # a supervisor's name (comm): how qex.linux.whose knows one, any user's


def supervisor(job_id: str, watching: bool = False) -> None:
    """A job's supervisor (``watching``: the minimal watcher it execs into for a long job)."""
    set_title(f"qex: supervisor of {job_id}{' (watching)' if watching else ''}", SUPERVISOR)


def waker(uid: int, root: str) -> None:
    set_title(f"qex: waker for uid {uid} in {root}", "qex: waker")


def hook_runner(uid: int, root: str) -> None:
    set_title(f"qex: stop hooks of uid {uid} in {root}", "qex: hooks")


_TITLE: list = []  # (pid, the name written, (start, size) of the argv area or None)


def set_title(title: str, name: str) -> None:
    """``title`` in place of this process's command line, and ``name`` (15 bytes at
    most) as its name (``comm``: ``top``, ``pgrep``, ``ps -o comm``).

    The name is ``prctl(PR_SET_NAME)`` through /proc/self/comm (~12 us: written once
    per process and name). The title is written over the argv area through
    /proc/self/mem (~7 us; what setproctitle does, without a C extension to import),
    cut to that area's length. A kernel that refuses either leaves that one as it
    was."""
    pid = posix.getpid()
    if not _TITLE or _TITLE[0] != pid:
        _TITLE[:] = [pid, None, _argv_area()]
    if _TITLE[1] != name:
        _TITLE[1] = name
        _write("/proc/self/comm", name.encode()[:15])
    if _TITLE[2] is not None:
        start, size = _TITLE[2]
        text = title.encode()[: size - 2]
        # NULs after it, and a last byte that is not one: the kernel then shows the
        # area up to the first NUL (as after setproctitle(3)), not the padding too.
        _write("/proc/self/mem", text + bytes(size - len(text) - 1) + b" ", start)


def _argv_area() -> "tuple[int, int] | None":
    try:
        fd = posix.open("/proc/self/stat", posix.O_RDONLY | posix.O_CLOEXEC)
        try:
            data = posix.read(fd, 4096)
        finally:
            posix.close(fd)
        fields = data[data.rindex(b")") + 2 :].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (proc(5): fields 48, 49)
    except (OSError, ValueError, IndexError):
        return None
    return (start, end - start) if end - start > 2 else None


def _write(path: str, data: bytes, at: "int | None" = None) -> None:
    try:
        fd = posix.open(path, posix.O_RDWR | posix.O_CLOEXEC)
    except OSError:
        return
    try:
        if at is None:
            posix.write(fd, data)
        else:
            posix.pwrite(fd, data, at)
    except OSError:
        pass
    finally:
        posix.close(fd)
