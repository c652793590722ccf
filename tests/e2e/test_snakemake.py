"""A real Snakemake 9 workflow through the shipped profile (integrations/snakemake/qex,
docs/integrations.md): four samples fanned in to one merge, each rule a qex job; a
failing rule fails the workflow and `qex status --word` reports it; Ctrl-C of
Snakemake kills its jobs. Marker ``workflow`` (pip install -e '.[workflow]'; .ci/run)."""

import json
import subprocess
import sys
import time
from importlib.util import find_spec

import pytest
from e2e_helpers import gate_command, release
from wfm_helpers import PROFILE, ctrl_c, qex_on_path, start

_MISSING = [m for m in ("snakemake", "snakemake_executor_plugin_cluster_generic") if find_spec(m) is None]
pytestmark = [
    pytest.mark.workflow,
    pytest.mark.skipif(bool(_MISSING), reason=f"not installed: {', '.join(_MISSING)} (pip install -e '.[workflow]')"),
]

FAN_IN = """\
SAMPLES = ["a", "b", "c", "d"]

rule all:
    input: "merged.txt"

rule process:
    output: "out/{sample}.txt"
    resources: mem_mb=64
    shell: "echo {wildcards.sample} > {output}"

rule merge:
    input: expand("out/{sample}.txt", sample=SAMPLES)
    output: "merged.txt"
    resources: mem_mb=64
    shell: "cat {input} > {output}"
"""

FAILS = """\
rule all:
    input: "bad.txt"

rule bad:
    output: "bad.txt"
    resources: mem_mb=64
    shell: "exit 3"
"""


def _snakemake(snakefile: str, checks_every: int = 1) -> list[str]:
    # The test's status checks every second (the profile's 5 s is for a shared machine); the rest is the profile's.
    return [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        snakefile,
        "--profile",
        PROFILE,
        "--seconds-between-status-checks",
        str(checks_every),
        "--latency-wait",
        "5",
    ]


def _log(workdir) -> str:
    """What Snakemake has written so far to its log file (.snakemake/log/)."""
    text = ""
    for path in (workdir / ".snakemake" / "log").glob("*.snakemake.log"):
        text += path.read_text(errors="replace")
    return text


def _jobs(q, env, *args):
    return json.loads(q.run("list", "--json", *args, env=env, check=0).stdout)


def test_fan_in_workflow_runs_every_rule_as_a_qex_job(q, tmp_path):
    env = qex_on_path(q)
    (tmp_path / "Snakefile").write_text(FAN_IN)
    proc = subprocess.run(
        _snakemake("Snakefile"), env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=400
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "merged.txt").read_text() == "a\nb\nc\nd\n"
    jobs = _jobs(q, env, "--tag", "snakemake")
    assert sorted(j["name"] for j in jobs) == ["smk-merge"] + ["smk-process"] * 4
    assert {j["state"] for j in jobs} == {"completed"}
    log = proc.stdout + proc.stderr
    for job in jobs:  # the id Snakemake got back is the qex job's id
        assert f"external jobid '{job['id']}'" in log
    # Run again, all up to date: Snakemake ends at once and submits nothing (a profile's sidecar
    # would keep it from ever exiting here: docs/integrations.md).
    again = subprocess.run(
        _snakemake("Snakefile"), env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, again.stdout + again.stderr
    assert len(_jobs(q, env, "--tag", "snakemake")) == 5


def test_failing_rule_fails_the_workflow_and_status_word_says_failed(q, tmp_path):
    env = qex_on_path(q)
    (tmp_path / "Snakefile").write_text(FAILS)
    proc = subprocess.run(
        _snakemake("Snakefile"), env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=400
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log
    [job] = _jobs(q, env, "--tag", "snakemake")
    assert job["state"] == "failed" and job["name"] == "smk-bad"
    assert f"external_jobid: {job['id']}" in log  # Snakemake names the qex job that failed
    assert q.run("status", "--word", job["id"], env=env, check=0).stdout == "failed\n"
    rule_log = q.run("logs", "--stderr", job["id"][:8], env=env, check=0).stdout  # where the rule's own error is
    assert "Error in rule bad" in rule_log and "exit 3" in rule_log


# Snakemake's cancel kills only the jobs it counts as active, and it does not count them while it
# checks their states: a round of checks takes every active job out of its list and puts back
# those still running only when the round ends (snakemake-interface-executor-plugins,
# RemoteExecutor._wait_for_jobs). A Ctrl-C during a round therefore cancels nothing (CI pressed
# it between two jobs' checks once), one during a check breaks the cancel ("cannot access local
# variable 'ret'"), and one between the log line "with external jobid" and the bookkeeping
# misses that job; docs/integrations.md says so. A person's Ctrl-C mostly comes between rounds,
# so the test presses it there: the calls file shows a whole round ended (each id's check
# started and ended, nothing started since), SETTLE seconds ago (the few lines of Python that
# put the jobs back after the last check's end leave nothing to see from outside), and the next
# round is ROUND_EVERY seconds away.
ROUND_EVERY = 3
SETTLE = 0.5


def _between_rounds(calls, ids) -> bool:
    lines = calls.read_text().splitlines() if calls.exists() else []
    checks = [x for x in lines if " status --word " in x]
    round_ = checks[-2 * len(ids) :]
    whole = sorted(round_) == sorted(f"{w} status --word {i}" for w in ("start", "end") for i in ids)
    if not (whole and checks and checks[-1].startswith("end ") and lines[-1] == checks[-1]):
        return False
    quiet_for = time.time() - calls.stat().st_mtime
    return SETTLE <= quiet_for < ROUND_EVERY - SETTLE


def test_ctrl_c_of_snakemake_kills_its_queued_and_running_jobs(q, tmp_path):
    calls = tmp_path / "qex-calls"
    env = qex_on_path(q, str(calls))
    gate = str(tmp_path / "gate")
    wait = " ".join(gate_command(gate)[2:]).replace("{", "{{").replace("}", "}}")
    (tmp_path / "Snakefile").write_text(
        'rule all:\n    input: expand("h/{s}.txt", s=["a", "b"])\n\n'
        'rule hang:\n    output: "h/{s}.txt"\n    resources: mem_mb=64\n'
        f'    shell: "{wait}; touch {{output}}"\n'
    )
    smk = start(_snakemake("Snakefile", checks_every=ROUND_EVERY), env, str(tmp_path))
    try:
        q.wait_for(
            lambda: len(_jobs(q, env, "--tag", "snakemake", "--state", "running")) >= 1,
            timeout=120,
            what="a rule running as a qex job",
        )
        # Snakemake holds both ids (its log says so as it goes): a Ctrl-C in the middle of a
        # `qex submit` would leave a job Snakemake never heard of, as it would from a terminal.
        q.wait_for(lambda: _log(tmp_path).count("with external jobid") == 2, timeout=60, what="both submitted")
        ids = [line.split("'")[1] for line in _log(tmp_path).splitlines() if "with external jobid" in line]
        q.wait_for(
            lambda: _between_rounds(calls, ids), timeout=60, what="Snakemake between two rounds of status checks"
        )
        ctrl_c(smk)
        out = smk.communicate(timeout=120)[0]
    finally:
        release(gate)
    assert smk.returncode != 0, out
    jobs = _jobs(q, env, "--tag", "snakemake")
    assert {j["state"] for j in jobs} <= {"killed", "cancelled"} and "killed" in {j["state"] for j in jobs}, out
    assert not (tmp_path / "h" / "a.txt").exists() and not (tmp_path / "h" / "b.txt").exists()
