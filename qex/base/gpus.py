"""The GPUs this machine's driver reports: a machine fact, read only where a
command asks for it (``qex config detect``, ``qex info``, the refusal of a GPU
claim with no pool ``gpu``). Nothing here is read to schedule: a machine with
no driver schedules GPU claims from the config.

The readers, first that answers:

- NVIDIA's own binding, NVML (``import pynvml``, from the ``nvidia-ml-py``
  package, imported only here: ``qex.base.gpus_nvml``), where it is installed
  and the driver loads: exact sizes, MIG instances' included;
- ``nvidia-smi``, in only these forms, so that any faithful stand-in serves
  (tests/fakes/nvidia-smi):
  ``--query-gpu=index,uuid,name,memory.total,mig.mode.current,driver_version
  --format=csv,noheader,nounits`` and, where MIG is on, ``-L`` for the
  instances (whose sizes it does not give: read from the profile's name,
  ``1g.10gb``, and marked so);
- AMD: ``amd-smi`` or ``rocm-smi`` JSON (``qex.base.gpus_amd``).

``QEX_GPU_READER`` = ``nvml``, ``nvidia-smi``, ``amd-smi``, ``rocm-smi`` or
``none`` picks one reader (tests; a box where one is broken).
"""

from __future__ import annotations

import os

from qex.base.gpu_model import Failed, GiB, Gpu, MiB, Mig, Reading, first_line, run, which

QUICK = 2.0  # seconds a command that only asks in passing waits (info, a refusal)
PATIENT = 20.0  # `qex config detect`: nvidia-smi without persistence mode takes ~1.5 s a call
QUERY = "index,uuid,name,memory.total,mig.mode.current,driver_version"
READERS = ("nvml", "nvidia-smi", "amd-smi", "rocm-smi")


def read(timeout: float = QUICK, env: dict | None = None) -> Reading | None:
    """The GPUs the first reader that is here reports; None when none is here
    (no NVML, no nvidia-smi, amd-smi or rocm-smi on PATH)."""
    env = dict(os.environ if env is None else env)
    only = env.get("QEX_GPU_READER", "")
    if only == "none":
        return None
    for reader in READERS:
        if only and reader != only:
            continue
        reading = _READ[reader](timeout, env)
        if reading is not None:
            return reading
    return None


def _nvml(timeout: float, env: dict) -> Reading | None:
    from qex.base import gpus_nvml

    return gpus_nvml.read()


def _nvidia_smi(timeout: float, env: dict) -> Reading | None:
    program = which("nvidia-smi", env)
    if program is None:
        return None
    out = run([program, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"], timeout, env)
    if isinstance(out, Failed):
        return Reading("nvidia", "nvidia-smi", error=out.why)
    try:
        rows = parse_query(out)
        gpus = [Gpu(int(r[0]), r[1], r[2], int(r[3]) * MiB, r[4] == "Enabled") for r in rows]
    except (ValueError, IndexError):
        return Reading("nvidia", "nvidia-smi", error=f"nvidia-smi answered what qex cannot read: {first_line(out)}")
    driver = rows[0][5] if rows else ""
    if any(g.mig_on for g in gpus):
        listed = run([program, "-L"], timeout, env)
        if isinstance(listed, Failed):
            return Reading("nvidia", "nvidia-smi", driver, error=listed.why)
        instances = parse_list(listed)
        gpus = [g.evolve(mig=tuple(instances.get(g.uuid, ()))) if g.mig_on else g for g in gpus]
    return Reading("nvidia", "nvidia-smi", driver, tuple(gpus))


def _amd(reader: str):
    def read_amd(timeout: float, env: dict) -> Reading | None:
        from qex.base import gpus_amd

        program = which(reader, env)
        return None if program is None else gpus_amd.read(reader, program, timeout, env)

    return read_amd


_READ = {"nvml": _nvml, "nvidia-smi": _nvidia_smi, "amd-smi": _amd("amd-smi"), "rocm-smi": _amd("rocm-smi")}


# ---- nvidia-smi's text -------------------------------------------------------------


def parse_query(text: str) -> list[list[str]]:
    """The rows of ``--format=csv,noheader,nounits``: fields split at ", "."""
    return [[f.strip() for f in line.split(", ")] for line in text.splitlines() if line.strip()]


def parse_list(text: str) -> dict[str, list[Mig]]:
    """The MIG instances of ``nvidia-smi -L``, by their GPU's UUID::

    GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5b6b...)
      MIG 3g.40gb     Device  0: (UUID: MIG-c6d4...)
    """
    import re

    out: dict[str, list[Mig]] = {}
    gpu = None
    for line in text.splitlines():
        m = re.match(r"GPU \d+: .* \(UUID: (GPU-[^)\s]+)\)\s*$", line)
        if m:
            gpu = out.setdefault(m.group(1), [])
            continue
        m = re.match(r"\s+MIG (\S+)\s+Device\s+\d+: \(UUID: (MIG-[^)\s]+)\)\s*$", line)
        if m and gpu is not None:
            gpu.append(Mig(m.group(2), m.group(1), profile_size(m.group(1)), exact=False))
    return out


def profile_size(profile: str) -> int:
    """The memory a MIG profile's name says (``1g.10gb``: 10 GiB; 0 when it says none)."""
    import re

    m = re.search(r"\.(\d+)gb", profile)
    return int(m.group(1)) * GiB if m else 0
