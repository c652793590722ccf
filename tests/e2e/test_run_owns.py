"""Issue 23, points 1, 9 and 10: `qex run` owns its job (a signal cancels it while it
waits, kills it while it runs: 125), the other waits leave the job (122) and say so;
`qex kill` stops every process the job started (a `setsid` grandchild, an orphan the
supervisor adopted) and a queued job in the same pass as the running ones."""

import os
import signal

import pytest
from e2e_helpers import FINAL, alive, gated, group_members, open_gate, read_line, wait_until_waiting

SMALL = '[budget]\ncpu = 1\nmem = "4GB"\n[defaults]\nmem = "100MB"\n'
TWO = '[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "100MB"\n'
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
NAMES = ["SIGINT", "SIGTERM", "SIGHUP"]


@pytest.fixture
def small(q):
    q.write_config(SMALL)
    return q


def run_queued_behind(q, blocker_gate: str):
    """A running job that holds the whole budget, and `qex run` of a job queued behind it
    (it would touch a file): (blocker id, the run's Popen, its job id, the file)."""
    blocker = q.submit("--", *gated(q, blocker_gate))
    q.wait_state(blocker, "running")
    ran = os.path.join(q.root, "run-job-ran")
    runner = q.popen("run", "--", "touch", ran)
    wait_until_waiting(q, runner)
    job = q.wait_for(
        lambda: next((r["id"] for r in q.records() if r["id"] != blocker), None),
        timeout=10,
        what="the run's job to be queued",
    )
    assert q.record(job)["state"] == "queued"
    return blocker, runner, job, ran


# -- point 1: qex run owns its job -----------------------------------------------------------


@pytest.mark.parametrize("sig", SIGNALS, ids=NAMES)
def test_a_signal_to_run_while_its_job_waits_cancels_it_and_gives_125(small, sig):
    blocker, runner, job, ran = run_queued_behind(small, "a")
    runner.send_signal(sig)
    out, err = runner.communicate(timeout=15)
    assert runner.returncode == 125, (out, err)
    assert "Traceback" not in err
    assert "cancel" in err, err
    rec = small.record(job)
    assert rec["state"] == "cancelled", rec
    open_gate(small, "a")  # the capacity comes free: the cancelled job must still never run
    small.wait_state(blocker, "completed")
    assert small.run("wait", blocker, job).returncode == 125
    assert small.record(job)["state"] == "cancelled"
    assert not os.path.exists(ran)


def test_sigterm_to_run_in_a_paused_queue_cancels_its_job_at_once(q):
    q.write_config(TWO)
    assert q.run("pause", "queue").returncode == 0
    runner = q.popen("run", "--", "touch", os.path.join(q.root, "ran"))
    wait_until_waiting(q, runner)
    job = q.wait_for(lambda: next((r["id"] for r in q.records()), None), timeout=10, what="the run's job")
    runner.send_signal(signal.SIGTERM)
    out, err = runner.communicate(timeout=15)  # (it used to wait for the pause to end, for ever)
    assert runner.returncode == 125, (out, err)
    assert q.record(job)["state"] == "cancelled"
    assert q.run("resume", "queue").returncode == 0
    assert q.run("list").returncode == 0  # a pass, with the queue open again
    assert q.record(job)["state"] == "cancelled"
    assert not os.path.exists(os.path.join(q.root, "ran"))


def test_sighup_to_run_while_its_job_runs_kills_it_and_gives_125(q):
    """(SIGINT and SIGTERM did already: test_lifecycle's test_run_interrupted_by_sigint_...)"""
    q.write_config(TWO)
    runner = q.popen("run", "--", "sh", "-c", "echo started; sleep 300 & wait")
    assert read_line(runner, timeout=10) == "started\n"
    wait_until_waiting(q, runner)
    job = next(r for r in q.records() if r["state"] == "running")
    runner.send_signal(signal.SIGHUP)
    out, err = runner.communicate(timeout=15)
    assert runner.returncode == 125, (out, err)
    assert "Traceback" not in err
    rec = q.wait_state(job["id"], FINAL, timeout=5)
    assert rec["state"] == "killed", rec
    q.wait_for(lambda: not group_members(job["pid"]), timeout=5, what="the job's group to be gone")


