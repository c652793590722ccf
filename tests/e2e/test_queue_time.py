"""--max-queue-time end to end: deadlines fire with no command typed, dependents
are skipped, the remedy fits the cause, and a queue pause stops the clock.

Every command here runs with QEX_WAKER_INTERVAL=30: a deadline met within a
second can then only come from the waker sleeping *to* it, not from polling.
"""

import os
import time

import pytest
from e2e_helpers import gated, open_gate

CONFIG = '[budget]\ncpu = 8\nmem = "8GB"\n[defaults]\nmem = "10MB"\n'
SLOW_WAKER = {"QEX_WAKER_INTERVAL": "30"}


@pytest.fixture
def qq(q):
    q.write_config(CONFIG)
    q.env.update(SLOW_WAKER)
    return q


def deadline(rec: dict) -> float:
    return rec["submitted_at"] + rec["max_queue_time"] + rec.get("queue_pause_secs", 0.0)


def test_a_2s_limit_behind_a_blocker_expires_on_time_with_no_command_and_its_dependent_is_skipped(qq):
    blocker = qq.submit("--lock", "L", "--", *gated(qq, "a"))
    qq.wait_state(blocker, "running")
    job = qq.submit("--lock", "L", "--max-queue-time", "2s", "--", "echo", "never")
    dependent = qq.submit("--needs", job, "--", "echo", "never")
    # From here on no qex command is typed: only files are read.
    rec = qq.wait_state(job, ("expired", "running", "completed"), timeout=10)
    assert rec["state"] == "expired"
    late = rec["ended_at"] - deadline(rec)
    assert 0 <= late <= 1.0, f"expired {late:.3f}s after its deadline"
    dep = qq.wait_state(dependent, ("skipped", "completed", "running"), timeout=5)
    assert dep["state"] == "skipped" and dep["skipped_root"] == job
    assert dep["ended_at"] - rec["ended_at"] <= 1.0
    assert "covers the holder" in rec["error"] and "lock L" in rec["error"], rec["error"]
    for name in ("stdout.log", "stderr.log"):
        assert not os.path.exists(os.path.join(qq.state, "jobs", job, name)), "an expired job never ran: no log"
    assert qq.run("wait", job).returncode == 123
    assert qq.run("wait", dependent).returncode == 126
    assert qq.record(blocker)["state"] == "running", "the blocker is untouched"
    open_gate(qq, "a")


@pytest.mark.parametrize(
    "cause, words", [("capacity", "give it a smaller claim"), ("dependency", "covers the whole pipeline")]
)
def test_the_remedy_fits_the_cause(q, cause, words):
    q.write_config('[budget]\ncpu = 1\nmem = "8GB"\n[defaults]\nmem = "10MB"\n')
    blocker = q.submit("--cpu", "1", "--", *gated(q, "a"))
    q.wait_state(blocker, "running")
    extra = ["--cpu", "1"] if cause == "capacity" else ["--cpu", "0.001", "--needs", blocker]
    job = q.submit(*extra, "--max-queue-time", "0.5s", "--", "true")
    rec = q.wait_state(job, ("expired", "running", "completed"), timeout=10)
    assert rec["state"] == "expired" and words in rec["error"], rec["error"]
    open_gate(q, "a")


def test_a_job_takes_the_default_limit_at_submission_and_a_later_config_does_not_touch_it(qq):
    qq.write_config(CONFIG + 'max_queue_time = "1s"\n')
    blocker = qq.submit("--lock", "L", "--", *gated(qq, "a"))
    job = qq.submit("--lock", "L", "--", "true")
    assert qq.record(job)["max_queue_time"] == 1.0
    qq.write_config(CONFIG)  # no default any more: the queued job keeps its own
    assert qq.wait_state(job, ("expired", "running", "completed"), timeout=10)["state"] == "expired"
    assert qq.record(blocker)["state"] == "running"
    open_gate(qq, "a")


def test_a_queue_pause_stops_the_clock_and_the_job_still_expires_after_the_resume(qq):
    blocker = qq.submit("--lock", "L", "--", *gated(qq, "a"))
    qq.wait_state(blocker, "running")
    qq.run("pause", "queue", "--reason", "maintenance", check=0)
    job = qq.submit("--lock", "L", "--max-queue-time", "1.5s", "--", "true")
    first = deadline(qq.record(job))
    # Stay paused well past the job's own deadline: it must not expire meanwhile.
    qq.wait_for(lambda: time.time() > first + 1.0, timeout=10, what="1s past the first deadline")
    assert qq.record(job)["state"] == "queued"
    assert "maintenance" in qq.record(job)["blocked_reason"]
    qq.run("resume", "queue", check=0)
    rec = qq.record(job)
    assert rec["state"] == "queued", "the resume does not expire it: the paused time is not counted"
    assert rec["queue_pause_secs"] >= 2.0, rec["queue_pause_secs"]
    moved = deadline(rec)
    assert moved > time.time()
    rec = qq.wait_state(job, ("expired", "running", "completed"), timeout=10)
    assert rec["state"] == "expired"
    assert 0 <= rec["ended_at"] - moved <= 1.0
    assert qq.record(blocker)["state"] == "running"
    open_gate(qq, "a")


def test_a_lock_pause_does_not_stop_the_clock(qq):
    qq.run("pause", "lock", "L", "--reason", "bench", check=0)
    job = qq.submit("--lock", "L", "--max-queue-time", "1s", "--", "true")
    rec = qq.wait_state(job, ("expired", "running", "completed"), timeout=10)
    assert rec["state"] == "expired" and rec.get("queue_pause_secs", 0.0) == 0.0
    assert 0 <= rec["ended_at"] - deadline(rec) <= 1.0
    assert "a person holds" in rec["error"] and "ask the person to resume it" in rec["error"], rec["error"]


def test_a_retry_never_expires_by_the_queue_limit(qq):
    flag = os.path.join(qq.root, "first-done")
    script = f"if [ -e '{flag}' ]; then exit 0; fi; touch '{flag}'; sleep 1.2; exit 1"
    job = qq.submit("--retries", "1", "--max-queue-time", "1s", "--", "sh", "-c", script)
    rec = qq.wait_state(job, ("completed", "failed", "expired"), timeout=15)
    assert rec["state"] == "completed" and len(rec["attempts"]) == 2
