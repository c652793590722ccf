"""The supervisor: the one process that runs a job and records its result.

Forked (no new interpreter) and detached by ``qex.queue.fork.launch_all``. It holds the
job's liveness lock for its whole life; the job inherits neither that lock nor
the state lock, only its lock in the peer directory (``spawn.LOCK_FD``). After the final record it runs a pass, forks the supervisors
of what that pass admitted, and exits; a child that becomes the next job's
supervisor continues in the same flat loop (``main_loop``).
"""

from __future__ import annotations

import _signal as signal  # the C module: signal.py builds enums, ~2 ms of a starting supervisor
import os
import time

from qex.base.states import HOLDING
from qex.linux import manners, pidfile, title, tree
from qex.linux.proc import KILL_GRACE, child_subreaper, detach_stdio, forked_children, look_up_prctl, signal_group
from qex.linux.rss import TreePeak
from qex.queue import engine, reconcile
from qex.queue.context import Launch
from qex.queue.launch import after_pass
from qex.store import fs, layout, lock
from qex.store.state import LAZY
from qex.supervisor import ending, spawn, starting
from qex.supervisor.ending import DRAIN_AFTER_EXIT
from qex.supervisor.memory import Meter
from qex.supervisor.pipes import grow, open_output
from qex.supervisor.working import Working

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

    from qex.config.context import Context
    from qex.queue.txn import Txn
    from qex.store.records import Status

_CRASH = "QEX_CRASH_AT" in os.environ  # crash points for tests (qex.base.faults); off in normal use
if _CRASH:
    from qex.base import faults


def main_loop(ctx: Context, launch: Launch) -> None:
    """Supervise jobs until none is handed over; never returns."""
    lock.never_give_up()  # (no --lock-timeout here: only this process can record its job's end)
    code = 0
    spawn.no_inherited_fds()
    fs.defer_syncs()  # its commits' fsyncs wait for the next spawn's preparation; _spawn settles them
    while launch is not None:
        try:
            launch = supervise(ctx, launch)
        except BaseException as exc:
            _print_exc()
            code = 70
            launch = _record_own_failure(ctx, launch, exc)
    try:
        _teach(ctx)
    except BaseException:
        pass
    try:
        fs.settle()  # its last commit (the end of its last job) is durable before it leaves
    except BaseException:
        _print_exc()
    os._exit(code)


def _record_own_failure(ctx: Context, launch: Launch, exc: BaseException) -> Launch | None:
    """The supervisor itself failed: say so in the record rather than leave it to reconcile."""
    child_subreaper(False)  # (before the pass forks anything)

    def fail(txn: Txn) -> object:
        rec = txn.record(launch.job_id)
        if rec.state in HOLDING:
            pid = rec.pid or (pidfile.launched(ctx.store.path(launch.job_id, layout.PID)) or (None,))[0]
            if pid:
                tree.kill_all(pid)  # a job spawned but not yet recorded has only its pid file
            reconcile.release_cgroup(ctx, launch.job_id)  # (one in its cgroup may have only the intent line yet)
            now, error = time.time(), f"its supervisor failed: {type(exc).__name__}: {exc}"
            txn.update(
                launch.job_id,
                state="failed",
                ended_at=now,
                error=error,
                attempts=reconcile.with_failed_attempt(rec, rec.attempt, error, now),
            )

    try:
        result = engine.run_pass(ctx, fail)
        return after_pass(ctx, result)
    except BaseException:
        _print_exc()
        return None


class Interrupt:
    """SIGUSR1 (qex kill) or SIGTERM: stop the job. Wakes the select loop via a pipe
    (and so does SIGCHLD: the loop reaps what the job orphaned; as ``watch.Interrupt``)."""

    def __init__(self):
        self.requested: str | None = None
        self.r, self.w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(self.w)
        signal.signal(signal.SIGUSR1, self._on)
        signal.signal(signal.SIGTERM, self._on)
        signal.signal(signal.SIGCHLD, _woken)

    def _on(self, signum, frame):
        self.requested = "kill" if signum == signal.SIGUSR1 else "term"

    def close(self) -> None:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        os.close(self.r)
        os.close(self.w)


def _woken(signum, frame) -> None:
    """SIGCHLD: its byte on the wake-up pipe is all it does."""


