"""A job as a row: the fields of ``qex list`` (``--format``), its text and its JSON,
and the cells ``qex top`` shows. Every name and command shown is safe text.

ELAPSED counts, for a queued job, its time in the queue so far; for a running
one, the time since it started; for an ended one, from its start to its end
(one that never started: its time in the queue). Clock times are local: the
time of day for today, else the date and the minute.
"""

from __future__ import annotations

import time

from qex.base import outcome
from qex.base.states import FINAL
from qex.base.text import plain
from qex.base.units import format_cores, format_duration, format_size, safe_text

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

    from qex.store.records import Claims, Row, Status

# name -> (header, width of its column; 0: the last column, as wide as it is)
FIELDS = {
    "id": ("ID", 8),
    "state": ("STATE", 9),
    "name": ("NAME", 24),
    "owner": ("USER", 10),
    "exit": ("EXIT", 4),
    "submitted": ("SUBMITTED", 11),
    "started": ("STARTED", 11),
    "ended": ("ENDED", 11),
    "elapsed": ("ELAPSED", 7),
    "cpu": ("CPU", 7),
    "peak": ("PEAK", 7),
    "claims": ("CLAIMS", 24),
    "group": ("GROUP", 12),
    "tags": ("TAGS", 16),
    "reason": ("REASON / RESULT", 0),
}
DEFAULT = ("id", "state", "name", "started", "ended", "elapsed", "peak", "claims", "reason")
RIGHT = frozenset({"exit", "elapsed", "cpu", "peak"})  # numbers: aligned on the right
TIMES = {"submitted": "submitted_at", "started": "started_at", "ended": "ended_at"}
NEEDS_RECORD = frozenset({"started", "elapsed", "cpu", "peak"})  # what a history line of an older qex lacks


def parse_format(text: str) -> tuple[str, ...]:
    """``--format id,state,elapsed``: the fields, in that order."""
    from qex.base.errors import UsageError

    names = tuple(w.strip() for w in text.split(",") if w.strip())
    bad = [n for n in names if n not in FIELDS]
    if bad or not names:
        raise UsageError(
            f"--format: {', '.join(map(repr, bad)) or 'nothing'} is no field; the fields are {','.join(FIELDS)}"
        )
    return names


def claims_text(claims: Claims) -> str:
    cpu = claims.millicores
    parts = [f"{format_cores(cpu)} core{'s' if cpu != 1000 else ''}", format_size(claims.mem)]
    for name, c in sorted(claims.pools.items()):
        parts.append(f"{safe_text(name)} {c.count}" + (f" x {format_size(c.size)}" if c.size else ""))
    return ", ".join(parts)


def elapsed(rec: Row | Status, now: float) -> float | None:
    """The seconds ELAPSED counts (the module's docstring), or None when unknown."""
    state, started, submitted, ended = rec.state, rec.started_at, rec.submitted_at, rec.ended_at
    if state in FINAL:
        since = started or submitted
        return max(0.0, ended - since) if ended and since else None
    if state == "queued":
        return max(0.0, now - submitted) if submitted else None
    return max(0.0, now - started) if started else None


def clock_text(t: float | None, now: float) -> str:
    """``14:02:11`` today, ``03-21 14:02`` another day of this year, else ``2023-03-21``."""
    if not t:
        return "-"
    at, today = time.localtime(t), time.localtime(now)
    if at[:3] == today[:3]:
        return time.strftime("%H:%M:%S", at)
    return time.strftime("%m-%d %H:%M" if at.tm_year == today.tm_year else "%Y-%m-%d", at)


def iso_text(t: float | None) -> str | None:
    """ISO 8601 in local time with its offset, to the second: ``2025-03-21T14:02:11+01:00``."""
    if t is None:
        return None
    text = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t))
    return f"{text[:-2]}:{text[-2:]}"


def _code(rec: Row | Status) -> int:
    return outcome.code_of(rec.state, rec.exit_code, rec.signal, rec.supervisor_lost)


