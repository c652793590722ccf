"""The fast admission pass decides exactly as the old one did.

``admit_old`` is the pass as it was before it was made linear (issue 10),
kept verbatim. On random snapshots (deps and skip chains, queue and lock
pauses, plain and indexed pools, locks, peers, priorities, deadlines,
oversized policies, bypass allowances, jobs of few shapes so the capacity
verdict is reused), both must give the same Plan: every decision and every
word of every reason and of the health line.
"""

from admit_old import admit as old_admit
from admit_ref import snapshots as ref_snapshots
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qex.admit import FINAL_STATES, Claim, Dep, DeviceUse, Pause, PeerHold, PoolSpec, Queued, Running, Snapshot, admit

GB = 1 << 30
NOW = 1000.0
STATES = sorted(FINAL_STATES | {"queued", "starting", "running"})
NAMES = ["net", "one", "gpu", "solo", "L1", "L2", "void"]
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_same(snap: Snapshot):
    new, old = admit(snap), old_admit(snap)
    assert repr(new) == repr(old)  # the first difference, readable
    assert new == old


@st.composite
def pool_specs(draw):
    specs = []
    if draw(st.booleans()):
        specs.append(PoolSpec("net", total=draw(st.integers(0, 4))))
    if draw(st.booleans()):
        specs.append(PoolSpec("one", total=1))
    if draw(st.booleans()):
        caps = draw(st.lists(st.sampled_from([0, 8 * GB, 16 * GB, 24 * GB]), min_size=1, max_size=4))
        specs.append(PoolSpec("gpu", devices=tuple(caps)))
    if draw(st.booleans()):
        specs.append(PoolSpec("solo", devices=(16 * GB,)))
    if draw(st.integers(0, 4)) == 0:  # a second spec of a name, and one that declares nothing
        specs.append(PoolSpec(draw(st.sampled_from(["net", "gpu"])), total=draw(st.integers(0, 3))))
        specs.append(PoolSpec("void"))
    return tuple(draw(st.permutations(specs)))


def a_claim(draw, name: str):
    size = draw(st.sampled_from([None, None, 4 * GB, 8 * GB, 16 * GB, 30 * GB, 0]))
    return Claim(name, draw(st.sampled_from([1, 1, 1, 2, 3, 0])), size)


