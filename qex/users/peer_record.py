"""A peer record's format: what a queue writes of its running jobs
(``record_of``) and what a reader accepts of another's (``parse``).

One record per queue (a state directory + a user), the file
``<key>.json`` of the peer directory (``qex.users.peer_dir``): one JSON
object with its ``kind`` and ``format``, the writer's user, uid, state
directory (real path and ``dev:ino``: ``state_identity``), boot id and host,
and ``jobs``: per running job its cores, memory, units of plain pools, the
device indices it was given and the name of the lock file its supervisor
holds. A job entry names no job, and locks (pools without a count) are never
published.

A record can only make another queue start less: ``parse`` holds every
amount to its bound by the one number check (``qex.base.numbers``: an int or a
float, finite, from 0 to what no machine has), and a record that does not hold
what a record holds is a ``BadRecord``, whose message says what. A record of an
older or newer format parses: unknown fields are ignored, missing optional
ones defaulted; a job entry keeps ``cpu``, ``mem`` and ``lock`` in every
format, so its cores and memory still count.
"""

from __future__ import annotations

import json
import os

from qex.base import numbers

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context

FORMAT = 1
KIND = "qex-peer"
MAX_RECORD = 1 << 20  # bytes; a larger file is not a record
MAX_JOBS = 10000
MAX_LIST = 256  # pools per job, devices per assignment


class BadRecord(ValueError):
    """A record that does not hold what a qex peer record holds; the message says what."""


# ---- the state directory a record names ------------------------------------------

_REAL: dict[str, str] = {}


def state_identity(root: str) -> tuple[str, str]:
    """(real path, "dev:ino") of a state directory: two spellings of one
    directory give the same identity. The real path is worked out once per
    process (as ``key_for`` does): a supervisor's every pass asks twice."""
    real = _REAL.get(root)
    if real is None:
        real = _REAL[root] = os.path.realpath(root)
    try:
        st = os.stat(real)
        ident = f"{st.st_dev}:{st.st_ino}"
    except OSError:
        ident = ""
    return real, ident


# ---- writing (``qex.users.peer_publish``) ---------------------------------------


def record_of(ctx: Context, jobs: list[tuple[str, dict]]) -> dict:
    """The record of what ``jobs`` hold. A job entry names no job: what it holds
    and the lock its supervisor holds, in the order of their locks, so that a
    supervisor that goes on to its next job of the same claims (it keeps its
    lock: ``engine.apply_plan``) leaves the record as it is, and nothing is
    written (``publish_locked``)."""
    return record_from(ctx, job_entries(ctx, jobs))


def job_entries(ctx: Context, jobs: list[tuple[str, dict]]) -> list[dict]:
    """The ``jobs`` entries of a record of what ``jobs`` hold (see ``record_of``)."""
    plain = {p.name for p in ctx.config.pools if p.count is not None}  # locks are never published
    entries = []
    for _job_id, e in jobs:
        entries.append(
            {
                "cpu": e["cpu"] / 1000,
                "mem": e["mem"],
                "pools": {name: cs[0] for name, cs in sorted(e.get("pools", {}).items()) if name in plain},
                "devices": [{"pool": p, "devices": list(d), "size": s} for p, d, s in e.get("assigned") or ()],
                "lock": e.get("peer_lock"),
            }
        )
    entries.sort(key=_entry_order)
    return entries


def record_from(ctx: Context, entries: list[dict]) -> dict:
    """The whole record around its ``jobs`` entries (``job_entries``)."""
    from qex.base import machine
    from qex.base.version import VERSION

    real, ident = state_identity(ctx.store.root)
    return {
        "format": FORMAT,
        "kind": KIND,
        "qex": VERSION,
        "user": ctx.user,
        "uid": ctx.uid,
        "state_dir": real,
        "state_id": ident,
        "boot_id": machine.boot_id(),
        "host": os.uname().nodename,
        "cpu": sum(j["cpu"] for j in entries),
        "mem": sum(j["mem"] for j in entries),
        "jobs": entries,
    }


def _entry_order(entry: dict):
    return (
        entry["lock"] or "",
        entry["cpu"],
        entry["mem"],
        sorted(entry["pools"].items()),
        [(u["pool"], u["devices"], u["size"] or 0) for u in entry["devices"]],
    )


