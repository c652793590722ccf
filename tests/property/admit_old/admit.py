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
- A running job's claims on an indexed pool count only through ``assigned``.
- While the queue is paused, every waiting job (dependency waits too) gets the
  pause reason; health says "paused: ...".
"""

from __future__ import annotations

from attrs import evolve, frozen

from qex.admit import words  # the live words: only the algorithm is the reference
from qex.admit.model import FINAL_STATES, Dep, DeviceUse, Expire, Plan, Queued, Skip, Snapshot, Start, Wait

from .resources import (
    AVAIL,
    CPU,
    INDEXED,
    MEM,
    Fit,
    Ledger,
    Machine,
    fit,
    get,
    hold,
    holders_of,
    is_whole,
    ledger_of,
    machine_of,
    never_fits,
    own_holder,
    peer_holders,
    started_holder,
)

START, SKIP = "start", "skip"
OWN, PEER, OUTSIDE = "own", "peer", "outside"
RUN_WHEN_IDLE = "run-when-idle"


@frozen
class Verdict:
    """One job's decision before expiry is applied. ``holder`` is START, SKIP
    or a Wait holder; ``parks`` (own/peer/outside) marks a capacity wait that
    can become the front; ``note`` is the health line it would give."""

    holder: str
    reason: str = ""
    cause: str = "capacity"
    assigned: tuple[DeviceUse, ...] = ()
    forced: bool = False
    root: str = ""
    front: str | None = None
    parks: str | None = None
    note: str = ""


@frozen
class Context:
    """What stays fixed during the pass. ``peers`` is the ledger with this
    queue's jobs removed (for the own/peer classification)."""

    snap: Snapshot
    m: Machine
    peers: Ledger
    deps: dict
    jobs: dict

    def dep(self, dep_id: str) -> Dep:
        return self.deps.get(dep_id) or Dep(dep_id, "missing")


@frozen
class Front:
    """The first job in order that waits for capacity."""

    id: str
    label: str
    kind: str
    allowance: int = 0
    passed: int = 0
    note: str = ""


@frozen
class State:
    """The pass so far."""

    ledger: Ledger
    front: Front | None = None
    start: tuple[Start, ...] = ()
    wait: tuple[Wait, ...] = ()
    skip: tuple[Skip, ...] = ()
    expire: tuple[Expire, ...] = ()
    stuck: str = ""


def order_key(job: Queued):
    return (-job.priority, job.seq, job.id)


def admit(snap: Snapshot) -> Plan:
    """Decide, for every queued job, start / wait / skip / expire."""
    ctx = _context(snap)
    st = State(ledger=_initial(ctx.m, snap))
    for job in sorted(snap.queued, key=order_key):
        st = _settle(ctx, st, job, _decide(ctx, st, job))
    return _plan(ctx, st)


def _initial(m: Machine, snap: Snapshot) -> Ledger:
    own = tuple(own_holder(m, r) for r in sorted(snap.running, key=lambda r: r.id))
    return ledger_of(m, own + peer_holders(m, snap.peers))


def _context(snap: Snapshot) -> Context:
    m = machine_of(snap)
    peers = ledger_of(m, peer_holders(m, snap.peers))
    deps = {d.id: d for d in sorted(snap.deps, key=lambda d: (d.id, d.state, d.root or ""))}
    return Context(snap, m, peers, deps, {j.id: j for j in snap.queued})


# ---- verdicts ---------------------------------------------------------------


def _decide(ctx: Context, st: State, job: Queued) -> Verdict:
    for check in (_skip, _paused, _unfinished, _never, _person, _held_for_front):
        verdict = check(ctx, st, job)
        if verdict is not None:
            return verdict
    return _capacity(ctx, st, job)


def _skip(ctx: Context, st: State, job: Queued) -> Verdict | None:
    for dep_id in job.needs:
        dep = ctx.dep(dep_id)
        if dep.state in FINAL_STATES and dep.state != "completed":
            root = dep.root if dep.state == "skipped" and dep.root else dep.id
            return Verdict(SKIP, words.skipped(dep, root, ctx.deps.get(root)), root=root)
    return None


