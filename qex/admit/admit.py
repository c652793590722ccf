"""The admission decision: a pure function from a Snapshot to a Plan.

Queue order is priority (higher first), then submission order (``seq``), then
id. The pass walks the queued jobs in that order, keeping what is held (this
queue's running jobs, peers, and the jobs started earlier in the pass), and
gives each job one verdict, checked in this order:

1. skip       — a job it ``needs`` ended and did not complete;
2. pause      — the queue is paused: nothing starts (but a retry);
3. dependency — a job it ``needs``/runs ``after`` has not ended;
4. oversized  — it can never start here (over the budget with oversized =
                queue/reject, or a pool claim above what the pool has);
5. person     — it claims a lock or pool that a person paused;
   pressure   — the machine's memory pressure is above ``[system] max_pressure``;
6. front      — an own-blocked front job has used up its bypass allowance;
7. capacity   — it starts, or waits for capacity. The first job that waits for
                capacity (not only for an all-or-nothing claim) is the front:
                own-blocked → at most ``max_bypass - passed_by`` later jobs start
                past it; peer/outside-blocked → later jobs keep starting.

A job whose ``deadline`` has passed expires instead of waiting or starting
(never while the queue is paused); the cause is the verdict it would have had.

Decisions the rules leave open:

- A job that waits for capacity *and* an all-or-nothing claim (a lock, the
  one unit of a pool, the one device of a pool) is a capacity wait and can be
  the front; only a job that waits for nothing but such claims does not park
  the queue. So a bypassing job that takes the front's lock cannot unpark it.
- An all-or-nothing claim held by a peer gives holder "peer" (never the front).
- A paused pool or lock (``Pause.locks``) is held whole by the person: holder
  "person", expiry cause "pause", never the front.
- A run-when-idle oversized job also needs its pools and the available memory
  when it starts alone; while it waits it is the front ("own" while this
  queue holds anything, else "peer", else "outside").
- Starts past a peer- or outside-blocked front are not counted in ``passed``.
- The own/peer test removes this queue's jobs (running and started in this
  pass) and keeps peers and ``mem_available``; "peer" wins over "outside".
- VRAM (``Snapshot.seen``, what the driver reports when a pass asked it): a
  running job of this queue that uses more on a device than it was given
  holds the larger there; another queue's jobs hold their use where it is
  above their claims; what no running qex job uses holds its device as
  "outside". A claim that cannot fit beside this queue's jobs removed, but
  fits beside the peers alone, waits for the VRAM outside qex ("outside",
  parks the front as memory outside qex does, its words name each device and
  what uses it); one the peers alone block waits for the peers.
- A running job's claims on an indexed pool count only through ``assigned``.
- While the queue is paused, every waiting job (dependency waits too) gets the
  pause reason; health says "paused: ...".

Cost: one pass is linear in the queued jobs. The capacity verdict of a job
(and its words) depends only on what is held and on the job's shape (cpu,
mem, claims), and what is held changes only when a job starts: so it is
computed once per shape between two starts, and reused (the few words that
name the job are filled in when used). The decisions are collected in lists
and the Plan is built once.
"""

from __future__ import annotations

import gc
from operator import attrgetter

from . import words
from .model import FINAL_STATES, Dep, DeviceUse, Expire, Plan, Queued, Skip, Snapshot, Start, Wait
from .resources import (
    AVAIL,
    CPU,
    INDEXED,
    MEM,
    Fit,
    Ledger,
    Machine,
    fit,
    holders_of,
    is_whole,
    ledger_of,
    machine_of,
    never_fits,
    own_holder,
    peer_holders,
    seen_holders,
    started_holder,
)

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


class Front:
    """The first job in order that waits for capacity."""

    __slots__ = ("id", "label", "kind", "allowance", "passed", "note")

    def __init__(self, id: str, label: str, kind: str, allowance: int = 0, passed: int = 0, note: str = ""):
        self.id = id
        self.label = label
        self.kind = kind
        self.allowance = allowance
        self.passed = passed
        self.note = note


def order_key(job: Queued) -> tuple[int, int, str]:
    return (-job.priority, job.seq, job.id)


_SEQ_ID = attrgetter("seq", "id")
_PRIORITY = attrgetter("priority")
_ID = attrgetter("id")


def _in_order(queued) -> list[Queued]:
    """``sorted(queued, key=order_key)`` with C-level keys: by (seq, id), then
    stably by priority, highest first (``reverse`` keeps the sort stable)."""
    jobs = sorted(queued, key=_SEQ_ID)
    jobs.sort(key=_PRIORITY, reverse=True)
    return jobs


