"""On a real NVIDIA GPU: real CUDA jobs with PyTorch (issue 32's last point).

Everything here is skipped, with the reason, where no NVIDIA driver answers
(`nvidia-smi -L`) or where the interpreter has no PyTorch with CUDA. The
fake-driver tests (tests/e2e/test_gpu_boxes.py, test_gpu_vram.py) prove the
same rules everywhere; these prove them against the driver itself.

The jobs run ``QEX_TEST_TORCH_PYTHON`` when set (an interpreter that has
PyTorch), else the tests' own interpreter. The config is what
``qex config detect`` prints for this machine, so every device of the box is
in the pool. About a minute on one H200: ``pytest -m gpu tests/gpu``.
"""

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

GiB, MiB = 1 << 30, 1 << 20
PY = os.environ.get("QEX_TEST_TORCH_PYTHON") or sys.executable


def _why_not() -> str | None:
    """Why these tests cannot run here (None: they can)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "no nvidia-smi: no NVIDIA driver on this machine"
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"nvidia-smi -L did not answer ({exc})"
    if listed.returncode != 0 or "GPU 0" not in listed.stdout:
        return f"nvidia-smi -L found no GPU (exit {listed.returncode}: {listed.stderr.strip()[:120]})"
    probe = subprocess.run(
        [PY, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True, text=True, timeout=120
    )
    if probe.stdout.strip() != "True":
        return f"{PY} has no PyTorch with CUDA (set QEX_TEST_TORCH_PYTHON to one that has)"
    return None


WHY_NOT = _why_not()
if WHY_NOT:
    pytest.skip(WHY_NOT, allow_module_level=True)


def smi_apps() -> dict[int, int]:
    """pid -> MiB used on any device, as nvidia-smi shows it now."""
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    used: dict[int, int] = {}
    for line in out.splitlines():
        pid, _, mib = (part.strip() for part in line.partition(","))
        if pid.isdigit() and mib.isdigit():
            used[int(pid)] = used.get(int(pid), 0) + int(mib)
    return used


def device_sizes() -> list[int]:
    """Each device's total memory, in bytes, in the driver's order."""
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return [int(line.strip()) * MiB for line in out.splitlines() if line.strip()]


@pytest.fixture
def box(q):
    """A queue whose config is this machine's GPUs, as `qex config detect` prints them."""
    q.env.pop("QEX_GPU_READER", None)
    detected = q.run("config", "detect", timeout=120)
    assert detected.returncode == 0, detected.stderr
    q.write_config('[defaults]\nmem = "1GB"\n[gpu]\nsample_every = "1s"\nobserve_every = "1s"\n' + detected.stdout)
    q.env["QEX_WAKER_INTERVAL"] = "0.5"
    return q


def torch_job(q, code: str, gate: str | None = None) -> list[str]:
    """A PyTorch job: ``code`` runs, then (with a gate) it writes ``<gate>.ready`` and waits for the gate."""
    wait = ""
    if gate:
        wait = (
            f"open({q.gate(gate) + '.ready'!r}, 'w').close()\n"
            f"import os, time\nwhile not os.path.exists({q.gate(gate)!r}): time.sleep(0.05)\n"
        )
    return [PY, "-c", "import torch\n" + code + "\n" + wait]


def ready(q, gate: str) -> bool:
    return os.path.exists(q.gate(gate) + ".ready")


