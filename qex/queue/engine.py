"""The admission pass: lock -> load -> reconcile -> admit -> commit -> launch.

Every command that changes the queue, every supervisor at the end of its job,
and the waker run ``run_pass``. The lock is held for the load, the decisions
and the writes only; supervisors are forked after it is released.
"""

from __future__ import annotations

import os
import time

from qex.base.states import HOLDING
from qex.linux.proc import close_quietly
from qex.queue import views
from qex.queue.context import Launch, PassResult
from qex.queue.reconcile import reconcile_locked
from qex.queue.txn import Txn
from qex.store import layout
from qex.store.index import on_slurm
from qex.store.lock import hold
from qex.store.records import Assigned
from qex.store.state import Index

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

    from qex.admit import Plan, Queued, Snapshot
    from qex.config.context import Context


ON_NODE = "QEX_SLURM_STEP"  # set by the Slurm backend's batch script (qex.slurm.script): a pass on a node
_ON_NODE = ON_NODE in os.environ  # admits nothing of the local queue (it would start it on the node)


def run_pass(
    ctx: Context,
    mutate: Callable[[Txn], object] | None = None,
    save_index: bool = True,
    early: Callable[[Context, list[Launch], tuple[int, ...]], int] | None = None,
) -> PassResult:
    """One pass; ``mutate(txn)`` makes the command's own change in the same hold.
    ``save_index``: see ``Store.commit_locked`` (a supervisor's pass saves it lazily).
    ``early``: None, or ``early(ctx, launches, locks) -> gate``, which forks the
    supervisors of what the pass admits before its commit, under the lock, and
    returns the write end of their gate (``qex.supervisor.become.early``)."""
    with ctx.store.lock() as held:
        idx = ctx.store.load_index_locked(save_replayed=False)  # the commit saves it
        txn = Txn(ctx.store, idx)
        value = mutate(txn) if mutate is not None else None
        from qex.users import peer_admission

        with peer_admission.admission(ctx, any(e["state"] == "queued" for e in idx.jobs.values())) as turn:
            from qex.store.state import LAZY

            # A supervisor's pass may decide by the head of the queue, unless its
            # commit is to save the index file (which must have every job's words).
            # (a process that must not fork, a qex.api program, only commits: qex.supervisor.starter admits)
            launches = admit_locked(ctx, txn, window=save_index == LAZY and not idx.save_due()) if ctx.forks else []
            from qex.hooks.markers import mark_locked

            mark_locked(ctx, txn)  # before the commit: a job final on disk always has its marker
            gate = -1
            if early is not None and launches:
                gate = early(ctx, launches, (*held.fds(), -1 if turn.fd is None else turn.fd))
                launches = []
            try:
                # the gate opens once the commit is durable, before the index file is saved, and
                # once the peer record says what the jobs it lets go hold: a pass killed between
                # its gate and its publishing left them running unseen by the other users
                # (counted again only at this user's next pass, perhaps the job's end; issue 34)
                txn.commit(save_index, applied=(lambda: _publish_then_open(ctx, idx, gate)) if gate >= 0 else None)
            finally:
                close_quietly(gate)  # without its byte (the commit failed): they leave, nothing started
            holding = _publish_locked(ctx, idx)
    jobs, uid = idx.jobs, ctx.uid
    if holding is not None:  # (a kept view: no walk of a long queue)
        queued_mine = any(jobs[q.id]["uid"] == uid for q in idx.view.jobs)
        running_mine = any(jobs[j]["uid"] == uid for j in holding)
    else:
        mine = [e["state"] for e in jobs.values() if e["uid"] == uid and not on_slurm(e)]  # (no waker for Slurm's)
        queued_mine, running_mine = "queued" in mine, any(s in HOLDING for s in mine)
    return PassResult(value, launches, queued_mine, running_mine, txn.next_deadline)


def _publish_locked(ctx: Context, idx: Index):
    """Tell the other queues what this user's jobs hold now (qex.users.peer_publish); a
    failure never fails the pass (qex info says it). Returns the ids of the
    index's starting and running jobs when the index has a queue view (a
    supervisor's, kept across its passes), else None."""
    from qex.users import peer_publish

    holding = None
    if idx.view is not None:
        from qex.queue import queueview

        holding = sorted(queueview.view_of(idx, views.queued_of).holding)
    try:
        peer_publish.publish_locked(ctx, idx, holding)
    except Exception:  # a hostile or broken peer directory must never stop this queue
        pass
    return holding


