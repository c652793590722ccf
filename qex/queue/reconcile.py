"""Reconcile: jobs whose supervisor is gone, one rule per case (docs/design.md, "The pass")."""

from __future__ import annotations

import os
import time

from qex.base.states import FINAL, HOLDING
from qex.linux import pidfile
from qex.queue import views
from qex.queue.txn import Txn
from qex.store import layout
from qex.store.lock import is_held
from qex.store.records import Attempt

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.store.records import Status


STOP_WAIT = 0.2  # seconds a pass waits, in all, for lost jobs' SIGKILLed processes to leave their cgroups and let
# go of their locks (it holds the admission lock, which the other users' passes wait for only ADMIT_WAIT: what is
# still there then keeps its claim, and the next pass looks again; the sweep removes a cgroup left)


def reconcile_locked(ctx: Context, txn: Txn, now: float) -> None:
    """Jobs whose supervisor is gone: requeue what never ran, fail what did."""
    lost = False
    until = None  # (the one deadline of this pass's waits for lost jobs: STOP_WAIT)
    idx = txn.idx
    if idx.view is not None:  # (kept by a supervisor: no walk of a long queue)
        from qex.queue import queueview

        holding = sorted(queueview.view_of(idx, views.queued_of).holding)
    else:
        holding = [job_id for job_id, entry in idx.jobs.items() if entry["state"] in HOLDING]
    for job_id in holding:
        entry = idx.jobs[job_id]
        alive = ctx.store.path(job_id, layout.ALIVE)
        try:
            if is_held(alive):
                continue
        except OSError:
            continue  # cannot look (another user's private directory): assume alive
        pid_path = ctx.store.path(job_id, layout.PID)
        launched = pidfile.launched(pid_path)
        lost = True
        until = until or time.monotonic() + STOP_WAIT
        try:
            rec = txn.record(job_id)
        except Exception:
            txn.idx.drop(job_id)
            continue
        if rec.state in FINAL:
            txn.store.index_put(txn.idx, rec.asdict())
            continue
        intent = pidfile.intent(pid_path) if launched is None else None
        # A pid file that says neither (empty, or cut short): its supervisor was killed
        # while it wrote it (each write truncates it first), around the spawn. The
        # job may have run: it is never started again.
        spawning = intent is not None or (launched is None and os.path.lexists(pid_path))
        if launched is None and entry["state"] == "starting" and not spawning:
            _requeue(ctx, txn, job_id, until)
            continue
        unfound = spawning and not _has_cgroup(ctx, job_id)  # no pid, no cgroup: only its peer lock tells
        _stop_orphan(launched)
        release_cgroup(ctx, job_id, until)  # with only an intent, the job's cgroup is all that holds it
        found = _stop_by_lock(ctx, rec, until)  # (what escaped its group, or dies slowly: its claim stays until gone)
        if found == "held":
            continue  # something of it still runs: its claim stays, the next pass looks again
        stopped = "the job's processes were stopped"
        if unfound and found == "gone":
            stopped = "nothing of the job runs any more (it may have run)"
        elif unfound and found is None:
            stopped = "it may have started, and if it did it was not stopped (it had no memory cgroup)"
        attempt = rec.attempt
        error = (
            f"its supervisor (pid {rec.supervisor_pid or intent or '?'}) was lost; {stopped} and the result is unknown"
        )
        attempts = with_failed_attempt(rec, attempt, error, now)
        txn.update(job_id, state="failed", ended_at=now, error=error, attempts=attempts, supervisor_lost=True)
    if lost:
        _sweep_cgroups(ctx, txn)


def _requeue(ctx: Context, txn: Txn, job_id: str, until: float) -> None:
    """Queue again a job whose starting qex died before it ran (no pid file: it never ran),
    once what its memory cgroup holds is stopped and the cgroup removed."""
    release_cgroup(ctx, job_id, until)
    txn.update(
        job_id,
        state="queued",
        assigned=[],
        forced=False,
        blocked_reason="requeued: the qex process that was starting it died before it ran",
    )


