"""The watch loop of a running job, and the minimal watcher process that runs it.

``loop`` is what the supervisor does while its job runs: copy the job's
output into its logs (``Sink``, with ``[logs] max_bytes``), enforce the
timeout (SIGTERM to the job's process group and every process the job
started, SIGKILL after the kill grace: ``qex.linux.tree``), answer ``qex kill``
(SIGUSR1) and a SIGTERM to the supervisor, reap the job through a pidfd (and
what it orphaned, which this child subreaper adopted, on SIGCHLD), and read
what a process the job left behind still writes for a short drain.

A job's follower (``qex run``: a FIFO, ``qex.supervisor.pipes``) gets every
byte the sink gets. When its FIFO is full (``Sink.held``, ``Sink.pending``) the job's pipe
leaves the poll and the FIFO comes in until it has taken what waits: the job
waits for its follower as for a pipe, and the time so spent is not the
drain's (a job that ended with its last output on the way waits for its
follower). Only a stopped job (kill, timeout) lets go of what still waits
after the drain (``drop_tee``), and the follower is told.

The forked supervisor runs it for a short grace (``GRACE``): a job that ends
by then never pays more. A job that still runs gets a supervisor that has
re-executed itself (same pid, same locks) into ``main`` here, a bare
``python -I -S`` that imports only this module, ``qex.supervisor.logs`` and a
few builtin modules, so that a long job's supervisor costs about what the
interpreter costs and not the whole of qex (see ``qex.supervisor.handoff``,
which does both execs). When the job has ended it execs back into the full qex,
which records the end exactly as the forked supervisor would have.

Import nothing here that is not builtin or already loaded by a bare
interpreter: ``posix`` (not ``os``), ``_signal`` (``signal`` imports ``enum``),
``select.poll`` (not ``selectors``), ``marshal`` (not ``json``). A followed job's
watcher loads ``_ctypes`` too, on its first output (libc's ``tee``:
``qex.linux.tee``; 92 kB of USS measured), for the stream's throughput.
"""

import _signal
import marshal
import posix as os  # not `os` (170 kB): the system calls are all in posix
import select
import sys
import time

from qex.linux import tree  # (builtins only, as this module)
from qex.linux.whose import FINISHER_TAG  # (posix only: how a supervisor is known)

TYPE_CHECKING = False  # (typing itself is not imported; nor is __future__: the minimal watcher)
if TYPE_CHECKING:
    from collections.abc import Iterable


FIRST_READ_SIZE = 1 << 12  # the watch loop's buffer at first (``_buffer``)
READ_SIZE = 1 << 16  # a pipe's whole buffer in one read
FOLLOWED_READ_SIZE = 1 << 20  # a followed job's pipes are this large (qex.supervisor.pipes.grow)
MAX_WAIT = 3600.0  # seconds one poll() may sleep at most
# Seconds a job runs under the forked supervisor before the supervisor slims down
# (QEX_WATCH_GRACE: for tests that count a supervisor's forks, which its execs reset).
GRACE = float(os.environ.get(b"QEX_WATCH_GRACE", b"0.5"))  # (posix.environ: bytes)
STOP_SIGNALS = {_signal.SIGUSR1, _signal.SIGTERM}
_PIPE_DONE = select.POLLHUP | select.POLLERR | select.POLLNVAL


class Interrupt:
    """SIGUSR1 (qex kill) or SIGTERM: stop the job. Wakes the poll via a pipe (and
    so does SIGCHLD: a process the job orphaned has ended, ``loop`` reaps it)."""

    def __init__(self):
        self.requested: str | None = None
        self.r, self.w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        _signal.set_wakeup_fd(self.w)
        _signal.signal(_signal.SIGUSR1, self._on)
        _signal.signal(_signal.SIGTERM, self._on)
        _signal.signal(_signal.SIGCHLD, _woken)

    def _on(self, signum, frame):
        self.requested = "kill" if signum == _signal.SIGUSR1 else "term"

    def close(self) -> None:
        _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
        _signal.set_wakeup_fd(-1)
        os.close(self.r)
        os.close(self.w)