def _publish_then_open(ctx: Context, idx: Index, gate: int) -> None:
    """The early supervisors' jobs are in this user's peer record before they may
    start. Dying from here on leaves no job unpublished: before the gate's byte,
    the supervisors leave (their locks, free, count nothing); after it, the record
    is out. (The pass's own publishing after the commit then finds nothing changed.)"""
    _publish_locked(ctx, idx)
    _open_gate(gate)


def _open_gate(gate: int) -> None:
    """Committed: the supervisors ``early`` forked may start their jobs. One that
    died meanwhile (EPIPE when none is left to read) started nothing: its job, left
    'starting' with no liveness lock, is requeued by the next pass (the waker's, at
    the latest), and this command still answers with the id it committed."""
    try:
        os.write(gate, b"g")
    except OSError:
        pass


# ---- admission ---------------------------------------------------------------


def admit_locked(ctx: Context, txn: Txn, window: bool = False) -> list[Launch]:
    """Admit, and apply the plan. ``window``: the pass may decide by the head of
    the queue (``_admit_head``), leaving the reason words of the jobs past it as
    they are; its commit must then not save the index file (``Txn.windowed``)."""
    from qex import admit as A
    from qex.queue import pause

    now = time.time()
    reconcile_locked(ctx, txn, now)
    pause.settle_locked(ctx, txn, now)
    launches = []
    if _ON_NODE:
        return launches
    for _ in range(8):  # an expiry or a skip settles its dependents in the same hold
        if not any(e["state"] == "queued" and not on_slurm(e) for e in txn.idx.jobs.values()):
            break
        foreign = _foreign(ctx)
        plan = _admit_head(ctx, txn, now) if window and not foreign else None
        window = False  # (what an expiry or a skip settles is decided on the whole queue)
        if plan is None:
            plan = A.admit(snapshot(ctx, txn, now, foreign=foreign))
        launches += apply_plan(ctx, txn, plan, now)
        txn.next_deadline = plan.next_deadline
        if not (plan.expire or plan.skip):
            break
    return launches


def snapshot(
    ctx: Context, txn: Txn, now: float, part: tuple[list[Queued], list[str]] | None = None, foreign: list | None = None
) -> Snapshot:
    """What ``admit`` decides on: every queued job of the index, or ``part``:
    (the queued jobs to decide, the ids of the jobs starting or running) from
    the queue's view (``_admit_head``). ``foreign``: the other members' queued
    jobs that count (``_foreign``), when the caller has them already."""
    from qex import admit as A
    from qex.queue import pause
    from qex.users import peer_scan

    cpu_budget, mem_budget = ctx.budget()
    memo = views.QUEUED_MEMO
    if len(memo) > 2 * len(txn.idx.jobs) + 256:
        memo.clear()  # jobs long gone
    if part is not None:
        queued, holding = part
        jobs = txn.idx.jobs
        running = [views.running_of(job_id, jobs[job_id]) for job_id in holding]
        dep_ids = set()
        for q in queued:
            if q.needs or q.after:
                dep_ids.update(q.needs, q.after)
    else:
        running, queued, dep_ids = _whole_index(txn.idx.jobs)
    if part is None and ctx.store.shared_root is not None:
        queued = _one_order(ctx, txn, queued, _foreign(ctx) if foreign is None else foreign)
    seen = ()
    if ctx.config.pools and any(q.claims for q in queued):
        from qex.queue import gpuseen

        if gpuseen.wanted(ctx, queued):  # (a pass with no GPU claim to admit never reads the driver)
            running, seen = _vram(ctx, txn, now, running)
    from qex.base import machine

    avail = machine.meminfo().get("MemAvailable")
    reserve = ctx.reserve()
    deps = [_dep(txn, d) for d in sorted(dep_ids)]
    roots = sorted({d.root for d in deps if d.root and d.root not in dep_ids})
    deps += [_dep(txn, r) for r in roots]  # the first failed job of a chain, for the words
    return A.Snapshot(
        now=now,
        cpu_budget=cpu_budget,
        mem_budget=mem_budget,
        mem_available=None if avail is None else avail - reserve,
        oversized=ctx.config.oversized,
        max_bypass=ctx.config.max_bypass,
        pools=tuple(A.PoolSpec(p.name, p.count, tuple(p.devices)) for p in ctx.config.pools),
        running=tuple(running),
        peers=tuple(peer_scan.holdings(ctx)),
        queued=tuple(queued),
        deps=tuple(deps),
        pause=pause.current(ctx, now),
        mem_reserve=reserve,
        seen=seen,
        pressure=_pressure(ctx) if queued else None,
    )


