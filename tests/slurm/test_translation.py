"""Issue 26: every row of the translation table (docs/slurm.md, `qex help slurm`), or its refusal,
on the real test cluster. The jobs of the rows are submitted held (``sbatch_args = ["--hold"]``,
itself a row): ``scontrol show job`` shows what Slurm was asked, and nothing runs."""

import json
import os
import re

import pytest

pytestmark = pytest.mark.slurm

HELD = '[backend]\nkind = "slurm"\npartition = "debug"\naccount = "lab"\nsbatch_args = ["--hold"]\n'


@pytest.fixture
def held(sq):
    sq.write_config(HELD)
    return sq


def shown(q, *argv) -> tuple[str, str]:
    """Submit held; (scontrol show job of it, the submission's stderr)."""
    proc = q.run("submit", *argv, "--", "true")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    rec = q.record(proc.stdout.strip())
    out = q.cluster.client("scontrol", "show", "job", rec["slurm_job_id"])
    assert out.returncode == 0, out.stderr
    return out.stdout, proc.stderr


def refused(q, *argv, words: str) -> None:
    before = len(q.records())
    proc = q.run("submit", *argv, "--", "true")
    assert proc.returncode == 121, (proc.returncode, proc.stdout, proc.stderr)
    assert words in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(q.records()) == before  # nothing queued


def test_the_configs_partition_account_and_sbatch_args_reach_the_slurm_job(held):
    text, _ = shown(held)
    assert "Partition=debug" in text and "Account=lab" in text
    assert "Reason=JobHeldUser" in text  # sbatch_args as written


def test_cpu_rounds_up_and_memory_in_megabytes(held):
    text, _ = shown(held, "--cpu", "2.2", "--mem", "1000M")
    assert re.search(r"\bCPUs/Task=3\b", text), text
    assert "MinMemoryNode=1000M" in text, text


def test_a_share_of_the_budget_is_refused(held):
    refused(held, "--cpu", "half", words="--cpu")


def test_gpus_become_a_gres_of_as_many_gpus(held):
    text, _ = shown(held, "--gpu", "3")
    assert "gres:gpu:3" in text or "gres/gpu=3" in text, text


def test_vram_is_shards_where_the_config_says_what_a_shard_is(held):
    held.write_config(HELD + 'shard_size = "10GB"\n')
    text, err = shown(held, "--vram", "25GB")
    assert "gres:shard:3" in text or "gres/shard=3" in text, text
    assert "warning" not in err
    refused(held, "--gpu", "2", "--vram", "10GB", words="shards")


def test_vram_gets_whole_gpus_with_a_warning(held):
    text, err = shown(held, "--vram", "8GB")
    assert "gres:gpu:1" in text or "gres/gpu=1" in text, text
    assert "warning" in err and "--vram" in err and "whole GPU" in err, err


def test_a_claim_is_a_license_and_a_sized_claim_is_refused(held):
    text, _ = shown(held, "--claim", "gate=2")
    assert "Licenses=gate:2" in text, text
    refused(held, "--claim", "gate=1:1GB", words="--claim")


def test_a_lock_is_a_license_of_one(held):
    text, _ = shown(held, "--lock", "gate")
    assert "Licenses=gate:1" in text, text


def test_a_license_the_cluster_lacks_is_refused_with_slurms_words(held):
    refused(held, "--lock", "nosuch", words="Slurm refused the job")


def test_timeout_is_time_in_minutes_rounded_up(held):
    text, _ = shown(held, "--timeout", "61s")
    assert "TimeLimit=00:02:00" in text, text


def test_max_queue_time_is_a_deadline_and_needs_a_timeout(held):
    text, _ = shown(held, "--timeout", "5m", "--max-queue-time", "1h")
    assert re.search(r"Deadline=\d{4}-", text), text
    refused(held, "--max-queue-time", "1h", words="--max-queue-time")


def test_a_priority_becomes_a_slurm_nice_of_the_opposite_sign(held):
    text, _ = shown(held, "--priority", "-3")
    assert "Nice=3" in text, text
    text, _ = shown(held, "--priority", "4")  # (root may lower a nice below 0)
    assert "Nice=-4" in text, text


