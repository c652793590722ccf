"""Memory that teaches, end to end, with the real kernel: a memory cgroup with a
150MB limit, a job that touches 400MB in it, a real OOM kill.

The OOM tests need a cgroup-v1 memory controller this process may write (root,
as on CI). Where there is none, they skip and say so; the learner tests run
everywhere.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from e2e_helpers import submit_wait_with_refused_move

from qex.linux import cgroup

MiB = 1 << 20
PY = sys.executable

# Attempt 1 touches 400MB, every later attempt 10MB (QEX_ATTEMPT says which).
GREEDY_FIRST = """\
import os
n = 400 if os.environ["QEX_ATTEMPT"] == "1" else 10
data = b"x" * (n << 20)
print("attempt", os.environ["QEX_ATTEMPT"], "touched", n, "MB")
"""

ALWAYS_GREEDY = 'data = b"x" * (400 << 20)\n'

# Ignores SIGTERM (so qex kill must SIGKILL it); optionally runs a child that the
# kernel kills for memory first; says it is ready; then waits to be killed.
STUBBORN = """\
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
code = "none"
if sys.argv[2] == "oom-child":
    code = subprocess.run([sys.executable, "-c", "data = b'x' * (400 << 20)"]).returncode
with open(sys.argv[1] + ".tmp", "w") as fh:
    fh.write(str(code))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    time.sleep(1)
"""


# ---- a limited memory cgroup for a test ------------------------------------------


@pytest.fixture
def memcg():
    """make(limit) -> the path of a new v1 memory cgroup, inside this test's own,
    removed (with anything left in it) at the end of the test."""
    made = []

    def make(limit: int) -> str:
        where = cgroup.here()
        if where is None or where[0] != "v1":
            pytest.skip(
                "skipped: this process has no cgroup-v1 memory controller, so no real OOM kill "
                "can be arranged here (CI runs these as root with /sys/fs/cgroup/memory)"
            )
        path = os.path.join(where[1], f"qextest-{os.getpid()}-{len(made)}")
        try:
            os.mkdir(path)
        except OSError as exc:
            pytest.skip(f"skipped: cannot make a memory cgroup in {where[1]} ({exc.strerror})")
        made.append(path)
        memsw = os.path.exists(os.path.join(path, "memory.memsw.limit_in_bytes"))
        if not memsw and _swap_total() > 0:
            pytest.skip(
                "skipped: this machine swaps and cannot limit swap per cgroup (no memory.memsw), "
                "so a 150MB limit would swap instead of killing"
            )
        for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):
            if os.path.exists(os.path.join(path, name)):
                with open(os.path.join(path, name), "w") as fh:
                    fh.write(str(limit))
        return path

    yield make
    for path in reversed(made):
        _remove_tree(path)


def _swap_total() -> int:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("SwapTotal:"):
                return int(line.split()[1])
    return 0


def _members(path: str) -> list[int]:
    pids = []
    for root, _dirs, _files in os.walk(path):
        try:
            with open(os.path.join(root, "cgroup.procs")) as fh:
                pids += [int(w) for w in fh.read().split()]
        except OSError:
            pass
    return pids


def _remove_tree(path: str) -> None:
    """Wait (bounded) for the test's qex processes to leave, kill what stays, rmdir depth first."""
    deadline = time.monotonic() + 10
    while _members(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in _members(path):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + 5
    for root, _dirs, _files in sorted(os.walk(path), key=lambda w: -len(w[0])):
        while True:
            try:
                os.rmdir(root)
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)


