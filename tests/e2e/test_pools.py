"""GPUs, VRAM, counted pools and locks, end to end, on a machine with no GPU.

Every observable item of the seed's "What I tested" list, with real jobs."""

import json
import os

import pytest
from e2e_helpers import gated, release

GPU_POOLS = """
[budget]
cpu = 8
mem = "8GB"
[defaults]
mem = "10MB"
[[pool]]
name    = "gpu"
size    = "vram"
devices = ["24GB", "24GB", "24GB", "24GB"]
env     = "CUDA_VISIBLE_DEVICES"

[[pool]]
name  = "net"
count = 2
"""

TWO_GPUS = GPU_POOLS.replace('["24GB", "24GB", "24GB", "24GB"]', '["24GB", "24GB"]')


def test_a_machine_with_no_gpu_schedules_a_gpu_claim_from_the_configuration(q):
    q.write_config(GPU_POOLS)
    out = os.path.join(q.root, "env.txt")
    job = q.submit(
        "--gpu",
        "1",
        "--vram",
        "20GB",
        "--",
        "sh",
        "-c",
        f'echo "$CUDA_VISIBLE_DEVICES|$QEX_GPU_DEVICES|$QEX_GPU_VRAM" > {out}',
    )
    rec = q.wait_state(job, "completed")
    assert open(out).read().strip() == f"0|0|{20 * 1024**3}"
    assert rec["assigned"] == [{"pool": "gpu", "devices": [0], "size": 20 * 1024**3}]
    assert rec["claims"]["pools"] == {"gpu": {"count": 1, "size": 20 * 1024**3}}
    shown = q.run("status", job).stdout
    assert "devices  gpu 0" in shown


def test_the_shell_value_of_the_device_variable_is_replaced_not_refused(q):
    q.write_config(GPU_POOLS)
    out = os.path.join(q.root, "env.txt")
    job = q.submit(
        "--gpu", "2", "--", "sh", "-c", f'echo "$CUDA_VISIBLE_DEVICES" > {out}', env={"CUDA_VISIBLE_DEVICES": "7"}
    )
    q.wait_state(job, "completed")
    assert open(out).read().strip() == "0,1"


def test_a_job_that_sets_the_device_variable_itself_is_refused(q):
    q.write_config(GPU_POOLS)
    proc = q.run("submit", "--gpu", "1", "--env", "CUDA_VISIBLE_DEVICES=3", "--", "true")
    assert proc.returncode == 121
    assert "CUDA_VISIBLE_DEVICES" in proc.stderr
    job_file = os.path.join(q.root, "job.toml")
    with open(job_file, "w") as fh:
        fh.write('command = ["true"]\n[env]\nCUDA_VISIBLE_DEVICES = "1"\n[resources]\ngpu = 1\n')
    proc = q.run("submit", "--job", job_file)
    assert proc.returncode == 121 and "CUDA_VISIBLE_DEVICES" in proc.stderr
    assert q.records() == []


def test_two_gpu_jobs_get_different_devices_and_a_third_waits(q):
    q.write_config(TWO_GPUS)
    cmd_a, gate_a = gated(q, "a"), q.gate("a")
    cmd_b, gate_b = gated(q, "b"), q.gate("b")
    a = q.submit("--gpu", "1", "--", *cmd_a)
    b = q.submit("--gpu", "1", "--", *cmd_b)
    c = q.submit("--gpu", "1", "--", "true")
    ra, rb = q.wait_state(a, "running"), q.wait_state(b, "running")
    assert {ra["assigned"][0]["devices"][0], rb["assigned"][0]["devices"][0]} == {0, 1}
    rc = q.wait_for(lambda: (r := q.record(c))["blocked_reason"] and r, what="a reason for the third job")
    assert rc["state"] == "queued"
    release(gate_a)
    done = q.wait_state(c, "completed")
    assert done["assigned"][0]["devices"] == ra["assigned"][0]["devices"]
    release(gate_b)
    q.wait_state(b, "completed")


def test_a_whole_device_claim_leaves_no_room_for_a_second_job(q):
    q.write_config(TWO_GPUS.replace('["24GB", "24GB"]', '["24GB"]'))
    cmd, gate = gated(q, "whole"), q.gate("whole")
    whole = q.submit("--gpu", "1", "--", *cmd)
    q.wait_state(whole, "running")
    small = q.submit("--vram", "1GB", "--", "true")
    q.wait_for(lambda: q.record(small)["blocked_reason"], what="the small job to wait")
    assert q.record(small)["state"] == "queued"
    release(gate)
    q.wait_state(small, "completed")