def _woken(signum, frame) -> None:
    """SIGCHLD: nothing to do here; its byte on the wake-up pipe wakes the loop."""


class End:
    """How the loop stopped: the job ended (wait status and rusage), or the
    grace passed with the job running and nothing else going on (``handoff``)."""

    __slots__ = ("wait_status", "rusage", "stop_reason", "incomplete", "handoff", "open_pipes")

    def __init__(self, wait_status=None, rusage=None, stop_reason=None, incomplete=False, handoff=False, open_pipes=()):
        self.wait_status, self.rusage, self.stop_reason = wait_status, rusage, stop_reason
        self.incomplete, self.handoff, self.open_pipes = incomplete, handoff, tuple(open_pipes)


def loop(
    pid: int,
    sinks: dict,
    open_pipes: "Iterable[int]",
    interrupt: object,
    timeout_at: float | None,
    kill_grace: float,
    drain: float,
    handoff_at: float | None = None,
    sampler: object = None,
    peak: object = None,
) -> End:
    """Watch the job ``pid`` (leader of its process group) until it has ended, its pipes
    are read (or ``drain`` seconds after its end) and its followers have what it wrote (see
    the module's doc), or until ``handoff_at``. ``sampler``: qex.supervisor.vram; ``peak``: rss."""
    open_pipes = set(open_pipes)
    held: dict[int, int] = {}  # a follower's FIFO -> the job's pipe held back until it takes what waits
    poll, pidfd = _poll_of(pid, open_pipes, interrupt, sinks, held)
    buffer = _buffer(sinks)
    stop_reason = kill_at = wait_status = rusage = drain_until = None  # stop_reason: "killed" | "timeout"
    since = 0  # the leader's start time: what started before it is not the job's (tree.descendants)
    incomplete, last = False, time.time()
    try:
        while open_pipes or wait_status is None or held:
            now = time.time()
            if held and drain_until is not None and stop_reason is None:
                drain_until += now - last  # (waiting for a follower)
            last = now
            if stop_reason is None:
                stop_reason = _stop_asked(interrupt, timeout_at, now, wait_status)
                if stop_reason:
                    since, kill_at = _terminate(pid, now, kill_grace, wait_status is None)
            kill_at = _kill_when_due(pid, kill_at, since, now)
            if drain_until is not None and now >= drain_until and (open_pipes or held):
                if held:  # a stopped job's last output, still waiting for its follower: let it go,
                    _let_go(held, sinks, poll, open_pipes)  # and give the log the drain it did not have
                    drain_until = now + drain
                    continue
                incomplete = True
                break
            handing = handoff_at is not None and stop_reason is None and wait_status is None
            if handing and now >= handoff_at:
                return End(handoff=True, open_pipes=open_pipes)
            soon = (timeout_at if stop_reason is None else None, kill_at, drain_until, handoff_at if handing else None)
            wait = _wait(now, *soon, _sample(sampler, now, poll, wait_status, peak))
            try:
                events = poll.poll(None if wait is None else wait * 1000)
            except InterruptedError:
                continue
            for fd, mask in events:
                if fd == pidfd:  # (kill_at: set only once a stop began, and the stop is done here)
                    wait_status, rusage = _reap(pid, poll, pidfd, since if stop_reason else None)
                    kill_at, drain_until = None, time.time() + drain
                else:
                    _on_event(fd, mask, pid, sinks, poll, buffer, open_pipes, held, interrupt, sampler)
        if wait_status is None:  # pipes closed first
            _, wait_status, rusage = os.wait4(pid, 0)
    finally:
        os.close(pidfd)
    return End(wait_status, rusage, stop_reason, incomplete)


