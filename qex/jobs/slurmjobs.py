"""Submission on the Slurm backend (``[backend] kind = "slurm"``, ``QEX_BACKEND=slurm``).

``submit.submit_many`` calls ``queue_locked`` instead of queueing for the local admission:
under the state lock, each job is given to ``sbatch`` (a fan-out: one job array), and its
record, queued with its Slurm job id (``slurm_job_id``), is committed in the same hold,
so the qex step on the node (``qex.supervisor.slurmstep``), which takes the lock to start
it, always finds it. The local admission never starts such a job: Slurm is its scheduler.
"""

from __future__ import annotations

import time

from qex.base.errors import SpecError
from qex.base.states import ACTIVE
from qex.store import layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.queue.txn import Txn
    from qex.store.records import Status


def on_slurm(ctx: Context) -> bool:
    """Whether this command's jobs go to Slurm (``[backend] kind``, ``QEX_BACKEND``: qex.config.keys.backend)."""
    from qex.config.keys import backend

    return backend(ctx.config) == "slurm"


def claims(ctx: Context, req: object) -> tuple[dict, dict, list[str]]:
    """A request's claims on Slurm (``qex.slurm.translate.claims``)."""
    from qex.slurm import translate

    return translate.claims(ctx.config, req)


def queue_locked(ctx: Context, txn: Txn, built: list) -> list[str]:
    """sbatch every job of a submission (``qex.jobs.submit.Built``) and queue its record; returns the ids. A failure
    cancels the Slurm jobs already submitted (the caller removes the directories)."""
    from qex.slurm import clients

    recs = []
    for b in built:
        # (an out-of-memory end is final on Slurm: [defaults] oom_retries does not apply; --oom-retries is refused)
        recs.append(b.record.evolve(seq=txn.idx.next_job, slurm_job_id=None, oom_retries=0))
        txn.idx.next_job += 1
    submitted: list[str] = []
    try:
        if len(recs) > 1 and all(r.template is not None for r in recs):
            recs = _array(ctx, txn, recs, submitted)  # a fan-out: its jobs differ only in command and name
        else:
            slurm_of: dict = {}  # id -> its Slurm id, or (root, how) for a stage skipped at once
            recs = [_one(ctx, txn, rec, slurm_of, submitted) for rec in recs]
    except BaseException:
        try:
            clients.cancel(submitted)
        except Exception:
            pass
        raise
    for rec in recs:
        txn.put(rec, None)
    return [rec.id for rec in recs]


def _one(ctx: Context, txn: Txn, rec: Status, slurm_of: dict, submitted: list) -> Status:
    """``rec`` submitted to Slurm (with its Slurm job id), or skipped at once."""
    from qex.slurm import clients, script, translate

    deps, skip = _dependencies(txn, rec, slurm_of)
    if skip is not None:
        slurm_of[rec.id] = skip
        return _skipped(rec, *skip)
    log = ctx.store.path(rec.id, layout.SLURM_LOG)
    argv = translate.sbatch_args(ctx.config, rec, deps, log)
    job = clients.submit(argv, script.batch_script(ctx.store.root, ctx.config.path, [rec.id], log))
    submitted.append(job)
    slurm_of[rec.id] = job
    return rec.evolve(slurm_job_id=job)


def _array(ctx: Context, txn: Txn, recs: list[Status], submitted: list) -> list[Status]:
    from qex.slurm import clients, script, translate

    deps, skip = _dependencies(txn, recs[0], {})
    if skip is not None:
        return [_skipped(rec, *skip) for rec in recs]
    log_of = ctx.store.path("{}", layout.SLURM_LOG)
    argv = translate.sbatch_args(ctx.config, recs[0], deps, "/dev/null", array=len(recs))
    job = clients.submit(argv, script.batch_script(ctx.store.root, ctx.config.path, [r.id for r in recs], log_of))
    submitted.append(job)
    return [rec.evolve(slurm_job_id=f"{job}_{i}") for i, rec in enumerate(recs)]


def _skipped(rec: Status, root: str, how: str) -> Status:
    return rec.evolve(
        state="skipped",
        ended_at=time.time(),
        skipped_root=root,
        error=f"a job it needs did not succeed: {root[:8]} ({how})",
    )


def _dependencies(txn: Txn, rec: Status, slurm_of: dict) -> tuple[list[str], tuple[str, str] | None]:
    """The Slurm dependency terms of ``rec`` (``needs`` -> afterok, ``after`` -> afterany),
    or the (root, words) of a need that ended without success: the job is skipped, as the
    local admission skips it. An ended dependency that satisfies it needs no term."""
    terms = []
    for kind, ids in (("afterok", rec.needs), ("afterany", rec.after)):
        for dep in ids:
            job = slurm_of.get(dep)
            if isinstance(job, tuple):  # a stage of this submission skipped at once: its root, its words
                if kind == "afterok":
                    return [], job
                continue
            if job is None:
                entry = txn.idx.jobs.get(dep)
                if entry is not None and entry.get("state") in ACTIVE:
                    job = entry.get("slurm")
                    if job is None:
                        option = "--needs" if kind == "afterok" else "--after"
                        raise SpecError(
                            f"{option}: job {dep[:8]} runs on this machine (the local backend); "
                            "a Slurm job can depend only on Slurm jobs"
                        )
                else:
                    try:
                        dep_rec = txn.record(dep)
                    except Exception:
                        dep_rec = None
                    state = "missing" if dep_rec is None else dep_rec.state
                    if kind == "afterok" and state != "completed":
                        root = dep_rec.skipped_root or dep if state == "skipped" else dep
                        return [], (root, "no such job" if state == "missing" else state)
                    continue
            terms.append(f"{kind}:{job}")
    return terms, None
