"""GPU boxes as they are (issue 32): the fence, the device order, devices by
UUID, a list of variables, detection, and the refusal that names it. On a
machine with no GPU: a fake nvidia-smi answers from a file (gpu_helpers)."""

import os

import pytest
from gpu_helpers import A100, fake_driver, gpu, set_driver, uuid

TWO = """
[defaults]
mem = "10MB"
[[pool]]
name    = "gpu"
devices = ["80GB", "80GB"]
"""


def seen(q, *submit, env=None, variables=("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")) -> dict:
    """What a job submitted with ``submit`` sees of ``variables`` ("unset" for a missing one)."""
    out = os.path.join(q.root, f"seen-{len(os.listdir(q.root))}")
    script = "; ".join(f'echo "{v}=${{{v}-unset}}" >> {out}' for v in variables)
    job = q.submit(*submit, "--", "sh", "-c", script, env=env)
    q.wait_state(job, "completed")
    with open(out) as fh:
        return dict(line.rstrip("\n").split("=", 1) for line in fh)


# ---- the fence -----------------------------------------------------------------------


def test_a_job_without_a_gpu_claim_is_given_no_device(q):
    q.write_config(TWO)
    assert seen(q)["CUDA_VISIBLE_DEVICES"] == ""


def test_the_fence_overrides_devices_the_caller_exported(q):
    q.write_config(TWO)
    assert seen(q, env={"CUDA_VISIBLE_DEVICES": "0,1"})["CUDA_VISIBLE_DEVICES"] == ""