def test_run_started_ignoring_sighup_as_nohup_does_lets_its_job_run_on(q):
    """A guard (today's behaviour, kept): `nohup qex run` survives the hang-up."""
    q.write_config(TWO)
    runner = q.popen(
        "run", "--", *gated(q, "a", "echo done"), preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN)
    )
    wait_until_waiting(q, runner)
    job = q.wait_for(
        lambda: next((r for r in q.records() if r["state"] == "running"), None), timeout=10, what="the run's job to run"
    )
    runner.send_signal(signal.SIGHUP)
    open_gate(q, "a")
    out, err = runner.communicate(timeout=15)
    assert runner.returncode == 0, (out, err)
    assert out == "done\n"
    assert q.record(job["id"])["state"] == "completed"


def test_sighup_stops_only_the_wait_of_submit_wait_submit_follow_and_status_follow(q):
    q.write_config(TWO)
    job = q.submit("--", *gated(q, "a", "echo finished"))
    q.wait_state(job, "running")
    waiters = [
        q.popen("submit", "--wait", "--", *gated(q, "a")),
        q.popen("submit", "--follow", "--", *gated(q, "a")),
        q.popen("status", "--follow", job),
    ]
    for waiter in waiters:
        wait_until_waiting(q, waiter)
        waiter.send_signal(signal.SIGHUP)
        out, err = waiter.communicate(timeout=10)
        assert waiter.returncode == 122, (waiter.args, out, err)
        assert "the job continues" in err, err
    assert q.record(job)["state"] == "running"
    assert sum(r["state"] in ("starting", "running") for r in q.records()) == 2  # (one waits for a core)
    open_gate(q, "a")
    for rec in q.records():
        assert q.wait_state(rec["id"], FINAL)["state"] == "completed"


def test_status_wait_interrupted_says_the_job_continues(q):
    q.write_config(TWO)
    job = q.submit("--", *gated(q, "a"))
    q.wait_state(job, "running")
    waiter = q.popen("status", "--wait", job)
    wait_until_waiting(q, waiter)
    waiter.send_signal(signal.SIGINT)
    out, err = waiter.communicate(timeout=10)
    assert waiter.returncode == 122, (out, err)
    assert "the job continues" in err, err
    assert q.record(job)["state"] == "running"
    open_gate(q, "a")
    q.wait_state(job, "completed")


def test_help_exit_codes_says_what_a_signal_does_to_run_and_to_the_waits(q):
    text = q.run("help", "exit-codes").stdout
    assert "SIGHUP" in text
    assert "qex run owns its job" in text
    assert "cancelled" in text and "killed" in text


# -- point 10: kill stops a job in any active state ----------------------------------------------


def test_kill_of_a_running_and_a_queued_job_cancels_the_queued_one_in_the_same_pass(small):
    running = small.submit("--", *gated(small, "a"))
    small.wait_state(running, "running")
    ran = os.path.join(small.root, "queued-ran")
    queued = small.submit("--", "touch", ran)
    assert small.record(queued)["state"] == "queued"
    kill = small.run("kill", running, queued)
    assert kill.returncode == 0, (kill.stdout, kill.stderr)
    assert f"{queued}  cancelled" in kill.stdout
    assert f"{running}  killed" in kill.stdout
    assert small.record(running)["state"] == "killed"
    assert small.record(queued)["state"] == "cancelled"
    assert small.run("list").returncode == 0  # a pass with the capacity free: nothing starts
    assert small.record(queued)["state"] == "cancelled"
    assert not os.path.exists(ran)
    assert small.run("wait", queued).returncode == 125


