"""A lost supervisor's job is requeued only when it provably never ran: its pid file
is missing. A pid file that says nothing (the supervisor was killed while it wrote
it: each write truncates it first) means the job may have run: it is never started
again. The random crash harness once ran a job twice before this was so."""

import os

import pytest
from test_window_pass import HELD, queue, run, two_cores


@pytest.fixture(autouse=True)
def supervisors_live_on():
    yield
    while HELD:
        os.close(HELD.pop())


def lose_supervisor(ctx, job_id: str) -> None:
    """The job's supervisor dies: its liveness lock goes (the test held it for it)."""
    alive = [fd for fd in HELD if os.readlink(f"/proc/self/fd/{fd}") == ctx.store.path(job_id, "alive.lock")]
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


def test_another_users_job_with_only_its_intent_line_is_out_of_reach_while_its_cgroup_has_members(tmp_path,
                                                                                                monkeypatch):
    """A supervisor lost within its job's first 20 ms leaves the intent line only (the
    pid line comes with 'running'): in a shared directory, another user's pass must
    leave that job alone while the cgroup its intent line names still holds processes."""
    from qex.config.context import Context
    from qex.linux import cgroup
    from qex.queue import reconcile

    class Cg:
        def __init__(self, members):
            self._members = members

        def members(self):
            return self._members

    ctx = Context.__new__(Context)
    ctx.uid = 4242  # not root, and not the job's owner
    ctx.store = type("S", (), {"job_dir": staticmethod(lambda job_id: str(tmp_path))})()
    entry = {"uid": 1000}
    monkeypatch.setattr(cgroup, "recorded", lambda job_dir, job_id: Cg([31337]))
    assert reconcile._runs_out_of_reach(ctx, "job-1", entry, None)
    monkeypatch.setattr(cgroup, "recorded", lambda job_dir, job_id: Cg([]))
    assert not reconcile._runs_out_of_reach(ctx, "job-1", entry, None)
    monkeypatch.setattr(cgroup, "recorded", lambda job_dir, job_id: None)
    assert not reconcile._runs_out_of_reach(ctx, "job-1", entry, None)
