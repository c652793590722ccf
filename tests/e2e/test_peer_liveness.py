"""A running job counts for the other users' queues while any process of it lives,
whatever happened to its supervisor (issue 34): the job's processes hold its lock
in the peer directory too (docs/multiuser.md, "Liveness").

Two real users (useradd, as root), private queues, one peer directory, a 2-core
budget; skipped with the reason where users cannot be made.
"""

import os
import signal
import time

import pytest
from e2e_helpers import alive, fd_targets
from multiuser_helpers import World, gated, open_gate, processes_of, wait_for

CONFIG = (
    '[budget]\ncpu = 2\nmem = "8GB"\n[defaults]\nmem = "100MB"\n'
    '[[pool]]\nname = "gpu"\ndevices = ["8GB", "8GB"]\nenv = "CUDA_VISIBLE_DEVICES"\n'
)
PEER_WORDS = "this job cannot fit while another user holds capacity"


@pytest.fixture
def world(users):
    w = World(users, users.base, CONFIG)
    yield w
    w.close()


def _kill_supervisor_and_waker(world, owner, job_id: str) -> dict:
    """SIGKILL every qex process of ``owner``'s queue (its job's supervisor, or the
    minimal watcher it became, and its waker), never the job's own processes;
    return the job's record as it was."""
    rec = owner.record(job_id)
    job_pid, lock = rec["pid"], os.path.join(world.peers, rec["peer_lock"])
    qex = processes_of(owner.state, but_group=job_pid)
    assert rec["supervisor_pid"] in qex and len(qex) >= 2, (rec, qex)  # its supervisor and its waker
    for pid in qex:
        if pid != rec["supervisor_pid"]:  # the waker, or a command that lingers: never a copy of the lock
            assert lock not in fd_targets(pid), (pid, fd_targets(pid))
    for pid in qex:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_for(lambda: not processes_of(owner.state, but_group=job_pid), 5, "the qex processes to be gone")
    assert alive(job_pid), "the job's process should live on"
    return rec


def test_a_job_whose_supervisor_was_killed_counts_for_the_other_users_while_it_runs(world):
    alice, bob = world.actor(0), world.actor(1)
    job = bob.submit("--cpu", "2", "--", *gated(world.gate("b")))
    bob.wait_state(job, "running")
    rec = _kill_supervisor_and_waker(world, bob, job)

    two = alice.submit("--cpu", "2", "--", "true")
    deadline = time.monotonic() + 3.5  # alice's waker passes once a second: three passes at least
    while True:
        mine = alice.record(two)
        assert mine["state"] == "queued" and mine["blocked_holder"] == "peer", mine
        assert PEER_WORDS in mine["blocked_reason"] and f"{bob.user} holds 2 cores" in mine["blocked_reason"], mine
        assert alive(rec["pid"])
        if time.monotonic() > deadline:
            break
        time.sleep(0.25)
    # What holds it: the job's process (its inherited descriptor), and bob's record still names it.
    lock = os.path.join(world.peers, rec["peer_lock"])
    assert lock in fd_targets(rec["pid"]), fd_targets(rec["pid"])
    assert os.path.exists(lock) and any(
        n.endswith(".json") and n.startswith(f"u{world.users.uid(bob.name)}-") for n in os.listdir(world.peers)
    )

    open_gate(world.gate("b"))  # bob's job ends; nothing of his queue is left to record it
    wait_for(lambda: not alive(rec["pid"]), 10, "bob's job to end")
    done = alice.wait_state(two, "completed", timeout=30)  # no command typed: alice's waker
    assert done["exit_code"] == 0
    info = alice.run("info", check=0).stdout
    assert "stale" in info, info


def test_a_device_held_whole_by_a_job_whose_supervisor_was_killed_stays_held(world):
    alice, bob = world.actor(0), world.actor(1)
    job = bob.submit("--cpu", "0.5", "--gpu", "1", "--", *gated(world.gate("b")))
    held = bob.wait_state(job, "running")
    assert held["assigned"][0]["devices"] == [0], held
    _kill_supervisor_and_waker(world, bob, job)

    other = alice.submit("--cpu", "0.5", "--gpu", "1", "--", "sh", "-c", 'echo "$CUDA_VISIBLE_DEVICES"')
    done = alice.wait_state(other, "completed", timeout=30)
    assert done["assigned"][0]["devices"] == [1], done
    assert alice.run("logs", other, "--stdout", check=0).stdout.strip() == "1"
    open_gate(world.gate("b"))


def test_the_owners_next_pass_stops_the_orphan_and_the_other_users_job_starts(world):
    # The liveness of the supervisor (alive.lock) stays its own: bob's next pass finds it
    # lost, stops the job's processes, and with them goes the last holder of the peer lock.
    alice, bob = world.actor(0), world.actor(1)
    job = bob.submit("--cpu", "2", "--", *gated(world.gate("b")))
    bob.wait_state(job, "running")
    rec = _kill_supervisor_and_waker(world, bob, job)
    two = alice.submit("--cpu", "2", "--", "true")
    assert alice.record(two)["blocked_holder"] == "peer"

    bob.run("wait", job, timeout=60)  # a pass of bob's: reconcile
    lost = bob.record(job)
    assert lost["state"] == "failed" and lost.get("supervisor_lost"), lost
    wait_for(lambda: not alive(rec["pid"]), 10, "the orphan to be stopped")
    assert alice.wait_state(two, "completed", timeout=30)["exit_code"] == 0


def test_a_process_a_job_left_behind_counts_for_nobody_once_its_queue_recorded_the_end(world):
    # The job's end is recorded, its own queue counts it no more, and its lock file is
    # removed, held or not: a reader opens the file by its name, so a process left behind
    # with the inherited descriptor counts for no queue. A drain hands the next job the
    # same lock; the left-behind process holds it too, and the end of the drain removes it.
    alice, bob = world.actor(0), world.actor(1)
    leave = f"sleep 300 >/dev/null 2>&1 </dev/null & while [ ! -e '{world.gate('1')}' ]; do sleep 0.02; done"
    first = bob.submit("--cpu", "2", "--", "sh", "-c", leave)
    bob.wait_state(first, "running")
    second = bob.submit("--cpu", "2", "--", *gated(world.gate("2")))
    open_gate(world.gate("1"))
    ran = bob.wait_state(second, "running")
    assert ran["peer_lock"] == bob.record(first)["peer_lock"], "the drain's supervisor hands its lock on"
    lock = os.path.join(world.peers, ran["peer_lock"])
    left = [p for p in processes_of(bob.state) if _cmdline(p) == b"sleep\x00300\x00"]
    assert len(left) == 1 and lock in fd_targets(left[0]), left

    two = alice.submit("--cpu", "2", "--", "true")
    assert alice.record(two)["blocked_holder"] == "peer"  # bob's second job runs
    open_gate(world.gate("2"))
    assert alice.wait_state(two, "completed", timeout=30)["exit_code"] == 0
    wait_for(lambda: not os.path.exists(lock), 10, "the supervisor to remove the lock file")  # (after its pass)
    assert f"{lock} (deleted)" in fd_targets(left[0])  # still held, by the process left behind
    os.kill(left[0], signal.SIGKILL)


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""
