"""Issue 26: the same commands on a real Slurm (tests/slurm/cluster.py), results from qex's records.

Each job waits on a gate file the test creates (never a sleep) where the test must see it
while it runs (its claims in ``scontrol show job``, a kill)."""

import json
import os
import re
import shlex
import subprocess

import pytest

pytestmark = pytest.mark.slurm


def gated(q, name: str, then: str = "true") -> list[str]:
    gate = q.gate(name)
    return ["bash", "-c", f"while [ ! -e {shlex.quote(gate)} ]; do sleep 0.05; done; {then}"]


def release(q, name: str) -> None:
    open(q.gate(name), "w").close()


def scontrol(q, slurm_id: str) -> str:
    proc = q.cluster.client("scontrol", "show", "job", slurm_id)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def until_running(q, job_id: str) -> dict:
    return q.wait_state(job_id, "running", timeout=60)


def test_a_job_runs_on_slurm_with_its_claims_its_exit_code_and_its_output(sq):
    job = sq.submit(
        "--cpu",
        "1.5",
        "--mem",
        "300M",
        "--gpu",
        "2",
        "--timeout",
        "90s",
        "--name",
        "core-job",
        "--tag",
        "t1",
        "--",
        *gated(sq, "core", "echo out-line; echo err-line >&2; echo gpus=$CUDA_VISIBLE_DEVICES; exit 7"),
    )
    rec = until_running(sq, job)
    slurm_id = rec["slurm_job_id"]
    assert slurm_id and slurm_id.isdigit(), rec
    shown = scontrol(sq, slurm_id)
    assert "JobName=core-job" in shown
    assert re.search(r"\bNumCPUs=2\b", shown), shown  # --cpu 1.5 -> --cpus-per-task=2 (rounded up)
    assert "mem=300M" in shown, shown  # --mem -> --mem
    assert "gres:gpu:2" in shown or "gres/gpu=2" in shown, shown  # --gpu 2 -> --gres=gpu:2
    assert "TimeLimit=00:02:00" in shown, shown  # --timeout 90s -> --time=2 (minutes, up)
    assert f"Comment=qex:{job} tags:t1" in shown, shown  # tags -> --comment
    assert "JobState=RUNNING" in shown
    assert f"job {slurm_id} (scontrol" in sq.run("status", job, check=0).stdout
    release(sq, "core")
    wait = sq.run("wait", job, timeout=120)
    assert wait.returncode == 7, (wait.stdout, wait.stderr)
    logs = sq.run("logs", job, check=0)
    assert "out-line" in logs.stdout and "gpus=0,1" in logs.stdout, logs.stdout
    assert "err-line" in sq.run("logs", "--stderr", job, check=0).stdout
    final = sq.record(job)
    assert final["state"] == "failed" and final["exit_code"] == 7 and final["slurm_job_id"] == slurm_id
    assert final["usage"]["cpu_secs"] is not None  # the supervisor's usage, written on the node


def test_the_record_is_written_after_scontrol_forgot_the_job(sq):
    job = sq.submit("--", *gated(sq, "forgot", "echo done-line"))
    slurm_id = until_running(sq, job)["slurm_job_id"]
    release(sq, "forgot")
    sq.wait_state(job, "completed", timeout=60)

    def forgotten():
        return sq.cluster.client("scontrol", "show", "job", slurm_id).returncode != 0

    sq.wait_for(forgotten, timeout=60, what="scontrol to forget the job (MinJobAge)", interval=0.5)
    status = sq.run("status", "--json", job, check=0)
    assert json.loads(status.stdout)[0]["state"] == "completed"
    assert sq.run("wait", job).returncode == 0
    assert "done-line" in sq.run("logs", job, check=0).stdout


def test_kill_cancels_the_slurm_job_and_records_killed(sq):
    job = sq.submit("--", *gated(sq, "never"))
    slurm_id = until_running(sq, job)["slurm_job_id"]
    kill = sq.run("kill", job, timeout=120)
    assert kill.returncode == 0, (kill.stdout, kill.stderr)
    rec = sq.wait_state(job, "killed", timeout=60)
    assert rec["kill_requested"]

    def slurm_ended():
        out = sq.cluster.client("squeue", "-h", "-j", slurm_id, "-o", "%T").stdout.strip()
        return out in ("", "COMPLETED", "FAILED", "CANCELLED")

    sq.wait_for(slurm_ended, timeout=60, what="the Slurm job to end", interval=0.2)


def test_kill_of_a_job_slurm_holds_cancels_it_there(sq):
    held = sq.submit("--", *gated(sq, "held-first"))
    job = sq.submit("--after", held, "--", "true")
    slurm_id = sq.record(job)["slurm_job_id"]
    assert "afterany:" in scontrol(sq, slurm_id)
    assert sq.run("kill", job).returncode == 0
    assert sq.record(job)["state"] == "cancelled"
    shown = sq.cluster.client("squeue", "-h", "-j", slurm_id, "-o", "%T").stdout.strip()
    assert shown in ("", "CANCELLED"), shown
    release(sq, "held-first")
    assert sq.run("wait", held, timeout=120).returncode == 0


