"""Reading the driver (qex/base/gpus*.py) and the words of detection
(qex/config/detect.py), against the fakes (tests/fakes): nvidia-smi in the
forms NVIDIA documents, NVML's binding, and canned amd-smi/rocm-smi JSON."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from qex.base import gpus, gpus_amd
from qex.base.gpu_model import Gpu, Reading
from qex.config import detect
from qex.config.keys import PoolDef

FAKES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fakes")
SMI = os.path.join(FAKES, "nvidia-smi")
MiB, GiB = 1024**2, 1024**3
G0, G1 = "GPU-00000000-1111-4222-8333-444444444444", "GPU-00000001-1111-4222-8333-444444444444"
M1, M2 = "MIG-00000001-1111-4222-8333-444444444444", "MIG-00000002-1111-4222-8333-444444444444"
BOX = {
    "driver": "550.54.15",
    "gpus": [
        {"uuid": G0, "name": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920},
        {
            "uuid": G1,
            "name": "NVIDIA A100-SXM4-80GB",
            "memory_mib": 81920,
            "mig": [
                {"uuid": M1, "profile": "3g.40gb", "memory_mib": 40192},
                {"uuid": M2, "profile": "1g.10gb", "memory_mib": 9856},
            ],
        },
    ],
}


@pytest.fixture
def box(tmp_path):
    path = tmp_path / "state.json"
    path.write_text(json.dumps(BOX))
    return {
        "PATH": FAKES + os.pathsep + os.environ["PATH"],
        "FAKE_NVIDIA_SMI_STATE": str(path),
        "QEX_GPU_READER": "nvidia-smi",
    }


def smi(box, *args) -> subprocess.CompletedProcess:
    return subprocess.run([SMI, *args], capture_output=True, text=True, env=box, timeout=30)


# ---- the fake answers as NVIDIA documents -------------------------------------------------


def test_the_fake_writes_csv_with_a_header_and_units_unless_asked_not_to(box):
    full = smi(box, "--query-gpu=index,uuid,memory.total,mig.mode.current", "--format=csv").stdout.splitlines()
    assert full == [
        "index, uuid, memory.total [MiB], mig.mode.current",
        f"0, {G0}, 81920 MiB, [N/A]",
        f"1, {G1}, 81920 MiB, Enabled",
    ]
    bare = smi(box, "--query-gpu=index,memory.total", "--format=csv,noheader,nounits").stdout
    assert bare == "0, 81920\n1, 81920\n"


def test_the_fake_lists_gpus_and_mig_instances_as_dash_L_does(box):
    assert smi(box, "-L").stdout.splitlines() == [
        f"GPU 0: NVIDIA A100-SXM4-80GB (UUID: {G0})",
        f"GPU 1: NVIDIA A100-SXM4-80GB (UUID: {G1})",
        f"  MIG 3g.40gb     Device  0: (UUID: {M1})",
        f"  MIG 1g.10gb     Device  1: (UUID: {M2})",
    ]


def test_the_fake_lists_a_process_while_its_file_names_it_and_it_lives(box, tmp_path):
    apps = tmp_path / "apps"
    apps.mkdir()
    state = json.loads(open(box["FAKE_NVIDIA_SMI_STATE"]).read())
    state["apps_dir"] = str(apps)
    open(box["FAKE_NVIDIA_SMI_STATE"], "w").write(json.dumps(state))
    query = ("--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv")
    assert smi(box, *query).stdout == "pid, used_gpu_memory [MiB], gpu_uuid\n"
    (apps / "mine").write_text(f"{os.getpid()} 1 2048\n")
    (apps / "gone").write_text("999999999 0 4096\n")
    assert smi(box, *query).stdout.splitlines()[1:] == [f"{os.getpid()}, 2048 MiB, {G1}"]
    used = smi(box, "--query-gpu=memory.used,memory.free", "--format=csv,noheader,nounits").stdout
    assert used.splitlines() == ["0, 81920", "2048, 79872"]


def test_the_fake_refuses_what_nvidia_smi_refuses(box):
    bad = smi(box, "--query-gpu=nonsense", "--format=csv")
    assert bad.returncode == 2 and 'Field "nonsense" is not a valid field to query.' in bad.stdout
    state = json.loads(open(box["FAKE_NVIDIA_SMI_STATE"]).read())
    open(box["FAKE_NVIDIA_SMI_STATE"], "w").write(json.dumps({**state, "fail": True}))
    assert smi(box, "-L").returncode == 9


# ---- qex reads it ---------------------------------------------------------------------


def test_qex_reads_gpus_and_mig_instances_through_nvidia_smi(box):
    reading = gpus.read(env=box)
    assert reading.source == "nvidia-smi" and reading.driver == "550.54.15" and not reading.error
    g0, g1 = reading.gpus
    assert (g0.index, g0.uuid, g0.memory, g0.mig_on) == (0, G0, 80 * GiB, False)
    assert g1.mig_on and [(m.uuid, m.profile, m.memory, m.exact) for m in g1.mig] == [
        (M1, "3g.40gb", 40 * GiB, False),
        (M2, "1g.10gb", 10 * GiB, False),
    ]  # nvidia-smi cannot say: the name's


def test_qex_reads_exact_mig_sizes_through_nvml(box, monkeypatch):
    spec = importlib.util.spec_from_file_location("pynvml", os.path.join(FAKES, "nvml", "pynvml.py"))
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("FAKE_NVIDIA_SMI_STATE", box["FAKE_NVIDIA_SMI_STATE"])
    reading = gpus.read(env={**box, "QEX_GPU_READER": "nvml"})
    assert reading.source == "NVML" and [g.uuid for g in reading.gpus] == [G0, G1]
    assert [(m.uuid, m.memory, m.exact) for m in reading.gpus[1].mig] == [
        (M1, 40192 * MiB, True),
        (M2, 9856 * MiB, True),
    ]
    monkeypatch.delenv("FAKE_NVIDIA_SMI_STATE")
    assert gpus.read(env={**box, "QEX_GPU_READER": "nvml"}) is None  # no driver: the next reader is asked


def test_a_driver_that_does_not_answer_is_an_error_not_a_box_without_gpus(box):
    state = json.loads(open(box["FAKE_NVIDIA_SMI_STATE"]).read())
    open(box["FAKE_NVIDIA_SMI_STATE"], "w").write(json.dumps({**state, "fail": True}))
    reading = gpus.read(env=box)
    assert reading.error.startswith("nvidia-smi failed (exit 9): NVIDIA-SMI has failed")
    open(box["FAKE_NVIDIA_SMI_STATE"], "w").write(json.dumps({**state, "delay": 5}))
    reading = gpus.read(timeout=0.5, env=box)
    assert reading.error == "nvidia-smi did not answer within 0.5 s"
    assert gpus.read(env={"PATH": "/nonexistent", "QEX_GPU_READER": "nvidia-smi"}) is None


def test_the_parsers_read_nvidia_smi_as_its_manual_shows_it():
    assert gpus.parse_query("0, GPU-a, NVIDIA H100 80GB HBM3, 81559, [N/A], 550.54.15\n") == [
        ["0", "GPU-a", "NVIDIA H100 80GB HBM3", "81559", "[N/A]", "550.54.15"]
    ]
    listed = gpus.parse_list(f"GPU 0: NVIDIA A100-SXM4-40GB (UUID: {G0})\n  MIG 1g.5gb      Device  0: (UUID: {M1})\n")
    assert [(m.profile, m.memory) for m in listed[G0]] == [("1g.5gb", 5 * GiB)]


def test_the_amd_smi_and_rocm_smi_parsers_read_the_json_of_several_releases():
    new = json.dumps(
        [
            {
                "gpu": 1,
                "asic": {"market_name": "AMD Instinct MI300X"},
                "vram": {"type": "HBM", "size": {"value": 196592, "unit": "MB"}},
            },
            {"gpu": 0, "asic": {"market_name": "AMD Instinct MI300X"}, "vram": {"size": "196592 MB"}},
        ]
    )
    assert [(g.index, g.memory) for g in gpus_amd.parse_amd_smi(new)] == [(1, 196592 * MiB), (0, 196592 * MiB)]
    old = json.dumps({"gpu_data": [{"gpu": 0, "asic": {"market_name": "MI210"}, "vram": {"vram_size_mb": 65520}}]})
    assert gpus_amd.parse_amd_smi(old)[0].memory == 65520 * MiB
    rocm = json.dumps(
        {
            "card0": {"Card Series": "AMD Instinct MI210", "VRAM Total Memory (B)": "68702699520"},
            "system": {"Driver version": "6.7.0"},
        }
    )
    assert [(g.index, g.name, g.memory) for g in gpus_amd.parse_rocm_smi(rocm)] == [
        (0, "AMD Instinct MI210", 68702699520)
    ]


# ---- the words of detection -------------------------------------------------------------


def test_the_block_names_whole_gpus_by_index_and_instances_by_uuid(box):
    reading = gpus.read(env=box)
    text = detect.block(reading)
    assert "{ index = 0, size = 85899345920, " in text and f'{{ uuid = "{M1}", size = 42949672960, ' in text
    assert "profile's name" in text  # the size nvidia-smi could not say is marked
    assert f'{{ uuid = "{G0}", ' in detect.block(reading, by_uuid=True)
    amd = Reading("amd", "rocm-smi", "", (Gpu(0, "", "AMD Instinct MI210", 68702699520),))
    assert 'env = "ROCR_VISIBLE_DEVICES"' in detect.block(amd)


def test_differences_name_what_is_missing_wrong_or_undeclared(box):
    reading = gpus.read(env=box)
    pool = PoolDef(
        name="gpu",
        count=None,
        devices=(80 * GiB, 40 * GiB, 90 * GiB),
        env="CUDA_VISIBLE_DEVICES",
        ids=("0", M1, "7"),
        names=("NVIDIA A100-SXM4-40GB", "", ""),
    )
    diffs = detect.differences(pool, reading)
    assert "device 2 (index 7) is not on this machine" in diffs
    assert "device 0 (index 0) is a NVIDIA A100-SXM4-40GB in the config, a NVIDIA A100-SXM4-80GB by the driver" in diffs
    assert any(d.startswith(f"the MIG instance {M2} of GPU 1") and d.endswith("is not declared") for d in diffs)
    assert not any("device 1" in d for d in diffs)  # the MIG size is not exact: only strict compares it
    whole = PoolDef(name="gpu", count=None, devices=(80 * GiB,), env="CUDA_VISIBLE_DEVICES", ids=("1",))
    assert "GPU 1 has MIG on" in detect.differences(whole, reading)[0]


def test_only_the_nvml_reader_imports_nvidias_binding():
    import ast
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2] / "qex"
    importers = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            )
            if any(n.split(".")[0] == "pynvml" for n in names):
                importers.add(str(path.relative_to(root)))
    assert importers == {"base/gpus_nvml.py"}
