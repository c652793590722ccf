"""The verdicts of the admission (``qex.admit.admit``): for one queued job, what it
waits for, or that it starts, given what the pass holds (``Context``, the ledger).
Pure, as the whole of ``qex/admit/``."""

from __future__ import annotations

from . import words
from .model import FINAL_STATES, Dep, DeviceUse, Queued, Snapshot
from .resources import AVAIL, CPU, INDEXED, MEM, Fit, Ledger, Machine, fit, holders_of, is_whole, never_fits

START, SKIP = "start", "skip"
OWN, PEER, OUTSIDE = "own", "peer", "outside"
RUN_WHEN_IDLE = "run-when-idle"


class Verdict:
    """One job's decision before expiry is applied. ``holder`` is START, SKIP
    or a Wait holder; ``parks`` (own/peer/outside) marks a capacity wait that
    can become the front; ``note`` is the health line it would give, or, when
    ``tail`` is not None, its head: the line is note + the job's label + tail
    (so one verdict serves every job of the same shape)."""

    __slots__ = ("holder", "reason", "cause", "assigned", "forced", "root", "front", "parks", "note", "tail")

    def __init__(
        self,
        holder: str,
        reason: str = "",
        cause: str = "capacity",
        assigned: tuple[DeviceUse, ...] = (),
        forced: bool = False,
        root: str = "",
        front: str | None = None,
        parks: str | None = None,
        note: str = "",
        tail: str | None = None,
    ):
        self.holder = holder
        self.reason = reason
        self.cause = cause
        self.assigned = assigned
        self.forced = forced
        self.root = root
        self.front = front
        self.parks = parks
        self.note = note
        self.tail = tail

    def note_for(self, job: Queued) -> str:
        return self.note if self.tail is None else self.note + words.label(job) + self.tail


class Context:
    """What stays fixed during the pass. ``peers`` is the ledger with this
    queue's jobs removed (for the own/peer classification), ``others`` that
    ledger without the VRAM used outside qex too (for the peer/outside one; the
    same ledger when nothing is used outside), ``seen`` the holders of VRAM
    beside this queue's jobs; ``locks`` the paused locks and pools (the first
    words of a name win)."""

    __slots__ = ("snap", "m", "peers", "others", "seen", "deps", "locks")

    def __init__(
        self,
        snap: Snapshot,
        m: Machine,
        peers: Ledger,
        deps: dict,
        locks: dict,
        others: Ledger | None = None,
        seen: tuple = (),
    ):
        self.snap = snap
        self.m = m
        self.peers = peers
        self.others = peers if others is None else others
        self.seen = seen
        self.deps = deps
        self.locks = locks

    def dep(self, dep_id: str) -> Dep:
        return self.deps.get(dep_id) or Dep(dep_id, "missing")


# ---------------------------------------------------------------


def skip_verdict(ctx: Context, job: Queued) -> Verdict | None:
    for dep_id in job.needs:
        dep = ctx.dep(dep_id)
        if dep.state in FINAL_STATES and dep.state != "completed":
            root = dep.root if dep.state == "skipped" and dep.root else dep.id
            return Verdict(SKIP, words.skipped(dep, root, ctx.deps.get(root)), root=root)
    return None


def unfinished_verdict(ctx: Context, job: Queued) -> Verdict | None:
    named = [(d, True) for d in job.needs] + [(d, False) for d in job.after]
    for dep_id, needed in named:
        dep = ctx.dep(dep_id)
        if dep.state not in FINAL_STATES:
            return Verdict("dependency", words.dep_wait(dep, needed), cause="dependency")
    return None


def _over_budget(m: Machine, job: Queued) -> bool:
    return job.cpu > m.cpu or job.mem > m.mem


def never_verdict(ctx: Context, job: Queued) -> Verdict | None:
    m = ctx.m
    for claim in job.claims:
        if never_fits(m, claim):
            note = f"stuck: job {words.label(job)} can never start: it claims more {claim.name} than the pool has"
            return Verdict("oversized", words.never_wait(m, claim), note=note)
    if _over_budget(m, job) and ctx.snap.oversized != RUN_WHEN_IDLE:
        reason = words.oversized_wait(m, job, ctx.snap.oversized)
        return Verdict("oversized", reason, note=f"stuck: job {words.label(job)} is larger than the budget")
    return None


def person_verdict(ctx: Context, job: Queued) -> Verdict | None:
    for claim in job.claims:
        said = ctx.locks.get(claim.name)
        if claim.count > 0 and said is not None:
            return Verdict("person", words.person_wait(ctx.m, claim.name, said), cause="pause")
    return None


def capacity_verdict(ctx: Context, led: Ledger, job: Queued) -> Verdict:
    """Start, or wait for capacity: a function of ``led`` and the job's
    shape only (``admit`` reuses it for every job of that shape)."""
    if _over_budget(ctx.m, job):
        return _alone(ctx, led, job)
    f = fit(ctx.m, led, job.cpu, job.mem, job.claims)
    if f.ok:
        return Verdict(START, assigned=f.assigned)
    whole = {c.name for c in job.claims if is_whole(ctx.m, c)}
    locks = tuple(n for n in f.pools if n in whole)
    if not f.budget and len(locks) == len(f.pools):
        return _lock_wait(ctx, led, locks)
    rest = Fit(f.budget, tuple(n for n in f.pools if n not in whole), f.assigned)
    return _capacity_wait(ctx, led, job, rest, locks, whole)


