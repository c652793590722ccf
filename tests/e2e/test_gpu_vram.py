"""VRAM measured per job, and VRAM used outside qex (issue 32, its last two
points). On a machine with no GPU: the fake nvidia-smi (tests/fakes) answers
from a state file; a process "holds" VRAM while a file in its ``apps_dir``
names its pid, device and MiB, and it lives."""

import json
import os
import signal
import subprocess

import pytest
from e2e_helpers import gated, open_gate
from gpu_helpers import fake_driver, gpu

MiB, GiB = 1 << 20, 1 << 30
TWO = """
[budget]
cpu = 8
[defaults]
mem = "10MB"
[gpu]
sample_every = "1s"
observe_every = "1s"
[[pool]]
name    = "gpu"
devices = ["80GB", "80GB"]
"""


@pytest.fixture
def box(q):
    """A queue on a box of two A100 80GB whose driver is the fake; returns the apps folder."""
    apps = os.path.join(q.root, "apps")
    os.mkdir(apps)
    fake_driver(q, [gpu(0), gpu(1)], apps_dir=apps, log=os.path.join(q.root, "driver.log"))
    q.write_config(TWO)
    q.env["QEX_WAKER_INTERVAL"] = "0.5"
    return apps


def calls(q) -> list[str]:
    """The fake driver's calls so far, one line each."""
    try:
        with open(os.path.join(q.root, "driver.log")) as fh:
            return fh.read().splitlines()
    except FileNotFoundError:
        return []


def hold(apps: str, name: str, device: int, mib: int, pid: int) -> None:
    """Process ``pid`` holds ``mib`` MiB on GPU ``device`` (the fake reads it while the process lives)."""
    tmp = os.path.join(apps, f".{name}")
    with open(tmp, "w") as fh:
        fh.write(f"{pid} {device} {mib}\n")
    os.replace(tmp, os.path.join(apps, name))


@pytest.fixture
def outsider(q):
    """A process outside qex (none of qex's marks: no QEX_JOB_ID, no qex parent); killed at the end."""
    env = {k: v for k, v in os.environ.items() if k != "QEX_JOB_ID"}
    procs = []

    def start():
        p = subprocess.Popen(["sleep", "600"], env=env)
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


# ---- VRAM used outside qex ---------------------------------------------------------------


def test_vram_used_outside_qex_sends_a_job_to_the_other_device(q, box, outsider):
    other = outsider()
    hold(box, "outside", 0, 70 * 1024, other.pid)  # 70GB of GPU 0, by a process outside qex
    job = q.submit("--vram", "20GB", "--", *gated(q, "go"))
    rec = q.wait_state(job, "running")
    assert rec["assigned"] == [{"pool": "gpu", "devices": [1], "size": 20 * GiB}]
    open_gate(q, "go")
    q.wait_state(job, "completed")


def test_a_claim_that_cannot_fit_beside_it_waits_naming_it_and_starts_once_it_is_gone(q, box, outsider):
    other = outsider()
    hold(box, "outside", 0, 70 * 1024, other.pid)
    job = q.submit("--gpu", "2", "--vram", "20GB", "--", "true")
    rec = q.wait_for(lambda: (r := q.record(job))["blocked_reason"] and r, what="a reason")
    assert rec["state"] == "queued" and rec["blocked_holder"] == "outside"
    reason = rec["blocked_reason"]
    assert "outside qex" in reason and "gpu 0" in reason and "70GB" in reason, reason
    assert f"pid {other.pid} (sleep)" in reason, reason
    status = q.run("status", job).stdout
    assert "outside qex" in status
    other.kill()
    other.wait()
    q.wait_state(job, "completed", timeout=15)  # the waker's recheck, a reading at most 1 s old


def test_a_process_left_by_an_ended_job_is_named_as_that_jobs(q, box):
    pid_file = os.path.join(q.root, "left.pid")
    # The job leaves a process behind that holds 70GB of GPU 0, and ends.
    left = q.submit(
        "--name", "leaver", "--", "sh", "-c", f"(trap '' HUP; exec sleep 600) >/dev/null 2>&1 & echo $! > {pid_file}"
    )
    q.wait_state(left, "completed")
    with open(pid_file) as fh:
        pid = int(fh.read())
    try:
        hold(box, "left", 0, 70 * 1024, pid)
        job = q.submit("--gpu", "2", "--vram", "20GB", "--", "true")
        rec = q.wait_for(lambda: (r := q.record(job))["blocked_reason"] and r, what="a reason")
        assert f"left by job {left[:8]} (ended)" in rec["blocked_reason"], rec["blocked_reason"]
    finally:
        os.kill(pid, signal.SIGKILL)


