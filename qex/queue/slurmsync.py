"""What Slurm knows that a record of the Slurm backend does not say yet (``qex wait``,
``qex status``, ``qex list``): asked in one ``squeue`` call, only for the jobs the index
still has as queued or running on Slurm. A job's result is never read from Slurm: the
qex step on its node writes the final record (``qex.supervisor.slurmstep``).

What is decided here, in one pass:

- a job Slurm holds with ``DependencyNeverSatisfied`` is cancelled in Slurm and recorded
  ``skipped``, naming the first job it needs that did not succeed (as locally);
- a job still ``queued`` here that Slurm ended or forgot before qex's step took it (an
  ``scancel`` outside qex, its ``--deadline``, a node that failed at boot) is recorded
  ``cancelled``, ``expired`` or ``failed``, with Slurm's words;
- a pending job's reason is Slurm's (``Slurm: Resources``).
"""

from __future__ import annotations

import time

from qex.base.states import ACTIVE
from qex.queue import engine
from qex.slurm.clients import ACTIVE_STATES
from qex.store.index import on_slurm

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.queue.txn import Txn

ENDED_AS = {"CANCELLED": "cancelled", "DEADLINE": "expired"}  # else failed


def refresh(ctx: Context, job_ids: list[str] | None = None) -> None:
    """Bring the records of the given jobs (None: every active Slurm job) up to Slurm's word."""
    from qex.slurm import clients

    jobs = ctx.store.read_index_jobs()
    wanted = None if job_ids is None else set(job_ids)
    for job_id in job_ids or ():  # (and what they wait for: its end decides theirs)
        entry = jobs.get(job_id) or {}
        wanted.update(entry.get("needs") or (), entry.get("after") or ())
    mine = {
        j: e["slurm"]
        for j, e in jobs.items()
        if on_slurm(e) and e["state"] == "queued" and (wanted is None or j in wanted)
    }
    if not mine:
        return  # (a running job's record is its supervisor's to write)
    try:
        known = clients.queue_states(sorted(mine.values()))
    except clients.SlurmError:
        return  # a controller that does not answer changes nothing; the records stand
    never = [j for j, s in mine.items() if known.get(s, ("", "", ""))[1] == clients.NEVER]
    if never:
        clients.cancel([mine[j] for j in never])
    words = {j: _words(*known.get(s, ("", "", ""))[:2]) for j, s in mine.items()}
    if never or any(w is None or jobs[j].get("reason") != w for j, w in words.items()):
        engine.run_pass(ctx, lambda txn: _apply(txn, mine, known, set(never)))  # (only when a record changes)


def skip_needing(ctx: Context, job_id: str) -> None:
    """A Slurm job that did not succeed (its step calls this): the queued Slurm jobs that
    need it, and those that need them, are recorded ``skipped`` at once and cancelled
    in Slurm (one scancel), as a local pass skips them; nobody has to be waiting."""
    from qex.slurm import clients

    def skip(txn: Txn) -> list[str]:
        now, failed, cancelled = time.time(), {job_id}, []
        root, how = _first_failed(txn, [job_id])
        changed = True
        while changed:
            changed = False
            for other, entry in list(txn.idx.jobs.items()):
                if on_slurm(entry) and entry["state"] == "queued" and failed & set(entry.get("needs") or ()):
                    txn.update(
                        other,
                        state="skipped",
                        ended_at=now,
                        skipped_root=root,
                        blocked_reason=None,
                        blocked_holder=None,
                        error=f"a job it needs did not succeed: {root[:8]} ({how})",
                    )
                    failed.add(other)
                    cancelled.append(entry["slurm"])
                    changed = True
        return cancelled

    cancelled = engine.run_pass(ctx, skip).value
    if cancelled:
        try:
            clients.cancel(cancelled)
        except clients.SlurmError:
            pass  # (Slurm holds them with DependencyNeverSatisfied: never started)


def _apply(txn, mine: dict, known: dict, never: set) -> None:
    now = time.time()
    for job_id, slurm_id in mine.items():
        entry = txn.idx.jobs.get(job_id)
        if entry is None or entry["state"] != "queued":
            continue  # ended meanwhile, or taken by its step (whose supervisor records it)
        state, reason, _ = known.get(slurm_id, ("", "", ""))
        if job_id in never:
            root, how = _first_failed(txn, txn.record(job_id).needs)
            txn.update(
                job_id,
                state="skipped",
                ended_at=now,
                skipped_root=root,
                blocked_reason=None,
                blocked_holder=None,
                error=f"a job it needs did not succeed: {root[:8]} ({how}); "
                f"Slurm job {slurm_id}: DependencyNeverSatisfied, cancelled",
            )
        elif not state or state not in ACTIVE_STATES:
            said = (
                f"Slurm ended job {slurm_id} ({state}, {reason})" if state else f"Slurm no longer knows job {slurm_id}"
            )
            txn.update(
                job_id,
                state=ENDED_AS.get(state, "failed"),
                ended_at=now,
                blocked_reason=None,
                blocked_holder=None,
                error=f"{said} before qex's step started it; see its slurm.log",
            )
        else:
            words = _words(state, reason)
            if entry.get("reason") != words:
                txn.update(
                    job_id,
                    change="reason",
                    blocked_reason=words,
                    blocked_holder="slurm",
                    blocked_since=txn.record(job_id).blocked_since or now,
                )


def _words(state: str, reason: str) -> str | None:
    """A waiting job's reason, in Slurm's words (None: Slurm no longer holds it)."""
    if not state or state not in ACTIVE_STATES:
        return None
    return f"Slurm: {state.lower()}" + (f" ({reason})" if reason and reason != "None" else "")


def _first_failed(txn, needs) -> tuple[str, str]:
    for dep in needs:
        try:
            rec = txn.record(dep)
        except Exception:
            return dep, "no such job"
        state = rec.state
        if state != "completed" and state not in ACTIVE:
            return (rec.skipped_root or dep, "skipped") if state == "skipped" else (dep, state)
    return (needs[0] if needs else "", "its dependency can never be met")