def prepare_early(ctx: Context, launch: Launch) -> None:
    """What a submission's early supervisor does before its commit's byte comes
    (``qex.supervisor.become.fork_early``): it reads the job's spec and makes its memory cgroup,
    and looks up prctl (the subreaper: ``qex.linux.proc.look_up_prctl``),
    which the commit's fsyncs leave time for (a commit that never comes leaves
    nothing behind: the caller removes the cgroup). A failure leaves it to
    ``supervise``, as for any supervisor."""
    try:
        launch.spec = ctx.store.read_spec(launch.job_id, must_own=True)
        meter = Meter()
        meter.prepare(ctx.store.job_dir(launch.job_id), launch.job_id, launch.attempt)
        launch.meter = meter
        look_up_prctl()  # (the subreaper, set in supervise)
        manners.bind()  # (the job's I/O class, set at the spawn)
    except Exception:
        launch.spec = launch.meter = None


def supervise(ctx: Context, launch: Launch) -> Launch | None:
    store = ctx.store
    job_id = launch.job_id
    title.supervisor(job_id)
    os.chdir(store.job_dir(job_id))
    spec, meter = launch.spec, launch.meter
    launch.spec = launch.meter = None
    if not launch.follows and spec is None:
        ctx.reload_config()  # (a job that follows another, or an early supervisor: read a moment ago)
    spec = spec if spec is not None else store.read_spec(job_id, must_own=True)
    interrupt = Interrupt()
    meter = meter if meter is not None else Meter()
    child_subreaper(True)  # what the job orphans is this process's to stop (qex.linux.tree); off in _finish
    proc, work = starting.start(ctx, launch, spec, meter, interrupt)
    if proc is None:
        meter.discard()
        return _finish(ctx, launch, work, interrupt)
    return _finish(ctx, launch, _watch(ctx, proc, work, interrupt, meter, launch), interrupt)


def _watch(
    ctx: Context, proc, work: Working, interrupt: Interrupt, meter: Meter | None = None, launch: Launch | None = None
) -> Working:
    """Copy output, enforce the timeout, answer a kill; return the working record with
    the outcome (or abandoned: no longer this process's job). A job that
    still runs after ``watch.GRACE`` is watched by a minimal process this one execs into
    (``qex.supervisor.handoff``: it comes back as ``resume``)."""
    from qex.supervisor import watch

    rec = work.rec
    sinks = _sinks(ctx, proc, rec.id)
    started = rec.started_at or time.time()
    timeout_at = started + rec.timeout if rec.timeout else None
    sampler, peak = _sampler(ctx, rec, started), TreePeak.start(started) if not (meter and meter.cg) else None
    handoff_at = time.time() + watch.GRACE if launch is not None else None
    mark_at = started + starting.RUNNING_AFTER if work.unrecorded and launch is not None else None
    pipes, abandon = sinks, None
    while True:
        pause_at = min(t for t in (handoff_at, mark_at) if t is not None) if (handoff_at or mark_at) else None
        end = watch.loop(
            proc.pid, sinks, pipes, interrupt, timeout_at, KILL_GRACE, DRAIN_AFTER_EXIT, pause_at, sampler, peak
        )
        if not (end.handoff and mark_at is not None):
            break
        mark_at, pipes = None, end.open_pipes  # the job runs on: record it running, then watch on
        spawn.pid_line_now(proc)
        current = starting.record_running(ctx, launch, rec, interrupt)
        if current.abandon:
            signal_group(proc.pid, signal.SIGKILL)
            handoff_at, abandon = None, current
        else:
            work = current
    if end.handoff:
        end = _hand_off(ctx, launch, proc, work, interrupt, meter, sinks, end.open_pipes, timeout_at, sampler, peak)
    _close_watch(proc, end, sampler, sinks)
    if abandon is not None:
        if meter is not None:
            meter.discard()
        return abandon
    return ending.classify(
        work,
        end.wait_status,
        end.rusage,
        end.stop_reason,
        interrupt,
        sinks,
        end.incomplete,
        meter,
        sampler.result() if sampler is not None else None,
        peak.result() if peak else None,
    )


def _sinks(ctx: Context, proc, job_id: str) -> dict:
    """The job's stdout and stderr sinks (``logs.Sink``) by the fd of its pipe, each
    attached to the FIFO of the ``qex run`` that follows the job, if one does."""
    from qex.supervisor.logs import Sink  # after the spawn: not on the way to the job's first instruction

    store = ctx.store
    limit, setting = _log_limit(ctx.config)
    sinks = {
        proc.stdout.fileno(): Sink(store.path(job_id, layout.STDOUT), limit, "stdout", setting),
        proc.stderr.fileno(): Sink(store.path(job_id, layout.STDERR), limit, "stderr", setting),
    }
    for (pipe, sink), name in zip(sinks.items(), (layout.STDOUT_PIPE, layout.STDERR_PIPE)):
        path = store.path(job_id, name)  # the FIFO of its qex run, if one follows it (qex.supervisor.pipes)
        fd = open_output(path)
        if fd >= 0:
            sink.attach(fd, path)
            grow(pipe)
    return sinks


