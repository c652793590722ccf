"""A shared box's manners: the niceness, I/O class and ``oom_score_adj`` a job runs with
(``[politeness]``, ``--nice``, ``--io-class``, ``--oom-score-adj``; docs/assumptions.md).

Each is absolute: the job gets the value asked for, never one added to its starter's.
The job must not run one instruction with other values, and ``posix_spawn`` has no
attribute for any of them, so the supervisor spawns it from a thread of its own
(``spawn_with``): niceness and I/O priority are per thread on Linux, and a child is
born with its spawning thread's. ``oom_score_adj`` is the process's: it is raised for
the spawn and put back (anyone may raise it, and lower it again as far as the value a
privileged writer gave). The supervisor itself keeps its own values: it takes the
state lock, and its fsyncs at an idle I/O class could wait for as long as someone
else writes.

Lowering a niceness below the starter's needs ``CAP_SYS_NICE`` (or ``RLIMIT_NICE``);
lowering ``oom_score_adj`` below what a privileged writer gave needs
``CAP_SYS_RESOURCE``. Without them the job gets the nearest it may (``effective``: the
submission says so in a sentence).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    T = TypeVar("T")

IOPRIO_WHO_PROCESS = 1
IOPRIO_CLASS_SHIFT = 13
BEST_EFFORT, IDLE = 2, 3
LOWEST = 7  # the lowest best-effort level
# (ioprio_set, ioprio_get) by machine
_SYSCALLS = {
    "x86_64": (251, 252),
    "aarch64": (30, 31),
    "riscv64": (30, 31),
    "ppc64le": (273, 274),
    "s390x": (282, 283),
    "i686": (289, 290),
}
CAP_SYS_NICE, CAP_SYS_RESOURCE = 23, 24


def ioprio_of(io_class: str) -> int | None:
    """The ioprio value of an ``io_class`` word; None for "none" (left as inherited)."""
    if io_class == "best-effort":
        return (BEST_EFFORT << IOPRIO_CLASS_SHIFT) | LOWEST
    if io_class == "idle":
        return IDLE << IOPRIO_CLASS_SHIFT
    return None


def io_words(value: int) -> str:
    """An ioprio value in words: ``best-effort 7``, ``idle``, ``none (from the niceness)``."""
    cls, level = value >> IOPRIO_CLASS_SHIFT, value & ((1 << IOPRIO_CLASS_SHIFT) - 1)
    return {0: "none (from the niceness)", 1: f"realtime {level}", 2: f"best-effort {level}", 3: "idle"}.get(
        cls, str(value)
    )


def words(nice: int, io_class: str | None, oom: int | None) -> str:
    """A job's manners in words: ``nice 10, I/O best-effort 7, oom_score_adj 500``."""
    io = {"best-effort": f"best-effort {LOWEST}", "idle": "idle"}.get(io_class, "as its starter's")
    return f"nice {nice}, I/O {io}, oom_score_adj {'inherited' if oom is None else oom}"


_SYSCALL: list = []  # libc's syscall (or False), bound once per process (bind)


def bind() -> None:
    """Bind libc's ``syscall`` (``qex.linux.libc``: not ctypes, which costs a just-forked
    supervisor several ms before its job's first instruction).
    An early supervisor binds it while its commit's fsyncs run (``prepare_early``)."""
    if not _SYSCALL:
        from qex.linux import libc

        _SYSCALL.append(libc.function("syscall", "long", ("long", "long", "long", "long")))


def _syscall(which: int, *args: int) -> int:
    bind()
    call = _SYSCALL[0]
    number = _SYSCALLS.get(os.uname().machine)
    if not call:
        raise OSError(38, "libc's syscall cannot be bound here")  # (38: ENOSYS)
    if number is None:
        raise OSError(0, f"no ioprio system call known on {os.uname().machine}")
    got = call(number[which], *args, *(0,) * (3 - len(args)))
    if got < 0:
        from qex.linux import libc

        err = libc.errno()
        raise OSError(err, os.strerror(err))
    return got


def ioprio_get(tid: int = 0) -> int:
    """The I/O priority of thread (or process) ``tid``; 0: the calling thread."""
    return _syscall(1, IOPRIO_WHO_PROCESS, tid)


