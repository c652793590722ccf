"""SIGKILL at any instant: a submission is whole or absent, a job keeps its result,
and no capacity stays held by the dead."""

import json
import os
import signal
import time

import pytest
from e2e_helpers import FINAL, alive, gated, group_members, open_gate, read_line

CONFIG = '[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "100MB"\n'


def test_sigkilled_submits_leave_whole_jobs_or_nothing_and_hold_no_capacity(q):
    q.write_config(CONFIG)
    t0 = time.monotonic()
    q.submit("--cpu", "1", "--", "true")  # how long one whole submission takes here
    whole = time.monotonic() - t0
    printed = []
    # kill points spread over the life of a submit: start-up, parsing, the pass, the fork
    for i in range(12):
        proc = q.popen("submit", "--cpu", "1", "--", "sh", "-c", "echo ran")
        time.sleep(whole * (0.4 + 0.07 * i))
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=10)
        assert "Traceback" not in err
        if out.strip():
            printed.append(out.strip())

    # every id that was printed is a job
    for job in printed:
        rec = q.record(job)
        assert rec["id"] == job
    # a later job of the whole budget runs: nothing is held by a dead submission
    later = q.run("submit", "--wait", "--wait-timeout", "20", "--cpu", "2", "--", "true")
    assert later.returncode == 0, later.stderr
    # and every job the killed submits left ends up final (none is stranded queued/starting)
    listing = q.run("list", "--json")
    assert listing.returncode == 0, listing.stderr
    assert "Traceback" not in listing.stderr
    listed = {r["id"] for r in json.loads(listing.stdout)}
    with_record = {r["id"] for r in q.records()}
    assert set(printed) <= listed
    assert listed <= with_record  # no job directory without a record is shown
    for job in listed:
        rec = q.wait_state(job, FINAL, timeout=10)
        assert rec["state"] in ("completed", "failed"), rec
        if job in printed and rec["state"] == "failed":
            assert rec["error"], rec  # a job whose start was lost says so
    again = q.run("list", "--json")
    assert {r["id"] for r in json.loads(again.stdout)} == listed


def test_sigkill_of_submit_wait_leaves_the_job_running_to_a_true_final_record(q):
    q.write_config(CONFIG)
    waiter = q.popen("submit", "--wait", "--", *gated(q, "a", "echo finished; exit 7"))
    job = None

    def running():
        nonlocal job
        for rec in q.records():
            if rec["state"] == "running":
                job = rec["id"]
                return rec
        return None

    rec = q.wait_for(running, timeout=10, what="the job to run")
    waiter.send_signal(signal.SIGKILL)
    waiter.communicate(timeout=10)
    assert alive(rec["pid"])
    assert q.record(job)["state"] == "running"
    open_gate(q, "a")
    final = q.wait_state(job, FINAL, timeout=10)
    assert final["state"] == "failed"
    assert final["exit_code"] == 7
    assert final["signal"] is None
    assert final["ended_at"] >= final["started_at"]
    with open(os.path.join(q.state, "jobs", job, "stdout.log")) as fh:
        assert fh.read() == "finished\n"
    assert q.run("wait", job).returncode == 7


def test_sigkilled_supervisor_fails_its_job_stops_its_group_and_frees_capacity(q):
    q.write_config('[budget]\ncpu = 1\nmem = "4GB"\n[defaults]\nmem = "100MB"\n')
    first = q.submit("--", *gated(q, "never", before="sleep 300 & "))
    second = q.submit("--", "sh", "-c", "echo second")
    rec = q.wait_state(first, "running")
    assert q.record(second)["state"] == "queued"
    supervisor, pid = rec["supervisor_pid"], rec["pid"]
    assert alive(supervisor) and alive(pid)
    q.wait_for(lambda: len(group_members(pid)) >= 2, timeout=5, what="the job's group to form")

    os.kill(supervisor, signal.SIGKILL)
    # no qex command is typed from here on: only files and /proc are read
    failed = q.wait_state(first, FINAL, timeout=6)
    assert failed["state"] == "failed", failed
    assert "supervisor" in (failed["error"] or ""), failed
    q.wait_for(lambda: not group_members(pid), timeout=6, what="the job's process group to be gone")
    assert not alive(pid)
    done = q.wait_state(second, FINAL, timeout=6)
    assert done["state"] == "completed", done
    with open(os.path.join(q.state, "jobs", second, "stdout.log")) as fh:
        assert fh.read() == "second\n"
    status = q.run("status", first)
    assert status.returncode == 0 and "supervisor" in status.stdout


