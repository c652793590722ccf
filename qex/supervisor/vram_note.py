"""A GPU job's VRAM in its record (``qex.supervisor.vram`` samples it).

- ``start``: the sampler of a job that claims the pool ``gpu``, where a driver
  answers (None elsewhere: nothing is measured, the record says null);
- ``fields``: what the record gets at the job's end (``usage.vram_peak``,
  ``usage.vram_peak_by_device``, ``vram_over``), ``ending.classify`` adds them;
- ``main``: the full qex the sampler starts when the job goes above what it was
  given, which records it at once (``change`` "vram": an event), while the job
  runs: ``python -c ... qex-vram-note JOB DATA``.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.store.records import Status
    from qex.supervisor.vram import Sampler

POOL = "gpu"


def start(ctx: Context, rec: Status, started: float) -> Sampler | None:
    """The sampler of this attempt, or None: no claim on a pool ``gpu`` of devices,
    or no reader of per-process VRAM on this machine."""
    from qex.base import gpu_use

    pool = ctx.config.pool(POOL)
    claim = rec.claims.pools.get(POOL)
    if pool is None or not pool.indexed or claim is None:
        return None
    nvml_path = _nvml_path()
    reader = gpu_use.reader_for(os.environ, nvml_path is not None)
    if not reader:
        return None
    if reader != gpu_use.NVML:
        nvml_path = None
    claims = {}
    for a in rec.assigned:
        if a.pool == POOL:
            for d in a.devices:
                if 0 <= d < len(pool.devices):
                    claims[str(d)] = a.size if a.size is not None else pool.devices[d]
    from qex.store import layout
    from qex.supervisor import vram, watch

    store = ctx.store
    return vram.Sampler(
        job_id=rec.id,
        attempt=rec.attempt,
        root=store.root,
        live=store.path(rec.id, layout.VRAM),
        seen_path=os.path.join(store.root, layout.GPU_SEEN),
        mode=store.file_mode,
        every=ctx.config.gpu_sample_every,
        next_at=started + vram.FIRST,
        ids=[pool.device_id(i) for i in range(len(pool.devices))],
        claims=claims,
        peaks={},
        indices={},
        over=None,
        noted=False,
        env=dict(os.environ),
        nvml_path=nvml_path,
        supervisor=os.getpid(),
        samples=0,
        note_pid=None,
        note_argv=watch.entry_argv(
            watch.package_parent(), "qex.supervisor.vram_note", "main", vram.NOTE_TAG, rec.id, 0, minimal=False
        )[:-1],
    )


def _nvml_path() -> str | None:
    """The folder to import NVIDIA's binding from, or None where it is not installed."""
    origin = getattr(sys.modules.get("pynvml"), "__file__", None)
    if origin is None:
        try:
            from importlib.util import find_spec

            spec = find_spec("pynvml")
        except (ImportError, ValueError):
            return None
        origin = spec.origin if spec is not None else None
    if not origin:
        return None
    folder = os.path.dirname(os.path.abspath(origin))
    return os.path.dirname(folder) if os.path.basename(origin) == "__init__.py" else folder


def fields(result: dict | None) -> dict:
    """The record's fields from a sampler's ``result()``: ``usage`` additions and ``vram_over``."""
    if not result or result.get("vram_peak") is None:
        return {"usage": {}, "vram_over": None}
    return {
        "usage": {"vram_peak": result["vram_peak"], "vram_peak_by_device": result["vram_peak_by_device"]},
        "vram_over": over_words(result.get("over") or []),
    }


def over_words(over: list) -> str | None:
    """ "used 30GB on gpu 0, above its claim of 10GB" for each [device, peak, claimed]."""
    from qex.base.units import format_size, safe_text

    parts = []
    for key, peak, claimed in over:
        where = f"{POOL} {key}" if str(key).isdigit() else safe_text(str(key), 60)
        if claimed:
            parts.append(f"{format_size(peak)} on {where}, above its claim of {format_size(claimed)}")
        elif str(key).isdigit():
            parts.append(f"{format_size(peak)} on {where}, which it was not given")
        else:
            parts.append(f"{format_size(peak)} on {where}, a GPU the pool {POOL} does not declare")
    return ("VRAM above its claim: used " + "; ".join(parts)) if parts else None


def main() -> None:
    """``python -c ... qex-vram-note JOB DATA``: record in the running job's record what
    its sampler found (above its claim; DATA: marshal, in hex), as a change "vram" (an event)."""
    import marshal

    from qex.base.states import HOLDING
    from qex.queue.txn import Txn
    from qex.store import fs
    from qex.store.state import LAZY, Store

    note = marshal.loads(bytes.fromhex(sys.argv[3]))
    store = Store(note["root"])
    job_id = note["job_id"]
    found = fields(note)
    try:
        with store.lock():
            txn = Txn(store, store.load_index_locked(save_replayed=False))
            rec = txn.record(job_id)
            if rec.state in HOLDING and rec.attempt == note["attempt"]:
                usage = rec.usage.evolve(**found["usage"])
                txn.update(job_id, change="vram", usage=usage, vram_over=found["vram_over"])
            txn.commit(save_index=LAZY)
        fs.settle()
    except Exception as exc:  # said in the job's supervisor.log (its stderr is the supervisor's)
        print(f"qex: cannot record the VRAM of job {job_id} above its claim: {exc}", file=sys.stderr, flush=True)
        os._exit(1)
    os._exit(0)