def test_an_out_of_memory_end_is_final(held):
    proc = held.run("submit", "--", "true", check=0)
    assert held.record(proc.stdout.strip())["oom_retries"] == 0  # ([defaults] oom_retries is 1)


def test_the_name_and_the_tags_reach_the_slurm_job(held):
    text, _ = shown(held, "--name", "nm", "--tag", "a", "--tag", "b")
    assert "JobName=nm" in text and "tags:a,b" in text, text


def test_cwd_becomes_the_slurm_jobs_work_dir(held, tmp_path):
    text, _ = shown(held, "--cwd", str(tmp_path))
    assert f"WorkDir={tmp_path}" in text, text


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--retries", "2"], "--retries"),
        (["--oom-retries", "1"], "--oom-retries"),
        (["--dedupe-key", "k", "--dedupe-window", "1h"], "--dedupe-window"),
    ],
)
def test_what_has_no_translation_is_refused(held, argv, words):
    refused(held, *argv, words=words)


def test_stdin_from_the_terminal_is_refused(held):
    proc = held.run("submit", "--stdin", "-", "--", "cat", input="x")
    assert proc.returncode == 121 and "--stdin -" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "defaults, words", [("retries = 1", "[defaults] retries"), ('max_queue_time = "1h"', "[defaults] max_queue_time")]
)
def test_a_default_without_translation_is_refused_naming_the_key(held, defaults, words):
    held.write_config(HELD + f"[defaults]\n{defaults}\n")
    refused(held, words=words)


def test_env_and_env_capture_reach_the_job_on_its_node(sq, tmp_path):
    env = {"QEX_TEST_CAPTURED": "yes"}
    job = sq.submit(
        "--env",
        "K=v,w",
        "--cwd",
        str(tmp_path),
        "--",
        "sh",
        "-c",
        'echo "K=$K captured=$QEX_TEST_CAPTURED pwd=$(pwd) slurm=$SLURM_JOB_ID"',
        env=env,
    )
    none = sq.submit(
        "--env-capture",
        "none",
        "--env",
        "PATH=/usr/bin:/bin",
        "--",
        "sh",
        "-c",
        'echo "captured=$QEX_TEST_CAPTURED"',
        env=env,
    )
    assert sq.run("wait", job, none, timeout=120).returncode == 0
    line = sq.run("logs", job, check=0).stdout.strip()
    assert line == f"K=v,w captured=yes pwd={tmp_path} slurm={sq.record(job)['slurm_job_id']}", line
    assert sq.run("logs", none, check=0).stdout.strip() == "captured="


def test_qex_backend_overrides_the_config(sq):
    job = sq.submit("--", "true", env={"QEX_BACKEND": "local"})
    assert sq.run("wait", job, env={"QEX_BACKEND": "local"}).returncode == 0
    assert sq.record(job)["slurm_job_id"] is None
    proc = sq.run("submit", "--", "true", env={"QEX_BACKEND": "pbs"})
    assert proc.returncode == 121 and "QEX_BACKEND" in proc.stderr, proc.stderr


def test_config_show_and_info_say_the_backend_and_its_controller(sq):
    shown_ = json.loads(sq.run("config", "show", "--json", check=0).stdout)
    assert shown_["values"]["backend.kind"]["resolved"] == "slurm"
    info = sq.run("info", check=0).stdout
    assert "slurm" in info and "UP" in info, info
    local = sq.run("config", "show", "--json", env={"QEX_BACKEND": "local"}, check=0).stdout
    assert json.loads(local)["values"]["backend.kind"]["source"] == "environment (QEX_BACKEND)"


def test_cancel_takes_a_waiting_job_out_of_slurm_and_clean_removes_its_record(held):
    proc = held.run("submit", "--", "true", check=0)
    job = proc.stdout.strip()
    slurm_id = held.record(job)["slurm_job_id"]
    assert held.run("cancel", job).returncode == 0
    assert held.record(job)["state"] == "cancelled"
    state = held.cluster.client("squeue", "-h", "-j", slurm_id, "-o", "%T").stdout.strip()
    assert state in ("", "CANCELLED"), state
    assert held.run("clean", job).returncode == 0
    assert not os.path.exists(os.path.join(held.state, "jobs", job))
