"""qex pause / qex resume end to end: pauses are files, end by themselves, name
themselves in every waiting job's reason, and hand a lock to a person."""

import json
import os
import pwd
import select
import subprocess
import sys
import time

import pytest
from e2e_helpers import gated, open_gate

CONFIG = '[budget]\ncpu = 8\nmem = "8GB"\n[defaults]\nmem = "10MB"\n'


@pytest.fixture
def qq(q):
    q.write_config(CONFIG)
    return q


def stderr_line(proc, timeout: float = 10.0) -> str:
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


def pause_file(q, name="queue.json") -> str:
    return os.path.join(q.state, "pause", name)


def test_pause_queue_for_2s_ends_by_itself_and_the_waiting_job_starts_with_no_command(qq):
    proc = qq.run("pause", "queue", "--for", "2s", "--reason", "disk swap", check=0)
    assert "the queue is paused for 2s" in proc.stderr
    with open(pause_file(qq)) as fh:
        until = json.load(fh)["until"]
    proc = qq.run("submit", "--", "true", check=0)  # a submission into a paused queue succeeds (0) and waits
    job = proc.stdout.strip()
    assert f"job {job[:8]} waits: the queue is paused by" in proc.stderr and "disk swap" in proc.stderr
    # From here on no qex command is typed.
    rec = qq.wait_state(job, ("completed", "failed", "expired"), timeout=10)
    assert rec["state"] == "completed"
    assert 0 <= rec["started_at"] - until <= 1.0, rec["started_at"] - until
    assert not os.path.exists(pause_file(qq)), "the pass at its end removed the pause"
    assert qq.run("pause", check=0).stdout.strip() == "nothing is paused"


def test_pause_lock_while_a_job_holds_it_makes_the_next_job_wait_for_a_person(qq):
    holder = qq.submit("--lock", "gpu0", "--", *gated(qq, "a"))
    qq.wait_state(holder, "running")
    proc = qq.run("pause", "lock", "gpu0", "--reason", "profiling", check=0)
    assert f"held by job {holder[:8]}" in proc.stderr and "as soon as that job ends" in proc.stderr
    nxt = qq.submit("--lock", "gpu0", "--", "true")
    other = qq.submit("--lock", "other", "--", "true")
    reason = qq.record(nxt)["blocked_reason"]
    assert reason.startswith("waits for lock gpu0, which a person holds:") and "profiling" in reason, reason
    assert "qex resume lock gpu0" in reason
    assert qq.wait_state(other, ("completed", "failed"))["state"] == "completed", "other locks are untouched"
    listing = qq.run("pause", check=0).stdout
    assert "lock gpu0: paused by" in listing and f"as soon as job {holder[:8]} ends" in listing
    open_gate(qq, "a")
    qq.wait_state(holder, "completed")
    listing = qq.run("pause", check=0).stdout
    assert listing.rstrip().endswith("the person has it")
    assert qq.record(nxt)["state"] == "queued", "the person has the lock: no job gets it"
    qq.run("resume", "lock", "gpu0", check=0)
    assert qq.wait_state(nxt, ("completed", "failed"))["state"] == "completed"


def test_pause_lock_drain_returns_when_the_lock_is_yours(qq):
    holder = qq.submit("--lock", "gpu0", "--", *gated(qq, "a"))
    qq.wait_state(holder, "running")
    proc = qq.popen("pause", "lock", "gpu0", "--drain")
    assert "held by job" in stderr_line(proc)
    assert "waiting for 1 job" in stderr_line(proc)
    assert proc.poll() is None
    open_gate(qq, "a")
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0 and "lock gpu0 is yours now" in err
    assert qq.record(holder)["state"] == "completed"