def admit(snap: Snapshot) -> Plan:
    """Decide, for every queued job, start / wait / skip / expire."""
    return decide(snap)[0]


def decide(snap: Snapshot) -> tuple[Plan, str | None]:
    """``admit``, with the id of the front (the first job that waits for
    capacity; None if none does)."""
    # A pass makes one decision object per job and no reference cycles: with a
    # long queue, the collections those allocations trigger were a third of
    # its time. Collection resumes (if it was on) when the pass returns.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _admit(snap)
    finally:
        if collecting:
            gc.enable()


def _admit(snap: Snapshot) -> tuple[Plan, str | None]:
    ctx = _context(snap)
    m = ctx.m
    led = _initial(ctx, snap)
    pause = snap.pause
    paused, locks = pause.queue, ctx.locks
    paused_verdict = Verdict("pause", words.pause_wait(pause.queue_reason), cause="pause") if paused else None
    pressed = Verdict("pressure", words.pressure_wait(snap.pressure), cause="pressure") if snap.pressure else None
    now = snap.now
    starts: list[Start] = []
    waits: list[Wait] = []
    skips: list[Skip] = []
    expires: list[Expire] = []
    first_wait: Queued | None = None
    next_deadline = None  # the earliest deadline of a waiting job
    front: Front | None = None
    front_verdict: Verdict | None = None  # set while an own-blocked front holds later jobs
    stuck = ""
    memo: dict = {}  # (cpu, mem, claims) -> capacity verdict, valid until the next start

    for job in _in_order(snap.queued):
        claims = job.claims
        v = None
        if job.needs or job.after or paused or claims or job.cpu > m.cpu or job.mem > m.mem:
            v = _own_verdict(ctx, job, paused_verdict, locks)  # (a plain job has none: no call)
        if v is None and pressed is not None:  # (no job starts under memory pressure, a retry neither)
            v = pressed
        if v is None and front_verdict is not None and front.allowance <= 0:
            v = front_verdict
        if v is None:
            key = (job.cpu, job.mem, claims)
            v = memo.get(key)
            if v is None:
                v = memo[key] = _capacity(ctx, led, job)

        # settle the verdict
        holder, deadline = v.holder, job.deadline
        if holder == SKIP:
            skips.append(Skip(job.id, v.root, v.reason))
        elif not paused and deadline is not None and now >= deadline:
            expires.append(Expire(job.id, v.cause, words.expired(v.cause, v.reason)))
        elif holder == START:
            led.add(m, started_holder(m, job, v.assigned))
            memo.clear()
            if front is not None and front.kind == OWN:
                front.allowance -= 1
                front.passed += 1
            starts.append(Start(job.id, v.assigned, v.forced))
        else:
            waits.append(Wait(job.id, v.reason, holder, v.front))
            if first_wait is None:
                first_wait = job
            if deadline is not None and (next_deadline is None or deadline < next_deadline):
                next_deadline = deadline
            if holder == "oversized" and not stuck:
                stuck = v.note_for(job)
            if v.parks is not None and front is None:
                front, front_verdict = _front_of(snap, job, v)

    return _plan(ctx, snap, starts, waits, skips, expires, front, first_wait, next_deadline, stuck)


def _plan(
    ctx: Context,
    snap: Snapshot,
    starts: list,
    waits: list,
    skips: list,
    expires: list,
    front: "Front | None",
    first_wait: "Queued | None",
    next_deadline,
    stuck: str,
) -> tuple[Plan, str | None]:
    """The Plan of a pass from what it decided, and the id of its front job (or None)."""
    if waits and len(set(map(_ID, snap.queued))) != len(snap.queued):
        # an id given twice: the last job of that id speaks for it (as a dict of the queue would)
        jobs = {j.id: j for j in snap.queued}
        first_wait = jobs[waits[0].id]
        next_deadline = min((jobs[w.id].deadline for w in waits if jobs[w.id].deadline is not None), default=None)
    passed = ((front.id, front.passed),) if front and front.kind == OWN and front.passed else ()
    health = _health(ctx, front, len(starts), waits, first_wait, stuck)
    plan = Plan(tuple(starts), tuple(waits), tuple(skips), tuple(expires), passed, health, next_deadline)
    return plan, (front.id if front is not None else None)


