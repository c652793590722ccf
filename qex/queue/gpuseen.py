"""VRAM in use on the GPUs, as a pass sees it (issue 32).

The driver's report of the VRAM each process holds (``qex.base.gpu_use``) is
kept in the state directory (``layout.GPU_SEEN``) and read again at most once
per ``[gpu] observe_every``: by a pass that has a claim on the pool ``gpu`` to
admit (``observe``, under the state lock, never waiting on the driver more
than ``gpu_use.WAIT`` seconds), by a command that is about to run such a pass
(``prefetch``, before it takes the lock: ``qex submit --gpu``, the waker while
a GPU claim waits), and by every GPU job's supervisor as it samples its job
(``qex.supervisor.vram``). A pass with no GPU claim to admit never reads it,
nor the driver.

Each process is then the job whose it is (``qex.linux.whose``):

- a running job of this queue: its use (``Running.used``), which counts where
  it is above what the job was given;
- a job of another queue (another user's, or another state directory's): its
  use counts beyond what the peers' claims hold on that device (``PEER_USE``);
- anything else, of any user, is VRAM used outside qex (``OUTSIDE_USE``), and
  a process of a job of this queue that has ended is named as that job's.

``reading`` does the same for the GPUs themselves (what ``qex info`` compares
with the config): kept in ``layout.GPU_READING``, read at most once per
``[gpu] observe_every``.
"""

from __future__ import annotations

import os
import time

from qex.base import gpu_files, gpu_use
from qex.base.states import HOLDING
from qex.store import layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from qex.admit import Queued
    from qex.base.gpu_model import Reading
    from qex.config.context import Context

POOL = "gpu"


def wanted(ctx: Context, queued: list[Queued]) -> bool:
    """Whether a pass that decides on ``queued`` reads the VRAM in use: a pool ``gpu``
    of devices is declared and one of them claims it."""
    pool = ctx.config.pool(POOL)
    return pool is not None and pool.indexed and any(c.name == POOL and c.count > 0 for q in queued for c in q.claims)


def entries_want(ctx: Context, entries: Iterable[dict]) -> bool:
    """``wanted`` for index entries (the waker's look at the index, without the lock)."""
    pool = ctx.config.pool(POOL)
    return (
        pool is not None
        and pool.indexed
        and any(e.get("state") == "queued" and POOL in (e.get("pools") or {}) for e in entries)
    )


def _path(ctx: Context) -> str:
    return os.path.join(ctx.store.root, layout.GPU_SEEN)


def kept(ctx: Context, now: float | None = None) -> gpu_use.Seen | None:
    """The reading kept in the state directory if it is at most ``[gpu] observe_every`` old."""
    now = time.time() if now is None else now
    seen = gpu_files.load(_path(ctx), gpu_files.boot_id())
    return seen if seen is not None and 0 <= now - seen.at <= ctx.config.gpu_observe_every else None


def observe(ctx: Context, now: float | None = None) -> gpu_use.Seen | None:
    """The reading at most ``[gpu] observe_every`` old: the kept one, else the driver's
    now (kept for the next command). None: no reader answers on this machine."""
    now = time.time() if now is None else now
    path, boot = _path(ctx), gpu_files.boot_id()
    old = gpu_files.load(path, boot)
    if old is not None and 0 <= now - old.at <= ctx.config.gpu_observe_every:
        return old
    known = old.indices if old is not None else {}
    # The indices (a config may name a GPU by its index) change only with the machine:
    # asked again only when a process shows a GPU they lack.
    ask = not known or any(u not in known for _p, u, _n in (old.apps if old is not None else ()))
    fresh = gpu_use.read_now(os.environ, indices=ask)
    if fresh is None:
        return None
    if not fresh.indices:
        fresh.indices = known
    gpu_files.keep(path, fresh, boot, ctx.store.file_mode)
    return fresh


def prefetch(ctx: Context) -> None:
    """Before a pass that will admit a GPU claim, outside the state lock: read the
    driver now if the kept reading is too old, so that the pass does not wait on it."""
    pool = ctx.config.pool(POOL)
    if pool is None or not pool.indexed:
        return
    try:
        if kept(ctx) is None:
            observe(ctx)
    except Exception:  # the pass reads it again, and says nothing is wrong with the queue
        pass


# ---- whose is each process's VRAM ---------------------------------------------------


def device_of(ctx: Context, seen: gpu_use.Seen) -> Callable[[str], int | None]:
    """A function: a GPU's UUID -> the place of its device in the pool ``gpu`` (None:
    not a device of the pool). A device is declared by its UUID, or by the driver's
    index (or its place in the list, which is then its index)."""
    pool = ctx.config.pool(POOL)
    ids = [pool.device_id(i) for i in range(len(pool.devices))] if pool is not None and pool.indexed else []
    places = {ref: i for i, ref in enumerate(ids)}

    def of(uuid: str) -> int | None:
        if uuid in places:
            return places[uuid]
        index = seen.indices.get(uuid)
        return places.get(str(index)) if index is not None else None

    return of


