"""A job's life seen from outside: processes, broken records, kill, cancel, clean,
logs, list, environment, retries, claim hints, and `qex run`."""

import json
import os
import signal

import pytest
from e2e_helpers import FINAL, alive, gated, group_members, open_gate, read_line, wait_until_waiting

CONFIG = '[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "100MB"\n'
SMALL = '[budget]\ncpu = 1\nmem = "4GB"\n[defaults]\nmem = "100MB"\n'


@pytest.fixture
def qq(q):
    q.write_config(CONFIG)
    return q


def log(q, job, name="stdout.log") -> str:
    with open(os.path.join(q.state, "jobs", job, name)) as fh:
        return fh.read()


def env_of(text: str) -> dict:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


# -- no process outlives the work ---------------------------------------------------------------


def test_no_process_of_the_state_dir_is_left_after_a_single_job(qq):
    job = qq.submit("--", *gated(qq, "a"))
    qq.wait_state(job, "running")
    assert qq.processes(), "the supervisor of a running job is a process of this queue"
    open_gate(qq, "a")
    qq.wait_state(job, "completed")
    qq.wait_for(lambda: not qq.processes(), timeout=4, what="every qex process to exit")


def test_no_process_of_the_state_dir_is_left_after_a_burst_with_a_small_budget(q):
    q.write_config(SMALL)
    jobs = [q.submit("--", "sh", "-c", f"echo {i}") for i in range(5)]
    for i, job in enumerate(jobs):
        assert q.wait_state(job, FINAL, timeout=15)["state"] == "completed"
        assert log(q, job) == f"{i}\n"
    q.wait_for(lambda: not q.processes(), timeout=4, what="every qex process to exit")