@st.composite
def shapes(draw, cpu_budget, mem_budget):
    """A few job shapes (cpu, mem, claims), shared by many jobs."""
    out = []
    for _ in range(draw(st.integers(1, 4))):
        cpu = draw(st.sampled_from([0, 1, cpu_budget // 4, cpu_budget // 2, cpu_budget, cpu_budget + 500]))
        mem = draw(st.sampled_from([0, mem_budget // 8, mem_budget // 2, mem_budget, mem_budget + GB]))
        n = draw(st.sampled_from([0, 0, 0, 1, 1, 2]))
        # (each pool or lock once: a submission that claims one twice is refused, jobs.claims)
        names = draw(st.lists(st.sampled_from(NAMES), min_size=n, max_size=n, unique=True))
        out.append((cpu, mem, tuple(a_claim(draw, name) for name in names)))
    return out


def uses(draw, specs):
    pools = [p for p in specs if p.devices]
    if not pools or draw(st.booleans()):
        return ()
    p = draw(st.sampled_from(pools))
    devs = draw(st.lists(st.integers(0, len(p.devices)), min_size=1, max_size=2, unique=True))
    return (DeviceUse(p.name, tuple(sorted(devs)), draw(st.sampled_from([None, 4 * GB, 8 * GB]))),)


@st.composite
def snapshots(draw, max_queued=40):
    cpu_budget = draw(st.integers(1, 8)) * 1000
    mem_budget = draw(st.integers(1, 16)) * GB
    specs = draw(pool_specs())
    kinds = draw(shapes(cpu_budget, mem_budget))
    running = []
    for k in range(draw(st.integers(0, 4))):
        cpu, mem, claims = draw(st.sampled_from(kinds))
        running.append(Running(f"run{k}", cpu, mem, claims, uses(draw, specs)))
    peers = []
    for k in range(draw(st.integers(0, 3))):
        units = tuple((draw(st.sampled_from(NAMES)), draw(st.integers(0, 2))) for _ in range(draw(st.integers(0, 2))))
        peers.append(
            PeerHold(
                f"user{draw(st.integers(0, 2))}",
                draw(st.sampled_from([0, 500, cpu_budget // 2])),
                draw(st.sampled_from([0, GB, mem_budget // 2])),
                units,
                uses(draw, specs),
            )
        )
    dep_ids = ["d1", "d2", "d3", "d4", "q003", "q010"]
    deps = tuple(
        Dep(d, draw(st.sampled_from(STATES)), draw(st.sampled_from([None, None, "d1", "root", "d9"])))
        for d in dep_ids[:4]
        if draw(st.integers(0, 4)) > 0
    )
    deps += tuple(Dep(r, draw(st.sampled_from(STATES))) for r in ("root", "d9") if draw(st.booleans()))
    queued = []
    for k in range(draw(st.integers(1, max_queued))):
        cpu, mem, claims = draw(st.sampled_from(kinds))
        few = draw(st.integers(0, 9)) == 0
        queued.append(
            Queued(
                id=f"q{k:03d}" if draw(st.integers(0, 60)) else f"q{max(k - 1, 0):03d}",  # rarely an id twice
                seq=k if draw(st.integers(0, 20)) else 0,
                priority=draw(st.sampled_from([0, 0, 0, 1, 2, -1])),
                cpu=cpu,
                mem=mem,
                claims=claims,
                needs=tuple(draw(st.lists(st.sampled_from(dep_ids), max_size=2, unique=True))) if few else (),
                after=tuple(draw(st.lists(st.sampled_from(dep_ids), max_size=2)))
                if draw(st.integers(0, 9)) == 0
                else (),
                deadline=draw(st.sampled_from([None] * 6 + [NOW - 1, NOW, NOW + 50, NOW + 10])),
                passed_by=draw(st.sampled_from([0, 0, 0, 1, 2, 3])),
                name=draw(st.sampled_from(["", "", "train", "a-very-long-job-name"])),
                retry=draw(st.integers(0, 7)) == 0,
            )
        )
    locks = tuple(
        (draw(st.sampled_from(NAMES)), draw(st.sampled_from(["", "maintenance", "disk swap"])))
        for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2])))
    )
    pause = Pause(
        queue=draw(st.integers(0, 9)) == 0, queue_reason=draw(st.sampled_from(["", "paused by bob: move"])), locks=locks
    )
    avail = draw(st.sampled_from([None, None, -GB, 0, mem_budget // 4, mem_budget, 4 * mem_budget]))
    return Snapshot(
        now=NOW,
        cpu_budget=cpu_budget,
        mem_budget=mem_budget,
        mem_available=avail,
        oversized=draw(st.sampled_from(["run-when-idle", "run-when-idle", "queue", "reject"])),
        max_bypass=draw(st.integers(0, 3)),
        pools=specs,
        running=tuple(draw(st.permutations(running))),
        peers=tuple(peers),
        queued=tuple(draw(st.permutations(queued))),
        deps=deps,
        pause=pause,
    )


@SETTINGS
@given(snapshots())
def test_the_pass_plans_as_the_old_pass_did_on_random_snapshots(snap):
    assert_same(snap)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ref_snapshots(max_queued=16))
def test_the_pass_plans_as_the_old_pass_did_on_the_reference_snapshots(snap):
    assert_same(snap)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ref_snapshots(max_running=0, max_peers=1, over=3))
def test_the_pass_plans_as_the_old_pass_did_with_many_oversized_jobs(snap):
    assert_same(snap)


def test_the_pass_plans_as_the_old_pass_did_for_a_long_queue_of_one_shape():
    """The drain's case at size: two running jobs fill the budget, many wait."""
    running = (Running("r1", 1000, 64 << 20), Running("r2", 1000, 64 << 20))
    for n, bypass, passed in ((1000, 2, 0), (300, 0, 0), (300, 3, 1)):
        queued = tuple(
            Queued(f"{i:06x}", i, cpu=1000, mem=64 << 20, name="true", passed_by=passed if i == 0 else 0)
            for i in range(n)
        )
        for held in (running, running[:1], ()):
            snap = Snapshot(NOW, 2000, 8 * GB, 4 * GB, "run-when-idle", bypass, (), held, (), queued)
            assert_same(snap)
