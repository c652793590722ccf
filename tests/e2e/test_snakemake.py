"""A real Snakemake 9 workflow through the shipped profile (integrations/snakemake/qex,
docs/integrations.md): four samples fanned in to one merge, each rule a qex job; a
failing rule fails the workflow and `qex status --word` reports it; Ctrl-C of
Snakemake kills its jobs. Marker ``workflow`` (pip install -e '.[workflow]'; .ci/run)."""

import json
import os
import signal
import subprocess
import sys
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


def _snakemake(snakefile: str) -> list[str]:
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
        "1",
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


# Snakemake's cancel kills only the jobs it counts as active, and it counts none while it
# checks their states: a round of checks takes every active job out of its list and puts back
# those still running only when the round ends (snakemake-interface-executor-plugins,
# RemoteExecutor._wait_for_jobs). A Ctrl-C during a round cancels nothing through Snakemake's
# cancel command (CI pressed it there once); the profile's sidecar (qex-sidecar) kills the run's
# jobs all the same. The test presses it there on purpose: the first job's check of a round has
# ended, the second's has not begun (both have been checked before: both are Snakemake's).
ACTIVE = {"queued", "starting", "running"}


def _mid_round(calls, ids) -> bool:
    lines = calls.read_text().splitlines() if calls.exists() else []
    return bool(lines) and lines[-1] == f"end status --word {ids[0]}" and f"end status --word {ids[1]}" in lines


def _start_hanging(q, tmp_path):
    """Snakemake running two rules that wait on a gate file, both submitted and checked once;
    returns Snakemake, its environment, the gate, the calls file and the two job ids."""
    calls = tmp_path / "qex-calls"
    env = qex_on_path(q, str(calls))
    gate = str(tmp_path / "gate")
    wait = " ".join(gate_command(gate)[2:]).replace("{", "{{").replace("}", "}}")
    (tmp_path / "Snakefile").write_text(
        'rule all:\n    input: expand("h/{s}.txt", s=["a", "b"])\n\n'
        'rule hang:\n    output: "h/{s}.txt"\n    resources: mem_mb=64\n'
        f'    shell: "{wait}; touch {{output}}"\n'
    )
    smk = start(_snakemake("Snakefile"), env, str(tmp_path))
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
        q.wait_for(lambda: all(f"end status --word {i}" in calls.read_text() for i in ids), timeout=60, what="checks")
    except BaseException:
        smk.kill()
        smk.communicate()
        release(gate)
        raise
    return smk, env, gate, calls, ids


def _all_stopped(q, env, tmp_path, ids) -> None:
    """Both jobs end killed or cancelled (the sidecar's kill may end after Snakemake), one of
    them killed while it ran; both carry the run's tag; no rule's output was made."""
    final = q.wait_for(
        lambda: (jobs := _jobs(q, env, "--tag", "snakemake")) and all(j["state"] not in ACTIVE for j in jobs) and jobs,
        timeout=60,
        what="the workflow's jobs to end",
    )
    assert sorted(j["id"] for j in final) == sorted(ids)
    assert {j["state"] for j in final} <= {"killed", "cancelled"} and "killed" in {j["state"] for j in final}, final
    [run] = {t for j in final for t in j["tags"] if t.startswith("smk-")}  # one run, the sidecar's name for it
    assert all(run in j["tags"] for j in final)
    assert not (tmp_path / "h" / "a.txt").exists() and not (tmp_path / "h" / "b.txt").exists()


def test_ctrl_c_during_status_checks_kills_its_queued_and_running_jobs(q, tmp_path):
    smk, env, gate, calls, ids = _start_hanging(q, tmp_path)
    try:
        q.wait_for(lambda: _mid_round(calls, ids), timeout=60, what="Snakemake between two checks of one round")
        ctrl_c(smk)
        out = smk.communicate(timeout=120)[0]
        assert smk.returncode != 0, out
        _all_stopped(q, env, tmp_path, ids)
        assert any(x.startswith("start kill --tag smk-") for x in calls.read_text().splitlines())  # the sidecar's
    finally:
        release(gate)


def test_snakemake_killed_outright_leaves_no_job_behind(q, tmp_path):
    """SIGKILL of Snakemake alone (no cancel runs): its sidecar sees it gone and kills the jobs."""
    smk, env, gate, calls, ids = _start_hanging(q, tmp_path)
    try:
        os.kill(smk.pid, signal.SIGKILL)
        smk.communicate(timeout=60)
        _all_stopped(q, env, tmp_path, ids)
    finally:
        release(gate)
