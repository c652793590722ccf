"""A stand-in for NVIDIA's binding (``pynvml`` of nvidia-ml-py), for tests on
machines with no GPU: the calls qex makes (qex/base/gpus_nvml.py), answered
from the state file of the fake nvidia-smi ($FAKE_NVIDIA_SMI_STATE, see
tests/fakes/nvidia-smi), where a MIG instance's ``memory_mib`` is its exact size.
With no state file, or one that says "fail", nvmlInit fails as it does where no
driver is loaded."""

import json
import os

NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
MAX_MIG = 7
_state = None


class NVMLError(Exception):
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_NotFound(NVMLError):
    pass


class _Memory:
    def __init__(self, mib):
        self.total, self.used, self.free = mib * 1024 * 1024, 0, mib * 1024 * 1024


class _Handle:
    def __init__(self, gpu, mig=None):
        self.gpu, self.mig = gpu, mig


def nvmlInit():
    global _state
    path = os.environ.get("FAKE_NVIDIA_SMI_STATE")
    if not path or not os.path.exists(path):
        raise NVMLError_DriverNotLoaded("Driver Not Loaded")
    with open(path) as fh:
        _state = json.load(fh)
    if _state.get("fail"):
        raise NVMLError_DriverNotLoaded("Driver Not Loaded")


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion():
    return _state.get("driver", "550.54.15")


def nvmlDeviceGetCount():
    return len(_state["gpus"])


def nvmlDeviceGetHandleByIndex(i):
    return _Handle(_state["gpus"][i])


def nvmlDeviceGetMigMode(h):
    if "mig" not in h.gpu:
        raise NVMLError_NotSupported("Not Supported")
    return NVML_DEVICE_MIG_ENABLE, NVML_DEVICE_MIG_ENABLE


def nvmlDeviceGetMaxMigDeviceCount(h):
    return MAX_MIG


def nvmlDeviceGetMigDeviceHandleByIndex(h, k):
    migs = h.gpu.get("mig") or []
    if k >= len(migs):
        raise NVMLError_NotFound("Not Found")
    return _Handle(h.gpu, migs[k])


def nvmlDeviceGetUUID(h):
    return (h.mig or h.gpu)["uuid"]


def nvmlDeviceGetName(h):
    return h.gpu["name"] + (f" MIG {h.mig['profile']}" if h.mig else "")


def nvmlDeviceGetMemoryInfo(h):
    return _Memory((h.mig or h.gpu)["memory_mib"])


class _Process:
    def __init__(self, pid, used):
        self.pid, self.usedGpuMemory = pid, used


def nvmlDeviceGetComputeRunningProcesses(h):
    """The processes of the state file's "apps" and "apps_dir" (as the fake nvidia-smi
    reads them) on this GPU, or on this MIG instance when the app names its UUID."""
    out = []
    for a in _apps():
        ref = str(a["gpu"])
        on_gpu = ref == h.gpu["uuid"] or (ref.isdigit() and int(ref) == _state["gpus"].index(h.gpu))
        if (h.mig is None and on_gpu) or (h.mig is not None and ref == h.mig["uuid"]):
            out.append(_Process(int(a["pid"]), int(a["used_mib"]) * 1024 * 1024))
    return out


def _apps():
    found = [dict(a) for a in _state.get("apps", [])]
    directory = _state.get("apps_dir")
    for name in sorted(os.listdir(directory)) if directory and os.path.isdir(directory) else ():
        try:
            with open(os.path.join(directory, name)) as fh:
                pid, gpu, mib = fh.read().split()[:3]
            found.append({"pid": int(pid), "gpu": gpu, "used_mib": int(mib)})
        except (OSError, ValueError):
            continue
    return [a for a in found if os.path.exists(f"/proc/{a['pid']}")]
