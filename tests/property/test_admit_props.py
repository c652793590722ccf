"""Invariants of admit() on random snapshots (see admit_ref.py for the reference)."""

from admit_ref import GB, Ref, check_plan, order, random_devices, snapshots
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qex.admit import Claim, PeerHold, PoolSpec, Queued, Running, Snapshot, admit

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(snapshots())
def test_a_plan_is_valid_complete_and_within_capacity(snap):
    """(a) budget, (b) pools and devices, (d) bypass, (e) never parked, (f) each job once."""
    check_plan(snap, admit(snap))


@settings(max_examples=150, deadline=None)
@given(snapshots(max_running=1, avail="always"))
def test_available_memory_is_shared_by_the_jobs_of_one_pass(snap):
    check_plan(snap, admit(snap))


@settings(max_examples=150, deadline=None)
@given(snapshots(max_running=0, max_peers=1, over=3))
def test_oversized_jobs_run_alone_only_when_idle(snap):
    check_plan(snap, admit(snap))


@SETTINGS
@given(snapshots(), st.randoms(use_true_random=False))
def test_the_same_input_in_another_order_gives_the_same_plan(snap, rng):
    """(c) deterministic whatever the order of the input tuples."""

    def shuffled(items):
        items = list(items)
        rng.shuffle(items)
        return tuple(items)

    other = snap.evolve(
        queued=shuffled(snap.queued),
        running=shuffled(snap.running),
        peers=shuffled(snap.peers),
        deps=shuffled(snap.deps),
        pools=shuffled(snap.pools),
    )
    assert admit(other) == admit(snap)


@SETTINGS
@given(snapshots())
def test_an_own_blocked_front_is_passed_at_most_the_allowance(snap):
    """(d), stated directly: starts after the first own-blocked capacity wait."""
    plan = admit(snap)
    waits = {w.id: w for w in plan.wait}
    starts = {s.id for s in plan.start}
    ordered = order(snap)
    fronts = [
        i for i, j in enumerate(ordered) if j.id in waits and waits[j.id].holder in ("own", "device", "peer", "outside")
    ]
    held_for = [w for w in plan.wait if w.holder == "front"]
    if held_for:
        front_id = held_for[0].front
        pos = next(i for i, j in enumerate(ordered) if j.id == front_id)
        assert pos in fronts
        front = ordered[pos]
        behind = sum(1 for j in ordered[pos + 1 :] if j.id in starts)
        assert behind == max(0, snap.max_bypass - front.passed_by)
        assert all(w.front == front_id for w in held_for)


DEVICE_CLAIM = st.tuples(st.integers(1, 3), st.sampled_from([None, 4, 8, 12, 20, 24]))


def _gpu(n, s):
    return (Claim("gpu", n, None if s is None else s * GB),)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([8, 16, 24]), min_size=1, max_size=5),
    st.lists(DEVICE_CLAIM, max_size=4),
    st.lists(DEVICE_CLAIM, max_size=8),
    st.data(),
)
def test_devices_are_never_summed_and_never_overfilled(caps, held, wants, data):
    """(b) on an indexed pool: assignments sorted, distinct, within capacity,
    with devices already held by this queue and by peers."""
    pool = PoolSpec("gpu", devices=tuple(c * GB for c in caps))
    snap = Snapshot(0.0, 10**6, 10**15, None, "queue", 0, (pool,), (), (), ())
    ref, running, peers = Ref(snap), [], []
    for i, (n, s) in enumerate(held):
        use = random_devices(data.draw, ref, _gpu(n, s)[0])
        if use is None:
            continue
        if data.draw(st.booleans()):
            peers.append(PeerHold(f"user{i}", assigned=(use,)))
            ref.add_peer(peers[-1])
        else:
            running.append(Running(f"r{i}", 1, 0, _gpu(n, s), (use,)))
            ref.add_own(f"r{i}", 1, 0, _gpu(n, s), (use,))
    queued = tuple(Queued(f"q{i}", i, cpu=1, claims=_gpu(n, s)) for i, (n, s) in enumerate(wants))
    snap = snap.evolve(running=tuple(running), peers=tuple(peers), queued=queued)
    check_plan(snap, admit(snap)).check_within()