def test_fence_false_leaves_the_variable_as_captured(q):
    q.write_config(TWO + "fence = false\n")
    assert seen(q, env={"CUDA_VISIBLE_DEVICES": "0,1"})["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert seen(q)["CUDA_VISIBLE_DEVICES"] == "unset"


def test_with_no_gpu_pool_the_variable_is_left_as_captured(q):
    q.write_config('[defaults]\nmem = "10MB"\n[[pool]]\nname = "net"\ncount = 1\n')
    assert seen(q, env={"CUDA_VISIBLE_DEVICES": "0,1"})["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert seen(q)["CUDA_VISIBLE_DEVICES"] == "unset"


def test_a_job_that_sets_a_fenced_variable_without_a_claim_is_refused(q):
    q.write_config(TWO)
    proc = q.run("submit", "--env", "CUDA_VISIBLE_DEVICES=0", "--", "true")
    assert proc.returncode == 121, proc.stderr
    assert "fence" in proc.stderr and "--gpu" in proc.stderr
    assert q.records() == []


# ---- the order, and devices by UUID ---------------------------------------------------


def test_device_indices_come_with_the_pci_bus_order(q):
    q.write_config(TWO)
    got = seen(q, "--gpu", "1")
    assert got == {"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def test_a_device_declared_by_uuid_is_given_by_its_uuid(q):
    whole, mig = uuid(0), uuid(1, "MIG")
    q.write_config(
        f'[defaults]\nmem = "10MB"\n[[pool]]\nname = "gpu"\ndevices = [\n'
        f'  {{ uuid = "{whole}", size = "80GB" }},\n  {{ uuid = "{mig}", size = "10GB" }},\n'
        '  { index = 3, size = "24GB" },\n]\n'
    )
    assert seen(q, "--gpu", "3")["CUDA_VISIBLE_DEVICES"] == f"{whole},{mig},3"
    assert seen(q, "--vram", "70GB")["CUDA_VISIBLE_DEVICES"] == whole
    qex_numbers = seen(q, "--gpu", "3", variables=("QEX_GPU_DEVICES",))
    assert qex_numbers == {"QEX_GPU_DEVICES": "0,1,2"}  # qex's own numbers: the places in the list


def test_a_job_cannot_set_another_device_order(q):
    q.write_config(TWO)
    proc = q.run("submit", "--gpu", "1", "--env", "CUDA_DEVICE_ORDER=FASTEST_FIRST", "--", "true")
    assert proc.returncode == 121 and "CUDA_DEVICE_ORDER" in proc.stderr
    assert q.records() == []


# ---- a list of variables --------------------------------------------------------------


def test_each_variable_of_a_list_gets_the_devices_and_its_own_no_device(q):
    q.write_config(TWO + 'env = ["HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"]\n')
    both = ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
    assert seen(q, "--gpu", "2", variables=both) == {"HIP_VISIBLE_DEVICES": "0,1", "CUDA_VISIBLE_DEVICES": "0,1"}
    exported = {"HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "0"}
    assert seen(q, env=exported, variables=both) == {"HIP_VISIBLE_DEVICES": "-1", "CUDA_VISIBLE_DEVICES": ""}


def test_rocr_with_a_hip_variable_in_one_list_is_refused_with_the_reason(q):
    q.write_config(TWO + 'env = ["ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"]\n')
    proc = q.run("config", "show")
    assert proc.returncode == 1
    assert "ROCR_VISIBLE_DEVICES first" in proc.stderr and 'env = "ROCR_VISIBLE_DEVICES"' in proc.stderr


# ---- detection ------------------------------------------------------------------------

MIG_BOX = [
    gpu(0),
    gpu(
        1,
        mig=[
            {"uuid": uuid(1, "MIG"), "profile": "3g.40gb", "memory_mib": 40192},
            {"uuid": uuid(2, "MIG"), "profile": "1g.10gb", "memory_mib": 9856},
        ],
    ),
]


def test_detect_prints_a_pool_block_ready_to_paste(q):
    fake_driver(q, MIG_BOX)
    proc = q.run("config", "detect")
    assert proc.returncode == 0, proc.stderr
    block = proc.stdout
    assert "[[pool]]" in block and "size = 85899345920" in block and A100 in block  # 81920 MiB, in bytes
    assert uuid(0) in block and uuid(1, "MIG") in block and uuid(2, "MIG") in block
    assert "index = 0" in block and "index = 1" not in block  # GPU 1 is its MIG instances
    q.write_config('[defaults]\nmem = "10MB"\n' + block)
    assert seen(q, "--gpu", "3")["CUDA_VISIBLE_DEVICES"] == f"0,{uuid(1, 'MIG')},{uuid(2, 'MIG')}"


def test_detect_write_keeps_the_file_and_a_second_write_changes_nothing(q):
    fake_driver(q, [gpu(0), gpu(1, name="NVIDIA GeForce RTX 4090", mib=24564)])
    mine = (
        '# my lab box\n[budget]\ncpu = 4   # leave some for me\n\n[[pool]]\nname = "net"\ncount = 2\n\n'
        '[logs]\nmax_bytes = "1MB"  # small\n'
    )
    q.write_config(mine)
    os.chmod(q.config, 0o640)
    proc = q.run("config", "detect", "--write")
    assert proc.returncode == 0, proc.stderr
    with open(q.config) as fh:
        written = fh.read()
    assert written.startswith(mine) and "[[pool]]" in written[len(mine) :]
    assert os.stat(q.config).st_mode & 0o777 == 0o640
    assert "24564" not in written and str(24564 * 1024 * 1024) in written
    before = os.stat(q.config)
    again = q.run("config", "detect", "--write")
    assert again.returncode == 0 and "nothing changed" in again.stderr
    assert open(q.config).read() == written and os.stat(q.config).st_mtime_ns == before.st_mtime_ns
    shown = q.run("config", "show", "--json", check=0)
    assert '"net"' in shown.stdout and '"gpu"' in shown.stdout


def test_detect_write_says_what_differs_and_changes_nothing(q):
    state = fake_driver(q, [gpu(0), gpu(1)])
    q.write_config('[[pool]]\nname = "gpu"\ndevices = ["80GB", "80GB", "80GB"]\n')
    set_driver(state, [gpu(0, mib=40960), gpu(1)])
    proc = q.run("config", "detect", "--write")
    assert proc.returncode == 1
    assert "nothing changed" in proc.stderr and "device 2 (index 2) is not on this machine" in proc.stderr
    assert "device 0 (index 0) is 80GB in the config, 40GB" in proc.stderr
    assert open(q.config).read() == '[[pool]]\nname = "gpu"\ndevices = ["80GB", "80GB", "80GB"]\n'


def test_info_says_in_one_line_where_the_config_and_the_driver_disagree(q):
    fake_driver(q, [gpu(0), gpu(1, mib=40960)])
    q.write_config('[[pool]]\nname = "gpu"\ndevices = ["80GB", "80GB", "80GB"]\n')
    lines = [ln for ln in q.run("info", check=0).stdout.splitlines() if ln.startswith("gpus ")]
    assert len(lines) == 1
    assert "disagree" in lines[0] and "device 2 (index 2) is not on this machine" in lines[0]
    assert "device 1 (index 1) is 80GB in the config, 40GB" in lines[0]


# ---- the refusal that names detect ----------------------------------------------------


@pytest.mark.parametrize("claim", [["--gpu", "1"], ["--vram", "1GB"]])
def test_a_gpu_claim_with_no_gpu_pool_on_a_box_whose_driver_answers_names_detect(q, claim):
    fake_driver(q, [gpu(0), gpu(1)])
    q.write_config('[defaults]\nmem = "10MB"\n')
    proc = q.run("submit", *claim, "--", "true")
    assert proc.returncode == 121
    assert "qex config detect" in proc.stderr and "2 GPUs" in proc.stderr and A100 in proc.stderr
    assert q.records() == []


def test_detect_where_no_driver_answers_says_so(q):
    proc = q.run("config", "detect", env={"QEX_GPU_READER": "none"})
    assert proc.returncode == 1 and "no GPU driver answers" in proc.stderr and proc.stdout == ""