def test_a_jobs_recorded_vram_peak_is_within_5_percent_of_what_nvidia_smi_showed(box):
    q = box
    code = "x = torch.empty(8 * 2**30, dtype=torch.uint8, device='cuda'); x.fill_(1); torch.cuda.synchronize()"
    job = q.submit("--vram", "10GB", "--", *torch_job(q, code, "held"))
    q.wait_for(lambda: ready(q, "held"), timeout=120, what="the job to hold 8 GiB")
    pid = q.record(job)["pid"]
    shown = 0
    for _ in range(3):  # what nvidia-smi shows of the job's process while it holds
        shown = max(
            shown,
            q.wait_for(lambda: smi_apps().get(pid) or None, timeout=30, what="nvidia-smi to list the job's process"),
        )
    q.wait_for(
        lambda: (json.loads(q.run("status", job, "--json").stdout)[0]["usage"].get("vram_peak") or 0) >= 8 * GiB,
        timeout=30,
        what="a sample of the 8 GiB",
    )
    open(q.gate("held"), "w").close()
    rec = q.wait_state(job, "completed", timeout=120)
    peak = rec["usage"]["vram_peak"]
    assert abs(peak - shown * MiB) <= 0.05 * shown * MiB, (peak, shown)
    print(f"recorded vram_peak {peak / GiB:.2f} GiB; nvidia-smi showed {shown} MiB")


def test_a_job_with_no_gpu_claim_sees_no_device(box):
    q = box
    out = os.path.join(q.root, "count")
    job = q.submit("--", *torch_job(q, f"open({out!r}, 'w').write(str(torch.cuda.device_count()))"))
    q.wait_state(job, "completed", timeout=120)
    with open(out) as fh:
        assert fh.read() == "0"


def test_a_process_outside_qex_holding_70_percent_makes_half_a_device_wait_then_start(box):
    q = box
    sizes = device_sizes()
    holders = []
    env = {k: v for k, v in os.environ.items() if k not in ("QEX_JOB_ID", "CUDA_VISIBLE_DEVICES")}
    try:
        for index, size in enumerate(sizes):  # every device 70% held, so half of one fits nowhere
            flag = os.path.join(q.root, f"outside-{index}")
            code = (
                f"import torch, os, signal\nx = torch.empty({int(size * 0.7)}, dtype=torch.uint8, "
                f"device='cuda:{index}'); torch.cuda.synchronize()\nopen({flag!r}, 'w').close()\nsignal.pause()"
            )
            holders.append(subprocess.Popen([PY, "-c", code], env=env))
            q.wait_for(lambda: os.path.exists(flag), timeout=120, what=f"the outsider on device {index}")
        job = q.submit("--vram", f"{min(sizes) // 2 // MiB}MiB", "--", "true")
        rec = q.wait_for(lambda: (r := q.record(job))["blocked_reason"] and r, timeout=30, what="a reason")
        assert rec["state"] == "queued" and rec["blocked_holder"] == "outside", rec
        assert "outside qex" in rec["blocked_reason"], rec["blocked_reason"]
        print("waits:", rec["blocked_reason"])
    finally:
        for p in holders:
            p.send_signal(signal.SIGKILL)
            p.wait()
    q.wait_state(job, "completed", timeout=60)


def test_two_gpu_jobs_that_fit_together_share_one_device_and_both_see_it(box):
    q = box
    size = device_sizes()[0]
    seen = [os.path.join(q.root, f"seen-{n}") for n in (0, 1)]
    jobs = []
    for n in (0, 1):
        code = (
            f"import json, os\nopen({seen[n]!r}, 'w').write(json.dumps([os.environ.get('CUDA_VISIBLE_DEVICES'), "
            "torch.cuda.device_count(), str(torch.cuda.get_device_properties(0).uuid)]))\n"
            "x = torch.ones(2**28, device='cuda'); torch.cuda.synchronize()"
        )
        jobs.append(q.submit("--gpu", "1", "--vram", f"{size // 4 // MiB}MiB", "--", *torch_job(q, code, f"both-{n}")))
    q.wait_for(lambda: all(ready(q, f"both-{n}") for n in (0, 1)), timeout=120, what="both jobs at once")
    records = [q.record(j) for j in jobs]
    assert [r["state"] for r in records] == ["running", "running"]
    assert records[0]["assigned"][0]["devices"] == records[1]["assigned"][0]["devices"], records
    views = []
    for path in seen:
        with open(path) as fh:
            views.append(json.load(fh))
    assert views[0] == views[1] and views[0][1] == 1, views
    for n in (0, 1):
        open(q.gate(f"both-{n}"), "w").close()
    for j in jobs:
        q.wait_state(j, "completed", timeout=60)