def test_kill_of_a_queued_job_alone_cancels_it_and_cancel_still_refuses_a_running_one(small):
    first = small.submit("--", *gated(small, "a"))
    second = small.submit("--", "touch", os.path.join(small.root, "second-ran"))
    assert small.record(second)["state"] == "queued"
    kill = small.run("kill", second)
    assert kill.returncode == 0, (kill.stdout, kill.stderr)
    assert small.record(second)["state"] == "cancelled"
    cancel = small.run("cancel", small.wait_state(first, "running")["id"])
    assert cancel.returncode == 1 and "qex kill" in cancel.stderr, cancel
    open_gate(small, "a")
    small.wait_state(first, "completed")
    assert not os.path.exists(os.path.join(small.root, "second-ran"))


# -- point 9: kill and --timeout stop every descendant ---------------------------------------------

ESCAPE = "setsid sh -c 'echo $$ > {pid}; exec sleep 300' >/dev/null 2>&1 </dev/null"


def escaped_pid(q, path: str) -> int:
    def read():
        try:
            with open(path) as fh:
                text = fh.read().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    return q.wait_for(read, timeout=10, what="the setsid grandchild to write its pid")


def cgroup_env(mode: str) -> dict:
    return {"QEX_CGROUP": "off"} if mode == "no-cgroup" else {}


@pytest.mark.parametrize("mode", ["cgroup", "no-cgroup"])
@pytest.mark.parametrize("shape", ["child", "orphan"])
def test_kill_stops_a_setsid_grandchild_that_left_the_process_group(q, mode, shape):
    """``child``: the grandchild's parent (the job's shell) still runs; ``orphan``: its parent
    is gone, so the supervisor (a child subreaper) adopted it."""
    q.write_config(TWO)
    pid_file = os.path.join(q.root, "escaped.pid")
    escape = ESCAPE.format(pid=pid_file)
    script = f"{escape} & wait" if shape == "child" else f"( {escape} & ); exec sleep 300"
    job = q.submit("--", "sh", "-c", script, env=cgroup_env(mode))
    rec = q.wait_state(job, "running")
    escaped = escaped_pid(q, pid_file)
    assert alive(escaped)
    try:
        kill = q.run("kill", job)
        assert kill.returncode == 0, (kill.stdout, kill.stderr)
        assert q.wait_state(job, FINAL)["state"] == "killed"
        q.wait_for(lambda: not alive(escaped), timeout=10, what="the setsid grandchild to be stopped")
        q.wait_for(lambda: not group_members(rec["pid"]), timeout=5, what="the job's group to be gone")
    finally:
        if alive(escaped):
            os.kill(escaped, signal.SIGKILL)


@pytest.mark.parametrize("mode", ["cgroup", "no-cgroup"])
def test_timeout_stops_a_setsid_grandchild_too(q, mode):
    q.write_config(TWO)
    pid_file = os.path.join(q.root, "escaped.pid")
    script = f"( {ESCAPE.format(pid=pid_file)} & ); exec sleep 300"
    job = q.submit("--timeout", "2", "--", "sh", "-c", script, env=cgroup_env(mode))
    escaped = escaped_pid(q, pid_file)
    try:
        assert q.wait_state(job, FINAL)["state"] == "timeout"
        q.wait_for(lambda: not alive(escaped), timeout=10, what="the setsid grandchild to be stopped")
    finally:
        if alive(escaped):
            os.kill(escaped, signal.SIGKILL)


def test_what_a_job_that_ended_by_itself_left_behind_keeps_running(q):
    """Today's rule for a job that ends by itself (a guard, not a change): qex does not
    stop what it left, even though its supervisor adopted it while it ran; nor does a
    kill of a later job of the same supervisor."""
    q.write_config(SMALL)
    pid_file = os.path.join(q.root, "left.pid")
    first = q.submit("--", "sh", "-c", f"( {ESCAPE.format(pid=pid_file)} & ); exit 0", env=cgroup_env("no-cgroup"))
    second = q.submit("--", *gated(q, "never"), env=cgroup_env("no-cgroup"))
    left = escaped_pid(q, pid_file)
    try:
        assert q.wait_state(first, FINAL)["state"] == "completed"
        q.wait_state(second, "running")
        assert q.run("kill", second).returncode == 0
        assert q.wait_state(second, FINAL)["state"] == "killed"
        assert alive(left)
    finally:
        if alive(left):
            os.kill(left, signal.SIGKILL)
