"""Head of line over many passes, with random peer holdings (issue 3).

The single-pass properties (test_admit_props.py) check one plan. These run a
queue forward: each pass's starts become running jobs, the plan's ``passed``
counts go into ``passed_by`` as the engine writes them, and running jobs end
at random between passes. Over the whole run:

- a front job blocked by a peer (or by memory outside qex) never parks the
  jobs behind it: no job ever waits "held for" it, and its reason says that
  another user holds capacity;
- a front job blocked by this queue's own jobs is passed at most
  ``max_bypass`` times in all, whatever the number of passes.
"""

from admit_ref import GB, check_plan, order
from hypothesis import event, given, settings
from hypothesis import strategies as st

from qex.admit import PeerHold, Queued, Running, Snapshot, admit
from qex.admit.words import OUTSIDE_WORDS, PEER_WORDS

OWN, PEERISH = ("own", "device"), ("peer", "outside")


@st.composite
def queues(draw):
    cpu_budget = draw(st.integers(2, 12)) * 1000
    mem_budget = draw(st.integers(2, 16)) * GB
    peers = []
    used_cpu = used_mem = 0
    for k in range(draw(st.integers(0, 3))):
        cpu = draw(st.integers(0, 4)) * cpu_budget // 8
        mem = draw(st.integers(0, 4)) * mem_budget // 8
        if used_cpu + cpu <= cpu_budget and used_mem + mem <= mem_budget:
            peers.append(PeerHold(f"user{k}", cpu, mem))
            used_cpu, used_mem = used_cpu + cpu, used_mem + mem
    running = []
    for k in range(draw(st.integers(0, 3))):
        cpu = draw(st.integers(1, 6)) * cpu_budget // 8
        mem = draw(st.integers(0, 4)) * mem_budget // 8
        if used_cpu + cpu <= cpu_budget and used_mem + mem <= mem_budget:
            running.append(Running(f"run{k}", cpu, mem))
            used_cpu, used_mem = used_cpu + cpu, used_mem + mem
    queued = tuple(
        Queued(
            f"q{k:02d}",
            k,
            draw(st.integers(0, 1)),
            draw(st.integers(1, 8)) * cpu_budget // 8,
            draw(st.integers(0, 8)) * mem_budget // 8,
        )
        for k in range(draw(st.integers(1, 12)))
    )
    avail = draw(st.sampled_from([None, None, mem_budget, mem_budget // 2]))
    snap = Snapshot(
        0.0, cpu_budget, mem_budget, avail, "queue", draw(st.integers(0, 3)), (), tuple(running), tuple(peers), queued
    )
    ends = draw(st.lists(st.lists(st.booleans(), min_size=20, max_size=20), min_size=12, max_size=12))
    return snap, ends


def front_of(snap: Snapshot, plan):
    """The first job in queue order that waits for capacity, with its Wait."""
    waits = {w.id: w for w in plan.wait}
    for job in order(snap):
        w = waits.get(job.id)
        if w is not None and w.holder in OWN + PEERISH:
            return job, w
    return None, None


@settings(max_examples=200, deadline=None)
@given(queues())
def test_over_many_passes_peer_fronts_never_park_and_own_fronts_are_passed_at_most_max_bypass(case):
    snap, ends = case
    passed_while_front: dict[str, int] = {}
    for step, finish in enumerate(ends):
        plan = admit(snap)
        check_plan(snap, plan)
        front, w = front_of(snap, plan)
        held_for = [x for x in plan.wait if x.holder == "front"]
        ordered = [j.id for j in order(snap)]
        started = {s.id for s in plan.start}
        if front is not None:
            event(f"front blocked by {w.holder}" + (", jobs held for it" if held_for else ""))
        if front is not None and w.holder in PEERISH:
            assert not held_for, ("a peer-blocked front parked jobs", front, held_for)
            assert plan.passed == ()
            assert (PEER_WORDS if w.holder == "peer" else OUTSIDE_WORDS) in w.reason, w
            assert "another user" in plan.health or "outside qex" in plan.health, plan.health
        if front is not None and w.holder in OWN:
            later = sum(1 for j in ordered[ordered.index(front.id) + 1 :] if j in started)
            passed_while_front[front.id] = passed_while_front.get(front.id, 0) + later
            assert passed_while_front[front.id] <= snap.max_bypass, (front, passed_while_front, snap.max_bypass)
            assert all(x.front == front.id for x in held_for)
        snap = _advance(snap, plan, finish)
        if not snap.queued:
            break


def _advance(snap: Snapshot, plan, finish) -> Snapshot:
    """What the engine does with a plan, then some running jobs end."""
    jobs = {j.id: j for j in snap.queued}
    passed = dict(plan.passed)
    started = [Running(s.id, jobs[s.id].cpu, jobs[s.id].mem) for s in plan.start]
    running = [r for i, r in enumerate(snap.running + tuple(started)) if not finish[i % len(finish)]]
    gone = {s.id for s in plan.start} | {x.id for x in plan.expire} | {x.id for x in plan.skip}
    queued = tuple(j.evolve(passed_by=j.passed_by + passed.get(j.id, 0)) for j in snap.queued if j.id not in gone)
    for j in queued:
        assert j.passed_by <= snap.max_bypass, j
    return snap.evolve(running=tuple(running), queued=queued)
