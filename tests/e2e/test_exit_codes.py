"""The exit-code table of CONTRACT.md, row by row, from real jobs and real signals."""

import json
import os
import signal
import uuid

import pytest
from e2e_helpers import gated, open_gate, wait_until_waiting

CONFIG = '[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "100MB"\n'


@pytest.fixture
def qq(q):
    q.write_config(CONFIG)
    return q


def job_dirs(q) -> list[str]:
    jobs = os.path.join(q.state, "jobs")
    return [n for n in os.listdir(jobs)] if os.path.isdir(jobs) else []


# -- 0..96: the job's own code ---------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 3, 96])
def test_job_code_0_to_96_is_returned_unchanged(qq, code):
    proc = qq.run("submit", "--wait", "--", "sh", "-c", f"exit {code}")
    assert proc.returncode == code, proc.stderr
    rec = json.loads(proc.stdout)
    assert rec["exit_code"] == code
    assert rec["state"] == ("completed" if code == 0 else "failed")
    assert qq.run("wait", rec["id"]).returncode == code
    assert qq.run("status", "--quiet", rec["id"]).returncode == code


# -- 97: 97..255 --------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [97, 124, 200, 255])
def test_job_code_97_to_255_gives_97_and_the_record_holds_the_real_code(qq, code):
    proc = qq.run("submit", "--wait", "--", "sh", "-c", f"exit {code}")
    assert proc.returncode == 97, proc.stderr
    rec = json.loads(proc.stdout)
    assert rec["state"] == "failed"
    assert rec["exit_code"] == code
    assert qq.record(rec["id"])["exit_code"] == code
    assert qq.run("wait", rec["id"]).returncode == 97


# -- 98: a signal qex did not send ----------------------------------------------------------


def test_job_killed_by_its_own_sigsegv_gives_98_and_the_record_names_the_signal(qq):
    proc = qq.run("submit", "--wait", "--", "sh", "-c", "kill -SEGV $$")
    assert proc.returncode == 98, proc.stderr
    rec = json.loads(proc.stdout)
    assert rec["state"] == "failed"
    assert rec["signal"] == "SIGSEGV"
    assert qq.run("wait", rec["id"]).returncode == 98


# -- 100: not stopped -------------------------------------------------------------------------


def test_status_quiet_of_a_running_job_gives_100_then_the_job_code(qq):
    job = qq.submit("--", *gated(qq, "a", "exit 5"))
    qq.wait_state(job, "running")
    proc = qq.run("status", "--quiet", job)
    assert proc.returncode == 100, proc.stderr
    assert proc.stdout == ""
    open_gate(qq, "a")
    qq.wait_state(job, "failed")
    assert qq.run("status", "--quiet", job).returncode == 5


def test_status_quiet_of_a_queued_job_gives_100(q):
    q.write_config('[budget]\ncpu = 1\nmem = "4GB"\n[defaults]\nmem = "100MB"\n')
    first = q.submit("--", *gated(q, "a"))
    second = q.submit("--", "true")
    assert q.record(second)["state"] == "queued"
    assert q.run("status", "--quiet", second).returncode == 100
    open_gate(q, "a")
    q.wait_state(second, "completed")
    assert q.run("status", "--quiet", first).returncode == 0


# -- 121: nothing ran -------------------------------------------------------------------------

BAD_SUBMISSIONS = {
    "zero-cpu": (["--cpu", "0", "--", "true"], "--cpu"),
    "negative-cpu": (["--cpu", "-1", "--", "true"], "--cpu"),
    "mem-word": (["--mem", "lots", "--", "true"], "--mem"),
    "mem-negative": (["--mem=-5GB", "--", "true"], "--mem"),
    "gpu-zero-with-vram": (["--gpu", "0", "--vram", "1GB", "--", "true"], "--vram"),
    "bad-timeout": (["--timeout", "soon", "--", "true"], "--timeout"),
    "unknown-jobfile-key": (["--job", "x.toml"], "bogus"),
    "missing-program": (["--", "/no/such/program-e2e"], "/no/such/program-e2e"),
    "program-not-on-path": (["--", "no-such-program-e2e"], "no-such-program-e2e"),
    "bad-name": (["--name", "a b;rm", "--", "true"], "name"),
}


@pytest.mark.parametrize("case", sorted(BAD_SUBMISSIONS))
def test_refused_submission_gives_121_names_the_problem_and_leaves_no_job(qq, case):
    args, named = BAD_SUBMISSIONS[case]
    with open(os.path.join(qq.root, "x.toml"), "w") as fh:
        fh.write('command = ["true"]\nbogus = 1\n')
    proc = qq.run("submit", *args)
    assert proc.returncode == 121, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    assert named in proc.stderr
    assert "Traceback" not in proc.stderr
    assert job_dirs(qq) == []
    listing = qq.run("list", "--json")
    assert listing.returncode == 0, listing.stderr
    assert json.loads(listing.stdout) == []


