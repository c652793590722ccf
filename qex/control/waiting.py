"""Waiting for jobs to end: the one poll of ``qex wait``, ``qex status --wait``, the
followers of ``qex run``, and ``qex.api``'s ``Job.wait`` and futures.

It reads the records without the lock, and now and then runs a pass for a job
whose supervisor died or for queued work that no waker will start.
"""

from __future__ import annotations

import time

from qex.base.states import FINAL, HOLDING
from qex.store import layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

    from qex.config.context import Context
    from qex.store.records import Status

POLL_FIRST, POLL_MAX, LIVENESS_EVERY = 0.02, 0.2, 1.0


class WaitLimit(Exception):
    """The caller's own --timeout passed (124)."""


def await_final(
    ctx: Context,
    job_ids: list[str],
    limit: float | None,
    first: bool = False,
    on_tick: Callable[[], object] | None = None,
    on_record: Callable[[Status], None] | None = None,
    idle: Callable[[float], None] | None = None,
) -> dict[str, Status]:
    """Poll the records (no lock) until every job (or, with ``first``, one) is final.
    ``idle(seconds)`` is the pause between two looks (a follower copies meanwhile)."""
    deadline = None if limit is None else time.monotonic() + limit
    done: dict[str, Status] = {}
    delay, last_check = POLL_FIRST, time.monotonic()
    while True:
        for job_id in job_ids:
            if job_id in done:
                continue
            rec = ctx.store.read_status(job_id)
            if on_record is not None:
                on_record(rec)
            if rec.state in FINAL:
                done[job_id] = rec
        if len(done) == len(job_ids) or (first and done):
            return done
        if on_tick is not None:
            on_tick()
        now = time.monotonic()
        if now - last_check >= LIVENESS_EVERY:
            last_check = now
            nudge(ctx, [j for j in job_ids if j not in done])
        if deadline is not None and now >= deadline:
            raise WaitLimit
        (idle or time.sleep)(delay if deadline is None else max(0.0, min(delay, deadline - now)))
        delay = min(POLL_MAX, delay * 1.5)


def nudge(ctx: Context, pending: list[str]) -> None:
    """A running job whose supervisor died, or queued work with no waker: run a pass."""
    from qex.queue import engine, waker
    from qex.store.lock import is_held

    need, on_slurm = False, []
    for job_id in pending:
        try:
            rec = ctx.store.read_status(job_id)
        except Exception:
            continue
        state = rec.state
        if rec.slurm_job_id and state == "queued":
            on_slurm.append(job_id)
        if state in HOLDING and not is_held(ctx.store.path(job_id, layout.ALIVE)):
            need = True
        elif state == "queued" and not rec.slurm_job_id and not is_held(waker.lock_path(ctx)):
            need = True
    if on_slurm:
        from qex.queue import slurmsync

        slurmsync.refresh(ctx, on_slurm)  # (Slurm's word on its waiting jobs: one squeue call)
    if need and not ctx.forks:  # (a qex.api program: a fresh process passes, qex.supervisor.starter)
        from qex.supervisor.become import kick

        kick(ctx)
    elif need:
        result = engine.run_pass(ctx)
        from qex.supervisor import become

        become.finish_pass(ctx, result)