def _on_event(
    fd: int, mask: int, pid: int, sinks: dict, poll, buffer, open_pipes: set, held: dict, interrupt, sampler
) -> None:
    """A descriptor of the poll is ready: a follower's FIFO took what waited, the job wrote,
    a signal came, or the VRAM sampler's answer."""
    if fd in held:
        _release(fd, mask, sinks, poll, held, open_pipes)
    elif fd in open_pipes:
        _copy(fd, mask, buffer, sinks, poll, open_pipes, held)
    elif fd == interrupt.r:
        _woken_by(fd, pid)
    elif sampler is not None:
        sampler.feed(fd, poll)


def _kill_when_due(pid: int, kill_at: float | None, since: int, now: float) -> float | None:
    """SIGKILL to what is left of the job once its kill grace is over; the next kill time."""
    if kill_at is not None and now >= kill_at:
        tree.stop(pid, _signal.SIGKILL, since)
        return None
    return kill_at


def _wait(now: float, *times: float | None) -> float | None:
    """Seconds to the earliest of ``times`` (None: no limit, poll until an event)."""
    limits = [t for t in times if t]
    # poll() takes an int of ms: a --timeout of weeks would overflow it; wake and look again
    return min(MAX_WAIT, max(0.0, min(limits) - now)) if limits else None


def _sample(sampler, now: float, poll, wait_status, peak: object = None) -> float | None:
    """A GPU job's VRAM sampler, while the job runs: a reading started when one is due,
    taken in when done; and the /proc sampler of a job without a cgroup (``peak``:
    qex.linux.rss). When the loop must look again for them (None: no sampler)."""
    if wait_status is not None:
        return None
    times = [
        t
        for t in (
            sampler.tick(now, poll) if sampler is not None else None,
            peak.tick(now) if peak is not None else None,
        )
        if t
    ]
    return min(times) if times else None


def _buffer(sinks: dict) -> bytearray:
    """One for the whole loop (a bytes object per read would grow the heap). It starts at
    one page, which the output of most jobs never fills: a bytearray's every byte is written
    when it is made, and a watcher holds at most 3 MiB of its own (issue 10). ``_grow``
    makes it full size at its first full read."""
    return bytearray(FIRST_READ_SIZE)


def _grow(buffer: bytearray, sinks: dict) -> None:
    """A read filled ``buffer``: the next takes a pipe's whole buffer (a followed job's is larger)."""
    size = FOLLOWED_READ_SIZE if any(s.tee >= 0 for s in sinks.values()) else READ_SIZE
    if len(buffer) < size:
        buffer.extend(bytes(size - len(buffer)))


def _stop_asked(interrupt, timeout_at: float | None, now: float, wait_status) -> str | None:
    """Why the job is to be stopped now: "killed" (qex kill, SIGTERM), "timeout", or None."""
    if interrupt.requested:
        return "killed"
    if timeout_at is not None and now >= timeout_at and wait_status is None:
        return "timeout"
    return None


def _reap(pid: int, poll, pidfd: int, stopping: int | None) -> tuple:
    """The job's leader ended: its wait status and rusage. ``stopping`` (the leader's start
    time, when the job is being stopped): what the job left behind is killed too."""
    _, wait_status, rusage = os.wait4(pid, 0)
    poll.unregister(pidfd)
    if stopping is not None:
        tree.kill_all(pid, stopping)  # what the job left behind, in its group or not
    return wait_status, rusage


def _woken_by(fd: int, pid: int) -> None:
    """The wake-up pipe: a signal came (and on SIGCHLD, an orphan of the job that this
    process adopted ended: ``tree.reap_adopted``)."""
    try:
        os.read(fd, 64)
    except BlockingIOError:
        pass
    tree.reap_adopted(pid)


def _poll_of(pid: int, open_pipes: set, interrupt, sinks: dict, held: dict) -> tuple:
    """A poll of the job's pipes (non-blocking; a pipe whose sink still has output for its
    follower: that follower's FIFO instead), its pidfd and the interrupt's pipe."""
    poll = select.poll()
    for fd in open_pipes:
        os.set_blocking(fd, False)
        if sinks[fd].pending or sinks[fd].held:
            poll.register(sinks[fd].tee, select.POLLOUT)
            held[sinks[fd].tee] = fd
        else:
            poll.register(fd, select.POLLIN)
    pidfd = os.pidfd_open(pid)
    poll.register(pidfd, select.POLLIN)
    poll.register(interrupt.r, select.POLLIN)
    return poll, pidfd


