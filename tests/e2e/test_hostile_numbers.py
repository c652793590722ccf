"""A number out of its bounds in a file another member of the group can write (issue 30):
a job record, an index entry, a pause file, learn.json. Every command answers without a
traceback, names the bad file, and loses no other job's result (qex/base/numbers.py)."""

import fcntl
import json
import os
import time

import pytest
from e2e_helpers import gated, locked_snapshot, open_gate

from qex.jobs import learn

CONFIG = '[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "100MB"\n'
BAD = {"huge": 1e308, "nan": float("nan"), "negative": -2, "text": "1", "bool": True}


@pytest.fixture
def qq(q):
    q.write_config(CONFIG)
    return q


def status_path(q, job_id: str) -> str:
    return os.path.join(q.state, "jobs", job_id, "status.json")


def write_json(path: str, data) -> None:
    with open(path, "w") as fh:
        fh.write(json.dumps(data))  # (NaN as the token NaN, which Python's json reads back)


def index(q) -> dict:
    with open(os.path.join(q.state, "index.json")) as fh:
        return json.load(fh)


def damage(q, job_id: str, value, record: bool = True, entry: bool = True, key: str = "cpu") -> None:
    """``value`` as the job's cores (or memory), in its record and in its index entry."""
    if record:
        rec = q.record(job_id)
        rec["claims"][key] = value
        write_json(status_path(q, job_id), rec)
    if entry:
        data = index(q)
        data["jobs"][job_id][key] = value
        write_json(os.path.join(q.state, "index.json"), data)


def no_traceback(proc) -> None:
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert "Error:" not in proc.stderr, proc.stderr


def queued_behind_a_paused_lock(q) -> str:
    """A job that waits (for the lock ``held``, which a person holds): no process runs it."""
    q.run("pause", "lock", "held", check=0)
    job = q.submit("--lock", "held", "--", "true")
    assert q.record(job)["state"] == "queued"
    return job


@pytest.mark.parametrize("key,kind", [("cpu", kind) for kind in sorted(BAD)] + [("mem", "negative"), ("mem", "huge")])
def test_a_bad_number_in_a_record_and_its_entry_is_named_and_no_other_job_is_lost(qq, key, kind):
    bad = queued_behind_a_paused_lock(qq)
    damage(qq, bad, BAD[kind], key=key)
    with open(status_path(qq, bad), "rb") as fh:
        as_written = fh.read()

    listed = qq.run("list")
    no_traceback(listed)
    assert listed.returncode == 0 and bad[:8] not in listed.stdout
    assert status_path(qq, bad) in listed.stderr and "damaged" in listed.stderr

    info = qq.run("info")
    no_traceback(info)
    assert info.returncode == 0
    named = [line for line in info.stdout.splitlines() if status_path(qq, bad) in line]
    assert len(named) == 1 and named[0].startswith("damaged") and f"qex clean {bad}" in named[0], info.stdout

    shown = qq.run("status", bad)
    no_traceback(shown)
    assert shown.returncode == 1 and shown.stderr.count("\n") == 1 and status_path(qq, bad) in shown.stderr

    ended = qq.run("submit", "--wait", "--", "sh", "-c", "exit 5")
    no_traceback(ended)
    assert ended.returncode == 5, ended.stderr
    other = [r for r in qq.records() if r["id"] != bad]
    assert [(r["state"], r["exit_code"], r["supervisor_lost"]) for r in other] == [("failed", 5, False)]

    assert qq.run("status", other[0]["id"]).returncode == 0
    with open(status_path(qq, bad), "rb") as fh:
        assert fh.read() == as_written, "a record the pass cannot use is never rewritten"
    data = index(qq)
    assert bad not in data["jobs"] and bad in data["damaged"]
    assert qq.run("clean", bad).returncode == 0
    assert not os.path.exists(status_path(qq, bad))
    assert qq.run("info").stdout.count("damaged") == 0