def test_a_device_holds_three_8gb_jobs_on_24gb_and_no_fourth(q):
    q.write_config(TWO_GPUS.replace('["24GB", "24GB"]', '["24GB"]'))
    gates, jobs = [], []
    for i in range(3):
        cmd, gate = gated(q, f"v{i}"), q.gate(f"v{i}")
        gates.append(gate)
        jobs.append(q.submit("--vram", "8GB", "--", *cmd))
    for job in jobs:
        q.wait_state(job, "running")
    fourth = q.submit("--vram", "8GB", "--", "true")
    q.wait_for(lambda: q.record(fourth)["blocked_reason"], what="the fourth to wait")
    assert q.record(fourth)["state"] == "queued"
    release(gates[0])
    q.wait_state(fourth, "completed")
    for gate in gates[1:]:
        release(gate)


def test_the_device_with_most_free_capacity_is_chosen_first(q):
    q.write_config(GPU_POOLS)
    cmd, gate = gated(q, "first"), q.gate("first")
    first = q.submit("--vram", "10GB", "--", *cmd)
    assert q.wait_state(first, "running")["assigned"][0]["devices"] == [0]
    second = q.submit("--vram", "10GB", "--", "true")
    assert q.wait_state(second, "completed")["assigned"][0]["devices"] == [1]
    release(gate)


@pytest.mark.parametrize("policy", ["run-when-idle", "queue", "reject"])
def test_a_gpu_claim_above_the_pool_total_is_refused_whatever_the_oversized_policy(q, policy):
    q.write_config(TWO_GPUS + f'[queue]\noversized = "{policy}"\n')
    proc = q.run("submit", "--gpu", "3", "--", "true")
    assert proc.returncode == 121
    assert "never start" in proc.stderr
    assert q.records() == []


def test_a_vram_claim_above_the_largest_device_is_refused_at_the_submission(q):
    q.write_config(TWO_GPUS)
    proc = q.run("submit", "--vram", "30GB", "--", "true")
    assert proc.returncode == 121
    assert "never start" in proc.stderr and "never added" in proc.stderr
    assert q.records() == []


def test_a_gpu_claim_with_no_gpu_pool_names_the_configuration(q):
    q.write_config('[defaults]\nmem = "10MB"\n')
    proc = q.run("submit", "--gpu", "1", "--", "true")
    assert proc.returncode == 121
    assert q.config in proc.stderr and "[[pool]]" in proc.stderr


def test_gpu_zero_with_vram_is_refused(q):
    q.write_config(TWO_GPUS)
    proc = q.run("submit", "--gpu", "0", "--vram", "1GB", "--", "true")
    assert proc.returncode == 121 and "--gpu" in proc.stderr


def test_a_size_on_a_plain_pool_is_refused(q):
    q.write_config(TWO_GPUS)
    proc = q.run("submit", "--claim", "net=1:2GB", "--", "true")
    assert proc.returncode == 121 and "net" in proc.stderr


def test_a_lock_needs_no_configuration_and_still_excludes(q):
    q.write_config('[budget]\ncpu = 4\n[defaults]\nmem = "10MB"\n')
    cmd, gate = gated(q, "lock"), q.gate("lock")
    holder = q.submit("--lock", "target", "--", *cmd)
    q.wait_state(holder, "running")
    second = q.submit("--lock", "target", "--", "true")
    free = q.submit("--", "true")  # a job with no lock passes it
    q.wait_state(free, "completed")
    reason = q.wait_for(lambda: q.record(second)["blocked_reason"], what="the lock reason")
    assert q.record(second)["state"] == "queued"
    assert holder[:8] in reason
    release(gate)
    q.wait_state(second, "completed")


def test_an_undeclared_pool_is_a_lock_and_two_units_of_it_are_refused(q):
    q.write_config('[defaults]\nmem = "10MB"\n')
    proc = q.run("submit", "--claim", "scratch=2", "--", "true")
    assert proc.returncode == 121 and "lock" in proc.stderr
    job = q.submit("--claim", "scratch=1", "--", "true")
    assert q.wait_state(job, "completed")["claims"]["pools"] == {"scratch": {"count": 1, "size": None}}