def test_a_failed_first_stage_skips_what_needs_it_in_slurm_too_and_runs_what_comes_after(sq):
    path = os.path.join(sq.root, "pipe.toml")
    with open(path, "w") as fh:
        fh.write(
            'name = "p"\n'
            '[[jobs]]\nname = "first"\ncommand = ["sh", "-c", "exit 5"]\n'
            '[[jobs]]\nname = "needy"\ncommand = ["sh", "-c", "echo never"]\nneeds = ["first"]\n'
            '[[jobs]]\nname = "later"\ncommand = ["sh", "-c", "echo cleaned"]\nafter = ["first"]\n'
        )
    proc = sq.run("pipeline", path, check=0)
    group = proc.stdout.strip().splitlines()[-1].split()[0]
    wait = sq.run("wait", group, timeout=180)
    assert wait.returncode == 5, (wait.stdout, wait.stderr)  # the first failure's code
    by_name = {r["name"]: r for r in sq.records()}
    assert by_name["first"]["state"] == "failed"
    assert by_name["needy"]["state"] == "skipped", by_name["needy"]
    assert by_name["needy"]["skipped_root"] == by_name["first"]["id"]
    assert "did not succeed" in by_name["needy"]["error"]  # (skipped by the failed stage's step, at its end)
    assert by_name["later"]["state"] == "completed"
    assert "cleaned" in sq.run("logs", by_name["later"]["id"], check=0).stdout
    needy = by_name["needy"]["slurm_job_id"]
    out = sq.cluster.client("squeue", "-h", "-j", needy, "-o", "%T").stdout.strip()
    assert out in ("", "CANCELLED"), out  # cancelled in Slurm too


def test_a_five_line_fan_out_is_one_job_array(sq):
    lines = os.path.join(sq.root, "lines.txt")
    with open(lines, "w") as fh:
        fh.write("".join(f"v{i}\n" for i in range(5)))
    proc = sq.run("submit", "--each-line", lines, "--", "echo", "{}", check=0)
    group = proc.stdout.split()[0]
    recs = [r for r in sq.records() if r["group"] == group]
    assert len(recs) == 5
    bases = {r["slurm_job_id"].split("_")[0] for r in recs}
    assert len(bases) == 1, [r["slurm_job_id"] for r in recs]  # one sbatch: one array
    assert sorted(r["slurm_job_id"].split("_")[1] for r in recs) == [str(i) for i in range(5)]
    assert sq.run("wait", group, timeout=180).returncode == 0
    for i, r in enumerate(sorted(recs, key=lambda r: int(r["slurm_job_id"].split("_")[1]))):
        assert sq.record(r["id"])["state"] == "completed"
        assert sq.run("logs", r["id"], check=0).stdout.strip() == f"v{i}"


def test_export_of_a_two_stage_pipeline_runs_under_bash_alone(sq, tmp_path):
    out_dir = tmp_path / "exported"
    out_dir.mkdir()
    path = os.path.join(sq.root, "two.toml")
    with open(path, "w") as fh:
        fh.write(
            f'[[jobs]]\nname = "make"\ncommand = ["sh", "-c", "echo made > {out_dir}/a"]\n'
            f'[[jobs]]\nname = "use"\ncommand = ["sh", "-c", "cat {out_dir}/a > {out_dir}/b"]\n'
            'needs = ["make"]\n'
        )
    script = sq.run("export", "slurm", path, check=0).stdout
    assert "-m qex" not in script and "slurmstep" not in script and "QEX_" not in script  # nothing of qex
    env = {"PATH": os.environ["PATH"], **sq.cluster.env}
    proc = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    ids = proc.stdout.split()
    assert len(ids) == 2 and all(i.isdigit() for i in ids), proc.stdout
    assert '"--dependency=afterok:$j0"' in script
    second = scontrol(sq, ids[1])
    assert re.search(rf"Dependency=afterok:{ids[0]}\b", second) or "Dependency=(null)" in second, second
    sq.wait_for(
        lambda: (out_dir / "b").exists() and (out_dir / "b").read_text() == "made\n",
        timeout=90,
        what="the second stage's file",
        interval=0.2,
    )


