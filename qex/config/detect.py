"""The machine's GPUs as a config says them (``qex config detect``), and where
a config and the driver disagree (``qex config detect --write``, ``qex info``).

The driver is read by ``qex.base.gpus``; this module only words what it
reports: the ``[[pool]]`` block (each whole GPU by its index, or by its UUID
with ``by_uuid``; a MIG instance always by its MIG-... UUID, the one way CUDA
names it), and the differences between that and a declared pool.

``add_to`` appends the block to the config file as text, so every byte of
the file before it stays (comments, layout, order), and checks the result
with tomlkit and the reader before writing it in place (atomically, with the
file's mode). A file that already declares a pool ``gpu`` is never changed.
"""

from __future__ import annotations

import json
import os

from qex.base import units
from qex.base.gpu_model import Reading
from qex.base.plain import Plain
from qex.config.keys import PoolDef

ENV = {"nvidia": "CUDA_VISIBLE_DEVICES", "amd": "ROCR_VISIBLE_DEVICES"}
INEXACT = "size from the profile's name (NVML, through nvidia-ml-py, reads it exactly)"


class Found(Plain, frozen=True):
    """One device the block declares: ``key`` "index" or "uuid" and its value
    (``ref``), size, model, whether the size is exact; ``what`` names it in a
    sentence, ``note`` says what its line's comment adds."""

    key: str
    ref: str
    size: int
    name: str
    exact: bool
    what: str
    note: str


def found(reading: Reading, by_uuid: bool = False) -> tuple[list[Found], list[str]]:
    """The devices to declare, and a note for each GPU that gives none (MIG on, no instance)."""
    out, notes = [], []
    for g in reading.gpus:
        if not g.mig_on:
            key, ref = ("uuid", g.uuid) if by_uuid and g.uuid else ("index", str(g.index))
            out.append(
                Found(
                    key,
                    ref,
                    g.memory,
                    g.name,
                    True,
                    f"GPU {g.index}",
                    f"GPU {g.index}" + (f", {g.uuid}" if g.uuid else ""),
                )
            )
            continue
        if not g.mig:
            notes.append(f"GPU {g.index} ({_plain(g.name)}) has MIG on and no instance: nothing of it to declare")
        for m in g.mig:
            out.append(
                Found(
                    "uuid",
                    m.uuid,
                    m.memory,
                    f"{g.name} MIG {m.profile}",
                    m.exact,
                    f"the MIG instance {m.uuid} of GPU {g.index}",
                    f"on GPU {g.index}",
                )
            )
    return out, notes


def block(reading: Reading, by_uuid: bool = False) -> str:
    """The ``[[pool]]`` of the GPUs ``reading`` reports, with comments; only
    comments when it reports none to declare."""
    devices, notes = found(reading, by_uuid)
    driver = f"{reading.vendor.upper() if reading.vendor == 'amd' else 'NVIDIA'} driver {reading.driver}".rstrip()
    lines = [
        f"# qex config detect: {len(reading.gpus)} GPU{'s' if len(reading.gpus) != 1 else ''} "
        f"({_plain(driver)}, read through {reading.source})."
    ]
    lines += [f"# {n}." for n in notes]
    if not devices:
        return "\n".join(lines) + "\n"
    if reading.vendor == "nvidia":
        lines.append("# A job is given each device's index (with CUDA_DEVICE_ORDER=PCI_BUS_ID: nvidia-smi's numbers)")
        lines.append("# or its UUID; a job without a --gpu claim is given none (fence = false turns that off).")
    lines += ["[[pool]]", 'name = "gpu"', f'env = "{ENV[reading.vendor]}"', "devices = ["]
    for d in devices:
        ref = d.ref if d.key == "index" else json.dumps(d.ref)
        note = f"{units.format_size(d.size)}, {_plain(d.note)}" + ("" if d.exact else f"; {INEXACT}")
        lines.append(f"    {{ {d.key} = {ref}, size = {d.size}, name = {json.dumps(d.name)} }},  # {note}")
    lines.append("]")
    return "\n".join(lines) + "\n"