def test_negative_size_as_a_separate_word_gives_121(qq):
    proc = qq.run("submit", "--mem", "-5GB", "--", "true")
    assert proc.returncode == 121, proc.stderr
    assert "--mem" in proc.stderr and job_dirs(qq) == []


def test_refused_submit_wait_and_run_also_give_121(qq):
    assert qq.run("submit", "--wait", "--cpu", "0", "--", "true").returncode == 121
    assert qq.run("run", "--mem", "lots", "--", "true").returncode == 121
    assert qq.run("run", "--", "/no/such/program-e2e").returncode == 121
    assert job_dirs(qq) == []


# -- 122: the wait was interrupted; the job continues ----------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_wait_gives_122_and_the_job_continues(qq, sig):
    job = qq.submit("--", *gated(qq, "a", "echo finished"))
    qq.wait_state(job, "running")
    waiter = qq.popen("wait", job)
    wait_until_waiting(qq, waiter)
    waiter.send_signal(sig)
    out, err = waiter.communicate(timeout=10)
    assert waiter.returncode == 122, (out, err)
    assert "Traceback" not in err
    assert qq.record(job)["state"] == "running"
    open_gate(qq, "a")
    rec = qq.wait_state(job, "completed")
    assert rec["exit_code"] == 0
    with open(os.path.join(qq.state, "jobs", job, "stdout.log")) as fh:
        assert fh.read() == "finished\n"


def test_interrupted_submit_wait_gives_122_and_the_job_continues(qq):
    waiter = qq.popen("submit", "--wait", "--", *gated(qq, "a"))
    wait_until_waiting(qq, waiter)
    waiter.send_signal(signal.SIGINT)
    out, err = waiter.communicate(timeout=10)
    assert waiter.returncode == 122, (out, err)
    job = err.strip().splitlines()[0].split()[-1]
    assert qq.record(job)["state"] in ("starting", "running")
    open_gate(qq, "a")
    qq.wait_state(job, "completed")


# -- 124: the wait's own limit -----------------------------------------------------------------


def test_wait_timeout_gives_124_and_the_job_continues(qq):
    job = qq.submit("--", *gated(qq, "a"))
    proc = qq.run("wait", "--timeout", "0.5", job)
    assert proc.returncode == 124, proc.stderr
    assert qq.record(job)["state"] == "running"
    proc = qq.run("status", "--wait", "--timeout", "0.3", job)
    assert proc.returncode == 124, proc.stderr
    open_gate(qq, "a")
    assert qq.run("wait", "--timeout", "20", job).returncode == 0


def test_submit_wait_timeout_gives_124_and_the_job_continues(qq):
    proc = qq.run("submit", "--wait", "--wait-timeout", "0.5", "--", *gated(qq, "a"))
    assert proc.returncode == 124, proc.stderr
    job = proc.stderr.strip().splitlines()[0].split()[-1]
    assert qq.record(job)["state"] == "running"
    open_gate(qq, "a")
    qq.wait_state(job, "completed")


# -- 125: something stopped the job -----------------------------------------------------------


def test_a_killed_job_gives_125_to_wait_and_status_quiet_and_is_recorded_killed(qq):
    job = qq.submit("--", *gated(qq, "never"))
    qq.wait_state(job, "running")
    waiter = qq.popen("wait", job)
    wait_until_waiting(qq, waiter)
    kill = qq.run("kill", job)
    assert kill.returncode == 0, kill.stderr
    out, err = waiter.communicate(timeout=15)
    assert waiter.returncode == 125, (out, err)
    assert qq.record(job)["state"] == "killed"
    assert qq.run("wait", job).returncode == 125
    assert qq.run("status", "--quiet", job).returncode == 125


def test_job_timeout_gives_125_and_the_record_says_timeout(qq):
    proc = qq.run("submit", "--wait", "--timeout", "0.5", "--", "sleep", "30")
    assert proc.returncode == 125, proc.stderr
    rec = json.loads(proc.stdout)
    assert rec["state"] == "timeout"
    assert rec["error"] and "timeout" in rec["error"]


def test_a_cancelled_queued_job_gives_125_to_wait_and_is_recorded_cancelled(q):
    q.write_config('[budget]\ncpu = 1\nmem = "4GB"\n[defaults]\nmem = "100MB"\n')
    first = q.submit("--", *gated(q, "a"))
    second = q.submit("--", "true")
    assert q.run("cancel", second).returncode == 0
    assert q.record(second)["state"] == "cancelled"
    assert q.run("wait", second).returncode == 125
    open_gate(q, "a")
    q.wait_state(first, "completed")