# -- broken records -------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_broken_record_leaves_list_and_status_of_the_others_working(qq, damage):
    good, broken = [json.loads(qq.run("submit", "--wait", "--", "true", check=0).stdout)["id"] for _ in range(2)]
    running = qq.submit("--", *gated(qq, "a"))
    qq.wait_state(running, "running")
    path = os.path.join(qq.state, "jobs", broken, "status.json")
    with open(path, "rb") as fh:
        whole = fh.read()
    with open(path, "wb") as fh:
        fh.write(whole[: len(whole) // 2] if damage == "truncated" else b"\x00\xff\xfe{garbage")

    listing = qq.run("list")
    assert listing.returncode == 0, listing.stderr
    assert good[:8] in listing.stdout and running[:8] in listing.stdout
    assert broken[:8] in listing.stderr  # a clear line names the broken one
    assert "Traceback" not in listing.stderr
    as_json = qq.run("list", "--json")
    assert as_json.returncode == 0
    assert {r["id"] for r in json.loads(as_json.stdout)} == {good, running}
    assert "Traceback" not in as_json.stderr

    for job, code in ((good, 0), (running, 100)):
        status = qq.run("status", "--json", job)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)[0]["id"] == job
        assert qq.run("status", "--quiet", job).returncode == code
    bad = qq.run("status", broken)
    assert bad.returncode in (1, 121), bad
    assert broken in bad.stderr and "Traceback" not in bad.stderr

    open_gate(qq, "a")  # the queue still works around it
    assert qq.run("wait", "--timeout", "20", running).returncode == 0
    assert qq.run("submit", "--wait", "--", "true").returncode == 0


# -- kill, cancel, clean ------------------------------------------------------------------------------


def test_kill_leaves_no_process_of_the_job_group(qq):
    job = qq.submit("--", "sh", "-c", "sleep 300 & sleep 300 & wait")
    pgid = qq.wait_state(job, "running")["pid"]
    qq.wait_for(lambda: len(group_members(pgid)) >= 3, timeout=5, what="sh and its two sleeps")
    kill = qq.run("kill", job)
    assert kill.returncode == 0, kill.stderr
    qq.wait_for(lambda: not group_members(pgid), timeout=5, what="the job's process group to be gone")
    rec = qq.wait_state(job, FINAL, timeout=5)
    assert rec["state"] == "killed"


def test_kill_of_a_job_that_ignores_sigterm_ends_with_sigkill_and_no_process_left(qq):
    job = qq.submit("--", "sh", "-c", "trap '' TERM; sleep 300 & echo ready; wait")
    pgid = qq.wait_state(job, "running")["pid"]
    qq.wait_for(
        lambda: len(group_members(pgid)) >= 2 and log(qq, job) == "ready\n",
        timeout=5,
        what="the job to ignore TERM and start its child",
    )
    assert qq.run("kill", job).returncode == 0
    qq.wait_for(lambda: not group_members(pgid), timeout=8, what="KILL after the grace")
    rec = qq.wait_state(job, FINAL, timeout=5)
    assert rec["state"] == "killed", rec
    assert qq.run("wait", job).returncode == 125


def test_clean_refuses_a_running_job_and_removes_an_ended_one(qq):
    job = qq.submit("--", *gated(qq, "a"))
    qq.wait_state(job, "running")
    refused = qq.run("clean", job)
    assert refused.returncode == 1, refused
    assert os.path.isdir(os.path.join(qq.state, "jobs", job))
    assert qq.record(job)["state"] == "running"
    open_gate(qq, "a")
    qq.wait_state(job, "completed")
    done = qq.run("clean", job)
    assert done.returncode == 0, done.stderr
    assert not os.path.exists(os.path.join(qq.state, "jobs", job))
    assert qq.run("status", job).returncode == 127


# -- logs and list -----------------------------------------------------------------------------------


def test_logs_gives_each_stream_apart_and_tail_grep_stdout_stderr_select_what_is_shown(qq):
    proc = qq.run(
        "submit", "--wait", "--", "sh", "-c", "for i in 1 2 3 4 5; do echo out-$i; done; echo err-1 >&2; echo err-2 >&2"
    )
    job = json.loads(proc.stdout)["id"]
    everything = qq.run("logs", job)
    assert everything.returncode == 0
    assert everything.stdout == "".join(f"out-{i}\n" for i in range(1, 6))
    assert everything.stderr == "err-1\nerr-2\n"
    tail = qq.run("logs", job, "--tail", "2", "--stdout")
    assert (tail.returncode, tail.stdout, tail.stderr) == (0, "out-4\nout-5\n", "")
    grep = qq.run("logs", job, "--grep", "out-[24]")
    assert (grep.returncode, grep.stdout, grep.stderr) == (0, "out-2\nout-4\n", "")
    only_out = qq.run("logs", job, "--stdout")
    assert "out-1" in only_out.stdout and "err" not in only_out.stdout + only_out.stderr
    only_err = qq.run("logs", job, "--stderr")
    assert "err-1" in only_err.stdout + only_err.stderr
    assert "out" not in only_err.stdout + only_err.stderr


def test_a_queued_job_has_no_logs_yet_and_they_read_as_empty_then_fill_when_it_runs(q):
    q.write_config(SMALL)
    holder = q.submit("--cpu", "1", "--", *gated(q, "a"))
    q.wait_state(holder, "running")
    waiting = q.submit("--cpu", "1", "--", "sh", "-c", "echo out; echo err >&2")
    assert q.record(waiting)["state"] == "queued"
    job_dir = os.path.join(q.state, "jobs", waiting)
    assert not {"stdout.log", "stderr.log"} & set(os.listdir(job_dir)), "its supervisor makes them"
    empty = q.run("logs", waiting)
    assert (empty.returncode, empty.stdout, empty.stderr) == (0, "", "")
    open_gate(q, "a")
    q.wait_state(waiting, "completed")
    assert (log(q, waiting), log(q, waiting, "stderr.log")) == ("out\n", "err\n")


def test_list_filters_by_state_and_tag(qq):
    ended = qq.run("submit", "--wait", "--tag", "alpha", "--", "true", check=0)
    ended = json.loads(ended.stdout)["id"]
    running = qq.submit("--tag", "beta", "--", *gated(qq, "a"))
    qq.wait_state(running, "running")
    proc = qq.run("list", "--state", "running", "--json")
    assert proc.returncode == 0
    assert [r["id"] for r in json.loads(proc.stdout)] == [running]
    proc = qq.run("list", "--state", "completed", "--json")
    assert [r["id"] for r in json.loads(proc.stdout)] == [ended]
    proc = qq.run("list", "--tag", "alpha")
    assert proc.returncode == 0
    assert ended[:8] in proc.stdout and running[:8] not in proc.stdout
    proc = qq.run("list", "--tag", "beta", "--json")
    assert [r["id"] for r in json.loads(proc.stdout)] == [running]
    assert json.loads(qq.run("list", "--tag", "gamma", "--json").stdout) == []
    open_gate(qq, "a")
    qq.wait_state(running, "completed")


# -- environment ---------------------------------------------------------------------------------------


def test_status_show_env_shows_an_env_value_and_plain_status_does_not(qq):
    job = qq.submit("--env", "E2E_SECRET=v4lue-42", "--", "true")
    qq.wait_state(job, "completed")
    shown = qq.run("status", "--show-env", job)
    assert shown.returncode == 0
    assert "E2E_SECRET=v4lue-42" in shown.stdout
    plain = qq.run("status", job)
    assert "v4lue-42" not in plain.stdout


def test_env_capture_none_gives_an_empty_environment_plus_the_job_variables(qq):
    proc = qq.run("run", "--env-capture", "none", "--", "/usr/bin/env")
    assert proc.returncode == 0, proc.stderr
    seen = env_of(proc.stdout)
    assert set(seen) == {"QEX_JOB_ID", "QEX_ATTEMPT"}, seen
    assert seen["QEX_ATTEMPT"] == "1"
    assert len(seen["QEX_JOB_ID"]) == 36 and seen["QEX_JOB_ID"] in proc.stderr
    proc = qq.run("run", "--env-capture", "none", "--env", "ONLY=this", "--", "/usr/bin/env")
    assert set(env_of(proc.stdout)) == {"QEX_JOB_ID", "QEX_ATTEMPT", "ONLY"}


def test_env_capture_minimal_keeps_only_the_listed_variables(qq):
    proc = qq.run(
        "run",
        "--env-capture",
        "minimal",
        "--",
        "/usr/bin/env",
        env={"E2E_NOISE": "x", "HOME": "/home/e2e", "LANG": "C.UTF-8"},
    )
    assert proc.returncode == 0, proc.stderr
    seen = env_of(proc.stdout)
    assert "E2E_NOISE" not in seen and "QEX_STATE_DIR" not in seen
    assert seen["HOME"] == "/home/e2e"
    assert set(seen) <= {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TZ", "QEX_JOB_ID", "QEX_ATTEMPT"}


def test_retries_rerun_a_failed_attempt_with_qex_attempt_2(qq):
    counter = os.path.join(qq.root, "attempts")
    script = f'echo "$QEX_ATTEMPT" >> {counter}; [ "$(wc -l < {counter})" -ge 2 ]'
    proc = qq.run("submit", "--wait", "--retries", "2", "--", "sh", "-c", script)
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(proc.stdout)
    assert rec["state"] == "completed"
    assert [(a["state"], a["exit_code"]) for a in rec["attempts"]] == [("failed", 1), ("completed", 0)]
    with open(counter) as fh:
        assert fh.read() == "1\n2\n"


def test_claim_hints_only_when_both_cpu_and_mem_are_given_and_never_override(qq):
    both = env_of(qq.run("run", "--cpu", "2", "--mem", "1GB", "--", "/usr/bin/env", check=0).stdout)
    assert both["OMP_NUM_THREADS"] == "2" and both["GOMAXPROCS"] == "2"
    assert float(both["QEX_CPU"]) == 2
    assert int(both["QEX_MEM"]) == 1024**3
    cpu_only = env_of(qq.run("run", "--cpu", "2", "--", "/usr/bin/env", check=0).stdout)
    assert not {"OMP_NUM_THREADS", "QEX_CPU", "QEX_MEM", "GOMAXPROCS"} & set(cpu_only), cpu_only
    mem_only = env_of(qq.run("run", "--mem", "1GB", "--", "/usr/bin/env", check=0).stdout)
    assert not {"OMP_NUM_THREADS", "QEX_CPU", "QEX_MEM", "GOMAXPROCS"} & set(mem_only), mem_only
    kept = env_of(
        qq.run("run", "--cpu", "2", "--mem", "1GB", "--", "/usr/bin/env", check=0, env={"OMP_NUM_THREADS": "7"}).stdout
    )
    assert kept["OMP_NUM_THREADS"] == "7"
    assert kept["GOMAXPROCS"] == "2"
    by_env = env_of(
        qq.run("run", "--cpu", "2", "--mem", "1GB", "--env", "GOMAXPROCS=5", "--", "/usr/bin/env", check=0).stdout
    )
    assert by_env["GOMAXPROCS"] == "5" and by_env["OMP_NUM_THREADS"] == "2"


# -- qex run -----------------------------------------------------------------------------------------


def test_run_streams_output_while_the_job_runs_and_returns_its_code(qq):
    runner = qq.popen("run", "--", *gated(qq, "a", "echo second; echo oops >&2; exit 5", before="echo first; "))
    assert read_line(runner, timeout=10) == "first\n"  # seen before the job may go on
    assert any(r["state"] == "running" for r in qq.records())
    open_gate(qq, "a")
    out, err = runner.communicate(timeout=20)
    assert runner.returncode == 5, err
    assert out == "second\n"
    assert "oops" in err


def test_run_interrupted_by_sigint_stops_the_job_and_returns_125(qq):
    runner = qq.popen("run", "--", "sh", "-c", "echo started; sleep 300 & wait")
    assert read_line(runner, timeout=10) == "started\n"
    wait_until_waiting(qq, runner)
    job = next(r for r in qq.records() if r["state"] == "running")
    runner.send_signal(signal.SIGINT)
    out, err = runner.communicate(timeout=15)
    assert runner.returncode == 125, (out, err)
    assert "Traceback" not in err
    rec = qq.wait_state(job["id"], FINAL, timeout=5)
    assert rec["state"] == "killed", rec
    qq.wait_for(lambda: not group_members(job["pid"]), timeout=5, what="the job's group to be gone")
    assert not alive(job["pid"])


def test_a_broken_record_of_a_queued_job_neither_fails_the_running_job_nor_wedges_the_queue(q):
    q.write_config(SMALL)
    first = q.submit("--", *gated(q, "a"))
    broken = q.submit("--", "true")
    behind = q.submit("--", "true")
    q.wait_state(first, "running")
    with open(os.path.join(q.state, "jobs", broken, "status.json"), "wb") as fh:
        fh.write(b"garb")
    open_gate(q, "a")
    done = q.wait_state(first, FINAL, timeout=10)
    assert (done["state"], done["error"]) == ("completed", None), done
    assert q.wait_state(behind, FINAL, timeout=10)["state"] == "completed"
    removed = q.run("clean", broken)  # the remedy the error message names
    assert removed.returncode == 0, removed.stderr
    assert not os.path.exists(os.path.join(q.state, "jobs", broken))


def test_list_shows_the_reason_of_a_waiting_job_legibly(q):
    q.write_config(SMALL)
    q.submit("--", *gated(q, "a"))
    second = q.submit("--", "true")
    reason = q.record(second)["blocked_reason"]
    assert reason and ("(" in reason or "'" in reason), reason  # a reason with punctuation
    listing = q.run("list")
    open_gate(q, "a")
    q.wait_state(second, "completed")
    assert reason[:60] in listing.stdout, (reason, listing.stdout)
