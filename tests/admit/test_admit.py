"""Example-based tests of qex.admit: one or a few per rule of the admission pass."""

import copy
import pickle
import random
import subprocess
import sys

import pytest

from qex.admit import (
    Claim,
    Dep,
    DeviceUse,
    Pause,
    PeerHold,
    PoolSpec,
    Queued,
    Running,
    Skip,
    Snapshot,
    Start,
    admit,
    cores,
    size,
)
from qex.base.plain import FrozenInstanceError, Plain

GB = 1 << 30
MB = 1 << 20
GPU4 = PoolSpec("gpu", devices=(24 * GB,) * 4)
GPU2 = PoolSpec("gpu", devices=(24 * GB, 24 * GB))


def snap(queued=(), running=(), peers=(), pools=(), **kw):
    base = dict(
        now=1000.0,
        cpu_budget=8000,
        mem_budget=16 * GB,
        mem_available=None,
        oversized="run-when-idle",
        max_bypass=2,
        pools=tuple(pools),
        running=tuple(running),
        peers=tuple(peers),
        queued=tuple(queued),
    )
    base.update(kw)
    return Snapshot(**base)


def job(jid, seq=None, **kw):
    return Queued(id=jid, seq=seq if seq is not None else int(jid.strip("abcdefghijklmnopqrstuvwxyz-_") or 0), **kw)


def started(plan):
    return [s.id for s in plan.start]


def waits(plan):
    return {w.id: w for w in plan.wait}


def gpu(count, size_=None):
    return (Claim("gpu", count, size_),)


# ---- format helpers -----------------------------------------------------------


@pytest.mark.parametrize(
    "milli,text", [(1000, "1 core"), (1500, "1.5 cores"), (250, "0.25 cores"), (8000, "8 cores"), (0, "0 cores")]
)
def test_millicores_are_worded_as_cores_singular_for_one(milli, text):
    assert cores(milli) == text