def test_a_wait_on_a_job_whose_supervisor_was_sigkilled_ends_instead_of_hanging(q):
    q.write_config(CONFIG)  # no job queued behind it: no waker; the wait itself must notice
    job = q.submit("--", *gated(q, "never", before="sleep 300 & "))
    rec = q.wait_state(job, "running")
    q.wait_for(lambda: len(group_members(rec["pid"])) >= 2, timeout=5, what="the job's group to form")
    os.kill(rec["supervisor_pid"], signal.SIGKILL)
    waited = q.run("wait", "--timeout", "15", job, timeout=30)
    assert waited.returncode not in (0, 124), waited
    final = q.record(job)
    assert final["state"] == "failed" and "supervisor" in (final["error"] or ""), final
    q.wait_for(lambda: not group_members(rec["pid"]), timeout=6, what="the job's group to be gone")
    assert q.run("submit", "--wait", "--wait-timeout", "10", "--cpu", "2", "--", "true").returncode == 0


def test_sigkill_of_run_leaves_the_job_to_finish_and_record_its_result(q):
    q.write_config(CONFIG)
    runner = q.popen("run", "--", *gated(q, "a", "echo end; exit 9", before="echo begin; "))
    assert read_line(runner, timeout=10) == "begin\n"
    job = next(r["id"] for r in q.records() if r["state"] == "running")
    runner.send_signal(signal.SIGKILL)
    runner.communicate(timeout=10)
    open_gate(q, "a")
    final = q.wait_state(job, FINAL, timeout=10)
    assert (final["state"], final["exit_code"]) == ("failed", 9)
    with open(os.path.join(q.state, "jobs", job, "stdout.log")) as fh:
        assert fh.read() == "begin\nend\n"


def test_the_code_of_a_job_that_ran_but_lost_its_supervisor_is_not_121(q):
    q.write_config(CONFIG)
    job = q.submit("--", *gated(q, "never", before="echo started; "))
    rec = q.wait_state(job, "running")
    out = os.path.join(q.state, "jobs", job, "stdout.log")

    def started():
        with open(out) as fh:
            return fh.read() == "started\n"

    q.wait_for(started, timeout=5, what="the job to run")
    os.kill(rec["supervisor_pid"], signal.SIGKILL)
    waited = q.run("wait", "--timeout", "15", job, timeout=30)
    assert q.record(job)["state"] == "failed"
    assert waited.returncode not in (0, 121, 124), waited


def test_a_lost_supervisor_is_noticed_with_no_command_typed_even_when_nothing_is_queued(q):
    q.write_config(CONFIG)
    job = q.submit("--", *gated(q, "alone"))
    rec = q.wait_state(job, "running")
    os.kill(rec["supervisor_pid"], signal.SIGKILL)
    # nothing queued, no command typed: the waker that lives while the job runs notices it
    final = q.wait_state(job, FINAL, timeout=10)
    assert final["state"] == "failed" and final["supervisor_lost"] and "supervisor" in final["error"]
    assert not alive(rec["pid"])
    q.wait_for(lambda: not q.processes(), timeout=10, what="no qex process left")


def test_a_lost_supervisors_job_is_stopped_through_its_cgroup_named_in_its_pid_file(q):
    """A process the job moved out of its process group (setsid) is still in the
    job's memory cgroup; the pass that finds the supervisor lost reads that cgroup
    off the job's pid file (no other file names it) and stops what is in it."""
    q.write_config(CONFIG)
    escaped = os.path.join(q.root, "escaped.pid")
    job = q.submit(
        "--",
        "sh",
        "-c",
        f"setsid sh -c 'echo $$ > {escaped}; exec sleep 300' & while [ ! -e '{q.gate('never')}' ]; do sleep 0.05; done",
    )
    rec = q.wait_state(job, "running")
    with open(os.path.join(q.state, "jobs", job, "pid")) as fh:
        words = fh.read().split()
    if len(words) < 4:
        pytest.skip("skipped: no memory cgroup can be made for a job here (its pid file names none)")
    assert words[:2] == [str(rec["pid"]), words[1]] and words[2] in ("v1", "v2") and job in words[3], words
    assert not os.path.exists(os.path.join(q.state, "jobs", job, "cgroup"))
    q.wait_for(lambda: os.path.exists(escaped) and open(escaped).read().strip(), what="the escaped process")
    with open(escaped) as fh:
        other = int(fh.read())
    assert alive(other) and other not in group_members(rec["pid"])

    os.kill(rec["supervisor_pid"], signal.SIGKILL)
    failed = q.wait_state(job, FINAL, timeout=6)
    assert failed["state"] == "failed" and failed["supervisor_lost"], failed
    q.wait_for(lambda: not alive(other), timeout=5, what="the escaped process to be stopped")
    assert not os.path.exists(words[3])