def with_failed_attempt(rec: Status, attempt: int, error: str, now: float) -> tuple[Attempt, ...]:
    """The record's attempts, then attempt number ``attempt``, failed at ``now`` with ``error``."""
    failed = Attempt(attempt, "failed", claims=rec.claims, started_at=rec.started_at, ended_at=now, error=error)
    return (*rec.attempts, failed)


def release_cgroup(ctx: Context, job_id: str, until: float | None = None) -> None:
    """Stop what is left in a lost job's memory cgroup and remove it (qex.linux.cgroup),
    waiting for its processes to leave it until ``until`` (``time.monotonic``), or ``STOP_WAIT``."""
    from qex.linux import cgroup

    wait = STOP_WAIT if until is None else max(0.0, until - time.monotonic())
    try:
        cgroup.stop_and_remove(ctx.store.job_dir(job_id), job_id, kill=True, wait=wait)
    except OSError:
        pass


def _has_cgroup(ctx: Context, job_id: str) -> bool:
    from qex.linux import cgroup

    return cgroup.recorded(ctx.store.job_dir(job_id), job_id) is not None


def _sweep_cgroups(ctx: Context, txn: Txn) -> None:
    """Empty job cgroups whose job is not running (only when a supervisor was lost: cheap)."""
    from qex.linux import cgroup

    try:
        cgroup.sweep(ctx.store, {j for j, e in txn.idx.jobs.items() if e["state"] in HOLDING})
    except OSError:
        pass


def _stop_by_lock(ctx: Context, rec: Status, until: float) -> str | None:
    """What still holds a lost job's peer lock is the job or what it started (it got a
    copy, ``qex.supervisor.spawn``, and so does what it forks), whatever left its process
    group or had no cgroup. SIGKILL each holder's process group (this user's processes,
    never this one), then wait until ``until`` (``time.monotonic``; one deadline for the
    whole pass) for them to let go, only when one was killed: a holder that is not this
    user's to stop costs a pass nothing. "gone":
    nothing of the job held it; "stopped": what held it is gone now; "held": something
    still holds it (its claim must stay); None: no lock tells (none recorded, or no peer
    directory)."""
    from qex.linux import proc
    from qex.users import peer_dir

    if not rec.peer_lock:
        return None
    where = peer_dir.directory(ctx)
    fd_dir, _problem, _note = peer_dir.open_dir(where, create=False)
    if fd_dir is None:
        return None
    try:
        if not peer_dir.lock_held(fd_dir, rec.peer_lock, rec.uid):
            return "gone"
        if not [pid for pid in proc.holders(os.path.join(where, rec.peer_lock)) if _kill_holder(pid)]:
            return "held"
        while peer_dir.lock_held(fd_dir, rec.peer_lock, rec.uid):
            if time.monotonic() >= until:
                return "held"
            time.sleep(0.01)
        return "stopped"
    finally:
        os.close(fd_dir)


def _kill_holder(pid: int) -> bool:
    """SIGKILL the process group of ``pid`` (a job's own, ``setpgroup``), and ``pid`` itself
    if it left that group; never this process's group, never another user's process.
    Whether it was sent."""
    import _signal as signal

    from qex.base.machine import process_real_uid

    if pid == os.getpid() or process_real_uid(pid) != os.getuid():
        return False
    try:
        group = os.getpgid(pid)
        if group > 1 and group != os.getpgrp():
            os.killpg(group, signal.SIGKILL)
        os.kill(pid, signal.SIGKILL)
    except OSError:
        return False
    return True


def _stop_orphan(launched) -> None:
    """SIGKILL the job's process group, but only if its leader is provably the job:
    its start time is the pid file's (a pid file of this user's, in this user's
    directory: ``qex.linux.pidfile``) and its real uid is this user's (root's
    own jobs run as root)."""
    if launched is None:
        return
    from qex.base.machine import process_real_uid, process_start_time

    pid, start = launched
    if start is not None and process_start_time(pid) == start and process_real_uid(pid) == os.getuid():
        import _signal as signal

        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
