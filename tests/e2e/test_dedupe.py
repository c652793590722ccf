"""--dedupe-key and --dedupe-window, end to end: real qex processes, real jobs."""

import fcntl
import json
import os
import select
import signal
import time

import pytest
from e2e_helpers import gated, open_gate

CONFIG = '[budget]\ncpu = 8\nmem = "8GB"\n[defaults]\nmem = "10MB"\n'


@pytest.fixture
def qq(q):
    q.write_config(CONFIG)
    return q


def lock_waiters(path: str) -> int:
    """Processes blocked on an flock of ``path`` (the '->' lines of /proc/locks)."""
    inode = os.stat(path).st_ino
    with open("/proc/locks") as fh:
        return sum(1 for line in fh if "->" in line and "FLOCK" in line and line.split()[-3].endswith(f":{inode}"))


def stderr_line(proc, timeout: float = 10.0) -> str:
    """One line of a Popen's stderr, within ``timeout``."""
    fd, buf, end = proc.stderr.fileno(), b"", time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            break
        ch = os.read(fd, 1)
        if not ch or ch == b"\n":
            return buf.decode()
        buf += ch
    raise AssertionError(f"no line on stderr within {timeout}s (so far {buf!r})")


def test_eight_processes_with_one_key_at_the_same_instant_give_one_job_and_all_print_its_id(qq):
    qq.run("info", check=0)  # makes the state directory and its lock
    lock = os.path.join(qq.state, "lock")
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # hold the queue: all eight line up behind it
    try:
        procs = [qq.popen("submit", "--dedupe-key", "build:/src", "--", *gated(qq, "a")) for _ in range(8)]
        qq.wait_for(lambda: lock_waiters(lock) == 8, timeout=30, what="8 submissions blocked on the queue lock")
    finally:
        os.close(fd)  # the same instant for all eight
    results = [p.communicate(timeout=30) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, results
    ids = {out.strip() for out, _ in results}
    assert len(ids) == 1, results
    (job,) = ids
    assert [r["id"] for r in qq.records()] == [job], "exactly one job was made"
    said = [err for _, err in results if "deduplicated" in err]
    assert len(said) == 7
    assert all(f"job {job} (" in err and "build:/src" in err and "no new job" in err for err in said)
    assert not [n for n in os.listdir(os.path.join(qq.state, "jobs")) if n != job], "no prepared job dir is left"
    open_gate(qq, "a")
    assert qq.wait_state(job, ("completed", "failed"))["state"] == "completed"


def test_the_holder_is_named_with_its_state_and_command_and_json_says_deduplicated(qq):
    job = qq.submit("--dedupe-key", "k", "--", *gated(qq, "a"))
    qq.wait_state(job, "running")
    proc = qq.run("submit", "--json", "--dedupe-key", "k", "--", "true", check=0)
    assert json.loads(proc.stdout) == {"id": job, "deduplicated": True}
    assert f"job {job} (running) holds the key 'k'" in proc.stderr and "while" in proc.stderr
    fresh = json.loads(qq.run("submit", "--json", "--dedupe-key", "other", "--", "true", check=0).stdout)
    assert fresh["deduplicated"] is False and fresh["id"] != job
    open_gate(qq, "a")


def test_a_key_is_free_after_its_job_ends_and_a_window_returns_a_success_never_a_failure(qq):
    ok = qq.submit("--dedupe-key", "good", "--", "true")
    assert qq.wait_state(ok, ("completed", "failed"))["state"] == "completed"
    again = qq.submit("--dedupe-key", "good", "--", "true")
    assert again != ok, "the key is free the moment its job ends"
    qq.wait_state(again, "completed")
    within = qq.run("submit", "--dedupe-key", "good", "--dedupe-window", "1h", "--", "true", check=0)
    assert within.stdout.strip() == again, "the window gives the latest success"
    assert "completed" in within.stderr and "--dedupe-window" in within.stderr

    bad = qq.submit("--dedupe-key", "bad", "--", "sh", "-c", "exit 3")
    assert qq.wait_state(bad, ("completed", "failed"))["state"] == "failed"
    retry = qq.run("submit", "--dedupe-key", "bad", "--dedupe-window", "1h", "--", "true", check=0)
    assert retry.stdout.strip() != bad and "deduplicated" not in retry.stderr, "a failed job never holds its key"

    qq.run("clean", again, check=0)
    after_clean = qq.run("submit", "--dedupe-key", "good", "--dedupe-window", "1h", "--", "true", check=0)
    assert after_clean.stdout.strip() not in (ok, again), "a cleaned record frees its key"


def test_a_window_does_not_reach_past_its_length(qq):
    ok = qq.submit("--dedupe-key", "w", "--", "true")
    qq.wait_state(ok, "completed")
    qq.wait_for(lambda: time.time() - qq.record(ok)["ended_at"] > 0.6, what="0.6s after the end")
    out = qq.run("submit", "--dedupe-key", "w", "--dedupe-window", "0.5s", "--", "true", check=0).stdout.strip()
    assert out != ok


def test_run_with_a_held_key_follows_that_job_and_ctrl_c_stops_only_the_wait(qq):
    job = qq.submit("--dedupe-key", "k", "--", *gated(qq, "a", "echo done"))
    qq.wait_state(job, "running")
    proc = qq.popen("run", "--dedupe-key", "k", "--", "echo", "never")
    assert "deduplicated" in stderr_line(proc)
    assert f"joining job {job}: following its output" in stderr_line(proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 122, (out, err)
    assert "the job continues" in err
    assert qq.record(job)["state"] == "running", "Ctrl-C stopped the wait, never the job"
    assert len(qq.records()) == 1
    open_gate(qq, "a")
    assert qq.wait_state(job, ("completed", "failed"))["state"] == "completed"


def test_run_with_a_held_key_returns_that_jobs_code_and_output(qq):
    job = qq.submit("--dedupe-key", "k", "--", *gated(qq, "a", "echo from-the-holder; exit 7"))
    proc = qq.popen("run", "--dedupe-key", "k", "--", "echo", "never")
    assert "deduplicated" in stderr_line(proc)
    open_gate(qq, "a")
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 7 and out == "from-the-holder\n"
    assert [r["id"] for r in qq.records()] == [job]


def test_a_job_file_key_dedupes_and_the_key_is_shown_in_safe_form(qq):
    path = os.path.join(qq.root, "job.json")
    key = "train:\u043a\u043b\u044e\u0447$(rm -rf /)"
    with open(path, "w") as fh:
        json.dump({"command": gated(qq, "a"), "dedupe_key": key}, fh)
    job = qq.submit("--job", path)
    assert qq.record(job)["dedupe_key"] == key, "the record keeps the key as given"
    proc = qq.run("submit", "--job", path, check=0)
    assert proc.stdout.strip() == job
    assert "\u043a" not in proc.stderr and "$(" not in proc.stderr and "train:???" in proc.stderr
    status = qq.run("status", job, check=0).stdout
    assert "dedupe   train:???" in status and "\u043a" not in status
    open_gate(qq, "a")


@pytest.mark.parametrize(
    "args, words",
    [
        (["--dedupe-key", ""], "the key is empty"),
        (["--dedupe-key", "a\nb"], "control character"),
        (["--dedupe-key", "x" * 600], "at most 512"),
        (["--dedupe-window", "1h"], "give --dedupe-key"),
        (["--dedupe-key", "k", "--dedupe-window", "0"], "longer than zero"),
        (["--dedupe-key", "k", "--dedupe-window", "soon"], "is not a duration"),
    ],
)
def test_a_bad_key_or_window_is_refused_with_121_and_no_job(qq, args, words):
    proc = qq.run("submit", *args, "--", "true")
    assert proc.returncode == 121 and words in proc.stderr and proc.stdout == ""
    assert qq.records() == []