def result_text(rec: Row | Status) -> str:
    """The last column: a queued job's reason, an ended one's code and error; and a GPU
    job's VRAM above its claim (``vram_over``), running or ended."""
    state, over = rec.state, rec.vram_over or ""
    if state in FINAL:
        text = f"exit {_code(rec)}" + (f": {rec.error}" if rec.error else "")
        return text + (f"; {over}" if over else "")
    return (rec.blocked_reason or "") if state == "queued" else over


def _used(rec: Row | Status, name: str) -> float | None:
    """``usage.max_rss`` or ``usage.cpu_secs``; None where not measured (a row of a qex before them)."""
    return None if rec.usage is None else getattr(rec.usage, name)


def cell(rec: Row | Status, field: str, now: float) -> str:
    """One field of a row as text."""
    if field in TIMES:
        return clock_text(getattr(rec, TIMES[field]), now)
    if field == "elapsed":
        secs = elapsed(rec, now)
        return "-" if secs is None else format_duration(secs)
    if field == "peak":
        peak = _used(rec, "max_rss")
        return "-" if peak is None else format_size(peak)
    if field == "cpu":
        secs = _used(rec, "cpu_secs")
        return "-" if secs is None else format_duration(secs)
    if field == "exit":
        return str(_code(rec)) if rec.state in FINAL else "-"
    if field == "id":
        return rec.id[:8]
    if field == "name":  # whole (at most 128 characters): two names never look the same cut (it pushes the row)
        return safe_text(rec.name, 128)
    if field == "owner":
        return safe_text(rec.owner, FIELDS[field][1])
    if field == "claims":
        return claims_text(rec.claims)
    if field == "group":
        return safe_text(rec.group_name or (rec.group or "-")[:8], FIELDS["group"][1])
    if field == "tags":
        return ",".join(safe_text(t) for t in rec.tags) or "-"
    if field == "reason":
        return plain(result_text(rec), 160)
    return str(getattr(rec, field, "?"))


def row(
    rec: Row | Status,
    now: float,
    fields: tuple[str, ...] = DEFAULT,
    paint: Callable[[str, str | None], str] | None = None,
) -> str:
    """A row of text; ``paint(text, state)`` colours the state's cell (qex.cli.tty)."""
    parts = []
    for i, field in enumerate(fields):
        text, size = cell(rec, field, now), FIELDS[field][1]
        last = i == len(fields) - 1
        if not last:
            text = text.rjust(size) if field in RIGHT else text.ljust(size)
        if field == "state" and paint is not None:
            text = paint(text, rec.state)
        parts.append(text)
    return "  ".join(parts).rstrip()


def header(fields: tuple[str, ...] = DEFAULT) -> str:
    parts = []
    for i, field in enumerate(fields):
        name, size = FIELDS[field]
        parts.append(name if i == len(fields) - 1 else name.rjust(size) if field in RIGHT else name.ljust(size))
    return "  ".join(parts).rstrip()


def json_row(rec: Status, now: float, fields: tuple[str, ...] | None) -> dict:
    """``qex list --json``: the record with its accounting beside it (ISO 8601 times beside
    the epoch, elapsed seconds); with ``--format``, only those fields, by their names."""
    data = rec.asdict()
    extra = {name: iso_text(data.get(key)) for name, key in TIMES.items()}
    secs = elapsed(rec, now)
    extra["elapsed"] = None if secs is None else round(secs, 3)
    if fields is None:
        return {**data, **extra}
    out = {}
    for field in fields:
        if field in TIMES:
            out[field], out[TIMES[field]] = extra[field], data.get(TIMES[field])
        elif field in ("elapsed",):
            out[field] = extra[field]
        elif field in ("cpu", "peak"):
            out[field] = _used(rec, "cpu_secs" if field == "cpu" else "max_rss")
        elif field == "exit":
            out[field] = _code(rec) if rec.state in FINAL else None
        elif field == "reason":
            out[field] = result_text(rec)
        else:
            out[field] = data.get(field)
    return out