def test_another_users_qex_job_is_not_vram_outside_qex(q, box, tmp_path):
    """A process under another queue's supervisor (its ancestry) counts as that
    queue's job: beyond its claims, never as outside qex too."""
    os.mkdir(tmp_path / "other")
    other = type(q)(str(tmp_path / "other"))  # a second queue: its own state directory, the same peers
    other.env.update({k: q.env[k] for k in ("PATH", "FAKE_NVIDIA_SMI_STATE", "QEX_GPU_READER", "QEX_PEER_DIR")})
    other.env["QEX_CGROUP"] = "off"  # (no job cgroup to name it either: only its ancestry does)
    other.write_config(TWO)
    # (its environment names its job, but another queue's: what the ancestry says is checked
    # by clearing it)
    theirs = other.submit(
        "--vram",
        "70GB",
        "--",
        "env",
        "-u",
        "QEX_JOB_ID",
        "sh",
        "-c",
        f'echo "$$ 0 {70 * 1024}" > {box}/theirs; ' + " ".join(gated(other, "go")[2:]),
    )
    try:
        other.wait_state(theirs, "running")
        q.wait_for(lambda: os.path.exists(os.path.join(box, "theirs")), what="its VRAM")
        job = q.submit("--gpu", "2", "--vram", "20GB", "--", "true")
        rec = q.wait_for(lambda: (r := q.record(job))["blocked_reason"] and r, what="a reason")
        assert rec["blocked_holder"] == "peer", rec["blocked_reason"]
        assert "outside qex" not in rec["blocked_reason"]
    finally:
        open_gate(other, "go")
        other.wait_state(theirs, "completed")


# ---- the cost: the driver is read only for a GPU claim, at most once per observe_every -----


def test_a_pass_with_no_gpu_claim_never_calls_the_driver_and_one_with_reads_it_once_per_observe_every(q, box):
    q.write_config(TWO.replace('observe_every = "1s"', 'observe_every = "1h"'))
    job = q.submit("--", "true")
    q.wait_state(job, "completed")
    q.run("list")
    q.run("status", job)
    assert calls(q) == []
    for _ in range(2):  # (jobs that end before their first sample: only the passes read it)
        q.wait_state(q.submit("--vram", "1GB", "--", "true"), "completed")
    assert sorted(c.split()[0] for c in calls(q)) == [
        "--query-compute-apps=pid,used_memory,gpu_uuid",
        "--query-gpu=index,uuid",
    ], calls(q)  # (together)


def test_info_reads_the_driver_at_most_once_per_observe_every(q, box):
    q.write_config(TWO.replace('observe_every = "1s"', 'observe_every = "1h"'))
    for _ in range(3):
        assert q.run("info").returncode == 0
    assert len([c for c in calls(q) if c.startswith("--query-gpu")]) == 1, calls(q)


# ---- VRAM measured per job --------------------------------------------------------------


def holding(q, apps: str, name: str, device: int, mib: int, gate: str) -> list[str]:
    """A job that holds ``mib`` MiB on GPU ``device`` (the fake's file names its shell),
    then waits on the gate ``gate`` and lets go."""
    return [
        "sh",
        "-c",
        f'echo "$$ {device} {mib}" > {apps}/{name}; '
        f"while [ ! -e '{q.gate(gate)}' ]; do sleep 0.02; done; rm -f {apps}/{name}",
    ]


def live_peak(q, job: str):
    """The job's VRAM peak as `qex status --json` shows it while it runs."""
    (rec,) = json.loads(q.run("status", job, "--json").stdout)  # (an array of one record)
    return rec["usage"].get("vram_peak")


@pytest.mark.parametrize("reader", ["nvidia-smi", "nvml"])
def test_a_jobs_vram_peak_is_recorded_within_64mib_of_what_it_held(q, box, reader):
    if reader == "nvml":  # NVIDIA's binding: the fake one, from the same state file
        fakes = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fakes", "nvml")
        q.env.update(QEX_GPU_READER="nvml", PYTHONPATH=fakes + os.pathsep + q.env.get("PYTHONPATH", ""))
    job = q.submit("--vram", "10GB", "--", *holding(q, box, "mine", 0, 3000, "go"))
    q.wait_for(lambda: live_peak(q, job), timeout=20, what="a sample while it runs")
    status = q.run("status", job).stdout
    assert "vram     peak 2.9GB on gpu 0 (claim 10GB per device)" in status, status
    open_gate(q, "go")
    rec = q.wait_state(job, "completed")
    usage = rec["usage"]
    assert abs(usage["vram_peak"] - 3000 * MiB) <= 64 * MiB, usage
    assert usage["vram_peak_by_device"] == {"0": usage["vram_peak"]}
    assert rec["vram_over"] is None
    assert rec["attempts"][-1]["usage"]["vram_peak"] == usage["vram_peak"]
    assert calls(q) if reader == "nvidia-smi" else True  # (the fake NVML keeps no log)


