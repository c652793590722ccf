"""The CPU budget holds under gated jobs and under a storm of concurrent submissions."""

import os
import threading
import time

from e2e_helpers import gated, locked_snapshot, open_gate

CONFIG = '[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "100MB"\n'
HOLDING = ("starting", "running")


def cpu_held(records) -> float:
    return sum(r["claims"]["cpu"] for r in records if r["state"] in HOLDING)


def test_three_one_core_jobs_never_run_more_than_two_at_once_and_the_third_starts_by_itself(q):
    q.write_config(CONFIG)
    jobs = [q.submit("--cpu", "1", "--", *gated(q, f"g{i}", f"echo done-{i}")) for i in range(3)]
    q.wait_state(jobs[0], "running")
    q.wait_state(jobs[1], "running")
    most = 0
    for _ in range(60):  # many samples; each one is a consistent instant (state lock held shared)
        snap = {r["id"]: r["state"] for r in locked_snapshot(q)}
        most = max(most, sum(snap[j] in HOLDING for j in jobs))
        assert snap[jobs[2]] == "queued", snap
        time.sleep(0.005)
    assert most == 2
    third = q.record(jobs[2])
    assert third["blocked_reason"], third  # a waiting job says why

    open_gate(q, "g0")  # no qex command is typed from here on
    q.wait_state(jobs[0], "completed", timeout=5)
    q.wait_state(jobs[2], "running", timeout=5)
    snap = {r["id"]: r["state"] for r in locked_snapshot(q)}
    assert sum(snap[j] in HOLDING for j in jobs) <= 2
    open_gate(q, "g1")
    open_gate(q, "g2")
    for i, job in enumerate(jobs):
        rec = q.wait_state(job, ("completed", "failed", "killed"), timeout=10)
        assert rec["state"] == "completed", rec
        with open(os.path.join(q.state, "jobs", job, "stdout.log")) as fh:
            assert fh.read() == f"done-{i}\n"


def test_twenty_concurrent_submits_make_twenty_distinct_jobs_within_the_budget(q):
    q.write_config(CONFIG)
    trace = os.path.join(q.root, "trace")
    # each job notes its own start and end (one short append each, atomic with O_APPEND)
    script = f'echo "S $QEX_JOB_ID $(date +%s%N)" >> {trace}; sleep 0.1; echo "E $QEX_JOB_ID $(date +%s%N)" >> {trace}'
    stop = threading.Event()
    samples = []

    def sampler():
        while not stop.is_set():
            samples.append(cpu_held(locked_snapshot(q)))
            time.sleep(0.01)

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    try:
        procs = [q.popen("submit", "--cpu", "1", "--", "sh", "-c", script) for _ in range(20)]
        outs = [p.communicate(timeout=60) for p in procs]
        assert [p.returncode for p in procs] == [0] * 20, [o[1] for o in outs]
        ids = [o[0].strip() for o in outs]
        assert len(set(ids)) == 20
        for job in ids:
            rec = q.wait_state(job, ("completed", "failed", "killed", "cancelled"), timeout=30)
            assert rec["state"] == "completed", rec
    finally:
        stop.set()
        thread.join()

    records = q.records()
    assert sorted(r["id"] for r in records) == sorted(ids)
    seqs = [r["seq"] for r in records]
    assert len(set(seqs)) == 20
    assert len(samples) > 10 and max(samples) <= 2.0, max(samples)
    assert max(samples) > 0  # the sampler did see jobs running

    events = []
    with open(trace) as fh:
        for line in fh:
            kind, job, stamp = line.split()
            events.append((int(stamp), 0 if kind == "E" else 1, job))
    assert sorted(j for _, k, j in events if k == 1) == sorted(ids)
    running, most = 0, 0
    for _, kind, _ in sorted(events):  # an end before a start at the same instant
        running += 1 if kind == 1 else -1
        most = max(most, running)
    assert most <= 2, most


def test_the_memory_budget_limits_jobs_as_the_cpu_budget_does(q):
    q.write_config('[budget]\ncpu = 8\nmem = "250MB"\n[defaults]\nmem = "100MB"\n')
    jobs = [q.submit("--cpu", "0.5", "--", *gated(q, f"g{i}")) for i in range(3)]
    q.wait_state(jobs[0], "running")
    q.wait_state(jobs[1], "running")
    snap = {r["id"]: r for r in locked_snapshot(q)}
    assert snap[jobs[2]]["state"] == "queued"
    assert "mem" in snap[jobs[2]]["blocked_reason"].lower() or "MB" in snap[jobs[2]]["blocked_reason"]
    open_gate(q, "g1")
    q.wait_state(jobs[2], "running", timeout=5)
    open_gate(q, "g0")
    open_gate(q, "g2")
    for job in jobs:
        assert q.wait_state(job, ("completed", "failed", "killed"), timeout=10)["state"] == "completed"