@pytest.mark.parametrize(
    "n,text", [(512 * MB, "512MB"), (GB + GB // 2, "1.5GB"), (24 * GB, "24GB"), (100, "100B"), (2048, "2KB")]
)
def test_bytes_are_worded_in_their_largest_unit(n, text):
    assert size(n) == text


# ---- order --------------------------------------------------------------------


def test_priority_first_then_submission_order():
    q = [job("j1", cpu=4000), job("j2", cpu=4000, priority=5), job("j3", cpu=4000)]
    plan = admit(snap(q))
    assert started(plan) == ["j2", "j1"]
    assert waits(plan)["j3"].holder == "own"


def test_the_plan_is_the_same_whatever_the_input_order():
    q = [job(f"j{i}", cpu=1500, mem=GB, claims=gpu(1, 10 * GB), priority=i % 3) for i in range(1, 9)]
    running = [Running(f"r{i}", 500, GB, assigned=(DeviceUse("gpu", (i,), 6 * GB),)) for i in range(2)]
    peers = [PeerHold("alice", 1000, GB), PeerHold("bob", 0, 0, assigned=(DeviceUse("gpu", (3,), None),))]
    s = snap(q, running, peers, [GPU4])
    plan = admit(s)
    rng = random.Random(4)
    for _ in range(5):
        shuffled = s.evolve(
            queued=tuple(rng.sample(q, len(q))),
            running=tuple(rng.sample(running, 2)),
            peers=tuple(rng.sample(peers, 2)),
        )
        assert admit(shuffled) == plan


# ---- dependencies -------------------------------------------------------------


def test_a_failed_need_skips_with_its_id_as_root():
    plan = admit(snap([job("j1", needs=("a1b2c3d4e5",))], deps=(Dep("a1b2c3d4e5", "failed"),)))
    assert plan.skip[0].id == "j1" and plan.skip[0].root == "a1b2c3d4e5"
    assert plan.skip[0].reason == "a job it needs did not succeed: a1b2c3d4 (failed)"
    assert not plan.start and not plan.wait


def test_a_skipped_need_gives_the_root_of_its_chain():
    deps = (Dep("mid", "skipped", root="first-failed"), Dep("first-failed", "oom"))
    plan = admit(snap([job("j1", needs=("mid",))], deps=deps))
    assert plan.skip[0].root == "first-failed"
    assert "first-fa (oom)" in plan.skip[0].reason


def test_a_missing_need_skips_and_a_missing_after_does_not():
    plan = admit(snap([job("j1", needs=("gone",)), job("j2", after=("gone",))]))
    assert [s.id for s in plan.skip] == ["j1"]
    assert started(plan) == ["j2"]


def test_after_runs_whatever_the_final_state():
    plan = admit(snap([job("j1", after=("x",))], deps=(Dep("x", "killed"),)))
    assert started(plan) == ["j1"]


def test_an_unfinished_dependency_waits_and_is_not_the_front():
    q = [job("j1", needs=("x",), cpu=8000), job("j2", cpu=4000), job("j3", cpu=4000)]
    running = [Running("r1", 4000, 0)]
    plan = admit(snap(q, running, max_bypass=0, deps=(Dep("x", "running"),)))
    w = waits(plan)
    assert w["j1"].holder == "dependency" and "x" in w["j1"].reason and "running" in w["j1"].reason
    assert started(plan) == ["j2"]
    assert w["j3"].holder == "own"


def test_skip_happens_while_the_queue_is_paused():
    s = snap([job("j1", needs=("x",)), job("j2")], deps=(Dep("x", "failed"),), pause=Pause(queue=True))
    plan = admit(s)
    assert [x.id for x in plan.skip] == ["j1"]
    assert waits(plan)["j2"].holder == "pause"


# ---- expiry ---------------------------------------------------------------------


def test_expiry_for_capacity_names_a_remedy():
    plan = admit(snap([job("j1", cpu=4000, deadline=999.0)], [Running("r1", 6000, 0)]))
    e = plan.expire[0]
    assert e.cause == "capacity" and "smaller claim" in e.reason and "--max-queue-time" in e.reason
    assert "4 cores" in e.reason


def test_expiry_for_a_dependency_says_cover_the_pipeline():
    plan = admit(snap([job("j1", needs=("x",), deadline=1000.0)], deps=(Dep("x", "queued"),)))
    assert plan.expire[0].cause == "dependency" and "whole pipeline" in plan.expire[0].reason


def test_expiry_for_a_lock_says_cover_the_holders_run():
    running = [Running("holder01", 1000, 0, claims=(Claim("target", 1),))]
    plan = admit(snap([job("j1", claims=(Claim("target", 1),), deadline=10.0)], running))
    assert plan.expire[0].cause == "lock" and "holder's run" in plan.expire[0].reason


def test_a_job_waiting_on_a_paused_lock_expires_with_the_cause_pause():
    s = snap([job("j1", claims=(Claim("target", 1),), deadline=10.0)], pause=Pause(locks=(("target", "maintenance"),)))
    assert admit(s).expire[0].cause == "pause"


def test_an_expired_job_never_starts_even_if_it_fits():
    plan = admit(snap([job("j1", deadline=1000.0)]))
    assert not plan.start and plan.expire[0].id == "j1"


def test_a_job_past_its_deadline_does_not_expire_while_the_queue_is_paused():
    plan = admit(snap([job("j1", deadline=10.0)], pause=Pause(queue=True, queue_reason="paused by alice: maintenance")))
    assert not plan.expire
    assert waits(plan)["j1"].reason == "paused by alice: maintenance"


def test_an_expired_front_does_not_park_the_queue():
    q = [job("j1", cpu=8000, deadline=1.0), job("j2", cpu=1000), job("j3", cpu=1000), job("j4", cpu=1000)]
    plan = admit(snap(q, [Running("r1", 4000, 0)], max_bypass=0))
    assert started(plan) == ["j2", "j3", "j4"]


def test_next_deadline_is_the_earliest_waiting_deadline():
    q = [job("j1", cpu=8000, deadline=5000.0), job("j2", cpu=8000, deadline=3000.0), job("j3", deadline=2000.0)]
    plan = admit(snap(q, [Running("r1", 4000, 0)]))
    assert started(plan) == ["j3"]
    assert plan.next_deadline == 3000.0
    assert admit(snap([job("j1")])).next_deadline is None


# ---- queue pause ----------------------------------------------------------------


def test_a_retry_continues_through_a_queue_pause():
    plan = admit(snap([job("j1"), job("j2", retry=True)], pause=Pause(queue=True, queue_reason="paused by alice")))
    assert [s.id for s in plan.start] == ["j2"]
    assert waits(plan)["j1"].holder == "pause" and waits(plan)["j1"].reason == "paused by alice"


def test_a_retry_still_waits_for_a_lock_a_person_holds():
    plan = admit(snap([job("j1", claims=(Claim("target", 1),), retry=True)], pause=Pause(locks=(("target", "x"),))))
    assert not plan.start and waits(plan)["j1"].holder == "person"


def test_a_paused_queue_starts_nothing():
    plan = admit(snap([job("j1"), job("j2", needs=("x",))], pause=Pause(queue=True), deps=(Dep("x", "queued"),)))
    assert not plan.start
    assert {w.holder for w in plan.wait} == {"pause"}
    assert plan.wait[0].reason == "the queue is paused"
    assert plan.health == "paused: the queue is paused"


# ---- cpu, memory, outside memory --------------------------------------------------


def test_jobs_start_until_the_cpu_or_memory_budget_is_full_and_the_next_names_its_holders():
    q = [job("j1", cpu=3000, mem=8 * GB), job("j2", cpu=3000, mem=8 * GB), job("j3", cpu=1000, mem=GB)]
    plan = admit(snap(q, [Running("r1", 1000, 0)]))
    assert started(plan) == ["j1", "j2"]
    assert waits(plan)["j3"].holder == "own"
    assert waits(plan)["j3"].reason.startswith(
        "waits for 1GB of memory (0B of 16GB free): held by this queue's jobs j1, j2"
    )


def test_own_wait_names_the_holders_and_amounts():
    running = [Running("0190a1b2-aaaa", 3000, 0), Running("0190a1c3-bbbb", 3000, 0)]
    plan = admit(snap([job("j1", cpu=4000)], running, max_bypass=0))
    assert (
        waits(plan)["j1"].reason
        == "waits for 4 cores (2 cores of 8 cores free): held by this queue's jobs 0190a1b2, 0190a1c3"
    )


def test_outside_memory_blocks_with_words_and_lets_jobs_behind_start():
    q = [job("j1", cpu=1000, mem=8 * GB), job("j2", cpu=1000, mem=GB)]
    plan = admit(snap(q, [Running("r1", 4000, 0)], mem_available=3 * GB, max_bypass=0))
    w = waits(plan)["j1"]
    assert w.holder == "outside"
    assert w.reason == "this job cannot fit while memory outside qex is in use (needs 8GB, 3GB available)"
    assert started(plan) == ["j2"]
    assert plan.health == "waits for memory outside qex: j1 needs 8GB, 3GB available"


def test_available_memory_is_reduced_by_jobs_started_in_this_pass():
    q = [job("j1", mem=2 * GB), job("j2", mem=2 * GB)]
    plan = admit(snap(q, mem_available=3 * GB))
    assert started(plan) == ["j1"]
    assert waits(plan)["j2"].holder == "own"


# ---- plain pools and locks ------------------------------------------------------------


def test_a_counted_pool_admits_until_full():
    q = [job(f"j{i}", cpu=100, claims=(Claim("net", 1),)) for i in range(1, 7)]
    plan = admit(snap(q, pools=[PoolSpec("net", total=4)]))
    assert started(plan) == ["j1", "j2", "j3", "j4"]
    assert "1 net (0 of 4 free)" in waits(plan)["j5"].reason


def test_peer_units_count_against_a_plain_pool():
    q = [job("j1", cpu=100, claims=(Claim("net", 2),)), job("j2", cpu=100, claims=(Claim("net", 1),))]
    plan = admit(snap(q, peers=[PeerHold("alice", units=(("net", 3),))], pools=[PoolSpec("net", total=4)]))
    assert started(plan) == ["j2"]
    w = waits(plan)["j1"]
    assert w.holder == "peer" and "(alice holds 3 net)" in w.reason


def test_an_undeclared_name_is_a_lock():
    q = [job("j1", claims=(Claim("target", 1),)), job("j2", claims=(Claim("target", 1),)), job("j3")]
    plan = admit(snap(q, max_bypass=0))
    assert started(plan) == ["j1", "j3"]
    w = waits(plan)["j2"]
    assert w.holder == "lock" and w.reason == "waits for lock target: held by this queue's job j1"


def test_a_lock_does_not_park_the_queue():
    running = [Running("holder01", 1000, 0, claims=(Claim("target", 1),))]
    q = [job("j1", claims=(Claim("target", 1),))] + [job(f"j{i}") for i in range(2, 6)]
    plan = admit(snap(q, running, max_bypass=0))
    assert started(plan) == ["j2", "j3", "j4", "j5"]
    assert not plan.passed


def test_a_peer_holding_units_of_a_locks_name_does_not_hold_the_lock():
    plan = admit(snap([job("j1", claims=(Claim("target", 1),))], peers=[PeerHold("alice", units=(("target", 1),))]))
    assert started(plan) == ["j1"]


def test_two_units_of_a_lock_never_start_and_do_not_park():
    plan = admit(snap([job("j1", claims=(Claim("target", 2),)), job("j2")], max_bypass=0))
    assert started(plan) == ["j2"]
    w = waits(plan)["j1"]
    assert w.holder == "oversized" and "never start" in w.reason


def test_the_whole_of_a_one_unit_pool_behaves_like_a_lock():
    running = [Running("holder01", 1000, 0, claims=(Claim("license", 1),))]
    q = [job("j1", claims=(Claim("license", 1),)), job("j2"), job("j3")]
    plan = admit(snap(q, running, pools=[PoolSpec("license", total=1)], max_bypass=0))
    assert waits(plan)["j1"].holder == "lock"
    assert started(plan) == ["j2", "j3"]


def test_a_paused_lock_is_held_by_a_person():
    s = snap(
        [job("j1", claims=(Claim("target", 1),)), job("j2")],
        pause=Pause(locks=(("target", "paused by alice until 14:02: maintenance"),)),
        max_bypass=0,
    )
    plan = admit(s)
    w = waits(plan)["j1"]
    assert w.holder == "person"
    assert w.reason == "waits for lock target, which a person holds: paused by alice until 14:02: maintenance"
    assert started(plan) == ["j2"]


def test_a_paused_pool_is_entirely_held_by_the_person():
    s = snap([job("j1", claims=gpu(1, GB))], pools=[GPU4], pause=Pause(locks=(("gpu", ""),)))
    plan = admit(s)
    assert waits(plan)["j1"].holder == "person" and "pool gpu" in waits(plan)["j1"].reason


# ---- indexed pools -------------------------------------------------------------------


def test_a_machine_with_no_gpu_admits_a_gpu_claim_from_the_config():
    plan = admit(snap([job("j1", claims=gpu(1, 20 * GB))], pools=[GPU4]))
    assert plan.start == (Start("j1", (DeviceUse("gpu", (0,), 20 * GB),)),)


def test_vram_is_never_summed_across_devices():
    q = [job("j1", claims=gpu(1, 30 * GB)), job("j2")]
    plan = admit(snap(q, pools=[GPU2], max_bypass=0))
    assert started(plan) == ["j2"]
    w = waits(plan)["j1"]
    assert w.holder == "oversized" and "never start" in w.reason and "24GB" in w.reason
    assert plan.health == "stuck: job j1 can never start: it claims more gpu than the pool has"


def test_two_jobs_get_different_devices_and_a_third_waits():
    q = [job(f"j{i}", claims=gpu(1, 20 * GB)) for i in (1, 2, 3)]
    plan = admit(snap(q, pools=[GPU2]))
    assert [s.assigned[0].devices for s in plan.start] == [(0,), (1,)]
    w = waits(plan)["j3"]
    assert w.holder == "device"
    assert "1 gpu device with 20GB free (0 of 2 have that much free)" in w.reason


def test_a_whole_device_claim_leaves_no_room_for_a_second_job():
    q = [job("j1", claims=gpu(1)), job("j2", claims=gpu(1, GB))]
    plan = admit(snap(q, pools=[PoolSpec("gpu", devices=(24 * GB,))]))
    assert plan.start[0].assigned == (DeviceUse("gpu", (0,), None),)
    assert "j2" in waits(plan)


def test_a_whole_device_needs_an_entirely_free_device():
    running = [Running("r1", 100, 0, assigned=(DeviceUse("gpu", (0,), GB),))]
    plan = admit(snap([job("j1", claims=gpu(1))], running, pools=[GPU2]))
    assert plan.start[0].assigned == (DeviceUse("gpu", (1,), None),)


def test_a_device_holds_three_8gb_jobs_on_24gb_and_no_fourth():
    q = [job(f"j{i}", cpu=100, claims=gpu(1, 8 * GB)) for i in range(1, 5)]
    plan = admit(snap(q, pools=[PoolSpec("gpu", devices=(24 * GB,))]))
    assert started(plan) == ["j1", "j2", "j3"]
    assert all(s.assigned == (DeviceUse("gpu", (0,), 8 * GB),) for s in plan.start)
    assert waits(plan)["j4"].holder == "device"


def test_most_free_first_and_lowest_index_on_a_tie():
    running = [
        Running("r1", 100, 0, assigned=(DeviceUse("gpu", (0,), 8 * GB),)),
        Running("r2", 100, 0, assigned=(DeviceUse("gpu", (2,), 4 * GB),)),
    ]
    q = [
        job("j1", cpu=100, claims=gpu(1, GB)),
        job("j2", cpu=100, claims=gpu(2, GB)),
        job("j3", cpu=100, claims=gpu(1, GB)),
    ]
    plan = admit(snap(q, running, pools=[GPU4]))
    # free: 16, 24, 20, 24 → j1 takes device 1 (tie with 3: lowest index)
    assert plan.start[0].assigned[0].devices == (1,)
    # free: 16, 23, 20, 24 → j2 takes 3 and 1, recorded sorted
    assert plan.start[1].assigned[0].devices == (1, 3)
    # free: 16, 22, 20, 23 → j3 takes 3
    assert plan.start[2].assigned[0].devices == (3,)


def test_a_device_a_peer_holds_is_not_given_again():
    peers = [PeerHold("alice", assigned=(DeviceUse("gpu", (0,), None),))]
    plan = admit(snap([job("j1", claims=gpu(1)), job("j2", claims=gpu(1))], peers=peers, pools=[GPU2]))
    assert plan.start[0].assigned == (DeviceUse("gpu", (1,), None),)
    w = waits(plan)["j2"]
    assert w.holder == "device" and "held by this queue's job j1" in w.reason


def test_device_contention_with_a_peer_is_classified_peer():
    peers = [PeerHold("alice", assigned=(DeviceUse("gpu", (0, 1), 20 * GB),))]
    q = [job("j1", claims=gpu(1, 10 * GB)), job("j2"), job("j3")]
    plan = admit(snap(q, peers=peers, pools=[GPU2], max_bypass=0))
    w = waits(plan)["j1"]
    assert w.holder == "peer"
    assert "this job cannot fit while another user holds capacity (alice holds 20GB on gpu 0, 1)" in w.reason
    assert started(plan) == ["j2", "j3"]


def test_a_partial_claim_on_a_one_device_pool_is_divisible():
    running = [Running("r1", 100, 0, assigned=(DeviceUse("gpu", (0,), 20 * GB),))]
    q = [job("j1", claims=gpu(1, 8 * GB)), job("j2"), job("j3")]
    plan = admit(snap(q, running, pools=[PoolSpec("gpu", devices=(24 * GB,))], max_bypass=1))
    assert waits(plan)["j1"].holder == "device"
    assert started(plan) == ["j2"]
    assert waits(plan)["j3"].holder == "front"
    assert plan.passed == (("j1", 1),)


def test_a_whole_claim_on_a_one_device_pool_is_all_or_nothing():
    running = [Running("r1", 100, 0, assigned=(DeviceUse("gpu", (0,), 4 * GB),))]
    q = [job("j1", claims=gpu(1)), job("j2"), job("j3")]
    plan = admit(snap(q, running, pools=[PoolSpec("gpu", devices=(24 * GB,))], max_bypass=0))
    assert waits(plan)["j1"].holder == "lock"
    assert started(plan) == ["j2", "j3"]


# ---- head of line ----------------------------------------------------------------------


def test_at_most_max_bypass_jobs_pass_an_own_blocked_front():
    q = [job("big", 1, cpu=6000, name="train")] + [job(f"j{i}", i + 1, cpu=500) for i in range(1, 6)]
    plan = admit(snap(q, [Running("r1", 4000, 0)], max_bypass=2))
    assert waits(plan)["big"].holder == "own"
    assert started(plan) == ["j1", "j2"]
    assert plan.passed == (("big", 2),)
    w = waits(plan)["j3"]
    assert w.holder == "front" and w.front == "big"
    assert (
        w.reason == "held for job train at the front of the queue, which waits for capacity that this queue's jobs hold"
    )
    assert plan.health == "held for job train"


def test_the_bypass_counter_carries_over_between_passes():
    q = [job("big", 1, cpu=6000, passed_by=1)] + [job(f"j{i}", i + 1, cpu=500) for i in range(1, 4)]
    plan = admit(snap(q, [Running("r1", 4000, 0)], max_bypass=2))
    assert started(plan) == ["j1"]
    assert plan.passed == (("big", 1),)
    q[0] = q[0].evolve(passed_by=2)
    plan = admit(snap(q, [Running("r1", 4000, 0)], max_bypass=2))
    assert not plan.start and not plan.passed


def test_max_bypass_zero_is_strict():
    q = [job("big", 1, cpu=6000), job("j1", 2, cpu=500)]
    plan = admit(snap(q, [Running("r1", 4000, 0)], max_bypass=0))
    assert not plan.start
    assert waits(plan)["j1"].holder == "front"


def test_a_peer_blocked_front_lets_everything_behind_start():
    q = [job("big", 1, cpu=6000, mem=2 * GB)] + [job(f"j{i}", i + 1, cpu=500) for i in range(1, 6)]
    plan = admit(snap(q, peers=[PeerHold("alice", 3000, 4 * GB)], max_bypass=0))
    w = waits(plan)["big"]
    assert w.holder == "peer"
    assert w.reason.startswith("this job cannot fit while another user holds capacity (alice holds 3 cores)")
    assert started(plan) == ["j1", "j2", "j3", "j4", "j5"]
    assert not plan.passed
    assert plan.health == "waits for another user: big cannot fit while alice holds 3 cores"


def test_peer_words_name_cores_and_memory():
    q = [job("big", 1, cpu=6000, mem=14 * GB)]
    plan = admit(snap(q, peers=[PeerHold("alice", 3000, 4 * GB)]))
    assert "(alice holds 3 cores, 4GB)" in waits(plan)["big"].reason


def test_only_one_front_later_waits_keep_their_own_reason():
    q = [job("big", 1, cpu=6000), job("j1", 2, cpu=5000), job("j2", 3, cpu=500)]
    plan = admit(snap(q, peers=[PeerHold("alice", 3000, 0)], running=[Running("r1", 1000, 0)]))
    w = waits(plan)
    assert w["big"].holder == "peer"
    assert w["j1"].holder == "own"
    assert started(plan) == ["j2"]


# ---- oversized -----------------------------------------------------------------------------


def test_oversized_runs_alone_when_idle():
    plan = admit(snap([job("huge", 1, cpu=12000), job("j1", 2)]))
    assert plan.start == (Start("huge", (), True),)
    assert waits(plan)["j1"].holder == "own"


def test_oversized_waits_as_an_own_front_so_the_queue_drains():
    q = [job("huge", 1, cpu=12000), job("j1", 2), job("j2", 3)]
    plan = admit(snap(q, [Running("r1", 1000, 0)], max_bypass=1))
    assert waits(plan)["huge"].holder == "own"
    assert "larger than the budget" in waits(plan)["huge"].reason
    assert started(plan) == ["j1"]
    assert waits(plan)["j2"].holder == "front"


def test_oversized_waits_for_a_peer_without_parking():
    q = [job("huge", 1, mem=20 * GB), job("j1", 2)]
    plan = admit(snap(q, peers=[PeerHold("alice", 1000, GB)], max_bypass=0))
    assert waits(plan)["huge"].holder == "peer"
    assert "this job cannot fit while another user holds capacity" in waits(plan)["huge"].reason
    assert started(plan) == ["j1"]


@pytest.mark.parametrize("policy", ["queue", "reject"])
def test_oversized_under_queue_waits_and_does_not_park(policy):
    q = [job("huge", 1, cpu=12000), job("j1", 2)]
    plan = admit(snap(q, oversized=policy, max_bypass=0))
    w = waits(plan)["huge"]
    assert w.holder == "oversized" and "larger than the budget" in w.reason and "run-when-idle" in w.reason
    assert started(plan) == ["j1"]
    assert plan.health == "stuck: job huge is larger than the budget"


# ---- health ------------------------------------------------------------------------------------


def test_health_says_idle_running_n_or_what_the_front_job_waits_for():
    assert admit(snap()).health == "idle"
    assert admit(snap([job("j1")])).health == "running 1"
    assert admit(snap([], [Running("r1", 1000, 0)])).health == "running 1"
    plan = admit(snap([job("j1", needs=("x",))], deps=(Dep("x", "queued"),)))
    assert plan.health.startswith("waiting: job j1: waits for job x")


def test_every_queued_job_appears_once():
    q = [
        job("j1", needs=("x",)),
        job("j2", deadline=1.0),
        job("j3"),
        job("j4", cpu=7500),
        job("j5", claims=(Claim("target", 1),)),
        job("j6", claims=(Claim("target", 1),)),
    ]
    plan = admit(snap(q, deps=(Dep("x", "failed"),)))
    ids = [x.id for part in (plan.start, plan.wait, plan.skip, plan.expire) for x in part]
    assert sorted(ids) == sorted(j.id for j in q)


def test_oversized_does_not_run_alone_while_a_peer_holds_only_memory():
    plan = admit(snap([job("huge", 1, cpu=12000)], peers=[PeerHold("alice", 0, GB)]))
    assert not plan.start
    assert waits(plan)["huge"].holder == "peer" and "(alice holds 1GB)" in waits(plan)["huge"].reason


# ---- the values themselves (plain classes, no attrs) ------------------------------


def test_importing_admit_does_not_import_attrs():
    """Every `qex submit` imports qex.admit: it must not pay for attrs."""
    code = "import sys, qex.admit; print(sorted(m for m in ('attr', 'attrs') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout


def test_values_are_frozen_and_compare_hash_and_print_by_their_fields():
    a = Claim("gpu", 1, 8 * GB)
    assert a == Claim(name="gpu", count=1, size=8 * GB) and a != Claim("gpu", 2, 8 * GB)
    assert hash(a) == hash(Claim("gpu", 1, 8 * GB)) and len({a, Claim("gpu", 1, 8 * GB)}) == 1
    assert repr(a) == f"Claim(name='gpu', count=1, size={8 * GB})"
    assert Dep("x", "failed") != Skip("x", "failed", "")  # another class: never equal
    with pytest.raises(AttributeError):
        a.count = 2
    with pytest.raises(FrozenInstanceError):
        del a.name
    assert (a.name, a.count, a.size) == ("gpu", 1, 8 * GB)
    q = Queued("j1", 3)
    assert (q.priority, q.cpu, q.mem, q.claims, q.needs, q.after, q.deadline, q.passed_by, q.name, q.retry) == (
        0,
        1000,
        0,
        (),
        (),
        (),
        None,
        0,
        "",
        False,
    )
    assert pickle.loads(pickle.dumps(q)) == q and copy.deepcopy(q) == q


def test_every_admission_value_is_a_frozen_plain_record_with_slots():
    import qex.admit
    from qex.admit import model

    classes = [c for c in vars(model).values() if isinstance(c, type) and c.__module__ == model.__name__]
    assert {c.__name__ for c in classes} == {n for n in qex.admit.__all__ if isinstance(getattr(qex.admit, n), type)}
    for cls in classes:
        assert issubclass(cls, Plain) and cls._frozen and cls._slots, cls
    snap = Snapshot(1.0, 1000, GB, None, "reject", 2, (PoolSpec("gpu", 2),), (), (PeerHold("bob"),), ())
    assert pickle.loads(pickle.dumps(snap)) == snap and not hasattr(snap, "__dict__")


def test_a_claims_equality_and_hash_written_by_hand_mean_what_plains_do():
    claims = [Claim("gpu", 1), Claim("gpu", 1, None), Claim("gpu", 1, GB), Claim("gpu", 2), Claim("lock", 1)]
    for a in claims:
        for b in claims:
            assert (a == b) == Plain.__eq__(a, b) and (a == b) <= (hash(a) == hash(b))
    assert Claim("gpu", 1).__eq__(Dep("gpu", "1")) is NotImplemented


def test_evolve_changes_only_the_named_fields():
    q = Queued("j1", 3, priority=2, name="train")
    moved = q.evolve(passed_by=2)
    assert moved.passed_by == 2 and (moved.id, moved.seq, moved.priority, moved.name) == ("j1", 3, 2, "train")
    assert q.passed_by == 0
    with pytest.raises(TypeError, match="bogus"):  # (the unknown field is named)
        q.evolve(bogus=1)


def test_callers_build_values_positionally_in_the_documented_order():
    """The order engine.snapshot(), peers.holdings() and pause.current() use."""
    claim = Claim("gpu", 1, None)
    use = DeviceUse("gpu", (0,), None)
    r = Running("r1", 1000, GB, (claim,), (use,))
    assert (r.id, r.cpu, r.mem, r.claims, r.assigned) == ("r1", 1000, GB, (claim,), (use,))
    q = Queued("q1", 7, 1, 500, GB, (claim,), ("a",), ("b",), 99.0, 2, "train", True)
    assert (
        q.id,
        q.seq,
        q.priority,
        q.cpu,
        q.mem,
        q.claims,
        q.needs,
        q.after,
        q.deadline,
        q.passed_by,
        q.name,
        q.retry,
    ) == ("q1", 7, 1, 500, GB, (claim,), ("a",), ("b",), 99.0, 2, "train", True)
    p = PeerHold("alice", 500, GB, (("net", 1),), (use,))
    assert (p.owner, p.cpu, p.mem, p.units, p.assigned) == ("alice", 500, GB, (("net", 1),), (use,))
    assert (Dep("x", "skipped", "root").root, PoolSpec("gpu", None, (GB,)).devices) == ("root", (GB,))
    s = Snapshot(1.0, 2000, GB, None, "queue", 2, (), (r,), (p,), (q,))
    assert (
        s.deps == () and s.pause == Pause() and (s.pause.queue, s.pause.queue_reason, s.pause.locks) == (False, "", ())
    )


def test_memory_pressure_holds_every_job_a_retry_too_and_says_the_number():
    s = snap(
        [job("j1"), job("j2", retry=True), job("j3", deadline=10.0), job("j4", needs=("x",))],
        deps=(Dep("x", "failed"),),
        pressure=(37.5, 20.0),
    )
    plan = admit(s)
    assert started(plan) == []
    assert {w: v.holder for w, v in waits(plan).items()} == {"j1": "pressure", "j2": "pressure"}
    assert "37.5%" in waits(plan)["j1"].reason and "[system] max_pressure 20%" in waits(plan)["j1"].reason
    assert [e.id for e in plan.expire] == ["j3"] and "raise [system] max_pressure" in plan.expire[0].reason
    assert [k.id for k in plan.skip] == ["j4"]  # (a failed need still skips)
    assert plan.health.startswith("held while the machine is under memory pressure: 37.5%")
    assert started(admit(snap([job("j1")], pressure=None))) == ["j1"]