def _hand_off(
    ctx: Context,
    launch: Launch,
    proc,
    work: Working,
    interrupt: Interrupt,
    meter,
    sinks,
    pipes,
    timeout_at,
    sampler,
    peak,
):
    """The job runs on past ``watch.GRACE``: exec into the minimal watcher, which never
    comes back here (``resume``). If the exec failed, watch on in this process and
    return the end ``watch.loop`` saw."""
    from qex.supervisor import slim, watch

    _teach(ctx)  # (the watcher is another program: what it would lose)

    spawn.pid_line_now(proc)
    slim.become_watcher(
        ctx,
        launch,
        proc.pid,
        work,
        interrupt,
        meter,
        sinks,
        pipes,
        timeout_at,
        KILL_GRACE,
        DRAIN_AFTER_EXIT,
        sampler,
        peak,
    )
    return watch.loop(proc.pid, sinks, pipes, interrupt, timeout_at, KILL_GRACE, DRAIN_AFTER_EXIT, None, sampler, peak)


def _close_watch(proc, end, sampler, sinks: dict) -> None:
    """The watch is over: the job's wait status on ``proc``, the sampler stopped, the
    logs and the job's pipes closed."""
    proc.returncode = end.wait_status
    if sampler is not None:
        sampler.stop()
    for sink in sinks.values():
        sink.close()
    proc.stdout.close()
    proc.stderr.close()


def _sampler(ctx: Context, rec: Status, started: float):
    """The VRAM sampler of a job that claims the pool gpu, where a driver answers
    (``qex.supervisor.vram_note.start``); None otherwise. Never fails the job."""
    if "gpu" not in rec.claims.pools:
        return None
    try:
        from qex.supervisor import vram_note

        return vram_note.start(ctx, rec, started)
    except Exception:
        _print_exc()
        return None


def resume(ctx: Context, launch: Launch, interrupt: Interrupt, ended: Callable[[], Working]) -> None:
    """The supervisor after its exec back from the minimal watcher (``qex.supervisor.handoff``):
    ``ended()`` classifies the job's end; record it as ``supervise`` does, then go on as
    ``main_loop``. Never returns."""
    lock.never_give_up()
    try:
        launch = _finish(ctx, launch, ended(), interrupt)
    except BaseException as exc:
        _print_exc()
        launch = _record_own_failure(ctx, launch, exc)
        if launch is None:
            os._exit(70)
    main_loop(ctx, launch)


def _log_limit(config) -> tuple[int | None, str]:
    """``[logs] max_bytes`` as read when the job starts, and the words the marker uses."""
    from qex.base.units import format_size

    limit = config.logs_max_bytes
    if not limit:
        return None, ""
    return limit, (f"[logs] max_bytes = {format_size(limit)} (raise it in {config.path}; 0 keeps everything)")


def _job_over() -> bool:
    """The job has ended (or was never spawned): this process stops being a child
    subreaper before it forks anything (``qex.linux.proc.child_subreaper``), and reaps
    the orphans of the job it adopted that have ended. True if some still live: what
    a job that ended by itself left behind goes on, and this process does not go on
    to another job while they are its children (a kill of that job would stop them:
    ``qex.linux.tree``); it leaves after its pass, and they go to init."""
    child_subreaper(False)
    return tree.reap_adopted(0, forked_children()) > 0


