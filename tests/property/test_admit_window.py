"""Admitting the head of a long queue gives the whole queue's plan (qex.admit.window).

The reference below does what the engine's windowed pass does, from the whole
snapshot: it admits the head and one representative per shape of the rest, and
gives every other job of a shape its representative's Wait. Whenever it says
that is sound (it does not return None), the plan must be ``admit``'s, word for
word. The random queues are those of ``test_admit_same``, with most jobs made
plain (no needs, after or deadline) so that the window often applies.
"""

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_admit_same import snapshots

from qex.admit import Queued, Running, Snapshot, Wait, admit, order_key
from qex.admit.window import admit_head, shape

GB = 1 << 30
NOW = 1000.0


def windowed(snap: Snapshot, k: int):
    """The whole queue's plan from its head, or None where the head does not decide it."""
    if len({q.id for q in snap.queued}) != len(snap.queued):
        return None  # (the engine's index never has an id twice)
    order = sorted(snap.queued, key=order_key)
    head, tail = order[:k], order[k:]
    reps: dict = {}
    for job in tail:
        key = shape(job)
        if key is None:
            return None
        reps.setdefault(key, job.id)
    firsts = set(reps.values())
    got = admit_head(snap.evolve(queued=tuple(head + [j for j in tail if j.id in firsts])), reps)
    if got is None:
        return None
    plan, tail_waits = got
    decided = {w.id: w for w in plan.wait}
    waits = []
    for job in order:
        if job.id in decided:
            waits.append(decided[job.id])
        elif job in tail:
            w = tail_waits[shape(job)]
            waits.append(Wait(job.id, w.reason, w.holder, w.front))
    return plan.evolve(wait=tuple(waits))


def plain(job: Queued, keep: bool) -> Queued:
    return job if keep else job.evolve(needs=(), after=(), deadline=None)


@st.composite
def mostly_plain(draw):
    snap = draw(snapshots(max_queued=30))
    if draw(st.integers(0, 3)) == 0:  # a queue pause, which holds all but retries
        snap = snap.evolve(pause=snap.pause.evolve(queue=True))
    keep = [draw(st.integers(0, 7)) == 0 for _ in snap.queued]
    return snap.evolve(queued=tuple(plain(j, k) for j, k in zip(snap.queued, keep)))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mostly_plain(), st.integers(0, 12))
def test_the_head_s_plan_is_the_whole_queue_s(snap, k):
    got = windowed(snap, k)
    event("window applies" if got is not None else "whole queue")
    if got is not None:
        assert repr(got) == repr(admit(snap))
        assert got == admit(snap)


def test_a_drain_s_queue_is_decided_by_its_head():
    """Two running jobs fill the budget, a thousand of one shape wait: the head decides."""
    running = (Running("r1", 1000, 64 << 20), Running("r2", 1000, 64 << 20))
    for n, bypass in ((1000, 2), (300, 0)):
        queued = tuple(Queued(f"{i:06x}", i, cpu=1000, mem=64 << 20, name="true") for i in range(n))
        for held in (running, running[:1]):
            snap = Snapshot(NOW, 2000, 8 * GB, 4 * GB, "run-when-idle", bypass, (), held, (), queued)
            got = windowed(snap, 16)
            assert got is not None
            assert got == admit(snap)


def test_the_head_does_not_decide_when_the_front_is_past_it():
    # Nothing waits in the head (it all starts): the front would be a representative,
    # and with no bypass allowed, the jobs behind it wait for it, not for capacity.
    queued = tuple(Queued(f"{i:06x}", i, cpu=1000, mem=GB) for i in range(6))
    snap = Snapshot(NOW, 2000, 8 * GB, None, "queue", 0, (), (), (), queued)
    assert windowed(snap, 2) is None
    whole = admit(snap)
    assert [w.holder for w in whole.wait] == ["own", "front", "front", "front"]