# ---- parsing (tolerant: unknown keys ignored, missing ones defaulted) ------------


def _reject_constant(word):
    raise BadRecord(f"holds {word}, which is not a number")


def parse(data: bytes) -> dict:
    """A record's bytes -> a checked dict; BadRecord says why not."""
    try:
        raw = json.loads(data, parse_constant=_reject_constant)
    except BadRecord:
        raise
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BadRecord("truncated or not JSON") from None
    if not isinstance(raw, dict) or raw.get("kind") != KIND:
        raise BadRecord("not a qex peer record (a foreign format)")
    fmt = raw.get("format", FORMAT)
    if not numbers.ok(fmt, numbers.COUNT, whole=True):
        raise BadRecord("format is not a whole number")
    jobs = raw.get("jobs", [])
    if not isinstance(jobs, list):
        raise BadRecord("jobs is not a list")
    if len(jobs) > MAX_JOBS:
        raise BadRecord(f"lists more than {MAX_JOBS} jobs")
    checked = [_job(j, i) for i, j in enumerate(jobs)]
    return {
        "format": fmt,
        "state_dir": _text(raw.get("state_dir"), 4096),
        "state_id": _text(raw.get("state_id"), 64),
        "boot_id": _text(raw.get("boot_id"), 64),
        "jobs": checked,
    }


def _text(v, limit: int) -> str:
    return v[:limit] if isinstance(v, str) else ""


def _job(j, i: int) -> dict:
    where = f"jobs[{i}]"
    if not isinstance(j, dict):
        raise BadRecord(f"{where} is not an object")
    cpu, mem = j.get("cpu", 0), j.get("mem", 0)
    if not numbers.ok(cpu, numbers.CORES):
        raise BadRecord(f"{where}.cpu is not a number of cores from 0 to {numbers.CORES}")
    if not numbers.ok(mem, numbers.BYTES, whole=True):
        raise BadRecord(f"{where}.mem is not a whole number of bytes from 0 to {numbers.BYTES}")
    lock = j.get("lock")
    if lock is not None and (
        not isinstance(lock, str)
        or "/" in lock
        or lock.startswith(".")
        or not lock.endswith(".lock")
        or len(lock) > 255
    ):
        raise BadRecord(f"{where}.lock is not the name of a lock file in the peer directory")
    return {
        "cpu": round(cpu * 1000),
        "mem": mem,
        "lock": lock,
        "pools": _pools(j.get("pools", {}), where),
        "devices": _devices(j.get("devices", []), where),
    }


def _pools(pools, where: str) -> dict[str, int]:
    if not isinstance(pools, dict) or len(pools) > MAX_LIST:
        raise BadRecord(f"{where}.pools is not a map of pool names to counts")
    out = {}
    for name, n in pools.items():
        if not isinstance(name, str) or not 0 < len(name) <= 64 or not numbers.ok(n, numbers.COUNT, whole=True):
            raise BadRecord(f"{where}.pools holds a bad entry")
        out[name] = n
    return out


def _devices(uses, where: str) -> list[tuple[str, tuple[int, ...], int | None]]:
    if not isinstance(uses, list) or len(uses) > MAX_LIST:
        raise BadRecord(f"{where}.devices is not a list")
    out = []
    for u in uses:
        if not isinstance(u, dict):
            raise BadRecord(f"{where}.devices holds a bad entry")
        pool, devs, size = u.get("pool"), u.get("devices", []), u.get("size")
        if not isinstance(pool, str) or not 0 < len(pool) <= 64:
            raise BadRecord(f"{where}.devices holds an entry without a pool name")
        if (
            not isinstance(devs, list)
            or len(devs) > MAX_LIST
            or not all(numbers.ok(d, numbers.DEVICE, whole=True) for d in devs)
        ):
            raise BadRecord(f"{where}.devices holds bad device indices")
        if size is not None and not numbers.ok(size, numbers.BYTES, whole=True):
            raise BadRecord(f"{where}.devices holds a bad size")
        out.append((pool, tuple(sorted(set(devs))), size))
    return out