def _copy(fd: int, mask: int, buffer: bytearray, sinks: dict, poll, open_pipes: set, held: dict) -> None:
    """What the pipe ``fd`` has, into its sink (``Sink.take``); at its end, it leaves the poll."""
    sink = sinks[fd]
    try:
        n = sink.take(fd, buffer) if mask & (select.POLLIN | select.POLLHUP) else 0
    except BlockingIOError:
        return
    except OSError:
        n = 0
    if n is None or sink.pending:  # (its follower's FIFO is full)
        _hold(fd, sink, poll, held)
    elif not n:
        poll.unregister(fd)
        open_pipes.discard(fd)
    elif n == len(buffer) < FOLLOWED_READ_SIZE:  # (full size: no more to look at)
        _grow(buffer, sinks)


def _let_go(held: dict, sinks: dict, poll, open_pipes: set) -> None:
    """Stop waiting for the followers of ``held``: what waits for them is dropped (``drop_tee``)."""
    for tee, pipe in held.items():
        poll.unregister(tee)
        sinks[pipe].drop_tee(cut=True)
        if pipe in open_pipes:
            poll.register(pipe, select.POLLIN)
    held.clear()


def _hold(pipe: int, sink, poll, held: dict) -> None:
    """The follower's FIFO is full: read no more of ``pipe`` until it has taken what waits."""
    try:
        poll.unregister(pipe)
    except KeyError:
        pass
    poll.register(sink.tee, select.POLLOUT)
    held[sink.tee] = pipe


def _release(tee: int, mask: int, sinks: dict, poll, held: dict, open_pipes: set) -> None:
    pipe = held[tee]
    sink = sinks[pipe]
    if mask & _PIPE_DONE:
        sink.drop_tee(cut=False)  # the follower is gone (it closed its end)
    elif not sink.flush_tee():
        return
    poll.unregister(tee)
    del held[tee]
    if pipe in open_pipes:
        poll.register(pipe, select.POLLIN)


def _terminate(pid: int, now: float, grace: float, unreaped: bool) -> tuple[int, float]:
    """SIGTERM to the job's group and every process it started: (the start time of its
    leader, before which nothing is the job's; when to SIGKILL them)."""
    since = tree.start_of(pid) if unreaped else 0  # (0: reaped, its pid may be another process's now)
    tree.stop(pid, _signal.SIGTERM, since)
    return since, now + grace


# ---- the two execs: the data they hand over, the fds they keep ---------------------


def write_handover(data: tuple) -> int:
    """An inheritable memfd holding ``data`` (marshal: builtin, and no size limit as argv has)."""
    fd = os.memfd_create("qex-handover", 0)
    blob = marshal.dumps(data)
    view = memoryview(blob)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, 0)
    return fd


def read_handover(fd: int) -> tuple:
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return marshal.loads(b"".join(chunks))


def exec_keeping(argv: list, keep: "Iterable[int | None]") -> None:
    """execv ``argv`` with the signals that stop a job blocked (the new image installs its
    handlers, then unblocks: a kill in between waits, it is not lost nor fatal), keeping
    exactly the fds ``keep`` besides 0, 1 and 2. Returns only if the exec failed, with
    everything as it was before."""
    keep = {fd for fd in keep if fd is not None and fd >= 0}
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    _signal.pthread_sigmask(_signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd > 2:
                try:
                    os.set_inheritable(fd, fd in keep)
                except OSError:
                    pass  # the fd of the listing itself, closed by now
        os.execv(argv[0], argv)
    except OSError as exc:
        print(
            f"qex: cannot exec {argv[0]} ({exc.strerror or exc}); the supervisor goes on as it is",
            file=sys.stderr,
            flush=True,
        )
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, STOP_SIGNALS)