def _finish(ctx: Context, launch: Launch, work: Working, interrupt: Interrupt) -> Launch | None:
    """Write the final record (or requeue a retry), run a pass, hand over."""
    interrupt.close()
    left_behind = _job_over()
    ctx.reload_config()  # [hooks] as it is when the job ends
    if work.abandon:
        return _close_and_end(launch, ctx)
    if _CRASH:
        faults.hit("supervisor.before_final")

    def record_end(txn: Txn) -> object:
        ending.record_end(ctx, txn, launch, work, lessons, lambda: _close_and_end(launch, ctx))

    lessons: list = []
    result = _until_recorded(ctx, record_end)
    if _CRASH:
        faults.hit("supervisor.after_final")
    if lessons:  # taught after the pass (the learner's fsync holds up no other pass)
        _LESSONS.extend(lessons)
    # The first job this pass admitted is this process's next job: no fork, no new
    # process image to fault in (a drain of short jobs is mostly this hand-over). Not
    # while a process the job left behind is this process's child (_job_over).
    own_next = result.launches.pop(0) if result.launches and not left_behind else None
    if launch.peer_fd >= 0 and any(n.peer_fd == launch.peer_fd for n in (own_next, *result.launches) if n):
        launch.peer_fd, launch.peer_lock = -1, None  # handed to a next job (apply_plan): not let go below
    child = after_pass(ctx, result)  # (a child keeps its own job's locks only: fork.launch_all)
    if child is not None:
        del _LESSONS[:]  # (the process it was forked from teaches them)
        return child  # a forked supervisor of another admitted job (the fds above are closed in it)
    if own_next is None or len(_LESSONS) >= TEACH_EVERY or time.monotonic() >= _LESSONS_DUE:
        _teach(ctx)
    if own_next is None:
        _prune(ctx)
    _close_and_end(launch, ctx)
    if own_next is not None:
        own_next.fresh = True  # admitted by this process's pass a moment ago (see starting.start)
        own_next.follows = True
        detach_stdio(ctx.store.path(own_next.job_id, layout.SUPERVISOR_LOG))
    return own_next


# What this supervisor's jobs taught the learner, not written yet: a drain's
# supervisor writes them every TEACH_EVERY jobs or TEACH_SECS seconds, and when
# it has no next job or hands its job to a watcher (``_teach``). One write per
# job (the learner's lock, a load, a write with its fsync) was 0.55 ms of each
# 5.3 ms job cycle of a drain. A supervisor killed meanwhile loses them: the
# learner only suggests claims.
_LESSONS: list = []
_LESSONS_DUE = 0.0  # (monotonic) the next write, at the latest
TEACH_EVERY = 64
TEACH_SECS = 1.0


def _teach(ctx: Context) -> None:
    global _LESSONS_DUE
    _LESSONS_DUE = time.monotonic() + TEACH_SECS
    if _LESSONS:
        from qex.supervisor.memory import teach

        lessons = _LESSONS[:]
        del _LESSONS[:]
        teach(ctx, lessons)


def _prune(ctx: Context) -> None:
    """Old records go (``qex.queue.prune.auto``: at most once per ``[store] prune_every``),
    and the files of the groups they were the last of. Never a reason to fail the job."""
    try:
        from qex.queue import prune

        removed = prune.auto(ctx)
        if removed:
            from qex.jobs import groups

            groups.prune(ctx)
    except Exception:
        _print_exc()


def _until_recorded(ctx: Context, mutate):
    """Only this process knows how the job ended: on a full disk (or any store error but a
    damaged record) it says why in supervisor.log and tries again, holding the job's
    capacity, for up to ``QEX_RECORD_PATIENCE`` seconds (a day)."""
    from qex.base.errors import BrokenRecord, StoreError

    patience = float(os.environ.get("QEX_RECORD_PATIENCE", 86400))
    deadline, delay, said = time.time() + patience, 0.1, False
    while True:
        try:
            return engine.run_pass(ctx, mutate, save_index=LAZY)
        except BrokenRecord:
            raise
        except StoreError as exc:
            if time.time() + delay > deadline:
                raise
            if not said:
                try:  # supervisor.log, on the same full disk, may not take it either
                    print(f"qex: cannot write the job's final record yet: {exc}; trying again until it can", flush=True)
                    said = True
                except OSError:
                    pass
            time.sleep(delay)
            delay = min(2.0, delay * 2)


def _print_exc() -> None:
    """The traceback of a supervisor's own failure, into supervisor.log (traceback is
    imported here: it costs a starting supervisor ~6 ms, before the job's first instruction)."""
    import traceback

    traceback.print_exc()


def _close_and_end(launch: Launch, ctx: Context | None = None) -> None:
    """Let go of the job's locks: the peer lock first (its file removed: the
    record no longer lists the job), then the liveness lock."""
    if launch.peer_fd >= 0 or launch.peer_lock:
        from qex.users import peer_dir

        if ctx is not None:
            peer_dir.release_job_lock(ctx, launch.peer_fd, launch.peer_lock)
        elif launch.peer_fd >= 0:
            os.close(launch.peer_fd)
        launch.peer_fd, launch.peer_lock = -1, None
    if launch.alive_fd >= 0:
        try:
            os.close(launch.alive_fd)
        except OSError:
            pass
    return None