def _whole_index(jobs: dict) -> tuple[list, list[Queued], set[str]]:
    """What a pass on the whole index decides on: (the jobs that hold, the queued jobs, the
    ids those depend on), leaving out the Slurm jobs (``jobs``: the index's, by id)."""
    running, queued, dep_ids = [], [], set()
    memo = views.QUEUED_MEMO
    for job_id, e in jobs.items():
        state = e["state"]
        if on_slurm(e):
            continue  # a Slurm job: its cluster admits it, and what it holds is the cluster's
        if state == "queued":
            known = memo.get(job_id)  # (``views.queued_of`` inlined: this loop runs for every job)
            q = known[1] if known is not None and known[0] is e else views.queued_of(job_id, e)
            queued.append(q)
            if q.needs or q.after:
                dep_ids.update(q.needs, q.after)
        elif state in HOLDING:
            running.append(views.running_of(job_id, e))
    return running, queued, dep_ids


def _pressure(ctx: Context) -> tuple[float, float] | None:
    """(the machine's memory pressure, ``[system] max_pressure``) when it is above, else None.
    A file that cannot be read now holds nothing back (the config's load refused the key
    where the kernel gives none)."""
    most = ctx.config.max_pressure
    if most is None:
        return None
    from qex.base import machine

    try:
        now = machine.memory_pressure()
    except (OSError, ValueError):
        return None
    return (now, most) if now > most else None


def _vram(ctx: Context, txn: Txn, now: float, running: list) -> tuple[list, tuple]:
    """The VRAM the driver reports (``qex.queue.gpuseen``): the running jobs with
    what they use, and what is used beside them."""
    from qex.queue import gpuseen

    try:
        reading = gpuseen.observe(ctx, now)
    except Exception:  # a driver's odd answer never stops a pass: it schedules from the config
        reading = None
    if reading is None or reading.error:
        return running, ()
    used, seen = gpuseen.for_admission(ctx, reading, txn.idx.jobs)
    return [r.evolve(used=used[r.id]) if r.id in used else r for r in running], seen


def _foreign(ctx: Context) -> list:
    """A shared directory: the other members' queued jobs that count now
    (``qex.queue.others``); none in a private one. With none, a pass decides as a
    private queue's does (by the head of a long queue too: ``_admit_head``)."""
    if ctx.store.shared_root is None:
        return []
    from qex.queue import others

    return others.queued(ctx)


def _one_order(ctx: Context, txn: Txn, queued: list[Queued], foreign: list) -> list[Queued]:
    """This member's queued jobs and the other members' that count now, in one order."""
    from qex.queue import others

    if not foreign:
        return queued
    jobs = txn.idx.jobs
    return others.order([(float(jobs[q.id]["submitted_at"]), ctx.uid, q) for q in queued], foreign)


HEAD = 4  # the queued jobs a windowed pass decides one by one (the drain's front and the few behind it)


def _admit_head(ctx: Context, txn: Txn, now: float):
    """The plan of a pass decided by the head of a long queue (``qex.admit.window``),
    or None (decide on the whole queue).

    The head, and the first job of each shape past it, are admitted; when that
    says every later job waits as the first of its shape does, and each of them
    already names that holder (no event is due), the later jobs are left as they
    are: only their reason words would change (other jobs hold the cores now),
    and those are written by the next pass that saves the index file, which
    decides on the whole queue (``run_pass``)."""
    from qex.admit import order_key
    from qex.admit.window import admit_head
    from qex.queue import queueview

    view = queueview.view_of(txn.idx, views.queued_of)
    part = view.head(HEAD)
    if part is None:
        return None
    head, reps, tail = part
    snap = snapshot(ctx, txn, now, (head + sorted(reps.values(), key=order_key), sorted(view.holding)))
    got = admit_head(snap, {sh: q.id for sh, q in reps.items()})
    if got is None:
        return None
    plan, waits = got
    if not view.tail_holds(head, tail, {sh: w.holder for sh, w in waits.items()}):
        return None
    txn.windowed = True
    return plan


