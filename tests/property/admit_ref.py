"""A brute-force reference for the admission rules, and hypothesis strategies.

Independent of qex.admit's internals: it recomputes what is held from the
snapshot and a plan, and checks a plan job by job in queue order.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import strategies as st

from qex.admit import FINAL_STATES, Claim, Dep, DeviceUse, Pause, PeerHold, PoolSpec, Queued, Running, Snapshot

GB = 1 << 30
NOW = 1000.0
CAPACITY_HOLDERS = {"own", "device", "peer", "outside"}
STATES = sorted(FINAL_STATES | {"queued", "starting", "running"})


def order(snap: Snapshot):
    return sorted(snap.queued, key=lambda j: (-j.priority, j.seq, j.id))


class Ref:
    """What is held, recomputed by hand."""

    def __init__(self, snap: Snapshot):
        self.snap = snap
        self.plain = {p.name: p.total for p in snap.pools if not p.devices and p.total is not None}
        self.caps = {p.name: p.devices for p in snap.pools if p.devices}
        self.cpu = self.mem = self.peer_cpu = self.peer_mem = self.started_mem = 0
        self.front, self.front_holder = None, None  # set by check_plan
        self.own = 0
        self.units = Counter()
        self.lock_holders = {}
        self.load = {name: [0] * len(c) for name, c in self.caps.items()}
        self.whole = {name: [0] * len(c) for name, c in self.caps.items()}
        for p in snap.peers:
            self.add_peer(p)
        for r in snap.running:
            self.add_own(r.id, r.cpu, r.mem, r.claims, r.assigned)

    def kind(self, name):
        return "indexed" if name in self.caps else "plain" if name in self.plain else "lock"

    def total(self, name):
        return self.plain.get(name, 1)

    def _devices(self, uses):
        for u in uses:
            if u.pool not in self.caps:
                continue
            for i in u.devices:
                self.load[u.pool][i] += self.caps[u.pool][i] if u.size is None else u.size
                self.whole[u.pool][i] += u.size is None

    def add_peer(self, p: PeerHold):
        self.cpu += p.cpu
        self.mem += p.mem
        self.peer_cpu += p.cpu
        self.peer_mem += p.mem
        for name, n in p.units:
            if self.kind(name) == "plain":
                self.units[name] += n
        self._devices(p.assigned)

    def add_own(self, jid, cpu, mem, claims, assigned, started=False):
        self.own += 1
        self.cpu += cpu
        self.mem += mem
        self.started_mem += mem if started else 0
        for c in claims:
            if self.kind(c.name) != "indexed":
                self.units[c.name] += c.count
                self.lock_holders.setdefault(c.name, []).append(jid)
        self._devices(assigned)

    # -- fitting ------------------------------------------------------------

    def device_ok(self, pool, i, size):
        if size is None:
            return self.load[pool][i] == 0 and self.caps[pool][i] > 0
        return self.caps[pool][i] - self.load[pool][i] >= max(size, 1)

    def claim_ok(self, c: Claim, exclude_whole=False, is_whole=None):
        if exclude_whole and is_whole(c):
            return True
        if self.kind(c.name) == "indexed":
            return sum(self.device_ok(c.name, i, c.size) for i in range(len(self.caps[c.name]))) >= c.count
        return self.units[c.name] + c.count <= self.total(c.name)

    def avail_ok(self, mem):
        return self.snap.mem_available is None or mem <= self.snap.mem_available - self.started_mem

    def fits(self, job: Queued, budget=True) -> bool:
        s = self.snap
        if budget and (self.cpu + job.cpu > s.cpu_budget or self.mem + job.mem > s.mem_budget):
            return False
        return self.avail_ok(job.mem) and all(self.claim_ok(c) for c in job.claims)

    def idle(self):
        return self.own == 0 and self.peer_cpu == 0 and self.peer_mem == 0

    def is_whole(self, c: Claim):
        k = self.kind(c.name)
        if k == "lock":
            return True
        if k == "plain":
            return self.total(c.name) == 1
        caps = self.caps[c.name]
        return len(caps) == 1 and (c.size is None or c.size >= caps[0])

    def fits_but_whole(self, job: Queued, avail=True) -> bool:
        """Fits if its all-or-nothing claims are ignored."""
        s = self.snap
        if self.cpu + job.cpu > s.cpu_budget or self.mem + job.mem > s.mem_budget:
            return False
        if avail and not self.avail_ok(job.mem):
            return False
        return all(self.claim_ok(c, True, self.is_whole) for c in job.claims)

    def check_assigned(self, job: Queued, assigned):
        indexed = [c for c in job.claims if self.kind(c.name) == "indexed" and c.count > 0]
        assert len(assigned) == len(indexed), (job, assigned)
        for c, u in zip(indexed, assigned):
            assert u.pool == c.name and u.size == c.size, (c, u)
            assert list(u.devices) == sorted(set(u.devices)) and len(u.devices) == c.count, u
            for i in u.devices:
                assert 0 <= i < len(self.caps[c.name]) and self.device_ok(c.name, i, c.size), (c, u, self.load)

    # -- totals -----------------------------------------------------------

    def check_within(self, allow_forced=False):
        s = self.snap
        if not allow_forced:
            assert self.cpu <= s.cpu_budget and self.mem <= s.mem_budget, (self.cpu, self.mem)
        for name, n in self.units.items():
            assert n <= self.total(name), (name, n)
        for pool, loads in self.load.items():
            for i, load in enumerate(loads):
                assert load <= self.caps[pool][i], (pool, i, load)
                assert self.whole[pool][i] == 0 or load == self.caps[pool][i], (pool, i)


def never(ref: Ref, job: Queued) -> bool:
    """Can never start: a claim above what its pool has, or oversized under queue/reject."""
    for c in job.claims:
        if ref.kind(c.name) == "indexed":
            caps = ref.caps[c.name]
            room = sum(1 for cap in caps if (cap > 0 if c.size is None else cap >= max(c.size, 1)))
            if c.count > room:
                return True
        elif c.count > ref.total(c.name):
            return True
    return oversized(ref.snap, job) and ref.snap.oversized != "run-when-idle"


def oversized(snap, job):
    return job.cpu > snap.cpu_budget or job.mem > snap.mem_budget


def dep_state(snap, dep_id):
    return next((d.state for d in snap.deps if d.id == dep_id), "missing")


def skipped(snap, job):
    return any(dep_state(snap, d) in FINAL_STATES and dep_state(snap, d) != "completed" for d in job.needs)


def skip_root(snap, job):
    """The first failed job of the chain, through the first need that did not succeed."""
    dep = next(d for d in job.needs if dep_state(snap, d) in FINAL_STATES and dep_state(snap, d) != "completed")
    found = next((d for d in snap.deps if d.id == dep), None)
    return found.root if found is not None and found.state == "skipped" and found.root else dep


def deps_ready(snap, job):
    return all(dep_state(snap, d) in FINAL_STATES for d in job.needs + job.after)


def expired(snap, job):
    return not snap.pause.queue and job.deadline is not None and snap.now >= job.deadline


def queue_paused(snap, job):
    """A queue pause holds every queued job but a retry (it already ran)."""
    return snap.pause.queue and not job.retry


def person(snap, job):
    paused = {name for name, _ in snap.pause.locks}
    return any(c.name in paused for c in job.claims)


def expected_holder(snap: Snapshot, ref: Ref, job: Queued) -> str:
    """The holder class of a job that waits for capacity or an all-or-nothing claim."""
    alone = Ref(snap.evolve(running=()))
    if oversized(snap, job):
        if ref.own:
            return "own"
        if ref.peer_cpu or ref.peer_mem or not all(ref.claim_ok(c) for c in job.claims):
            return "peer"
        return "outside"
    if ref.fits_but_whole(job):
        blocked = [c for c in job.claims if not ref.claim_ok(c)]
        return "lock" if any(_own_holds(ref, alone, c.name) for c in blocked) else "peer"
    if alone.fits_but_whole(job):
        only_devices = (
            ref.cpu + job.cpu <= snap.cpu_budget
            and ref.mem + job.mem <= snap.mem_budget
            and ref.avail_ok(job.mem)
            and all(ref.kind(c.name) == "indexed" for c in job.claims if not ref.claim_ok(c, True, ref.is_whole))
        )
        return "device" if only_devices else "own"
    return "outside" if alone.fits_but_whole(job, avail=False) else "peer"


def _own_holds(ref: Ref, alone: Ref, name: str) -> bool:
    """A job of this queue holds some of ``name`` (ref minus the peers-only view)."""
    if ref.kind(name) == "indexed":
        return any(a != b for a, b in zip(ref.load[name], alone.load[name]))
    return ref.units[name] != alone.units[name]


def check_plan(snap: Snapshot, plan) -> Ref:
    """Walk the plan in queue order against the reference; return the final
    state (with ``front`` and ``front_holder`` set)."""
    ids = [x.id for part in (plan.start, plan.wait, plan.skip, plan.expire) for x in part]
    assert sorted(ids) == sorted(j.id for j in snap.queued), "every queued job exactly once"
    walk = Walk(snap, plan)
    for job in order(snap):
        walk.step(job)
    return walk.finish()


class Walk:
    """The reference walk of one plan: what is held, the front, the bypass count."""

    def __init__(self, snap: Snapshot, plan):
        self.snap, self.plan = snap, plan
        self.starts = {s.id: s for s in plan.start}
        self.waits = {w.id: w for w in plan.wait}
        self.ref = Ref(snap)
        self.ref.check_within(allow_forced=True)
        self.over = self.ref.cpu > snap.cpu_budget or self.ref.mem > snap.mem_budget  # a forced job runs alone
        self.front, self.allowance, self.passed, self.forced = None, None, 0, False

    def step(self, job: Queued):
        snap, plan = self.snap, self.plan
        assert (job.id in {s.id for s in plan.skip}) == skipped(snap, job), job
        if skipped(snap, job):
            assert next(s.root for s in plan.skip if s.id == job.id) == skip_root(snap, job)
            return
        assert (job.id in {e.id for e in plan.expire}) == expired(snap, job), job
        if expired(snap, job):
            return
        exhausted = self.allowance is not None and self.passed >= self.allowance
        eligible = (
            not queue_paused(snap, job) and deps_ready(snap, job) and not person(snap, job) and not never(self.ref, job)
        )
        if job.id in self.starts:
            assert eligible and not exhausted, ("started when it may not", self.front, job)
            self.started(job, self.starts[job.id])
        else:
            self.waited(job, self.waits[job.id], eligible, exhausted)

    def started(self, job: Queued, s):
        ref = self.ref
        if s.forced:
            assert oversized(self.snap, job) and self.snap.oversized == "run-when-idle" and ref.idle()
            assert ref.fits(job, budget=False)
            self.forced = True
        else:
            assert not oversized(self.snap, job) and ref.fits(job), job
        ref.check_assigned(job, s.assigned)
        ref.add_own(job.id, job.cpu, job.mem, job.claims, s.assigned, started=True)
        self.passed += self.allowance is not None

    def waited(self, job: Queued, w, eligible: bool, exhausted: bool):
        snap, ref = self.snap, self.ref
        if eligible and not exhausted:
            if oversized(snap, job):
                assert not (ref.idle() and ref.fits(job, budget=False)), ("should have started alone", job)
            else:
                assert not ref.fits(job), ("fits but did not start", job, w)
        if w.holder == "front":
            assert exhausted and w.front == self.front.id, (w, self.front)
        elif eligible:
            assert w.holder == expected_holder(snap, ref, job), (w, job)
        capacity = w.holder in CAPACITY_HOLDERS and (
            oversized(snap, job) or not ref.fits_but_whole(job) or w.holder == "outside"
        )
        if self.front is None and eligible and capacity:
            self.front = job
            ref.front, ref.front_holder = job, w.holder
            if w.holder in ("own", "device"):
                self.allowance = max(0, snap.max_bypass - job.passed_by)

    def finish(self) -> Ref:
        plan, snap, ref = self.plan, self.snap, self.ref
        expected = ((self.front.id, self.passed),) if self.allowance is not None and self.passed else ()
        assert plan.passed == expected, (plan.passed, expected)
        if self.over:
            assert not plan.start, "nothing starts beside a forced job"
        ref.check_within(allow_forced=self.forced or self.over)
        if self.forced:
            assert len(plan.start) == 1 and not snap.running and all(p.cpu == 0 and p.mem == 0 for p in snap.peers)
        deadlines = [j.deadline for j in snap.queued if j.id in self.waits and j.deadline is not None]
        assert plan.next_deadline == min(deadlines, default=None)
        return ref


# ---- strategies -------------------------------------------------------------------

SIZES = [2 * GB, 4 * GB, 4 * GB, 8 * GB, 8 * GB, 12 * GB, 16 * GB, 24 * GB, 30 * GB]


@st.composite
def pools(draw):
    out = []
    if draw(st.booleans()):
        out.append(PoolSpec("net", total=draw(st.integers(1, 4))))
    if draw(st.booleans()):
        out.append(
            PoolSpec(
                "gpu",
                devices=tuple(draw(st.lists(st.sampled_from([8 * GB, 16 * GB, 24 * GB]), min_size=1, max_size=4))),
            )
        )
    if draw(st.booleans()):
        out.append(PoolSpec("tpu", devices=(16 * GB,)))
    return tuple(out)


def claim_for(draw, name, specs):
    spec = next((p for p in specs if p.name == name), None)
    if spec is not None and spec.devices:
        size = draw(st.sampled_from([None] + SIZES))
        return Claim(name, draw(st.sampled_from([1, 1, 1, 2, 3])), size)
    if spec is not None:
        return Claim(name, draw(st.integers(1, spec.total + 1)))
    return Claim(name, draw(st.sampled_from([1] * 12 + [2])))


@st.composite
def claims(draw, pool_specs, names=("net", "gpu", "tpu", "L1", "L2", "gpu")):
    if draw(st.integers(0, 2)) == 0:
        return ()
    chosen = draw(st.lists(st.sampled_from(names), unique=True, max_size=2))
    return tuple(claim_for(draw, n, pool_specs) for n in chosen)


def random_devices(draw, ref: Ref, c: Claim):
    ok = [i for i in range(len(ref.caps[c.name])) if ref.device_ok(c.name, i, c.size)]
    if len(ok) < c.count:
        return None
    return DeviceUse(c.name, tuple(sorted(draw(st.permutations(ok))[: c.count])), c.size)


def holding(draw, ref: Ref, cpu, mem, cl):
    """Devices for claims that fit now (chosen at random), or None."""
    if not all(ref.claim_ok(c) for c in cl):
        return None
    uses = [random_devices(draw, ref, c) for c in cl if ref.kind(c.name) == "indexed"]
    return None if any(u is None for u in uses) else tuple(uses)


@st.composite
def sizes(draw, budget, over=20):
    """Mostly a small part of the budget; one time in ``over``, more than all of it."""
    pick = draw(st.integers(0, over - 1))
    if pick == 0:
        return budget + max(1, draw(st.integers(1, 8)) * budget // 16)
    top = 24 if pick < over // 4 + 1 else 8
    return max(1, draw(st.integers(1, top)) * budget // 24 - draw(st.integers(0, 3)))


@st.composite
def snapshots(draw, max_queued=10, max_peers=2, max_running=3, avail="maybe", over=20):
    """Random snapshots whose running jobs and peers fit. Knobs: how many
    peers/running jobs at most, whether mem_available is always known, and one
    job dimension in ``over`` is above the budget."""
    cpu_budget = draw(st.integers(1, 16)) * 500
    mem_budget = draw(st.integers(1, 32)) * GB // 2
    specs = draw(pools())
    base = Snapshot(NOW, cpu_budget, mem_budget, None, "run-when-idle", 0, specs, (), (), ())
    ref = Ref(base)
    peers = []
    for k in range(draw(st.integers(0, max_peers))):
        cpu = draw(st.sampled_from([0, max(1, draw(st.integers(1, 8)) * cpu_budget // 16)]))
        mem = draw(st.sampled_from([0, max(1, draw(st.integers(1, 8)) * mem_budget // 16)]))
        cl = tuple(c for c in draw(claims(specs, ("net", "gpu", "tpu", "gpu"))) if ref.kind(c.name) != "lock")
        uses = holding(draw, ref, cpu, mem, cl)
        if uses is None or ref.cpu + cpu > cpu_budget or ref.mem + mem > mem_budget:
            continue
        units = tuple((c.name, c.count) for c in cl if ref.kind(c.name) == "plain")
        if draw(st.booleans()):
            units += (("L1", 1),)  # a peer's lock name: never counted here
        p = PeerHold(f"user{k}", cpu, mem, units, uses)
        ref.add_peer(p)
        peers.append(p)
    running = []
    for k in range(draw(st.integers(0, max_running))):
        cpu, mem = draw(sizes(cpu_budget)), draw(sizes(mem_budget))
        cl = draw(claims(specs))
        uses = holding(draw, ref, cpu, mem, cl)
        if uses is None or ref.cpu + cpu > cpu_budget or ref.mem + mem > mem_budget:
            continue
        ref.add_own(f"run{k}", cpu, mem, cl, uses)
        running.append(Running(f"run{k}", cpu, mem, cl, uses))
    dep_ids = ["d1", "d2", "d3", "d4"]
    deps = tuple(
        Dep(d, draw(st.sampled_from(STATES)), draw(st.sampled_from([None, "d1", "root"]))) for d in dep_ids[:3]
    )
    queued = []
    for k in range(draw(st.integers(1, max_queued))):
        queued.append(
            Queued(
                id=f"q{k:02d}",
                seq=k,
                priority=draw(st.integers(0, 2)),
                cpu=draw(sizes(cpu_budget, over)),
                mem=draw(sizes(mem_budget, over)),
                claims=draw(claims(specs)),
                needs=tuple(draw(st.lists(st.sampled_from(dep_ids), max_size=2, unique=True)))
                if draw(st.integers(0, 5)) == 0
                else (),
                after=tuple(draw(st.lists(st.sampled_from(dep_ids), max_size=1)))
                if draw(st.integers(0, 6)) == 0
                else (),
                deadline=draw(st.sampled_from([None] * 6 + [NOW - 1, NOW, NOW + 50, NOW + 10])),
                passed_by=draw(st.sampled_from([0, 0, 0, 1, 2, 3])),
                name=draw(st.sampled_from(["", "", "train"])),
                retry=draw(st.integers(0, 7)) == 0,
            )
        )
    pause = Pause(
        queue=draw(st.integers(0, 19)) == 0,
        locks=(draw(st.sampled_from([("L1", "maintenance"), ("gpu", "")])),) if draw(st.integers(0, 5)) == 0 else (),
    )
    known = avail == "always" or draw(st.booleans())
    avail = draw(st.integers(0, 16)) * mem_budget // 16 if known else None
    return Snapshot(
        now=NOW,
        cpu_budget=cpu_budget,
        mem_budget=mem_budget,
        mem_available=avail,
        oversized=draw(st.sampled_from(["run-when-idle", "run-when-idle", "queue", "reject"])),
        max_bypass=draw(st.integers(0, 3)),
        pools=specs,
        running=tuple(running),
        peers=tuple(peers),
        queued=tuple(queued),
        deps=deps,
        pause=pause,
    )
