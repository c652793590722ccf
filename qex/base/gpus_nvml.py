"""The GPUs through NVIDIA's own binding, NVML (``import pynvml``, from the
``nvidia-ml-py`` package). The one module that imports it (optional: ``pip
install qex[gpu]``); where it is missing, or the driver's library does not
load, ``read`` says None and the next reader (nvidia-smi) is asked.

NVML gives what nvidia-smi's query forms do not: a MIG instance's exact
memory, and no process started per read (~1.5 s a call without persistence
mode).
"""

from __future__ import annotations

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.base.gpu_model import Reading


def read() -> Reading | None:
    """The GPUs NVML reports, or None where NVML is not installed or does not load."""
    from qex.base.gpu_model import Reading

    pynvml = _loaded()
    if pynvml is None:
        return None  # no binding, no driver library, or no driver: the next reader says why
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        gpus = tuple(_gpu(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount()))
    except pynvml.NVMLError as e:
        return Reading("nvidia", "NVML", error=f"NVML failed: {_text(str(e))}")
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
    return Reading("nvidia", "NVML", driver, gpus)


def _gpu(pynvml, index: int):
    from qex.base.gpu_model import Gpu

    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
        mig_on = current == pynvml.NVML_DEVICE_MIG_ENABLE
    except pynvml.NVMLError:  # a GPU without MIG
        mig_on = False
    return Gpu(
        index=index,
        uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
        name=_text(pynvml.nvmlDeviceGetName(handle)),
        memory=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
        mig_on=mig_on,
        mig=tuple(_instances(pynvml, handle)) if mig_on else (),
    )


def _instances(pynvml, handle) -> list:
    from qex.base.gpu_model import Mig

    out = []
    for k in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, k)
        except pynvml.NVMLError:  # an empty slot
            continue
        name = _text(pynvml.nvmlDeviceGetName(mig))  # "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
        out.append(
            Mig(
                uuid=_text(pynvml.nvmlDeviceGetUUID(mig)),
                profile=name.rpartition("MIG ")[2] or name,
                memory=int(pynvml.nvmlDeviceGetMemoryInfo(mig).total),
            )
        )
    return out


def apps() -> tuple[list, dict, str] | None:
    """The compute processes of each GPU and of each MIG instance: ([(pid, UUID, bytes)],
    {GPU UUID: index}, "" or why NVML failed); None where NVML is not installed or
    does not load. Imports nothing of qex (the minimal watcher's sampler calls it,
    through ``qex.base.gpu_use.nvml``)."""
    pynvml = _loaded()
    if pynvml is None:
        return None
    found, where = [], {}
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            where[uuid] = index
            for name, h in [(uuid, handle), *_mig_handles(pynvml, handle)]:
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                    used = getattr(p, "usedGpuMemory", None)
                    if isinstance(used, int) and used >= 0:  # (None: the driver does not say)
                        found.append((int(p.pid), name, used))
    except pynvml.NVMLError as e:
        return [], {}, f"NVML failed: {_text(str(e))}"
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
    return found, where, ""


def _mig_handles(pynvml, handle) -> list:
    """(UUID, handle) of each MIG instance of a GPU in MIG mode."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except pynvml.NVMLError:
        return []
    out = []
    if current == pynvml.NVML_DEVICE_MIG_ENABLE:
        for k in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, k)
            except pynvml.NVMLError:
                continue
            out.append((_text(pynvml.nvmlDeviceGetUUID(mig)), mig))
    return out


def _text(value) -> str:
    """A string from NVML: bytes from bindings before 11.515, str since."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _loaded():
    """NVIDIA's binding, initialised; None where it is not installed or NVML does not load."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    return pynvml
