"""How the supervisor starts its job: the record checked (the job is still to
start, and not to be killed), the job spawned outside the state lock, its logs
made, and 'running' recorded (``start``; the design: docs/design.md, "The
supervisor")."""

from __future__ import annotations

import _signal as signal  # the C module (see qex.supervisor.run)
import os
import time

from qex.base.errors import StoreError
from qex.linux.proc import signal_group
from qex.queue.txn import Txn
from qex.store import fs, layout
from qex.store.state import LAZY
from qex.supervisor import spawn
from qex.supervisor.memory import Meter
from qex.supervisor.working import Outcome, Working

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.queue.context import Launch
    from qex.store.records import Status
    from qex.store.state import Store

RUNNING_AFTER = 0.02  # the longest a spawned job waits for its 'running' record while the lock is busy


def start(
    ctx: Context, launch: Launch, spec: object, meter: Meter | None = None, interrupt: object | None = None
) -> tuple[object, Working]:
    """Spawn the job; return (process, its working record: its pid and start time), or
    (None, the outcome of a start that failed, or the job abandoned).

    The spawn is outside the state lock (the spawn and the cgroup moves around it
    take time the other supervisors would wait for). Before it, the record is
    read to check that the job is still to start and not to be killed: without
    the lock for a job a pass admitted just before (``launch.fresh``: the record
    that pass wrote, and a kill since), under it otherwise. 'running'
    is recorded right after it, waiting for the state lock if another process
    holds it (a submission's early supervisor gets its byte while the submission
    still saves the index): a script that sees its job's first output finds the
    job running. When this supervisor's own pass at the end of its previous job
    admitted this one (``launch.follows``: a drain, where the other supervisors'
    passes wait for the lock), the record waits, at most ``RUNNING_AFTER``, and a
    job that ends by then gets 'running' and its end in one commit (``run._finish``):
    such a drain takes the lock once per job, not twice (taken at once whenever
    it happened to be free, in one job in five, it cost the other supervisor
    1.5 ms of waiting each time). A `qex kill` asked meanwhile is answered when 'running' is
    recorded. A supervisor that dies before that leaves a 'starting' job with a
    pid file (its intent line is written before the spawn, see ``spawn.spawn``): the
    next pass stops it and records it lost, never starts it twice.
    """
    store = ctx.store
    meter = meter or Meter()
    rec = _record_to_start(store, launch)
    if rec.state != "starting":
        return None, Working(rec, abandon=True)
    if rec.kill_requested:
        killed = Outcome("killed", time.time(), error="stopped by qex kill before it started")
        return None, Working(rec, outcome=killed)
    now = time.time()
    proc, failure = spawn.spawn(ctx, launch, spec, rec, meter)
    if proc is None:
        return None, Working(rec, outcome=Outcome("failed", time.time(), started_at=now, error=failure))
    work = Working(rec.evolve(pid=proc.pid, supervisor_pid=os.getpid(), started_at=now), unrecorded=True)
    if launch.follows:
        return proc, work  # a drain: 'running' waits for RUNNING_AFTER, or rides on the end (see above)
    spawn.pid_line_now(proc)
    make_logs(store, launch.job_id)  # (after the spawn: never on the way to the job's first instruction)
    current = record_running(ctx, launch, work.rec, interrupt)
    if current.abandon:
        signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        return None, current
    return proc, current


def _record_to_start(store: Store, launch: Launch) -> Status:
    """The job's record as ``start`` checks it: without the lock for a job a pass
    admitted just before (``launch.fresh``), if it still says 'starting'; under the
    lock otherwise (the caller abandons a job whose record says anything else)."""
    if launch.fresh:  # the record as the pass that admitted it left it (and a kill since): no lock
        launch.fresh = False
        try:
            rec = store.cached_status(launch.job_id) or store.read_status(launch.job_id)
        except Exception:
            rec = None
        if rec is not None and rec.state == "starting":
            return rec
        # (not as expected: look again under the lock)
    with store.lock():
        txn = Txn(store, store.load_index_locked(save_replayed=False))
        rec = txn.record(launch.job_id)
        txn.commit()
    return rec


def make_logs(store: Store, job_id: str) -> None:
    """The job's stdout.log and stderr.log, empty, before its record says 'running' (a
    script that sees it running opens them); a job's logs are made when it starts, not
    when it is queued. The watch's ``Sink`` opens them again, and says what went wrong
    (a link or a FIFO planted there) in the record: here it is left to it."""
    for name in (layout.STDOUT, layout.STDERR):
        try:
            os.close(fs.open_regular(store.path(job_id, name), os.O_WRONLY | os.O_CREAT))
        except OSError:
            pass


def record_running(ctx: Context, launch: Launch, rec: Status, interrupt: object | None = None) -> Working:
    """Record the spawned job 'running' (``rec``: its pid and start; see ``start``).
    Returns the working record, abandoned if the job is no longer this process's to
    run (the caller stops it)."""
    store = ctx.store
    with store.lock():
        txn = Txn(store, store.load_index_locked(save_replayed=False))
        current = txn.record(launch.job_id)
        if current.state != "starting":  # not this process's to run any more: never leave it running
            return Working(current, abandon=True)
        current = txn.update(
            launch.job_id, state="running", pid=rec.pid, supervisor_pid=rec.supervisor_pid, started_at=rec.started_at
        )
        if current.kill_requested and interrupt is not None:
            interrupt.requested = "kill"  # asked while it was being spawned: the watch stops it at once
        txn.commit(save_index=LAZY)  # the journal has it; a pass soon saves the index
    try:
        fs.settle()  # no spawn follows to make it durable (fs.defer_syncs): now, while the job runs
    except StoreError:
        pass  # (kept: the next settle, before this process spawns, forks or leaves, raises it again)
    return Working(current)
