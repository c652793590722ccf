"""AMD GPUs through ``amd-smi`` or ``rocm-smi`` JSON (``qex.base.gpus`` asks
here after the NVIDIA readers).

- ``amd-smi static --asic --vram --json``: a list (or ``{"gpu_data": [...]}``)
  of ``{"gpu": 0, "asic": {"market_name": ...}, "vram": {"size": {"value":
  196592, "unit": "MB"}}}``; older releases write the size as ``"196592 MB"``
  or ``vram_size_mb``. amd-smi's MB are MiB.
- ``rocm-smi --showproductname --showmeminfo vram --json``: ``{"card0":
  {"Card Series": ..., "VRAM Total Memory (B)": "68702699520"}, ...}``.

Devices are given by index (ROCR_VISIBLE_DEVICES takes indices); the formats
of both tools have changed between ROCm releases, so a field qex cannot find
is an ``error`` that names the tool, never a guess.
"""

from __future__ import annotations

import json

from qex.base.gpu_model import Failed, Gpu, MiB, Reading, run

ARGS = {
    "amd-smi": ["static", "--asic", "--vram", "--json"],
    "rocm-smi": ["--showproductname", "--showmeminfo", "vram", "--json"],
}


def read(reader: str, program: str, timeout: float, env: dict) -> Reading:
    out = run([program, *ARGS[reader]], timeout, env)
    if isinstance(out, Failed):
        return Reading("amd", reader, error=out.why)
    try:
        gpus = parse_amd_smi(out) if reader == "amd-smi" else parse_rocm_smi(out)
    except (ValueError, KeyError, TypeError, AttributeError):
        return Reading("amd", reader, error=f"{reader} answered JSON qex cannot read (its format differs by release)")
    return Reading("amd", reader, "", tuple(sorted(gpus, key=lambda g: g.index)))


def parse_amd_smi(text: str) -> list[Gpu]:
    data = json.loads(text)
    if isinstance(data, dict):
        data = next(v for v in data.values() if isinstance(v, list))
    out = []
    for entry in data:
        vram = entry["vram"]
        size = vram.get("size", vram.get("vram_size_mb", vram.get("vram_size")))
        out.append(Gpu(index=int(entry["gpu"]), uuid="", name=str(entry["asic"]["market_name"]), memory=_mib(size)))
    return out


def _mib(size) -> int:
    """amd-smi's VRAM size, in MB (MiB): ``{"value": N, "unit": "MB"}``, ``"N MB"`` or N."""
    if isinstance(size, dict):
        value, unit = size["value"], str(size.get("unit", "MB")).upper()
    elif isinstance(size, str):
        value, _, unit = size.partition(" ")
        unit = unit.strip().upper() or "MB"
    else:
        value, unit = size, "MB"
    scale = {"B": 1, "KB": 1024, "MB": MiB, "GB": 1024 * MiB}[unit]
    return int(value) * scale


def parse_rocm_smi(text: str) -> list[Gpu]:
    data = json.loads(text)
    out = []
    for card, fields in data.items():
        if not card.startswith("card"):
            continue  # "system"
        lowered = {k.lower(): v for k, v in fields.items()}
        name = lowered.get("card series") or lowered.get("card model") or lowered.get("card sku") or "AMD GPU"
        out.append(Gpu(index=int(card[4:]), uuid="", name=str(name), memory=int(lowered["vram total memory (b)"])))
    return out