def ioprio_set(value: int, tid: int = 0) -> None:
    _syscall(0, IOPRIO_WHO_PROCESS, tid, value)


def oom_score_adj(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/oom_score_adj", "rb") as fh:
        return int(fh.read())


def set_oom_score_adj(value: int) -> None:
    fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)


def _has_cap(bit: int) -> bool:
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"CapEff:"):
                    return bool(int(line.split()[1], 16) >> bit & 1)
    except (OSError, ValueError, IndexError):
        pass
    return os.geteuid() == 0


def lowest_nice() -> int:
    """The lowest niceness this process may give a thread of its own: any (-20) with
    ``CAP_SYS_NICE``, else what ``RLIMIT_NICE`` allows, else its own."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    if _has_cap(CAP_SYS_NICE):
        return -20
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NICE)[0]
    allowed = 20 - soft if soft != resource.RLIM_INFINITY else -20
    return max(-20, min(own, allowed))


def oom_allowed(value: int) -> bool:
    """Whether this process may set its ``oom_score_adj`` to ``value``: raising always;
    lowering is tried and put back (the floor a privileged writer set is not shown)."""
    own = oom_score_adj()
    if value >= own or _has_cap(CAP_SYS_RESOURCE):
        return True
    try:
        set_oom_score_adj(value)
    except PermissionError:
        return False
    set_oom_score_adj(own)
    return True


def effective(nice: int, oom: int) -> tuple[int, int, list[str]]:
    """What a job asking ``nice`` and ``oom`` gets when started by a process like this
    one, and a sentence for each it cannot get."""
    said = []
    floor = lowest_nice() if nice < os.getpriority(os.PRIO_PROCESS, 0) else nice
    if nice < floor:
        said.append(
            f"niceness {nice} is below {floor}, the lowest this user may give (lowering a niceness "
            f"needs root or a higher RLIMIT_NICE): the job runs at {floor}"
        )
        nice = floor
    if not oom_allowed(oom):
        own = oom_score_adj()
        said.append(
            f"oom_score_adj {oom} is below what this user may set (lowering it needs root): the job runs at {own}"
        )
        oom = own
    return nice, oom, said


def spawn_with(fn: Callable[[], T], nice: int | None, io_class: str | None, oom: int | None) -> T:
    """``fn()`` (the spawn), from a thread whose niceness is ``nice`` and whose I/O class
    is ``io_class``'s, with this process's ``oom_score_adj`` at ``oom`` meanwhile (None:
    as they are). Returns what ``fn`` returns (or raises what it raises). A value the
    kernel refuses is left as it is and said in the supervisor's log."""
    put_back = None
    if oom is not None:
        try:
            own = oom_score_adj()
            if own != oom:
                set_oom_score_adj(oom)
                put_back = own
        except (OSError, ValueError) as exc:
            _said(f"oom_score_adj {oom}", exc)
    try:
        prio = None if io_class is None else ioprio_of(io_class)
        if nice is None and prio is None:
            return fn()
        return _in_thread(fn, nice, prio)
    finally:
        if put_back is not None:
            try:
                set_oom_score_adj(put_back)
            except OSError as exc:
                _said(f"its own oom_score_adj back to {put_back}", exc)


def _in_thread(fn: Callable[[], T], nice: int | None, prio: int | None) -> T:
    import _thread

    done, out = _thread.allocate_lock(), []
    done.acquire()

    def run() -> None:
        try:
            tid = _thread.get_native_id()
            if nice is not None and os.getpriority(os.PRIO_PROCESS, tid) != nice:
                try:
                    os.setpriority(os.PRIO_PROCESS, tid, nice)
                except OSError as exc:
                    _said(f"niceness {nice}", exc)
            if prio is not None:
                try:
                    ioprio_set(prio, tid)
                except OSError as exc:
                    _said(f"I/O class {io_words(prio)}", exc)
            out.append((True, fn()))
        except BaseException as exc:  # (raised again in the caller)
            out.append((False, exc))
        finally:
            done.release()

    _thread.start_new_thread(run, ())
    done.acquire()
    ok, value = out[0]
    if not ok:
        raise value
    return value


def _said(what: str, exc: BaseException) -> None:
    print(
        f"qex: the job cannot be given {what} ({getattr(exc, 'strerror', None) or exc}); it runs "
        "with this supervisor's",
        flush=True,
    )