def _own_verdict(ctx: Context, job: Queued, paused_verdict: "Verdict | None", locks) -> "Verdict | None":
    """What the job waits for whatever the capacity, in this order: a dependency that
    failed (skip), a queue pause, a dependency not ended, a claim the machine can never
    meet, a lock a person holds (``qex pause lock``). None: nothing of its own."""
    m, needs = ctx.m, job.needs
    v = _skip(ctx, job) if needs else None
    if v is None and paused_verdict is not None and not job.retry:  # a running job's retries go on
        v = paused_verdict
    if v is None and (needs or job.after):
        v = _unfinished(ctx, job)
    claims = job.claims
    if v is None and (claims or job.cpu > m.cpu or job.mem > m.mem):
        v = _never(ctx, job)
        if v is None and claims and locks:
            v = _person(ctx, job)
    return v


def _front_of(snap: Snapshot, job: Queued, v: Verdict) -> tuple["Front", "Verdict | None"]:
    """The first job that parks the queue: the front, and, when it is blocked by this
    queue's own jobs, the verdict of the jobs that may not pass it any more."""
    front = Front(job.id, words.label(job), v.parks, max(0, snap.max_bypass - job.passed_by), 0, v.note_for(job))
    if front.kind == OWN:
        return front, Verdict("front", words.front_wait(front.label), front=front.id)
    return front, None


def _initial(ctx: Context, snap: Snapshot) -> Ledger:
    m = ctx.m
    own = [own_holder(m, r) for r in sorted(snap.running, key=lambda r: r.id)]
    return ledger_of(m, own + list(peer_holders(m, snap.peers)) + list(ctx.seen))


def _context(snap: Snapshot) -> Context:
    m = machine_of(snap)
    peer_list = peer_holders(m, snap.peers)
    seen = seen_holders(m, snap.seen, peer_list) if snap.seen else ()
    peers = ledger_of(m, peer_list + seen)
    others = ledger_of(m, peer_list + tuple(h for h in seen if h.outside is None)) if seen else peers
    deps = {d.id: d for d in sorted(snap.deps, key=lambda d: (d.id, d.state, d.root or ""))}
    locks: dict = {}
    for name, said in snap.pause.locks:
        locks.setdefault(name, said)
    return Context(snap, m, peers, deps, locks, others, seen)


# ---- verdicts ---------------------------------------------------------------


def _skip(ctx: Context, job: Queued) -> Verdict | None:
    for dep_id in job.needs:
        dep = ctx.dep(dep_id)
        if dep.state in FINAL_STATES and dep.state != "completed":
            root = dep.root if dep.state == "skipped" and dep.root else dep.id
            return Verdict(SKIP, words.skipped(dep, root, ctx.deps.get(root)), root=root)
    return None


def _unfinished(ctx: Context, job: Queued) -> Verdict | None:
    named = [(d, True) for d in job.needs] + [(d, False) for d in job.after]
    for dep_id, needed in named:
        dep = ctx.dep(dep_id)
        if dep.state not in FINAL_STATES:
            return Verdict("dependency", words.dep_wait(dep, needed), cause="dependency")
    return None


def _over_budget(m: Machine, job: Queued) -> bool:
    return job.cpu > m.cpu or job.mem > m.mem


def _never(ctx: Context, job: Queued) -> Verdict | None:
    m = ctx.m
    for claim in job.claims:
        if never_fits(m, claim):
            note = f"stuck: job {words.label(job)} can never start: it claims more {claim.name} than the pool has"
            return Verdict("oversized", words.never_wait(m, claim), note=note)
    if _over_budget(m, job) and ctx.snap.oversized != RUN_WHEN_IDLE:
        reason = words.oversized_wait(m, job, ctx.snap.oversized)
        return Verdict("oversized", reason, note=f"stuck: job {words.label(job)} is larger than the budget")
    return None


def _person(ctx: Context, job: Queued) -> Verdict | None:
    for claim in job.claims:
        said = ctx.locks.get(claim.name)
        if claim.count > 0 and said is not None:
            return Verdict("person", words.person_wait(ctx.m, claim.name, said), cause="pause")
    return None


def _capacity(ctx: Context, led: Ledger, job: Queued) -> Verdict:
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


# ---- the health line ---------------------------------------------------------


def _health(ctx: Context, front: Front | None, started: int, waits: list, first_wait, stuck: str) -> str:
    snap = ctx.snap
    running = len(snap.running) + started
    if not waits:
        return f"running {running}" if running else "idle"
    if snap.pause.queue:
        return f"paused: {words.pause_wait(snap.pause.queue_reason)}"
    if snap.pressure:
        return words.pressure_wait(snap.pressure, "held")
    if stuck:
        return stuck
    if front is not None:
        return f"held for job {front.label}" if front.kind == OWN else front.note
    if running:
        return f"running {running}"
    return f"waiting: job {words.label(first_wait)}: {waits[0].reason}"
