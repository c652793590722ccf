"""A held state lock never hangs a command silently (issue 30): after 2 s qex says
who holds it, and it gives up after --lock-timeout (121, nothing done); a
supervisor waits as long as it takes, and records its job's end."""

import os
import pwd
import subprocess
import sys

import pytest
from e2e_helpers import gated, open_gate, read_line

CONFIG = '[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "100MB"\n'

# Takes the lock, says so, holds it until its stdin has a line (or ends): never a sleep.
HOLDER = (
    "import fcntl, os, sys\n"
    "fd = os.open(sys.argv[1], os.O_RDWR)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "print('held', flush=True)\n"
    "sys.stdin.readline()\n"
)


@pytest.fixture
def qq(q):
    q.write_config(CONFIG)
    q.run("info", check=0)  # the state directory and its lock file
    return q


@pytest.fixture
def holder(qq):
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, os.path.join(qq.state, "lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert read_line(proc.stdout, 20) == "held\n"
    yield proc
    let_go(proc)


def let_go(proc) -> None:
    if proc.poll() is None:
        proc.stdin.close()
        proc.wait(timeout=20)


def job_dirs(q) -> list[str]:
    jobs = os.path.join(q.state, "jobs")
    return os.listdir(jobs) if os.path.isdir(jobs) else []


def who(pid: int) -> str:
    return f"held by pid {pid} (user {pwd.getpwuid(os.getuid()).pw_name}, command "


@pytest.mark.parametrize(
    "line", [["submit", "--lock-timeout", "3", "--", "true"], ["--lock-timeout", "3", "submit", "--", "true"]]
)
def test_a_held_lock_is_named_then_the_command_gives_up_with_121_and_no_job(qq, holder, line):
    proc = qq.run(*line, timeout=30)
    assert proc.returncode == 121, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ""
    waiting, refusal = proc.stderr.splitlines()
    assert waiting.startswith(f"qex: waiting for the queue lock {qq.state}/lock, {who(holder.pid)}")
    assert "giving up after 3 s" in waiting
    assert refusal.startswith(f"qex: the queue lock {qq.state}/lock is still {who(holder.pid)}")
    assert "after 3 s of waiting" in refusal and "--lock-timeout SECONDS" in refusal
    assert job_dirs(qq) == [] and qq.records() == []


def test_a_lock_let_go_after_the_notice_lets_the_command_finish(qq, holder):
    proc = qq.popen("submit", "--", "true")
    line = read_line(proc.stderr, 20)
    assert line and line.startswith(f"qex: waiting for the queue lock {qq.state}/lock, {who(holder.pid)}"), line
    assert "giving up after 60 s" in line  # the default
    assert proc.poll() is None
    let_go(holder)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, (out, err)
    qq.wait_state(out.strip(), "completed")


def test_a_short_timeout_gives_up_without_the_notice(qq, holder):
    proc = qq.run("submit", "--lock-timeout", "0.5", "--", "true", timeout=30)
    assert proc.returncode == 121, proc.stderr
    assert proc.stderr.startswith(f"qex: the queue lock {qq.state}/lock is still {who(holder.pid)}"), proc.stderr
    assert "waiting for" not in proc.stderr and job_dirs(qq) == []


@pytest.mark.parametrize("value", ["0", "-5", "abc", "1x"])
def test_a_bad_lock_timeout_is_a_clear_refusal(q, value):
    proc = q.run("submit", "--lock-timeout", value, "--", "true")
    assert proc.returncode == 121, proc.stderr
    assert proc.stderr.startswith(f"qex: --lock-timeout: '{value}' is not a time to wait for a lock"), proc.stderr
    proc = q.run("submit", "--", "true", env={"QEX_LOCK_TIMEOUT": value})
    assert proc.returncode == 121, proc.stderr
    assert proc.stderr.startswith(f"qex: QEX_LOCK_TIMEOUT: '{value}' is not a time"), proc.stderr
    assert q.records() == []


def test_the_environment_sets_the_timeout_and_the_option_wins(qq, holder):
    proc = qq.run("submit", "--", "true", env={"QEX_LOCK_TIMEOUT": "0.5"}, timeout=30)
    assert proc.returncode == 121 and "after 0.5 s of waiting" in proc.stderr, proc.stderr
    proc = qq.run("submit", "--lock-timeout", "0.2", "--", "true", env={"QEX_LOCK_TIMEOUT": "50"}, timeout=30)
    assert proc.returncode == 121 and "after 0.2 s of waiting" in proc.stderr, proc.stderr


def test_a_supervisor_waits_for_the_lock_and_records_its_job(qq):
    env = {"QEX_LOCK_TIMEOUT": "1"}  # a command would give up after 1 s; a supervisor never does
    job = qq.submit("--", *gated(qq, "a"), env=env)
    qq.wait_state(job, "running")
    hold = subprocess.Popen(
        [sys.executable, "-c", HOLDER, os.path.join(qq.state, "lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert read_line(hold.stdout, 20) == "held\n"
        open_gate(qq, "a")
        log = os.path.join(qq.state, "jobs", job, "supervisor.log")

        def noticed():
            try:
                with open(log) as fh:
                    return "waiting for the queue lock" in fh.read()
            except FileNotFoundError:
                return False

        qq.wait_for(noticed, 20, "the supervisor's notice in its log")
        with open(log) as fh:
            assert who(hold.pid) in fh.read()
        assert qq.record(job)["state"] == "running"
    finally:
        let_go(hold)
    rec = qq.wait_state(job, ("completed", "failed"))
    assert rec["state"] == "completed" and not rec.get("error"), rec