def test_pause_queue_drain_waits_until_nothing_runs_while_running_jobs_and_retries_go_on(qq):
    flag = os.path.join(qq.root, "attempt1")
    gate = qq.gate("a")
    script = (
        f"if [ -e '{flag}' ]; then exit 0; fi; touch '{flag}'; while [ ! -e '{gate}' ]; do sleep 0.02; done; exit 1"
    )
    job = qq.submit("--retries", "1", "--", "sh", "-c", script)
    qq.wait_state(job, "running")
    proc = qq.popen("pause", "queue", "--drain")
    assert "the queue is paused" in stderr_line(proc)
    assert "waiting for 1 job" in stderr_line(proc)
    queued = qq.submit("--", "true")
    open_gate(qq, "a")  # attempt 1 fails; its retry runs although the queue is paused
    rec = qq.wait_state(job, ("completed", "failed"), timeout=10)
    assert rec["state"] == "completed" and len(rec["attempts"]) == 2
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0 and "drained: nothing runs" in err
    assert qq.record(queued)["state"] == "queued", "nothing new started"
    qq.run("resume", check=0)
    assert qq.wait_state(queued, ("completed", "failed"))["state"] == "completed"


def test_every_waiting_job_names_the_pause_in_list_status_info_and_wait(qq):
    qq.run("pause", "queue", "--reason", "upgrade", check=0)
    job = qq.submit("--", "true")
    rec = qq.record(job)
    assert rec["state"] == "queued" and rec["blocked_holder"] == "pause"
    assert "paused by" in rec["blocked_reason"] and "upgrade" in rec["blocked_reason"]
    assert "qex resume queue ends it" in rec["blocked_reason"]
    assert "the queue is paused by" in qq.run("list", check=0).stdout
    assert "reason   the queue is paused by" in qq.run("status", job, check=0).stdout
    info = qq.run("info", check=0).stdout
    assert "paused: the queue is paused by" in info and "pause     queue: paused by" in info
    proc = qq.popen("wait", job)
    line = stderr_line(proc)
    assert f"job {job[:8]} waits: the queue is paused by" in line and "upgrade" in line
    qq.run("resume", "queue", check=0)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0 and "completed" in out


def test_a_second_pause_keeps_the_first_end_and_reason_and_a_pause_for_0_is_refused(qq):
    for bad in ("0", "0s", "soon", "-1"):
        proc = qq.run("pause", "queue", "--for", bad)
        assert proc.returncode == 2 and "--for" in proc.stderr, (bad, proc.stderr)
    assert not os.path.exists(pause_file(qq))
    qq.run("pause", "queue", "--for", "1h", "--reason", "first", check=0)
    with open(pause_file(qq)) as fh:
        first = json.load(fh)
    proc = qq.run("pause", "queue", "--for", "5m", "--reason", "second", check=0)
    assert "already paused" in proc.stderr and "first" in proc.stderr
    with open(pause_file(qq)) as fh:
        assert json.load(fh) == first
    listing = json.loads(qq.run("pause", "--json", check=0).stdout)
    assert len(listing) == 1
    item = listing[0]
    assert item["reason"] == "first" and item["until"] == first["until"]
    assert item["user"] == pwd.getpwuid(os.getuid()).pw_name and item["ppid"] == os.getpid()
    text = qq.run("pause", check=0).stdout
    assert f"by {item['user']} (pid {os.getpid()})" in text and "until" in text and "first" in text
    qq.run("resume", "queue", check=0)
    proc = qq.run("resume", "queue")
    assert proc.returncode == 1 and "not paused" in proc.stderr


@pytest.mark.parametrize("content", [b"{not json", b"", b'{"kind": "queue"}'])
def test_an_unreadable_pause_file_holds_the_queue_and_says_so(qq, content):
    os.makedirs(os.path.join(qq.state, "pause"), exist_ok=True)
    with open(pause_file(qq), "wb") as fh:
        fh.write(content)
    job = qq.submit("--", "true")
    rec = qq.record(job)
    assert rec["state"] == "queued" and "the queue is held: the pause file" in rec["blocked_reason"]
    assert "qex resume queue removes it" in rec["blocked_reason"]
    assert "held: the pause file" in qq.run("pause", check=0).stdout
    qq.run("resume", "queue", check=0)
    assert qq.wait_state(job, ("completed", "failed"))["state"] == "completed"