def test_a_counted_pool_lets_n_jobs_operate_and_makes_the_next_one_wait(q):
    q.write_config(GPU_POOLS)
    out = os.path.join(q.root, "claim.txt")
    gates, jobs = [], []
    for i in range(2):
        cmd, gate = gated(q, f"net{i}", before=f'echo "$QEX_CLAIM_NET" > {out}; '), q.gate(f"net{i}")
        gates.append(gate)
        jobs.append(q.submit("--claim", "net=1", "--", *cmd))
    for job in jobs:
        q.wait_state(job, "running")
    assert open(out).read().strip() == "1"
    third = q.submit("--claim", "net=1", "--", "true")
    q.wait_for(lambda: q.record(third)["blocked_reason"], what="the third to wait")
    assert q.record(third)["state"] == "queued"
    release(gates[1])
    q.wait_state(third, "completed")
    release(gates[0])


def test_a_job_file_gives_the_same_claims_as_the_options(q):
    q.write_config(GPU_POOLS)
    job_file = os.path.join(q.root, "job.toml")
    with open(job_file, "w") as fh:
        fh.write(
            'command = ["true"]\n[resources]\ngpu = 2\nvram = "8GB"\nlocks = ["data"]\n[resources.claims]\nnet = 1\n'
        )
    from_file = q.wait_state(q.submit("--job", job_file), "completed")
    from_flags = q.wait_state(
        q.submit("--gpu", "2", "--vram", "8GB", "--lock", "data", "--claim", "net=1", "--", "true"), "completed"
    )
    assert from_file["claims"] == from_flags["claims"]


def test_defaults_vram_applies_to_a_gpu_claim_without_vram(q):
    q.write_config(GPU_POOLS.replace('mem = "10MB"', 'mem = "10MB"\nvram = "4GB"'))
    rec = q.wait_state(q.submit("--gpu", "1", "--", "true"), "completed")
    assert rec["claims"]["pools"]["gpu"] == {"count": 1, "size": 4 * 1024**3}


def test_a_job_that_fails_to_start_still_frees_its_devices(q):
    q.write_config(TWO_GPUS.replace('["24GB", "24GB"]', '["24GB"]'))
    script = os.path.join(q.root, "vanishing.sh")
    with open(script, "w") as fh:
        fh.write("#!/bin/sh\ntrue\n")
    os.chmod(script, 0o755)
    cmd, gate = gated(q, "blocker"), q.gate("blocker")
    blocker = q.submit("--gpu", "1", "--", *cmd)
    q.wait_state(blocker, "running")
    doomed = q.submit("--gpu", "1", "--", script)  # valid at submission...
    os.unlink(script)  # ...gone when it would start
    release(gate)
    rec = q.wait_state(doomed, "failed")
    assert "cannot start" in rec["error"]
    after = q.submit("--gpu", "1", "--", "true")
    assert q.wait_state(after, "completed")["assigned"][0]["devices"] == [0]


def test_an_assignment_survives_kill_9_of_everything_but_the_supervisor(q):
    q.write_config(TWO_GPUS)
    cmd, gate = gated(q, "keep"), q.gate("keep")
    held = q.submit("--gpu", "1", "--", *cmd)
    rec = q.wait_state(held, "running")
    supervisor = rec["supervisor_pid"]
    for pid in q.processes():
        if pid != supervisor:
            os.kill(pid, 9)
    info = json.loads(q.run("info", "--json", check=0).stdout)
    gpu = next(p for p in info["pools"] if p["name"] == "gpu")
    held_device = rec["assigned"][0]["devices"][0]
    assert gpu["devices"][held_device]["free"] == 0
    other = q.wait_state(q.submit("--gpu", "1", "--", "true"), "completed")
    assert other["assigned"][0]["devices"] != [held_device]
    release(gate)
    q.wait_state(held, "completed")


def test_info_reports_the_pools_and_their_devices(q):
    q.write_config(GPU_POOLS)
    cmd, gate = gated(q, "info"), q.gate("info")
    job = q.submit("--vram", "20GB", "--claim", "net=1", "--", *cmd)
    q.wait_state(job, "running")
    info = json.loads(q.run("info", "--json", check=0).stdout)
    pools = {p["name"]: p for p in info["pools"]}
    assert pools["gpu"]["devices"][0] == {"index": 0, "capacity": 24 * 1024**3, "free": 4 * 1024**3}
    assert pools["gpu"]["holders"][0]["id"] == job
    assert pools["net"]["free"] == 1 and pools["net"]["total"] == 2
    text = q.run("info", check=0).stdout
    assert "gpu" in text and "net: 1 of 2 free" in text
    release(gate)