def _paused(ctx: Context, st: State, job: Queued) -> Verdict | None:
    pause = ctx.snap.pause
    if not pause.queue or job.retry:  # a running job's retries continue through a queue pause
        return None
    return Verdict("pause", words.pause_wait(pause.queue_reason), cause="pause")


def _unfinished(ctx: Context, st: State, job: Queued) -> Verdict | None:
    named = [(d, True) for d in job.needs] + [(d, False) for d in job.after]
    for dep_id, needed in named:
        dep = ctx.dep(dep_id)
        if dep.state not in FINAL_STATES:
            return Verdict("dependency", words.dep_wait(dep, needed), cause="dependency")
    return None


def _over_budget(m: Machine, job: Queued) -> bool:
    return job.cpu > m.cpu or job.mem > m.mem


def _never(ctx: Context, st: State, job: Queued) -> Verdict | None:
    m = ctx.m
    for claim in job.claims:
        if never_fits(m, claim):
            note = f"stuck: job {words.label(job)} can never start: it claims more {claim.name} than the pool has"
            return Verdict("oversized", words.never_wait(m, claim), note=note)
    if _over_budget(m, job) and ctx.snap.oversized != RUN_WHEN_IDLE:
        reason = words.oversized_wait(m, job, ctx.snap.oversized)
        return Verdict("oversized", reason, note=f"stuck: job {words.label(job)} is larger than the budget")
    return None


def _person(ctx: Context, st: State, job: Queued) -> Verdict | None:
    for claim in job.claims:
        said = get(ctx.snap.pause.locks, claim.name)
        if claim.count > 0 and said is not None:
            return Verdict("person", words.person_wait(ctx.m, claim.name, said), cause="pause")
    return None


def _held_for_front(ctx: Context, st: State, job: Queued) -> Verdict | None:
    front = st.front
    if front is not None and front.kind == OWN and front.allowance <= 0:
        return Verdict("front", words.front_wait(front.label), front=front.id)
    return None


def _capacity(ctx: Context, st: State, job: Queued) -> Verdict:
    if _over_budget(ctx.m, job):
        return _alone(ctx, st, job)
    f = fit(ctx.m, st.ledger, job.cpu, job.mem, job.claims)
    if f.ok:
        return Verdict(START, assigned=f.assigned)
    whole = {c.name for c in job.claims if is_whole(ctx.m, c)}
    locks = tuple(n for n in f.pools if n in whole)
    if not f.budget and len(locks) == len(f.pools):
        return _lock_wait(ctx, st, locks)
    rest = evolve(f, pools=tuple(n for n in f.pools if n not in whole))
    return _capacity_wait(ctx, st, job, rest, locks, whole)


def _lock_wait(ctx: Context, st: State, names: tuple[str, ...]) -> Verdict:
    holders = holders_of(st.ledger, names)
    holder = "lock" if any(not h.peer for h in holders) else PEER
    return Verdict(holder, words.lock_wait(ctx.m, names, holders), cause="lock")


def _capacity_wait(ctx: Context, st: State, job: Queued, f: Fit, locks, whole) -> Verdict:
    m, led = ctx.m, st.ledger
    extra = words.also_locks(m, locks, holders_of(led, locks))
    divisible = tuple(c for c in job.claims if c.name not in whole)
    alone = fit(m, ctx.peers, job.cpu, job.mem, divisible)
    if alone.ok:
        only_devices = not f.budget and all(m.kind(n) == INDEXED for n in f.pools)
        reason = words.own_wait(m, led, job, f, holders_of(led, f.budget + f.pools))
        return Verdict("device" if only_devices else OWN, reason + extra, parks=OWN)
    dims = tuple(d for d in alone.budget if d != AVAIL) + alone.pools
    if dims:
        return _peer_verdict(ctx, job, words.peer_wait(m, job, alone, holders_of(ctx.peers, dims)) + extra, dims)
    return _outside_verdict(ctx, job, extra)


def _peer_verdict(ctx: Context, job: Queued, reason: str, dims) -> Verdict:
    amounts = words.peer_amounts(ctx.m, holders_of(ctx.peers, dims), dims)
    note = f"waits for another user: {words.label(job)} cannot fit while {amounts}"
    return Verdict(PEER, reason, parks=PEER, note=note)


