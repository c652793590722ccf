"""A lost supervisor's job is requeued only when it provably never ran: its pid file
is missing. A pid file that says nothing (the supervisor was killed while it wrote
it: each write truncates it first) means the job may have run: it is never started
again. The random crash harness once ran a job twice before this was so."""

import os
import time

import pytest
from test_window_pass import HELD, queue, run, two_cores


@pytest.fixture(autouse=True)
def supervisors_live_on():
    yield
    while HELD:
        os.close(HELD.pop())


def lose_supervisor(ctx, job_id: str) -> None:
    """The job's supervisor dies and nothing of the job runs: its liveness lock and its
    peer lock go (the test held them for both; a peer lock still held is a job still
    running, whose claim the pass keeps)."""
    rec = ctx.store.read_status(job_id)
    ours = {ctx.store.path(job_id, "alive.lock")}
    if rec.peer_lock:
        from qex.users import peer_dir

        ours.add(os.path.join(peer_dir.directory(ctx), rec.peer_lock))
    alive = [fd for fd in HELD if os.readlink(f"/proc/self/fd/{fd}") in ours]
    for fd in alive:
        HELD.remove(fd)
        os.close(fd)


@pytest.mark.parametrize("pid_file", [None, b"", b"-"])
def test_a_starting_job_of_a_lost_supervisor_is_requeued_only_without_a_pid_file(tmp_path, monkeypatch, pid_file):
    ctx = two_cores(tmp_path, monkeypatch)
    job, _ = queue(ctx, 2)
    assert run(ctx, save_index=True) == [job]
    lose_supervisor(ctx, job)
    if pid_file is not None:
        with open(ctx.store.path(job, "pid"), "wb") as fh:
            fh.write(pid_file)
    started = run(ctx, save_index=True)
    rec = ctx.store.read_status_dict(job)
    if pid_file is None:  # it never ran: queued again, and started again
        assert started == [job] and rec["state"] == "starting"
    else:  # it may have run: recorded lost, never started again
        assert job not in started
        assert rec["state"] == "failed" and rec["supervisor_lost"], rec


def test_a_pass_signals_only_on_its_own_evidence(tmp_path):
    """A pid file this user does not own is no evidence, and a process whose real uid is
    another's is never signalled, even when the pid file's start time matches it."""
    import shutil
    import subprocess

    from qex.base.machine import process_start_time
    from qex.linux import pidfile
    from qex.queue import reconcile

    if os.getuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run a process as another user")
    other = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "60"])
    try:
        wait = time.monotonic() + 5
        while process_start_time(other.pid) is None and time.monotonic() < wait:
            time.sleep(0.01)
        start = process_start_time(other.pid)
        path = str(tmp_path / "pid")
        pidfile.write(path, other.pid, start)
        assert pidfile.launched(path) == (other.pid, start)  # this user's file: read
        os.chown(path, 65534, -1)
        assert pidfile.launched(path) is None  # another's: no evidence
        while open(f"/proc/{other.pid}/status").read().find("Uid:\t65534") < 0 and time.monotonic() < wait:
            time.sleep(0.01)  # (setpriv has changed its uid before it execs sleep)
        reconcile._stop_orphan((other.pid, process_start_time(other.pid)))
        assert other.poll() is None  # another user's process: never signalled
    finally:
        other.kill()
        other.wait()


def test_a_pass_waits_once_in_all_for_the_cgroups_and_locks_of_several_lost_jobs(tmp_path, monkeypatch):
    """A pass holds the admission lock while it waits for lost jobs' killed processes to
    leave their cgroups and let go of their peer locks; the other users wait for that
    lock only ADMIT_WAIT. So three lost jobs whose processes are slow to die cost the
    pass one STOP_WAIT, not three (or six); each keeps its claim, and the next pass,
    once the locks are gone, ends them."""
    import types

    from qex.linux import cgroup
    from qex.queue import reconcile

    ctx = two_cores(tmp_path, monkeypatch)
    ctx.cores = 8
    jobs = queue(ctx, 3)
    assert sorted(run(ctx, save_index=True)) == sorted(jobs)
    for job in jobs:  # each supervisor died as it spawned (an empty pid file: the job may run)
        alive = ctx.store.path(job, "alive.lock")
        fd = next(fd for fd in HELD if os.readlink(f"/proc/self/fd/{fd}") == alive)
        HELD.remove(fd)
        os.close(fd)
        open(ctx.store.path(job, "pid"), "wb").close()
    clock = [100.0]  # (a clock that moves only when the pass sleeps: no real timing)
    fake = types.SimpleNamespace(monotonic=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s))
    monkeypatch.setattr(reconcile, "time", fake)
    killed = []  # the test holds the peer locks (it stands in for the jobs): "killed", they stay held
    monkeypatch.setattr(reconcile, "_kill_holder", lambda pid: killed.append(pid) or True)
    waits = []  # each job's cgroup never empties: its removal waits all it is given

    def slow_cgroup(job_dir, job_id, kill, wait):
        waits.append(wait)
        fake.sleep(wait)
        return False

    monkeypatch.setattr(cgroup, "stop_and_remove", slow_cgroup)
    run(ctx, save_index=True)
    assert len(killed) == 3 and len(waits) == 3 and waits[0] == pytest.approx(reconcile.STOP_WAIT)
    assert 100.0 + reconcile.STOP_WAIT <= clock[0] < 100.0 + reconcile.STOP_WAIT + 0.05
    assert {ctx.store.read_status_dict(j)["state"] for j in jobs} <= {"starting", "running"}  # claims kept
    while HELD:  # the jobs' processes are gone
        os.close(HELD.pop())
    run(ctx, save_index=True)
    for job in jobs:
        rec = ctx.store.read_status_dict(job)
        assert rec["state"] == "failed" and "nothing of the job runs any more" in rec["error"], rec
