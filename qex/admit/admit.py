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
from .model import Expire, Plan, Queued, Skip, Snapshot, Start, Wait
from .resources import Ledger, ledger_of, machine_of, own_holder, peer_holders, seen_holders, started_holder
from .verdicts import (
    OWN,
    SKIP,
    START,
    Context,
    Verdict,
    capacity_verdict,
    never_verdict,
    person_verdict,
    skip_verdict,
    unfinished_verdict,
)


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
                v = memo[key] = capacity_verdict(ctx, led, job)

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
    v = skip_verdict(ctx, job) if needs else None
    if v is None and paused_verdict is not None and not job.retry:  # a running job's retries go on
        v = paused_verdict
    if v is None and (needs or job.after):
        v = unfinished_verdict(ctx, job)
    claims = job.claims
    if v is None and (claims or job.cpu > m.cpu or job.mem > m.mem):
        v = never_verdict(ctx, job)
        if v is None and claims and locks:
            v = person_verdict(ctx, job)
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