def _plain(text: str) -> str:
    from qex.base.text import plain

    return plain(text, 200)


# ---- the config against the driver ------------------------------------------------


def differences(pool: PoolDef | None, reading: Reading, strict: bool = False) -> list[str]:
    """Where the pool ``gpu`` and the driver disagree, each in a few words.

    Always: a device the driver does not report, a GPU it reports that is not
    declared, a declared size above the device's, another model, a variable
    the driver's runtime does not read. ``strict`` (is the block that detect
    would write already there?): any other size, and another env."""
    if pool is None:
        return [f"no pool 'gpu' is declared, and the driver reports {reading.summary()}"]
    if not pool.indexed:
        return [f"the pool 'gpu' counts units, and the driver reports {reading.summary()}: declare them as devices"]
    machine = {(d.key, d.ref): d for d in found(reading)[0]}
    seen, out = set(), []
    for i, size in enumerate(pool.devices):
        ref = pool.device_id(i)
        key = _key_of(ref, reading)
        d = machine.get(key)
        label = f"device {i} ({'index ' + ref if ref.isdigit() else units.safe_text(ref, 60)})"
        if d is None:
            out.append(f"{label} is not on this machine" + _mig_hint(ref, reading))
            continue
        seen.add(key)
        if (size > d.size and d.exact) or (strict and size != d.size):
            out.append(
                f"{label} is {units.format_size(size)} in the config, {units.format_size(d.size)} "
                f"({d.size} bytes) by the driver"
            )
        model = pool.names[i] if pool.names else ""
        if model and model != d.name:
            out.append(
                f"{label} is a {units.safe_text(model, 60)} in the config, a {units.safe_text(d.name, 60)} "
                "by the driver"
            )
    out += [
        f"{_plain(d.what)} ({_plain(d.name)}, {units.format_size(d.size)}) is not declared"
        for key, d in machine.items()
        if key not in seen
    ]
    want = ENV[reading.vendor]
    if want not in pool.variables and (strict or not set(pool.variables) & set(_READ_BY[reading.vendor])):
        out.append(f"env is {', '.join(pool.variables)}; the driver's runtime reads {want}")
    return out


_READ_BY = {
    "nvidia": ("CUDA_VISIBLE_DEVICES",),
    "amd": ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"),
}


def _key_of(ref: str, reading: Reading) -> tuple[str, str]:
    """A declared device as ``found`` keys it: ("index", "0") for a whole GPU, ("uuid", "MIG-...")."""
    if ref.isdigit():
        return "index", ref
    whole = next((g for g in reading.gpus if g.uuid == ref and not g.mig_on), None)
    return ("index", str(whole.index)) if whole is not None else ("uuid", ref)


def _mig_hint(ref: str, reading: Reading) -> str:
    gpu = next((g for g in reading.gpus if str(g.index) == ref or g.uuid == ref), None)
    if gpu is not None and gpu.mig_on:
        return f": GPU {gpu.index} has MIG on, and its instances are the devices (by their MIG-... UUIDs)"
    return ""


# ---- --write ----------------------------------------------------------------------


def add_to(path: str, text: str | None, block_text: str, mode: int) -> str:
    """Write the config at ``path`` (whose text is ``text``, None: no file) with
    ``block_text`` after what it holds; returns the new text. Checked with tomlkit
    and the reader first: a result that would not load is never written."""
    from qex.config import read
    from qex.config import text as config_text
    from qex.store import fs

    before = text or ""
    new = before + ("\n" if before and not before.endswith("\n") else "") + ("\n" if before.strip() else "")
    new += block_text
    read.read(path, config_text.parse_toml(path, new))
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fs.write_atomic(os.path.realpath(path), new.encode(), mode=mode)
    return new