def test_a_bad_number_in_an_index_entry_alone_is_taken_again_from_the_record(qq):
    job = queued_behind_a_paused_lock(qq)
    damage(qq, job, 1e308, record=False)
    listed = qq.run("list")
    no_traceback(listed)
    assert job[:8] in listed.stdout and listed.stderr == ""
    info = qq.run("info")
    no_traceback(info)
    assert "damaged" not in info.stdout
    assert index(qq)["jobs"][job]["cpu"] == 1000, "the pass wrote the entry again from the record"
    assert job[:8] in qq.run("list", "--state", "active").stdout
    qq.run("resume", "lock", "held", check=0)
    assert qq.wait_state(job, "completed")["claims"]["cpu"] == 1.0


def test_a_fake_running_job_with_negative_claims_frees_nothing(qq):
    """A member of the group writes a running record of -2 cores (and its entry) and holds
    its liveness lock: without the check, three 2-core jobs ran on a 2-core budget."""
    fake = queued_behind_a_paused_lock(qq)
    rec = qq.record(fake)
    rec.update(state="running", started_at=time.time(), claims={**rec["claims"], "cpu": -2, "mem": 0})
    write_json(status_path(qq, fake), rec)
    data = index(qq)
    data["jobs"][fake].update(state="running", cpu=-2000, mem=0)
    write_json(os.path.join(qq.state, "index.json"), data)
    fd = os.open(os.path.join(qq.state, "jobs", fake, "alive.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # its "supervisor" lives
    try:
        jobs = [qq.submit("--cpu", "2", "--", *gated(qq, f"g{i}")) for i in range(3)]
        qq.wait_state(jobs[0], "running")
        for _ in range(20):
            held = [r for r in locked_snapshot(qq) if r["id"] in jobs and r["state"] in ("starting", "running")]
            assert len(held) == 1, [(r["id"][:8], r["state"]) for r in held]
            time.sleep(0.01)
        assert fake in qq.run("info").stdout
        for i in range(3):
            open_gate(qq, f"g{i}")
        for job in jobs:
            assert qq.wait_state(job, "completed", timeout=30)["exit_code"] == 0
    finally:
        os.close(fd)


@pytest.mark.parametrize("value", [1 << 70, "machine+1"])
def test_a_learned_value_above_the_machine_is_passed_over(qq, value):
    from qex.base import machine

    nbytes = machine.mem_total() + 1 if value == "machine+1" else value
    key = learn.key_of(["sleep", "1"])
    write_json(
        os.path.join(qq.state, "learn.json") if os.path.isdir(qq.state) else _made(qq),
        {"format": 1, "commands": {key: {"n": "sleep", "at": 1, "s": [["peak", nbytes]]}}},
    )
    proc = qq.run("submit", "--", "sleep", "1")
    assert proc.returncode == 0, proc.stderr
    assert "learner store" in proc.stderr and "passed over" in proc.stderr, proc.stderr
    rec = qq.record(proc.stdout.strip())
    assert rec["claims"]["mem"] == 100 << 20 and rec["claim_source"]["mem"] == "default"


def _made(q) -> str:
    q.run("list", check=0)  # makes the state directory
    return os.path.join(q.state, "learn.json")


@pytest.mark.parametrize("until", [1e308, float("nan"), -1, "soon", True])
def test_a_pause_file_with_a_bad_time_holds_as_a_damaged_one_and_is_shown(qq, until):
    qq.run("pause", "queue", check=0)
    path = os.path.join(qq.state, "pause", "queue.json")
    with open(path) as fh:
        data = json.load(fh)
    write_json(path, {**data, "until": until})
    for args in (("info",), ("pause",), ("list",)):
        proc = qq.run(*args)
        no_traceback(proc)
        assert proc.returncode == 0, (args, proc.stderr)
    assert "not a pause record" in qq.run("info").stdout
    job = qq.submit("--", "true")
    assert qq.record(job)["state"] == "queued"  # a pause that cannot be read holds all the same
    assert qq.run("resume", "queue").returncode == 0
    qq.wait_state(job, "completed")
