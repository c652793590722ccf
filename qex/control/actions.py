"""kill, cancel and clean: the decisions, made under the lock; the CLI prints.
The rule of kill and cancel is ``stop_jobs``."""

from __future__ import annotations

import os
import signal
import time

from qex.base.errors import PermissionRefused
from qex.base.states import FINAL
from qex.queue import engine
from qex.store import layout
from qex.store.index import on_slurm
from qex.store.lock import is_held

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.queue.txn import Txn


def check_owner(ctx: Context, job: str, uid: int | None, owner: str | None, verb: str, changes: bool = True) -> None:
    """No user can kill, cancel or clean another user's job (id ``job``, of ``uid``, named
    ``owner``), or read its secrets (root excepted). In a shared directory, even root's
    qex changes only the jobs in its own member directory (``changes``): it never acts
    on files another member wrote; it reads them."""
    if uid is None or uid == ctx.uid:
        return
    owner = owner or uid
    if ctx.uid != 0:
        raise PermissionRefused(f"job {job[:8]} belongs to {owner}; only its owner (or root) can {verb} it")
    if changes and ctx.store.shared_root is not None and not os.path.isdir(ctx.store.job_dir(job)):
        raise PermissionRefused(
            f"job {job[:8]} belongs to {owner}, in their own directory of the shared state "
            f"directory; root's qex acts on it only as its owner would: "
            f"sudo -u {owner} qex {verb} {job[:8]}"
        )


def _owned_active(ctx: Context, txn, job_id: str, verb: str, answer: dict) -> dict | None:
    """The index entry of an active job the caller may act on; an ended job is
    answered "ended:<state>" and gives None; another user's job is refused."""
    entry = txn.idx.jobs.get(job_id)
    if entry is None:
        rec = txn.record(job_id)  # (another member's job: refused, never "ended")
        check_owner(ctx, job_id, rec.uid, rec.owner, verb)
        answer[job_id] = f"ended:{rec.state}"
        return None
    check_owner(ctx, job_id, entry.get("uid"), entry.get("owner"), verb)
    return entry


KILL, CANCEL = "kill", "cancel"


def select_active(
    ctx: Context, tags: list[str], group: str | None, states: set[str] | None, name: str | None
) -> list[str]:
    """The bulk selection of ``kill``/``cancel`` (``--tag``, ``--group``, ``--state``,
    ``--name``, ``--mine``): the caller's own queued, starting and running jobs that match
    every filter given (none given: all of them), in submission order. Another user's job
    is never selected (a shared directory's other members are in their own stores; a
    private one's entries are checked by uid, root's included). Nothing matched is
    ``NoSuchJob`` (127), as an id that names nothing."""
    from qex.base.errors import NoSuchJob, QexError, UsageError
    from qex.jobs.resolve import name_matches, resolve

    members = None
    if group is not None:
        target = resolve(ctx.store, group)
        if not target.is_group:
            raise UsageError(
                f"--group: {group} is a job, not a group; give a group id or name", option="--group", value=group
            )
        members = set(target.members)
    index = ctx.store.read_index_jobs()
    chosen = []
    for job_id, entry in sorted(index.items(), key=lambda item: item[1].get("seq", 0)):
        if entry.get("uid") != ctx.uid or (states is not None and entry.get("state") not in states):
            continue
        if (members is not None and job_id not in members) or (
            name is not None and not name_matches(name, entry.get("name") or "")
        ):
            continue
        if tags:
            try:
                have = set(ctx.store.read_status(job_id).tags)
            except QexError:
                continue  # (ended and cleaned meanwhile, or damaged: not selected)
            if not set(tags) <= have:
                continue
        chosen.append(job_id)
    if not chosen:
        from qex.base.units import safe_text

        which = " or ".join(sorted(states)) if states else "queued or running"
        words = [f"--tag {safe_text(t)}" for t in tags] + [
            f"--{k} {safe_text(v)}" for k, v in (("group", group), ("name", name)) if v is not None
        ]
        raise NoSuchJob(f"no {which} job of yours" + (f" matches {' '.join(words)}" if words else ""))
    return chosen