def entry_argv(here: str, module: str, function: str, tag: str, job_id: str, fd: int, minimal: bool) -> list:
    """``python [-I -S] -c <import qex from ``here``> TAG JOB FD``."""
    code = f"import sys;sys.path.insert(0,{here!r});from {module} import {function};{function}()"
    return [sys.executable, *(("-I", "-S") if minimal else ()), "-c", code, tag, job_id, str(fd)]


def _quiet_signals() -> None:
    """The dispositions a detached supervisor has (``engine.detach_stdio``); the
    interpreter's start set others."""
    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
    _signal.signal(_signal.SIGPIPE, _signal.SIG_IGN)


def package_parent() -> str:
    """The folder that holds the qex package this process runs (so that the exec'd
    watcher and the full qex after it import this same code)."""
    import os.path  # (this module's ``os`` is posix, which has no path)

    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    """The minimal watcher: ``python -I -S -c ... qex-watch JOB FD`` (see the module doc)."""
    from qex.supervisor.logs import Sink

    _quiet_signals()
    job_id, fd = sys.argv[2], int(sys.argv[3])
    from qex.linux import title

    title.supervisor(job_id, watching=True)
    watch, passed = read_handover(fd)
    interrupt = Interrupt()
    interrupt.requested = watch["requested"]
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, STOP_SIGNALS)
    sinks = {}
    for pipe, state in watch["sinks"]:
        sinks[pipe] = Sink.resume(state)
    pid = watch["pid"]
    sampler, peak = _samplers(watch)
    end = loop(
        pid,
        {p: s for p, s in sinks.items()},
        [p for p in sinks if p in watch["open"]],
        interrupt,
        watch["timeout_at"],
        watch["kill_grace"],
        watch["drain"],
        None,
        sampler,
        peak,
    )
    if sampler is not None:
        sampler.stop()
    for pipe, sink in sinks.items():
        os.close(pipe)
        sink.drop_tee(cut=False)  # (all it was given is taken: the loop ends only then)
    ended = _ended(end, interrupt, sinks, sampler, peak)
    interrupt.close()
    out = write_handover((ended, passed))
    keep = [out, *watch["keep"], *(s.fd for s in sinks.values()), *(s.cut_fd for s in sinks.values())]
    exec_keeping(
        entry_argv(watch["here"], "qex.supervisor.handoff", "finish", FINISHER_TAG, job_id, out, minimal=False), keep
    )
    # The full qex cannot start again (its interpreter gone?). Dying lets go of the liveness
    # lock: the next pass finds the supervisor lost and says so in the record.
    print(f"qex: the watcher of job {job_id} cannot exec back into qex to record its end", file=sys.stderr, flush=True)
    os._exit(70)


def _samplers(watch: dict) -> tuple:
    """The VRAM sampler of a GPU job and the /proc peak of a job without a cgroup, as the
    full supervisor handed them over (None where the job has none); builtin modules only."""
    sampler = peak = None
    if watch.get("vram"):
        from qex.supervisor.vram import Sampler

        sampler = Sampler.resume(watch["vram"])
    if watch.get("rss"):
        from qex.linux.rss import TreePeak

        peak = TreePeak.resume(watch["rss"])
    return sampler, peak


def _ended(end: End, interrupt: Interrupt, sinks: dict, sampler: object, peak: object) -> dict:
    """What the full qex needs to record the end (``qex.supervisor.handoff.finish``)."""
    r = end.rusage
    return {
        "wait_status": end.wait_status,
        "stop_reason": end.stop_reason,
        "incomplete": end.incomplete,
        "requested": interrupt.requested,
        "rusage": (r.ru_maxrss, r.ru_utime, r.ru_stime) if r is not None else None,
        "sinks": [s.handover() for s in sinks.values()],
        "vram": sampler.result() if sampler is not None else None,
        "rss": peak.result() if peak is not None else None,
    }