def _outside_verdict(ctx: Context, job: Queued, extra: str = "") -> Verdict:
    available = ctx.m.mem_available or 0
    note = (
        f"waits for memory outside qex: {words.label(job)} needs {words.size(job.mem)}, "
        f"{words.size(max(available, 0))} available"
    )
    return Verdict(OUTSIDE, words.outside_wait(job, available) + extra, parks=OUTSIDE, note=note)


def _alone(ctx: Context, st: State, job: Queued) -> Verdict:
    """An oversized job under run-when-idle: it starts (forced) only when
    nothing else holds anything; meanwhile it can be the front."""
    m, led = ctx.m, st.ledger
    f = fit(m, led, job.cpu, job.mem, job.claims, budget=False)
    own = tuple(sorted((h for h in led.holders if not h.peer), key=lambda h: h.who))
    if not own and led.cpu.peer == 0 and led.mem.peer == 0 and f.ok:
        return Verdict(START, assigned=f.assigned, forced=True)
    if own:
        return Verdict(OWN, words.idle_own_wait(m, job, own), parks=OWN)
    dims = tuple(d for d, load in ((CPU, led.cpu), (MEM, led.mem)) if load.peer > 0) + f.pools
    if dims:
        return _peer_verdict(ctx, job, words.idle_peer_wait(m, job, holders_of(led, dims), dims), dims)
    return _outside_verdict(ctx, job)


# ---- applying verdicts ------------------------------------------------------


def _expired(ctx: Context, job: Queued) -> bool:
    snap = ctx.snap
    return not snap.pause.queue and job.deadline is not None and snap.now >= job.deadline


def _settle(ctx: Context, st: State, job: Queued, v: Verdict) -> State:
    if v.holder == SKIP:
        return evolve(st, skip=st.skip + (Skip(job.id, v.root, v.reason),))
    if _expired(ctx, job):
        return evolve(st, expire=st.expire + (Expire(job.id, v.cause, words.expired(v.cause, v.reason)),))
    if v.holder == START:
        return _started(ctx, st, job, v)
    return _waiting(ctx, st, job, v)


def _started(ctx: Context, st: State, job: Queued, v: Verdict) -> State:
    led = hold(ctx.m, st.ledger, started_holder(ctx.m, job, v.assigned))
    front = st.front
    if front is not None and front.kind == OWN:
        front = evolve(front, allowance=front.allowance - 1, passed=front.passed + 1)
    return evolve(st, ledger=led, front=front, start=st.start + (Start(job.id, v.assigned, v.forced),))


def _waiting(ctx: Context, st: State, job: Queued, v: Verdict) -> State:
    st = evolve(st, wait=st.wait + (Wait(job.id, v.reason, v.holder, v.front),))
    if v.holder == "oversized" and not st.stuck:
        st = evolve(st, stuck=v.note)
    if v.parks is not None and st.front is None:
        allowance = max(0, ctx.snap.max_bypass - job.passed_by)
        st = evolve(st, front=Front(job.id, words.label(job), v.parks, allowance, 0, v.note))
    return st


# ---- the plan -----------------------------------------------------------------


def _plan(ctx: Context, st: State) -> Plan:
    front = st.front
    passed = ((front.id, front.passed),) if front and front.kind == OWN and front.passed else ()
    deadlines = [ctx.jobs[w.id].deadline for w in st.wait if ctx.jobs[w.id].deadline is not None]
    return Plan(st.start, st.wait, st.skip, st.expire, passed, _health(ctx, st), min(deadlines, default=None))


def _health(ctx: Context, st: State) -> str:
    running = len(ctx.snap.running) + len(st.start)
    if not st.wait:
        return f"running {running}" if running else "idle"
    if ctx.snap.pause.queue:
        return f"paused: {words.pause_wait(ctx.snap.pause.queue_reason)}"
    if st.stuck:
        return st.stuck
    if st.front is not None:
        return f"held for job {st.front.label}" if st.front.kind == OWN else st.front.note
    if running:
        return f"running {running}"
    first = st.wait[0]
    return f"waiting: job {words.label(ctx.jobs[first.id])}: {first.reason}"