def _dep(txn: Txn, job_id: str):
    from qex import admit as A

    entry = txn.idx.jobs.get(job_id)
    if entry is not None:
        return A.Dep(job_id, entry["state"])
    try:
        rec = txn.record(job_id)
    except Exception:
        return A.Dep(job_id, "missing")
    return A.Dep(job_id, rec.state, rec.skipped_root)


def apply_plan(ctx: Context, txn: Txn, plan: Plan, now: float) -> list[Launch]:
    launches = []
    for start in plan.start:
        if start.id not in txn.idx.jobs:
            continue  # another member's job (a shared directory): its capacity is reserved; its owner starts it
        try:
            fd = hold(ctx.store.path(start.id, layout.ALIVE))
        except FileNotFoundError:  # its directory was removed by hand: it is no job any more
            txn.idx.drop(start.id)
            ctx.store.save_index_locked(txn.idx)
            continue
        if fd is None:
            continue
        if txn.peer_reuse is not None:  # the next job of the supervisor that runs this pass
            (peer_fd, peer_lock), txn.peer_reuse = txn.peer_reuse, None
        else:
            from qex.users import peer_dir

            peer_fd, peer_lock = peer_dir.hold_job_lock(ctx, start.id)
        assigned = tuple(Assigned(a.pool, tuple(a.devices), a.size) for a in start.assigned)
        started = txn.update(
            start.id,
            state="starting",
            assigned=assigned,
            forced=start.forced,
            blocked_reason=None,
            blocked_holder=None,
            blocked_since=None,
            peer_lock=peer_lock,
        )
        launch = Launch(start.id, fd, peer_fd, peer_lock)
        launch.attempt = started.attempt
        launches.append(launch)
    _set_reasons(txn, [(wait.id, wait.reason, wait.holder) for wait in plan.wait], now)
    for skip in plan.skip:
        if skip.id not in txn.idx.jobs:
            continue
        txn.update(
            skip.id,
            state="skipped",
            ended_at=now,
            error=skip.reason,
            skipped_root=skip.root,
            blocked_reason=None,
            blocked_holder=None,
        )
    for exp in plan.expire:
        if exp.id not in txn.idx.jobs:
            continue
        txn.update(exp.id, state="expired", ended_at=now, error=exp.reason, blocked_reason=None, blocked_holder=None)
    for job_id, n in plan.passed:
        if job_id in txn.idx.jobs and txn.idx.jobs[job_id]["state"] == "queued":
            rec = txn.record(job_id)
            txn.update(job_id, change="reason", passed_by=rec.passed_by + n)
    return launches


def _set_reasons(txn: Txn, waits, now: float) -> None:
    """Give each waiting job (id, reason words, holder) its reason.

    A new kind of wait (another holder: capacity, a dependency, a pause, a peer...)
    is a change of the record, journaled like any other. New words for the same
    kind (other jobs hold the cores now, other amounts free) change only the
    job's index entry: behind a full budget every start would otherwise rewrite
    and journal the record of every waiting job. Readers take the words from
    the index (``live_reason``; ``Store.read_live``).
    """
    jobs, records, words_only = txn.idx.jobs, txn.records, False
    for job_id, reason, holder in waits:  # (a loop in one frame: behind a long queue it runs for every job)
        entry = jobs.get(job_id)
        if entry is None:
            continue
        old = entry.get("reason")
        if entry.get("holder") == holder:
            if old == reason:
                continue
            if old is not None and job_id not in records:
                entry["reason"] = reason  # no event, no record: only the index file changes
                words_only = True
                continue
        rec = txn.record(job_id)
        since = rec.blocked_since if rec.blocked_reason else None
        txn.update(job_id, change="reason", blocked_reason=reason, blocked_holder=holder, blocked_since=since or now)
    if words_only:
        txn.idx.unsaved = True