def _lock_wait(ctx: Context, led: Ledger, names: tuple[str, ...]) -> Verdict:
    holders = holders_of(led, names)
    if holders and all(h.outside is not None for h in holders):  # a one-device pool's device, used outside qex
        amounts = words.outside_amounts(holders, names)
        return Verdict(
            OUTSIDE,
            words.vram_outside_wait(ctx.m, None, names, holders),
            parks=OUTSIDE,
            note="waits for VRAM outside qex: ",
            tail=f" cannot fit while {amounts}",
        )
    holder = "lock" if any(not h.peer for h in holders) else PEER
    return Verdict(holder, words.lock_wait(ctx.m, names, holders), cause="lock")


def _capacity_wait(ctx: Context, led: Ledger, job: Queued, f: Fit, locks, whole) -> Verdict:
    m = ctx.m
    extra = words.also_locks(m, locks, holders_of(led, locks))
    divisible = tuple(c for c in job.claims if c.name not in whole)
    alone = fit(m, ctx.peers, job.cpu, job.mem, divisible)
    if alone.ok:
        only_devices = not f.budget and all(m.kind(n) == INDEXED for n in f.pools)
        reason = words.own_wait(m, led, job, f, holders_of(led, f.budget + f.pools))
        return Verdict("device" if only_devices else OWN, reason + extra, parks=OWN)
    dims = tuple(d for d in alone.budget if d != AVAIL) + alone.pools
    if dims:
        if (
            ctx.seen
            and alone.pools
            and len(dims) == len(alone.pools)
            and fit(m, ctx.others, job.cpu, job.mem, divisible).pools == ()
        ):
            return _vram_outside_verdict(ctx, job, alone.pools, extra)  # the peers alone leave it room
        return _peer_verdict(ctx, job, words.peer_wait(m, job, alone, holders_of(ctx.peers, dims)) + extra, dims)
    return _outside_verdict(ctx, job, extra, led)


def _vram_outside_verdict(ctx: Context, job: Queued, pools: tuple[str, ...], extra: str = "") -> Verdict:
    """It waits for VRAM used outside qex on the devices of ``pools``."""
    holders = tuple(h for h in holders_of(ctx.peers, pools) if h.outside is not None)
    amounts = words.outside_amounts(holders, pools)
    return Verdict(
        OUTSIDE,
        words.vram_outside_wait(ctx.m, job, pools, holders) + extra,
        parks=OUTSIDE,
        note="waits for VRAM outside qex: ",
        tail=f" cannot fit while {amounts}",
    )


def _peer_verdict(ctx: Context, job: Queued, reason: str, dims) -> Verdict:
    amounts = words.peer_amounts(ctx.m, holders_of(ctx.peers, dims), dims)
    return Verdict(PEER, reason, parks=PEER, note="waits for another user: ", tail=f" cannot fit while {amounts}")


def _outside_verdict(ctx: Context, job: Queued, extra: str = "", led: Ledger | None = None) -> Verdict:
    """Waits for the machine's available memory: used outside qex, or kept by the
    reserve (``[system] reserve_mem``) when the job would fit without it."""
    m = ctx.m
    available = m.mem_available or 0
    reserve = m.mem_reserve
    if reserve > 0 and job.mem <= available + reserve - (led.started_mem if led is not None else 0):
        tail = f" needs {words.size(job.mem)}, {words.size(max(available, 0))} available beside the reserve"
        return Verdict(
            OUTSIDE,
            words.reserve_wait(job, available, reserve) + extra,
            parks=OUTSIDE,
            note="waits for the memory reserve: ",
            tail=tail,
        )
    tail = f" needs {words.size(job.mem)}, {words.size(max(available, 0))} available"
    return Verdict(
        OUTSIDE,
        words.outside_wait(job, available, reserve) + extra,
        parks=OUTSIDE,
        note="waits for memory outside qex: ",
        tail=tail,
    )


def _alone(ctx: Context, led: Ledger, job: Queued) -> Verdict:
    """An oversized job under run-when-idle: it starts (forced) only when
    nothing else holds anything; meanwhile it can be the front."""
    m = ctx.m
    f = fit(m, led, job.cpu, job.mem, job.claims, budget=False)
    own = tuple(sorted((h for h in led.holders if not h.peer), key=lambda h: h.who))
    if not own and led.cpu.peer == 0 and led.mem.peer == 0 and f.ok:
        return Verdict(START, assigned=f.assigned, forced=True)
    if own:
        return Verdict(OWN, words.idle_own_wait(m, job, own), parks=OWN)
    dims = tuple(d for d, load in ((CPU, led.cpu), (MEM, led.mem)) if load.peer > 0) + f.pools
    if dims:
        holders = holders_of(led, dims)
        if f.pools and not any(h.other_user for h in holders):  # only VRAM outside qex is in its way
            return _vram_outside_verdict(ctx, job, f.pools)
        return _peer_verdict(ctx, job, words.idle_peer_wait(m, job, holders, dims), dims)
    return _outside_verdict(ctx, job, led=led)