def test_a_fifo_as_a_lock_pause_file_holds_that_lock_without_hanging(qq):
    os.makedirs(os.path.join(qq.state, "pause"), exist_ok=True)
    os.mkfifo(pause_file(qq, "lock-db.json"))
    held = qq.submit("--lock", "db", "--", "true")
    free = qq.submit("--", "true")
    assert qq.wait_state(free, ("completed", "failed"))["state"] == "completed"
    reason = qq.record(held)["blocked_reason"]
    assert "which a person holds" in reason and "cannot be read" in reason
    qq.run("resume", "lock", "db", check=0)
    assert qq.wait_state(held, ("completed", "failed"))["state"] == "completed"


@pytest.mark.parametrize("args", [["lock"], ["lock", "a b"], ["queue", "x"], ["gpu"], ["--for", "1m"]])
def test_a_bad_pause_command_line_is_refused_with_2(qq, args):
    proc = qq.run("pause", *args)
    assert proc.returncode == 2 and proc.stderr.startswith("qex: "), proc.stderr
    assert not os.path.exists(os.path.join(qq.state, "pause")) or not os.listdir(os.path.join(qq.state, "pause"))


def test_in_a_state_dir_of_another_user_a_queue_pause_is_refused_but_a_lock_pause_is_not(qq, tmp_path):
    if os.getuid() != 0:
        pytest.skip("needs root to run qex as another user")
    nobody = pwd.getpwnam("nobody")
    qq.run("info", check=0)
    for d, _, files in os.walk(qq.root):
        os.chmod(d, 0o777)
        for f in files:
            os.chmod(os.path.join(d, f), 0o666)

    def as_nobody(*args):
        return subprocess.run(
            [sys.executable, "-m", "qex", *args],
            env={**qq.env, "HOME": str(tmp_path)},
            cwd=qq.root,
            capture_output=True,
            text=True,
            timeout=30,
            preexec_fn=lambda: (os.setgid(nobody.pw_gid), os.setuid(nobody.pw_uid)),
        )

    try:
        probe = as_nobody("version")
    except OSError as exc:
        pytest.skip(f"the user nobody cannot run this Python: {exc}")
    if probe.returncode != 0:
        pytest.skip(f"the user nobody cannot run qex here: {probe.stderr.strip()[:200]}")
    proc = as_nobody("pause", "queue")
    assert proc.returncode == 1 and "only its owner (or root) can pause the whole queue" in proc.stderr
    assert not os.path.exists(pause_file(qq))
    proc = as_nobody("pause", "lock", "scratch")
    assert proc.returncode == 0, proc.stderr
    with open(pause_file(qq, "lock-scratch.json")) as fh:
        assert json.load(fh)["uid"] == nobody.pw_uid


def _holders(path: str) -> list[int]:
    """The processes with ``path`` open (a waker holds its lock file)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == path:
                    found.append(int(pid))
                    break
            except OSError:
                continue
    return found


def test_a_waker_whose_state_directory_is_removed_ends(qq):
    """rm -rf of a state dir (a reset) must not leave a waker passing at nothing forever."""
    import shutil

    from e2e_helpers import alive

    qq.run("pause", "queue", check=0)
    job = qq.submit("--", "true")
    lock = os.path.join(qq.state, f"waker-{os.getuid()}.lock")
    end = time.monotonic() + 10
    while not (wakers := _holders(lock)) and time.monotonic() < end:
        time.sleep(0.05)
    assert len(wakers) == 1, "a paused queue with a job queued keeps its waker"
    assert alive(wakers[0]) and qq.record(job)["state"] == "queued"
    shutil.rmtree(qq.state)
    end = time.monotonic() + 10
    while alive(wakers[0]) and time.monotonic() < end:
        time.sleep(0.05)
    assert not alive(wakers[0]), "the waker of a removed state directory is still running"
    # the same path made afresh is a new queue, with its own waker when it needs one
    assert qq.wait_state(qq.submit("--", "true"), ("completed", "failed"))["state"] == "completed"
