"""Invariants of admit() on random snapshots (see admit_ref.py for the reference)."""

from admit_ref import GB, Ref, check_plan, order, snapshots
from attrs import evolve
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qex.admit import Claim, PoolSpec, Queued, Snapshot, admit

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(snapshots())
def test_a_plan_is_valid_complete_and_within_capacity(snap):
    """(a) budget, (b) pools and devices, (d) bypass, (e) never parked, (f) each job once."""
    check_plan(snap, admit(snap))


@SETTINGS
@given(snapshots(), st.randoms(use_true_random=False))
def test_the_same_input_in_another_order_gives_the_same_plan(snap, rng):
    """(c) deterministic whatever the order of the input tuples."""
    def shuffled(items):
        items = list(items)
        rng.shuffle(items)
        return tuple(items)

    other = evolve(snap, queued=shuffled(snap.queued), running=shuffled(snap.running),
                   peers=shuffled(snap.peers), deps=shuffled(snap.deps), pools=shuffled(snap.pools))
    assert admit(other) == admit(snap)


@SETTINGS
@given(snapshots())
def test_an_own_blocked_front_is_passed_at_most_the_allowance(snap):
    """(d), stated directly: starts after the first own-blocked capacity wait."""
    plan = admit(snap)
    waits = {w.id: w for w in plan.wait}
    starts = {s.id for s in plan.start}
    ordered = order(snap)
    fronts = [i for i, j in enumerate(ordered) if j.id in waits and waits[j.id].holder in ("own", "device", "peer", "outside")]
    held_for = [w for w in plan.wait if w.holder == "front"]
    if held_for:
        front_id = held_for[0].front
        pos = next(i for i, j in enumerate(ordered) if j.id == front_id)
        assert pos in fronts
        front = ordered[pos]
        behind = sum(1 for j in ordered[pos + 1:] if j.id in starts)
        assert behind == max(0, snap.max_bypass - front.passed_by)
        assert all(w.front == front_id for w in held_for)


@SETTINGS
@given(snapshots())
def test_peer_blocked_front_never_parks_jobs_that_fit(snap):
    """(e): with a peer/outside front, every later job that fits alone starts."""
    plan = admit(snap)
    assert not [w for w in plan.wait if w.holder == "front" and w.front is None]
    heads = [w for w in plan.wait if w.holder in ("peer", "outside")]
    if heads and not any(w.holder in ("own", "device", "front") for w in plan.wait):
        assert plan.passed == ()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([8, 16, 24]), min_size=1, max_size=6), st.lists(st.tuples(st.integers(1, 3), st.sampled_from([None, 4, 8, 12, 20, 24])), max_size=8))
def test_devices_are_never_summed_and_never_overfilled(caps, wants):
    """(b) on an indexed pool alone: assignments sorted, distinct, within capacity."""
    pool = PoolSpec("gpu", devices=tuple(c * GB for c in caps))
    queued = tuple(Queued(f"q{i}", i, cpu=1, claims=(Claim("gpu", n, None if s is None else s * GB),))
                   for i, (n, s) in enumerate(wants))
    snap = Snapshot(0.0, 10**6, 10**15, None, "queue", 0, (pool,), (), (), queued)
    ref = check_plan(snap, admit(snap))
    ref.check_within()
    assert isinstance(ref, Ref)