# -- 127 and 2 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["wait", "status", "kill", "cancel", "logs", "clean"])
def test_an_unknown_name_or_id_gives_127_naming_it_without_a_traceback(qq, command):
    qq.submit("--", "true")  # a queue that exists, with a job that is not this one
    for word in ("nonsense", str(uuid.uuid4())):
        proc = qq.run(command, word)
        assert proc.returncode == 127, (word, proc.stdout, proc.stderr)
        assert word in proc.stderr
        assert "Traceback" not in proc.stderr


def test_status_quiet_and_wait_of_an_unknown_id_give_127_in_an_empty_state_dir(qq):
    assert qq.run("status", "--quiet", "abcd1234").returncode == 127
    assert qq.run("wait", "--timeout", "1", "abcd1234").returncode == 127


@pytest.mark.parametrize(
    "args,code",
    [
        (["submit", "--no-such-option", "--", "true"], 121),
        (["list", "--bogus"], 2),
        (["wait"], 121),
        (["status"], 2),
        (["frobnicate"], 2),
    ],
    ids=["submit-option", "list-option", "wait-no-id", "status-no-id", "no-command"],
)
def test_bad_command_line_gives_121_where_the_code_is_a_jobs_else_2(qq, args, code):
    proc = qq.run(*args)
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert proc.stderr.strip()
    assert "Traceback" not in proc.stderr
    assert job_dirs(qq) == []


# -- what submit prints --------------------------------------------------------------------------


def test_submit_prints_exactly_the_id_on_stdout(qq):
    proc = qq.run("submit", "--", "sh", "-c", "echo out; echo err >&2")
    assert proc.returncode == 0
    job = proc.stdout[:-1]
    assert proc.stdout == job + "\n"
    assert str(uuid.UUID(job)) == job
    assert job_dirs(qq) == [job]
    assert qq.wait_state(job, "completed")["id"] == job


def test_submit_json_gives_id_and_deduplicated_false(qq):
    proc = qq.run("submit", "--json", "--", "true")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc == {"id": doc["id"], "deduplicated": False}
    assert job_dirs(qq) == [doc["id"]]


def test_submit_wait_puts_the_id_on_stderr_and_the_record_on_stdout(qq):
    proc = qq.run("submit", "--wait", "--", "sh", "-c", "echo job-output; exit 4")
    assert proc.returncode == 4
    rec = json.loads(proc.stdout)  # stdout is exactly one JSON document: the record
    assert rec["state"] == "failed" and rec["exit_code"] == 4
    assert rec["id"] in proc.stderr
    assert "job-output" not in proc.stdout.splitlines()  # the job's output is not mixed in
    assert qq.record(rec["id"])["state"] == "failed"


def test_id_file_is_written_before_the_wait_begins(qq):
    id_file = os.path.join(qq.root, "job.id")
    waiter = qq.popen("submit", "--wait", "--id-file", id_file, "--", *gated(qq, "a"))

    def written():
        if os.path.exists(id_file):
            with open(id_file) as fh:
                text = fh.read().strip()
            return text if len(text) == 36 else None
        return None

    job = qq.wait_for(written, timeout=10, what="the id file")
    assert str(uuid.UUID(job)) == job
    assert waiter.poll() is None  # the wait is still going on: the job waits on its gate
    assert qq.record(job)["state"] in ("starting", "running")
    open_gate(qq, "a")
    out, err = waiter.communicate(timeout=20)
    assert waiter.returncode == 0, err
    assert json.loads(out)["id"] == job
    with open(id_file) as fh:
        assert fh.read().strip() == job


def test_id_file_without_wait_holds_the_printed_id(qq):
    id_file = os.path.join(qq.root, "plain.id")
    proc = qq.run("submit", "--id-file", id_file, "--", "true")
    assert proc.returncode == 0
    with open(id_file) as fh:
        assert fh.read().strip() == proc.stdout.strip()


def test_submit_with_a_warning_still_prints_only_the_id_on_stdout(qq):
    qq.write_config(CONFIG.replace("cpu = 2", 'cpu = "0.5"'))  # (more cores than the machine are refused)
    proc = qq.run("submit", "--cpu", "1", "--", "true")  # above the budget: a warning, then it runs alone
    assert proc.returncode == 0
    job = proc.stdout.strip()
    assert proc.stdout == job + "\n" and str(uuid.UUID(job)) == job
    assert "warning" in proc.stderr
    assert qq.wait_state(job, "completed")["forced"] is True


def test_bad_option_message_has_a_single_prefix(qq):
    proc = qq.run("list", "--bogus")
    assert proc.returncode == 2
    assert not proc.stderr.startswith("qex: qex:"), proc.stderr