def stop_jobs(ctx: Context, job_ids: list[str], verb: str, wait: bool = True, why: str | None = None) -> dict[str, str]:
    """The one rule of ``qex kill`` and ``qex cancel``; every command that stops a job
    calls it (kill and cancel, of jobs or groups, and a signal to ``qex run``).

    In one pass, whatever the verb, a queued job ends ``cancelled`` (``why`` in its
    record): it never starts, not even on the capacity the jobs killed with it free.
    A starting or running job is killed (``kill``: marked killed-on-request, then its
    supervisor is signalled, which stops every process the job started) or left
    alone (``cancel`` refuses it). Another user's job is refused (PermissionRefused).

    Returns, per id: "cancelled"; for a job being killed, the final state it reached
    ("killed", ...), "signalled" if it had not ended after the kill grace, or
    "signal" without ``wait``; "running" (cancel refused it); "ended:<state>".
    """
    why = why or (f"cancelled by {ctx.user} before it started" if verb == KILL else f"cancelled by {ctx.user}")

    slurm_ids: dict[str, str] = {}  # job id -> its Slurm job id (the Slurm backend: scancel stops it)

    def mark(txn: Txn) -> dict:
        answer = {}
        for job_id in job_ids:
            entry = _owned_active(ctx, txn, job_id, verb, answer)
            if entry is None:
                continue
            if on_slurm(entry):
                slurm_ids[job_id] = entry["slurm"]
            if entry["state"] == "queued":
                txn.update(
                    job_id, state="cancelled", ended_at=time.time(), error=why, blocked_reason=None, blocked_holder=None
                )
                answer[job_id] = "cancelled"
            elif verb == KILL:
                txn.update(job_id, change="reason", kill_requested=True)
                answer[job_id] = "signal"
            else:
                answer[job_id] = "running"
        return answer

    result = engine.run_pass(ctx, mark)
    answer = result.value
    if slurm_ids:
        _stop_on_slurm(slurm_ids, answer)
    for job_id, what in answer.items():
        if what == "signal" and job_id not in slurm_ids:
            _signal_supervisor(ctx, job_id)

    from qex.supervisor import become

    become.finish_pass(ctx, result)
    if wait:
        _await_final(ctx, [j for j, w in answer.items() if w == "signal"], answer)
    return answer


def _stop_on_slurm(slurm_ids: dict[str, str], answer: dict[str, str]) -> None:
    """The Slurm backend: a job cancelled here is cancelled in Slurm (``scancel``); a
    running one's qex step gets SIGUSR1 (``scancel --batch --signal=USR1``), which its
    supervisor answers as it answers ``qex kill`` on one machine (recorded killed).
    A refusal (a job Slurm already ended or forgot, a controller that does not answer)
    changes nothing: the record says cancelled, and a step that starts later runs nothing."""
    from qex.slurm import clients

    for ids, how in (
        ([slurm_ids[j] for j, w in answer.items() if w == "cancelled" and j in slurm_ids], {}),
        (
            [slurm_ids[j] for j, w in answer.items() if w == "signal" and j in slurm_ids],
            {"signal": "USR1", "batch": True},
        ),
    ):
        try:
            clients.cancel(ids, **how)
        except clients.SlurmError:
            pass


def _signal_supervisor(ctx: Context, job_id: str) -> None:
    try:
        rec = ctx.store.read_status(job_id)
    except Exception:
        return
    pid = rec.supervisor_pid
    if rec.slurm_job_id:
        return  # its supervisor runs on a node of the cluster: Slurm signals it (_stop_on_slurm)
    if pid and is_held(ctx.store.path(job_id, layout.ALIVE)):
        try:
            os.kill(pid, signal.SIGUSR1)
        except OSError:
            pass


def _await_final(ctx: Context, job_ids: list[str], answer: dict) -> None:
    from qex.supervisor.run import KILL_GRACE

    deadline = time.time() + KILL_GRACE + 5
    pending = set(job_ids)
    while pending and time.time() < deadline:
        for job_id in list(pending):
            try:
                state = ctx.store.read_status(job_id).state
            except Exception:
                state = None
            if state in FINAL:
                answer[job_id] = state
                pending.discard(job_id)
            elif state == "starting":
                _signal_supervisor(ctx, job_id)
        if pending:
            time.sleep(0.02)
    for job_id in pending:
        answer[job_id] = "signalled"


def clean_jobs(ctx: Context, job_ids: list[str]) -> tuple[list[str], dict[str, str], dict[str, dict]]:
    """Remove the directories of ended jobs (``qex.queue.prune.remove_ended``), none of
    another user's. Returns (removed, refused: id -> why, kept: id -> {"why", "needed_by"})."""
    from qex.queue.prune import remove_ended

    return remove_ended(ctx, job_ids, lambda rec: check_owner(ctx, rec.id, rec.uid, rec.owner, "clean"))


def sweep_unfinished_dirs(ctx: Context, older_than: float = 3600.0) -> int:
    """Remove job directories that never got a record (a submission killed
    half-way) once they are old enough that no submission can still be making them."""
    import shutil

    now, removed = time.time(), 0
    try:
        names = os.listdir(ctx.store.jobs)
    except FileNotFoundError:
        return 0
    for name in names:
        path = os.path.join(ctx.store.jobs, name)
        try:
            if os.path.exists(os.path.join(path, layout.STATUS)) or now - os.lstat(path).st_mtime < older_than:
                continue
        except OSError:
            continue
        if layout.is_hidden_job_dir(name) or not name.startswith("."):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed
