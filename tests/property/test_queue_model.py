"""A stateful model of one queue: submit, finish, admit (applying each plan).

Invariants: nothing is ever over the budget, a pool or a device (except one
forced oversized job running alone); every plan passes the reference checks
of admit_ref; an own-blocked front whose bypass allowance is used up is passed
by nobody until it starts; and when the queue is drained, every job that can
ever fit has started.
"""

from admit_ref import GB, Ref, check_plan, never, oversized, random_devices
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from qex.admit import Claim, PeerHold, PoolSpec, Queued, Running, Snapshot, admit, order_key


class QueueModel(RuleBasedStateMachine):
    @initialize(data=st.data(), strict=st.booleans())
    def setup(self, data, strict):
        """``strict``: no all-or-nothing claims (no locks, no one-unit or
        one-device pools), so an own-blocked front stays the front until it starts."""
        self.strict = strict
        self.cpu_budget = data.draw(st.integers(2, 16)) * 500
        self.mem_budget = data.draw(st.integers(2, 32)) * GB // 2
        self.max_bypass = data.draw(st.integers(0, 3))
        self.policy = data.draw(st.sampled_from(["run-when-idle", "queue"]))
        self.mem_available = data.draw(st.sampled_from([None, None, self.mem_budget // 2, self.mem_budget]))
        low = 2 if strict else 1
        self.pools = (
            PoolSpec("net", total=data.draw(st.integers(low, 4))),
            PoolSpec(
                "gpu", devices=tuple(data.draw(st.lists(st.sampled_from([8 * GB, 24 * GB]), min_size=low, max_size=4)))
            ),
        )
        self.names = ["net", "gpu"] if strict else ["net", "gpu", "L1"]
        self.queued, self.running, self.forced = {}, {}, set()
        self.peers = self._draw_peers(data)
        self.seq = 0
        self.tracked = None

    def _draw_peers(self, data):
        snap = self.snapshot()
        ref = Ref(snap)
        cpu = data.draw(st.sampled_from([0, self.cpu_budget // 4]))
        mem = data.draw(st.sampled_from([0, self.mem_budget // 4]))
        use = random_devices(data.draw, ref, Claim("gpu", 1, data.draw(st.sampled_from([None, 4 * GB]))))
        units = (("net", 1),) if data.draw(st.booleans()) else ()
        if use is None:
            return ()
        return (PeerHold("alice", cpu, mem, units, (use,) if data.draw(st.booleans()) else ()),)

    def snapshot(self) -> Snapshot:
        return Snapshot(
            now=0.0,
            cpu_budget=self.cpu_budget,
            mem_budget=self.mem_budget,
            mem_available=self.mem_available,
            oversized=self.policy,
            max_bypass=self.max_bypass,
            pools=self.pools,
            running=tuple(self.running[k] for k in sorted(self.running)),
            peers=getattr(self, "peers", ()),
            queued=tuple(self.queued[k] for k in sorted(self.queued)),
        )

    # ---- rules ------------------------------------------------------------------

    def _claim(self, data, name):
        if name == "gpu":
            caps = self.pools[1].devices
            size = data.draw(st.sampled_from([None, 4 * GB, 8 * GB, 16 * GB]))
            return Claim("gpu", data.draw(st.integers(1, len(caps))), size)
        if name == "net":
            return Claim("net", data.draw(st.integers(1, self.pools[0].total)))
        return Claim(name, 1)

    @rule(data=st.data())
    def submit(self, data):
        over = data.draw(st.integers(0, 9)) == 0
        cpu = self.cpu_budget + 500 if over else data.draw(st.integers(1, 8)) * self.cpu_budget // 8
        mem = data.draw(st.integers(0, 8)) * self.mem_budget // 8
        names = data.draw(st.lists(st.sampled_from(self.names), unique=True, max_size=2))
        job = Queued(
            f"j{self.seq:03d}",
            self.seq,
            data.draw(st.integers(0, 2)),
            cpu,
            mem,
            tuple(self._claim(data, n) for n in names),
        )
        self.seq += 1
        self.queued[job.id] = job
        if self.tracked is not None and order_key(job) < order_key(self.queued[self.tracked]):
            self.tracked = None  # a job ahead of the tracked front: the front may change

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def finish(self, data):
        done = data.draw(st.sampled_from(sorted(self.running)))
        del self.running[done]
        self.forced.discard(done)

    @rule()
    def admit_pass(self):
        snap = self.snapshot()
        plan = admit(snap)
        ref = check_plan(snap, plan)
        self._check_tracked(plan, ref)
        self._apply(plan)
        self._track(ref)

    # ---- applying a plan ----------------------------------------------------------

    def _apply(self, plan):
        for s in plan.start:
            job = self.queued.pop(s.id)
            self.running[s.id] = Running(s.id, job.cpu, job.mem, job.claims, s.assigned)
            if s.forced:
                self.forced.add(s.id)
        for front_id, n in plan.passed:
            job = self.queued[front_id]
            self.queued[front_id] = job.evolve(passed_by=job.passed_by + n)
        assert not plan.skip and not plan.expire

    def _check_tracked(self, plan, ref):
        if self.tracked is None:
            return
        front = self.queued[self.tracked]
        started = {s.id for s in plan.start}
        if front.id in started:
            self.tracked = None
            return
        still_front = ref.front is not None and ref.front.id == front.id and ref.front_holder in ("own", "device")
        if not still_front:
            # Only an oversized job (own-blocked while own jobs run, peer-blocked
            # once they are gone) or an all-or-nothing claim changes that.
            assert not self.strict or oversized(self.snapshot(), front), (front, ref.front, ref.front_holder)
            self.tracked = None
            return
        behind = [s for s in started if order_key(self.queued[s]) > order_key(front)]
        assert not behind, ("passed a front whose allowance is used up", front, behind)

    def _track(self, ref):
        front = ref.front
        if front is None or ref.front_holder not in ("own", "device") or front.id not in self.queued:
            return
        if self.queued[front.id].passed_by >= self.max_bypass:
            self.tracked = front.id

    # ---- invariants ------------------------------------------------------------------

    @invariant()
    def nothing_over_capacity(self):
        if not hasattr(self, "running"):
            return
        ref = Ref(self.snapshot())
        forced = bool(self.forced & set(self.running))
        ref.check_within(allow_forced=forced)
        if forced:
            assert len(self.running) == 1

    def teardown(self):
        if not hasattr(self, "running"):
            return
        for _ in range(len(self.queued) + 2):
            self.running.clear()
            self.forced.clear()
            self.tracked = None
            self.admit_pass()
        self.running.clear()
        snap = self.snapshot()
        alone = Ref(snap)
        for job in snap.queued:
            if never(alone, job):
                continue
            if oversized(snap, job):
                assert not (alone.idle() and alone.fits(job, budget=False)), job
            else:
                assert not alone.fits(job), ("never started though it fits alone", job)


QueueModel.TestCase.settings = settings(
    max_examples=80, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_queue_model = QueueModel.TestCase