def for_admission(ctx: Context, seen: gpu_use.Seen, jobs: dict, proc: str = "/proc") -> tuple[dict, tuple]:
    """What a reading means to a pass: ({running job id: its uses (DeviceUse per device)},
    the Seen of the VRAM beside this queue's running jobs). ``jobs``: the index's."""
    from qex import admit as A
    from qex.admit.model import OUTSIDE_USE, PEER_USE
    from qex.linux.whose import whose

    of = device_of(ctx, seen)
    used: dict[str, list] = {}
    beside = []
    supervised = {e.get("supervisor_pid"): j for j, e in jobs.items() if e.get("state") in HOLDING}
    for pid, uuid, nbytes in seen.apps:
        device = of(uuid)
        if device is None or nbytes <= 0:
            continue  # a GPU the pool does not declare
        w = whose(pid, proc)
        if w is None:
            continue  # gone since the reading (its VRAM with it)
        if w.job is None and w.supervisor and w.supervisor in supervised:
            w.job = supervised[w.supervisor]  # (under one of this queue's supervisors: its job)
        entry = jobs.get(w.job) if w.job else None
        if entry is not None and entry.get("state") in HOLDING:
            used.setdefault(w.job, []).append(A.DeviceUse(POOL, (device,), nbytes))
        elif w.job and (entry is not None or os.path.exists(ctx.store.path(w.job, layout.STATUS))):
            state = "queued again" if entry is not None else "ended"
            beside.append(
                A.Seen(
                    POOL, device, nbytes, OUTSIDE_USE, f"pid {pid} ({_name(w.comm)}), left by job {w.job[:8]} ({state})"
                )
            )
        elif w.job or w.via:
            beside.append(A.Seen(POOL, device, nbytes, PEER_USE, _user(w.uid)))
        else:
            beside.append(A.Seen(POOL, device, nbytes, OUTSIDE_USE, f"pid {pid} ({_name(w.comm)}) of {_user(w.uid)}"))
    return {j: tuple(u) for j, u in used.items()}, tuple(beside)


def _name(comm: str) -> str:
    from qex.base.units import safe_text

    return safe_text(comm or "?", 32)


_USERS: dict[int, str] = {}


def _user(uid: int) -> str:
    name = _USERS.get(uid)
    if name is None:
        import pwd

        from qex.base.units import safe_text

        try:
            name = safe_text(pwd.getpwuid(uid).pw_name, 32)
        except KeyError:
            name = f"uid {uid}"
        _USERS[uid] = name
    return name


# ---- the GPUs themselves (qex info) ---------------------------------------------------


def reading(ctx: Context, now: float | None = None) -> Reading | None:
    """What the driver reports of the GPUs (``qex.base.gpus.read``), at most
    ``[gpu] observe_every`` old: kept in the state directory, so that ``qex info``
    does not start nvidia-smi on every call. None: no reader here."""
    from qex.base import gpus
    from qex.store import fs

    now = time.time() if now is None else now
    path, boot = os.path.join(ctx.store.root, layout.GPU_READING), gpu_files.boot_id()
    try:
        data = fs.read_json(path, 1 << 20)
        got = _reading_of(data, boot, now, ctx.config.gpu_observe_every)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        got = None
    if got is not None:
        return got[0]
    fresh = gpus.read(timeout=gpus.QUICK)
    try:
        fs.write_atomic(
            path, fs.json_bytes(_reading_json(fresh, boot, now)), mode=ctx.store.file_mode, sync_dir=False, sync=False
        )
    except Exception:  # a cache: the next command reads the driver
        pass
    return fresh


def _reading_json(r: Reading | None, boot: str, now: float) -> dict:
    out = {"format": 1, "boot": boot, "at": now, "reading": None}
    if r is not None:
        out["reading"] = {
            "vendor": r.vendor,
            "source": r.source,
            "driver": r.driver,
            "error": r.error,
            "gpus": [
                [g.index, g.uuid, g.name, g.memory, g.mig_on, [[m.uuid, m.profile, m.memory, m.exact] for m in g.mig]]
                for g in r.gpus
            ],
        }
    return out


def _reading_of(data: dict, boot: str, now: float, fresh_for: float) -> tuple[Reading | None] | None:
    """(the Reading kept, or None for "no reader") if it is this boot's and fresh; else None.
    Every number is held to its bound (``qex.base.numbers``)."""
    from qex.base import numbers
    from qex.base.gpu_model import Gpu, Mig, Reading

    if not isinstance(data, dict) or data.get("format") != 1 or data.get("boot") != boot:
        return None
    at = numbers.number(data.get("at"), numbers.TIME)
    if not 0 <= now - at <= fresh_for:
        return None
    r = data.get("reading")
    if r is None:
        return (None,)
    gpus = []
    for index, uuid, name, memory, mig_on, migs in r["gpus"]:
        gpus.append(
            Gpu(
                numbers.number(index, numbers.DEVICE, whole=True),
                str(uuid),
                str(name),
                numbers.number(memory, numbers.BYTES, whole=True),
                bool(mig_on),
                tuple(
                    Mig(str(u), str(p), numbers.number(n, numbers.BYTES, whole=True), bool(e)) for u, p, n, e in migs
                ),
            )
        )
    return (Reading(str(r["vendor"]), str(r["source"]), str(r["driver"]), tuple(gpus), str(r["error"])),)