def inside(q, cg: str, *args, env=None, timeout=60) -> subprocess.CompletedProcess:
    """Run `qex ARGS` from a shell that first moves itself into the cgroup ``cg``."""
    script = 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"'
    return subprocess.run(
        ["sh", "-c", script, "sh", cg, PY, "-m", "qex", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=q.root,
        env={**q.env, **(env or {})},
    )


def write(q, name: str, text: str) -> str:
    path = os.path.join(q.root, name)
    with open(path, "w") as fh:
        fh.write(text)
    return path


def vmstat_oom_kills() -> int:
    return cgroup.machine_oom_kills() or 0


# ---- answer an OOM ------------------------------------------------------------------


def test_an_oom_kill_is_retried_with_double_the_claim_and_completes(q, memcg):
    cg = memcg(150 * MiB)
    job = write(q, "job.py", GREEDY_FIRST)
    proc = inside(q, cg, "submit", "--wait", "--mem", "100MB", "--", PY, job)
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(proc.stdout)
    assert rec["state"] == "completed"
    first, second = rec["attempts"]
    assert first["state"] == "oom" and first["oom_evidence"] == "cgroup"
    assert first["signal"] == "SIGKILL" and first["usage"]["oom_kills"] >= 1
    assert first["claims"]["mem"] == 100 * MiB
    assert second["claims"]["mem"] >= 2 * first["claims"]["mem"]
    assert second["state"] == "completed" and second["oom_evidence"] is None
    assert rec["claims"]["mem"] == second["claims"]["mem"]
    assert "doubled after attempt 1" in rec["claim_source"]["mem"]
    assert "the claim of 100MB was too small" in first["error"]
    assert "Retry 1 of 1 claims 200MB" in first["error"]
    # the waiting command said so on stderr, once
    assert proc.stderr.count("the claim of 100MB was too small") == 1, proc.stderr
    out = q.run("logs", rec["id"], "--stdout").stdout
    assert "attempt 2 touched 10 MB" in out
    # the job's cgroups are gone
    assert not [n for n in os.listdir(cg) if n.startswith("qex-")]

    # the learner kept the OOM as a floor: the next run of the command, without --mem,
    # claims at least double the claim that was too small
    again = q.submit("--", PY, job)
    rec2 = q.wait_state(again, "completed")
    assert rec2["claims"]["mem"] >= 200 * MiB
    assert "after an out-of-memory kill" in rec2["claim_source"]["mem"]
    assert rec2["claim_source"]["mem"].startswith("learned")


def test_with_no_oom_retries_the_state_is_oom_and_wait_gives_99(q, memcg):
    cg = memcg(150 * MiB)
    job = write(q, "job.py", GREEDY_FIRST)
    proc = inside(q, cg, "submit", "--oom-retries", "0", "--mem", "100MB", "--", PY, job)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip()
    waited = q.run("wait", job_id, timeout=30)
    assert waited.returncode == 99, (waited.stdout, waited.stderr)
    assert "the claim of 100MB was too small" in waited.stderr
    rec = q.record(job_id)
    assert rec["state"] == "oom" and rec["oom_evidence"] == "cgroup"
    assert len(rec["attempts"]) == 1 and rec["attempts"][0]["state"] == "oom"
    assert "the claim of 100MB was too small" in rec["error"] and "Not retried, --oom-retries 0" in rec["error"]
    assert q.run("status", job_id, "--quiet").returncode == 99


def test_the_retry_claim_is_capped_at_the_budget_and_a_claim_at_the_budget_is_not_retried(q, memcg):
    q.write_config('[budget]\nmem = "150MB"\n')
    cg = memcg(150 * MiB)
    job = write(q, "job.py", ALWAYS_GREEDY)
    proc = inside(q, cg, "submit", "--wait", "--oom-retries", "3", "--mem", "100MB", "--", PY, job)
    assert proc.returncode == 99, proc.stderr
    rec = json.loads(proc.stdout)
    assert rec["state"] == "oom"
    assert [a["claims"]["mem"] for a in rec["attempts"]] == [100 * MiB, 150 * MiB]
    first, second = rec["attempts"]
    if second["usage"]["max_rss"] >= 150 * MiB:  # it reached its claim: the claim was too small
        assert "already at the budget of 150MB" in rec["error"]
        assert "the claim of 150MB was too small" in rec["error"]
    else:  # the cgroup of 150MB, which qex runs in too, ran out first (issue 23, point 11)
        assert "the claim of 100MB was too small" in first["error"]
        assert "too small" not in second["error"] and "the cgroup qex runs in" in second["error"]
        assert "no larger than the claim" in second["error"]


def test_without_a_cgroup_the_machine_counter_is_the_evidence_and_the_record_says_so(q, memcg):
    cg = memcg(150 * MiB)
    job = write(q, "job.py", ALWAYS_GREEDY)
    proc = inside(
        q, cg, "submit", "--wait", "--oom-retries", "0", "--mem", "100MB", "--", PY, job, env={"QEX_CGROUP": "off"}
    )
    assert proc.returncode == 99, proc.stderr
    rec = json.loads(proc.stdout)
    assert rec["state"] == "oom" and rec["oom_evidence"] == "machine-counter"
    attempt = rec["attempts"][0]
    assert attempt["usage"]["peak_from"] == "rusage" and attempt["usage"]["oom_kills"] is None
    assert "circumstantial" in rec["error"]


def test_an_oom_under_the_limit_qex_runs_in_names_that_limit_and_never_doubles_the_claim(q, memcg):
    """Issue 23, point 11: the job claims 300MB inside a cgroup of 150MB. The kernel
    kills it when the cgroup qex runs in is full, at a peak under its claim: the claim
    was not the cause, so the sentence names that limit (its size and where), never
    calls the claim too small, and no retry doubles the claim; as that limit holds less
    than the claim, the same claim would run out again, and it says so."""
    cg = memcg(150 * MiB)
    job = write(q, "job.py", GREEDY_FIRST)
    proc = inside(q, cg, "submit", "--wait", "--mem", "300MB", "--", PY, job)
    assert proc.returncode == 99, proc.stderr
    rec = json.loads(proc.stdout)
    assert rec["state"] == "oom" and rec["oom_evidence"] == "cgroup"
    assert [a["claims"]["mem"] for a in rec["attempts"]] == [300 * MiB]  # never 600MB
    assert rec["usage"]["max_rss"] < 300 * MiB
    said = rec["error"]
    assert "too small" not in said and "too small" not in proc.stderr, (said, proc.stderr)
    assert "ran out outside the job" in said and "the cgroup qex runs in" in said, said
    assert "(150MB, " in said and cg in said, said  # which limit: its size and where
    assert "Not retried" in said and "no larger than the claim" in said, said  # and why not
    assert q.run("status", rec["id"]).stdout.count("too small") == 0


OTHER_HOG = """import os, sys, time
data = b"y" * (int(sys.argv[2]) << 20)
open(sys.argv[1], "w").close()
while not os.path.exists(sys.argv[1] + ".stop"):
    time.sleep(0.05)
"""

# Attempt 1 asks the kernel to pick it first (oom_score_adj 1000: never the other process)
# and touches 200MB; later attempts touch 10MB.
PICK_ME_FIRST = """import os
if os.environ["QEX_ATTEMPT"] == "1":
    with open("/proc/self/oom_score_adj", "w") as fh:
        fh.write("1000")
n = 200 if os.environ["QEX_ATTEMPT"] == "1" else 10
data = b"x" * (n << 20)
print("attempt", os.environ["QEX_ATTEMPT"], "touched", n, "MB")
"""


def test_an_oom_that_another_process_of_the_cgroup_caused_is_retried_at_the_same_claim(q, memcg):
    """Issue 23, point 11: another process in the cgroup qex runs in holds 60MB of its
    150MB; the job, claiming 120MB, is killed at a peak far under its claim. The sentence
    names the cgroup's limit, the retry keeps the claim of 120MB and says why."""
    cg = memcg(150 * MiB)
    hog_script, ready = write(q, "hog.py", OTHER_HOG), os.path.join(q.root, "hog-ready")
    script = 'echo $$ > "$1/cgroup.procs" && exec "$2" "$3" "$4" 60'
    hog = subprocess.Popen(["sh", "-c", script, "sh", cg, PY, hog_script, ready])
    try:
        q.wait_for(lambda: os.path.exists(ready), 20, "the other process to hold its memory")
        job = write(q, "job.py", PICK_ME_FIRST)
        proc = inside(q, cg, "submit", "--wait", "--mem", "120MB", "--", PY, job)
    finally:
        open(ready + ".stop", "w").close()
        hog.wait(10)
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(proc.stdout)
    first, second = rec["attempts"]
    assert first["state"] == "oom" and first["usage"]["max_rss"] < 120 * MiB, first
    said = first["error"]
    assert "too small" not in said and "ran out outside the job" in said and "(150MB, " in said, said
    assert "Retry 1 of 1 keeps the claim of 120MB" in said, said
    assert [a["claims"]["mem"] for a in rec["attempts"]] == [120 * MiB, 120 * MiB]
    assert "doubled" not in (rec["claim_source"].get("mem") or "")
    assert second["state"] == "completed" and rec["state"] == "completed"
    assert "attempt 2 touched 10 MB" in q.run("logs", rec["id"], "--stdout").stdout


# ---- a kill always wins -------------------------------------------------------------


def test_a_job_that_qex_kill_stops_is_killed_even_after_an_oom_kill_in_its_cgroup(q, memcg):
    cg = memcg(150 * MiB)
    job = write(q, "stubborn.py", STUBBORN)
    ready = os.path.join(q.root, "ready")
    proc = inside(q, cg, "submit", "--mem", "100MB", "--", PY, job, ready, "oom-child")
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip()
    q.wait_for(lambda: os.path.exists(ready), 20, "the job's child to be killed for memory")
    assert open(ready).read() == str(-signal.SIGKILL), "the child should have been OOM-killed"
    killed = q.run("kill", job_id)
    assert killed.returncode == 0, killed.stderr
    rec = q.wait_state(job_id, ("killed", "oom", "failed"))
    assert rec["state"] == "killed", rec
    assert rec["oom_evidence"] is None and rec["attempts"][0]["oom_evidence"] is None, rec
    assert rec["attempts"][0]["usage"]["oom_kills"] >= 1, "the cgroup did count the OOM kill"
    assert rec["signal"] == "SIGKILL"
    assert q.run("wait", job_id).returncode == 125


def test_a_job_that_qex_kill_stops_is_killed_while_the_machine_oom_counter_rises(q, memcg):
    job = write(q, "stubborn.py", STUBBORN)
    ready = os.path.join(q.root, "ready")
    job_id = q.submit("--", PY, job, ready, "no-child", env={"QEX_CGROUP": "off"})
    q.wait_for(lambda: os.path.exists(ready), 20, "the job to start")
    before = vmstat_oom_kills()
    elsewhere = memcg(50 * MiB)  # an OOM kill somewhere else on the machine, meanwhile
    script = 'echo $$ > "$1/cgroup.procs" && exec "$2" -c "data = b\'x\' * (400 << 20)"'
    hog = subprocess.run(["sh", "-c", script, "sh", elsewhere, PY], capture_output=True)
    assert hog.returncode == -signal.SIGKILL
    assert vmstat_oom_kills() > before, "the machine's OOM-kill counter should have risen"
    assert q.run("kill", job_id).returncode == 0
    rec = q.wait_state(job_id, ("killed", "oom", "failed"))
    assert rec["state"] == "killed" and rec["oom_evidence"] is None, rec
    assert rec["signal"] == "SIGKILL"


# ---- cgroups never outlive their job --------------------------------------------------


def test_a_lost_supervisor_s_job_cgroup_is_removed_by_the_next_pass(q, memcg):
    cg = memcg(1024 * MiB)
    job = write(q, "stubborn.py", STUBBORN)
    ready = os.path.join(q.root, "ready")
    proc = inside(q, cg, "submit", "--", PY, job, ready, "no-child")
    job_id = proc.stdout.strip()
    q.wait_for(lambda: os.path.exists(ready), 20, "the job to start")
    rec = q.record(job_id)
    job_cg = os.path.join(cg, cgroup.name_of(job_id, 1))
    assert os.path.isdir(job_cg) and rec["pid"] in _members(job_cg)
    os.kill(rec["supervisor_pid"], signal.SIGKILL)
    q.run("wait", job_id, "--timeout", "15")  # a waiter runs the pass that notices
    rec = q.wait_state(job_id, "failed")
    assert "supervisor" in rec["error"]
    assert not os.path.exists(job_cg)


def test_clean_removes_a_cgroup_that_a_leftover_process_kept(q, memcg):
    cg = memcg(1024 * MiB)
    pidfile = os.path.join(q.root, "leftover.pid")
    # the job leaves a process behind (its own session, output closed) and exits 0
    script = (
        f"import subprocess; p = subprocess.Popen(['sleep', '60'], start_new_session=True, "
        f"stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); open({pidfile!r}, 'w').write(str(p.pid))"
    )
    proc = inside(q, cg, "submit", "--wait", "--", PY, "-c", script)
    assert proc.returncode == 0, proc.stderr
    job_id = json.loads(proc.stdout)["id"]
    job_cg = os.path.join(cg, cgroup.name_of(job_id, 1))
    assert os.path.isdir(job_cg), "the leftover process keeps the job's cgroup"
    leftover = int(open(pidfile).read())
    assert leftover in _members(job_cg)
    os.kill(leftover, signal.SIGKILL)
    q.wait_for(lambda: leftover not in _members(job_cg), 10, "the leftover to end")
    assert q.run("clean", job_id).returncode == 0
    assert not os.path.exists(job_cg)


# ---- the learner ---------------------------------------------------------------------


def test_the_second_run_gets_a_learned_claim_and_mem_always_wins(q):
    job = ["--", PY, "-c", "data = b'x' * (80 << 20)"]
    first = q.submit(*job)
    rec1 = q.wait_state(first, "completed")
    assert rec1["claim_source"]["mem"] == "default"
    peak = rec1["usage"]["max_rss"]
    assert peak >= 80 * MiB

    second = q.submit(*job)
    rec2 = q.wait_state(second, "completed")
    assert rec2["claim_source"]["mem"].startswith("learned from 1 run (peak ")
    assert peak * 1.2 <= rec2["claims"]["mem"] < peak * 1.2 + 2 * MiB
    assert rec2["claims"]["mem"] < rec1["claims"]["mem"]

    third = q.submit("--mem", "1GB", *job)
    rec3 = q.wait_state(third, "completed")
    assert rec3["claims"]["mem"] == 1024 * MiB and rec3["claim_source"]["mem"] == "user"

    status = q.run("status", second).stdout
    assert "learned from 1 run" in status

    q.write_config("[learn]\nenabled = false\n")
    fourth = q.submit(*job)
    assert q.record(fourth)["claim_source"]["mem"] == "default"


def test_a_corrupted_learner_store_does_not_break_submission(q):
    os.makedirs(q.state, exist_ok=True)
    store = os.path.join(q.state, "learn.json")
    with open(store, "wb") as fh:
        fh.write(b"\x00{not json")
    proc = q.run("submit", "--wait", "--", PY, "-c", "print('ok')")
    assert proc.returncode == 0, proc.stderr
    assert "learner store cannot be used" in proc.stderr
    rec = json.loads(proc.stdout)
    assert rec["claim_source"]["mem"] == "default" and rec["claims"]["mem"] > 0

    # the damaged file was moved aside, not destroyed, and the store starts again: the
    # supervisor teaches after the job's final record (which ends --wait), so the new
    # store is awaited (it moves the old one aside, then writes the new one)
    def new_store():
        try:
            with open(store) as fh:
                return json.load(fh).get("commands")
        except (OSError, ValueError):
            return None  # still the damaged one (not yet moved aside), or not yet written

    q.wait_for(new_store, timeout=20, what="the learner's new store")
    aside = [n for n in os.listdir(q.state) if n.startswith("learn.json.corrupt-")]
    assert len(aside) == 1
    with open(os.path.join(q.state, aside[0]), "rb") as fh:
        assert fh.read() == b"\x00{not json"
    with open(store) as fh:
        assert len(json.load(fh)["commands"]) == 1
    again = q.run("submit", "--", PY, "-c", "print('ok')")
    assert again.returncode == 0 and "warning" not in again.stderr
    assert q.record(again.stdout.strip())["claim_source"]["mem"].startswith("learned from 1 run")


def test_a_job_that_cannot_join_its_cgroup_runs_once_without_one(q):
    """The kernel refuses the join (simulated in the real qex process that starts the job):
    the supervisor cannot move into the job's cgroup for the spawn, and starts the job
    once, without a cgroup."""
    probe, why = cgroup.create("0193f7a2-0000-7000-8000-00000000beef", 1)
    if probe is None:
        pytest.skip(f"skipped: no memory cgroup can be made here ({why}), so there is no join to refuse")
    probe.remove()
    rec = submit_wait_with_refused_move(q, "join", "refused")
    assert rec["state"] == "completed"
    assert rec["usage"]["peak_from"] == "rusage" and rec["usage"]["oom_kills"] is None
    assert q.run("logs", rec["id"], "--stdout").stdout == "ran\n"
    assert not os.path.exists(os.path.join(cgroup.here()[1], cgroup.name_of(rec["id"], 1)))


def test_info_says_what_memory_evidence_jobs_get(q):
    on = json.loads(q.run("info", "--json", check=0).stdout)["memory"]
    expected = cgroup.create("0193f7a2-0000-7000-8000-00000000cafe", 1)[0]
    if expected is not None:
        expected.remove()
    assert on["per_job_cgroup"] is (expected is not None)
    assert on["oom_evidence"] == ("cgroup" if expected is not None else on["oom_evidence"])
    off = json.loads(q.run("info", "--json", env={"QEX_CGROUP": "off"}, check=0).stdout)["memory"]
    assert off["per_job_cgroup"] is False and off["why_not"] == "QEX_CGROUP=off"
    assert off["oom_evidence"] in ("machine-counter", None)
    assert "no cgroup per job" in q.run("info", env={"QEX_CGROUP": "off"}, check=0).stdout