def test_a_job_above_its_vram_claim_is_said_so_in_status_list_and_the_events(q, box):
    job = q.submit("--vram", "10GB", "--name", "greedy", "--", *holding(q, box, "greedy", 0, 30 * 1024, "go"))
    rec = q.wait_for(lambda: (r := q.record(job))["vram_over"] and r, timeout=20, what="vram_over in the record")
    assert rec["state"] == "running"
    said = "VRAM above its claim: used 30GB on gpu 0, above its claim of 10GB"
    assert rec["vram_over"] == said
    assert said in q.run("status", job).stdout
    row = [ln for ln in q.run("list").stdout.splitlines() if ln.startswith(job[:8])]
    assert row and said in row[0], row
    events = q.run("events", "--json", "--since", "start", "--timeout", "1").stdout.splitlines()
    vram = [json.loads(e) for e in events if '"change": "vram"' in e or '"change":"vram"' in e]
    assert vram and vram[0]["id"] == job and vram[0]["job"]["vram_over"] == said, events
    open_gate(q, "go")
    rec = q.wait_state(job, "completed")
    assert rec["vram_over"] == said and rec["usage"]["vram_peak"] == 30 * GiB
    row = [ln for ln in q.run("list").stdout.splitlines() if ln.startswith(job[:8])]
    assert said in row[0], row
    jsonschema = pytest.importorskip("jsonschema")
    for kind, doc in (("status", rec), ("event", vram[0])):  # what qex writes validates against its schema
        schema = json.loads(q.run("schema", kind).stdout)
        errors = list(jsonschema.validators.validator_for(schema)(schema).iter_errors(doc))
        assert not errors, [e.message for e in errors]


def test_admission_counts_a_running_jobs_use_above_its_claim(q, box):
    """A 10GB claim that uses 75GB of GPU 0 leaves no room there for a 20GB job:
    that one starts on GPU 1, and a two-device claim waits for the job."""
    greedy = q.submit("--vram", "10GB", "--", *holding(q, box, "greedy", 0, 75 * 1024, "go"))
    q.wait_for(lambda: live_peak(q, greedy), what="its first sample (kept for the passes)")
    job = q.submit("--vram", "20GB", "--", "true")
    assert q.wait_state(job, "completed")["assigned"][0]["devices"] == [1]
    two = q.submit("--gpu", "2", "--vram", "20GB", "--", "true")
    rec = q.wait_for(lambda: (r := q.record(two))["blocked_reason"] and r, what="a reason")
    assert rec["blocked_holder"] == "device" and greedy[:8] in rec["blocked_reason"], rec["blocked_reason"]
    open_gate(q, "go")
    q.wait_state(two, "completed")


def test_the_learner_learns_vram_as_it_learns_memory(q, box):
    command = holding(q, box, "learn", 0, 4096, "go")
    open_gate(q, "go")  # (it holds its VRAM only for an instant: the gate is open already)
    command[2] = command[2].replace("while", "sleep 2.5; while")
    first = q.submit("--vram", "guess", "--", *command)
    rec = q.wait_state(first, "completed")
    assert rec["claims"]["pools"]["gpu"]["size"] is None  # nothing learned yet: whole devices
    assert "nothing learned" in rec["claim_source"]["vram"]
    assert rec["usage"]["vram_peak"] == 4096 * MiB
    second = q.submit("--vram", "guess", "--", *command)
    rec = q.record(second)
    assert rec["claims"]["pools"]["gpu"]["size"] == int(4096 * MiB * 1.2) // MiB * MiB + MiB * (
        int(4096 * MiB * 1.2) % MiB > 0
    )
    assert "learned from 1 run (VRAM peak 4GB)" in rec["claim_source"]["vram"]


def test_a_job_without_a_gpu_claim_is_not_sampled(q, box):
    job = q.submit("--", "sh", "-c", "sleep 1.5")
    q.wait_state(job, "completed")
    assert q.record(job)["usage"].get("vram_peak") is None
    assert calls(q) == []