def test_export_of_a_fan_out_is_one_array(sq, tmp_path):
    lines = tmp_path / "lines"
    lines.write_text("one\ntwo words\n")
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"command": ["sh", "-c", f"echo {{}} > {tmp_path}/out-$SLURM_ARRAY_TASK_ID"]}))
    script = sq.run("export", "slurm", job, "--each-line", lines, check=0).stdout
    assert "--array=0-1" in script
    env = {"PATH": os.environ["PATH"], **sq.cluster.env}
    proc = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip().isdigit(), (proc.stdout, proc.stderr)
    sq.wait_for(
        lambda: (tmp_path / "out-1").exists() and (tmp_path / "out-1").read_text() == "two words\n",
        timeout=90,
        what="the array's second task",
        interval=0.2,
    )
    assert (tmp_path / "out-0").read_text() == "one\n"


def test_a_waiting_job_shows_slurms_reason_and_an_scancel_outside_qex_is_recorded(sq):
    sq.write_config('[backend]\nkind = "slurm"\nsbatch_args = ["--hold"]\n')
    job = sq.submit("--", "true")
    status = json.loads(sq.run("status", "--json", job, check=0).stdout)[0]
    assert status["state"] == "queued"
    assert status["blocked_reason"] == "Slurm: pending (JobHeldUser)" and status["blocked_holder"] == "slurm"
    assert sq.cluster.client("scancel", sq.record(job)["slurm_job_id"]).returncode == 0
    wait = sq.run("wait", job, timeout=60)
    rec = sq.record(job)
    assert rec["state"] == "cancelled" and "Slurm" in rec["error"], rec
    assert wait.returncode == 125


def test_timeout_is_the_supervisors_on_the_node(sq):
    job = sq.submit("--timeout", "2s", "--", "sleep", "60")
    assert sq.run("wait", job, timeout=120).returncode == 125  # (timeout: the contract's 125)
    rec = sq.record(job)
    assert rec["state"] == "timeout", rec


def test_run_streams_the_log_and_returns_the_jobs_code_and_rerun_submits_again(sq):
    proc = sq.run("run", "--name", "ran", "--", "sh", "-c", "echo streamed; exit 4", timeout=120)
    assert proc.returncode == 4, (proc.stdout, proc.stderr)
    assert "streamed" in proc.stdout
    first = next(r for r in sq.records() if r["name"] == "ran")
    again = sq.run("rerun", first["id"], check=0).stdout.strip()
    assert sq.run("wait", again, timeout=120).returncode == 4
    assert sq.record(again)["slurm_job_id"] not in (None, first["slurm_job_id"])
    listing = json.loads(sq.run("list", "--json", check=0).stdout)
    assert {r["id"] for r in listing} >= {first["id"], again}


def test_a_job_whose_dependency_can_never_be_met_in_slurm_is_cancelled_and_skipped(sq):
    sq.write_config('[backend]\nkind = "slurm"\nsbatch_args = ["--hold"]\n')
    first = sq.submit("--", "true")
    sq.write_config('[backend]\nkind = "slurm"\n')
    second = sq.submit("--needs", first, "--", "true")
    first_slurm, second_slurm = sq.record(first)["slurm_job_id"], sq.record(second)["slurm_job_id"]
    assert f"afterok:{first_slurm}" in sq.cluster.client("scontrol", "show", "job", second_slurm).stdout
    assert sq.cluster.client("scancel", first_slurm).returncode == 0  # outside qex: its step never runs
    wait = sq.run("wait", second, timeout=120)
    assert wait.returncode == 126, (wait.stdout, wait.stderr)  # skipped
    rec = sq.record(second)
    assert rec["state"] == "skipped" and "DependencyNeverSatisfied" in rec["error"], rec
    assert rec["skipped_root"] == first and sq.record(first)["state"] == "cancelled"
    out = sq.cluster.client("squeue", "-h", "-j", second_slurm, "-o", "%T").stdout.strip()
    assert out in ("", "CANCELLED"), out


def test_events_show_a_slurm_jobs_life(sq):
    job = sq.submit("--", "true")
    assert sq.run("wait", job, timeout=120).returncode == 0
    proc = sq.run("events", "--json", "--since", "start", "--timeout", "3s", timeout=60)
    states = [e.get("state") for e in map(json.loads, proc.stdout.splitlines()) if e.get("id") == job]
    assert states[0] == "queued" and states[-1] == "completed" and "running" in states, proc.stdout


def test_a_need_that_already_failed_skips_at_submission_and_one_that_succeeded_is_met(sq):
    bad = sq.submit("--", "false")
    good = sq.submit("--", "true")
    assert sq.run("wait", bad, good, timeout=120).returncode == 1
    skipped = sq.submit("--needs", bad, "--", "true")
    rec = sq.record(skipped)
    assert rec["state"] == "skipped" and rec["skipped_root"] == bad and rec["slurm_job_id"] is None, rec
    assert sq.run("wait", skipped).returncode == 126
    met = sq.submit("--needs", good, "--", "true")
    assert sq.run("wait", met, timeout=120).returncode == 0
