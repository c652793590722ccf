"""One frame of ``qex top``, as lines of (text, kind) pieces: the curses screen
(``qex.cli.top``) draws each kind in its colour, ``qex top --once`` prints the
text alone. No curses here: a plain frame needs none.

The header: the budget's cores and memory as bars (``#`` held by this queue,
``=`` by the other queues, ``.`` free), each pool and each of its devices, the
other queues that hold something, and the queue's health line. Then the jobs:
those that hold capacity, the queued ones in the queue's order with their
reason, the other members' active jobs (a shared directory), and the jobs that
ended last, newest first.
"""

from __future__ import annotations

import time

from qex.base.units import format_cores, format_duration, format_size, safe_text
from qex.cli import listing, tty

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

    from qex.store.records import Row

    Piece = tuple[str, str | None]

BAR = 30  # the widest bar
COLUMNS = ("id", "state", "name", "elapsed", "peak", "claims", "devices", "reason")
WIDTHS = {"name": 18, "claims": 26, "devices": 8}
KEYS = "up/down move  k kill  c cancel  l log  / filter  ? help  q quit"


class Frame:
    """The lines of one frame, and the ids of the rows shown (``ids``), top to bottom."""

    def __init__(self):
        self.lines: list[list[Piece]] = []
        self.ids: list[str] = []
        self.table_at = 0  # the index in ``lines`` of the first row of the table

    def add(self, *pieces: Piece) -> None:
        self.lines.append([p for p in pieces if p[0]])

    def text(self, width: int | None = None) -> str:
        """The frame as plain text (no escape codes), each line cut to ``width``."""
        out = []
        for line in self.lines:
            text = "".join(t for t, _ in line)
            out.append((text if width is None else text[:width]).rstrip())
        return "\n".join(out)


def header(frame: Frame, data: dict) -> None:
    now = data["now"]
    load = data["load"]
    frame.add(
        ("qex top", "bold"),
        (f"  {safe_text(data['state_dir'], 80)}  ", None),
        (time.strftime("%H:%M:%S", time.localtime(now)), None),
        (f"  load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}" if load else "", None),
    )
    cpu_budget, mem_budget = data["budget"]
    own_cpu, own_mem = data["held"]
    other_cpu, other_mem = sum(p[1] for p in data["peers"]), sum(p[2] for p in data["peers"])
    frame.add(
        *bar("cores", own_cpu, other_cpu, cpu_budget),
        (
            f"{format_cores(own_cpu + other_cpu)} of {format_cores(cpu_budget)} held: "
            f"{format_cores(own_cpu)} this queue, {format_cores(other_cpu)} others; "
            f"{format_cores(max(0, cpu_budget - own_cpu - other_cpu))} free",
            None,
        ),
    )
    avail = data.get("mem_available")
    frame.add(
        *bar("memory", own_mem, other_mem, mem_budget),
        (
            f"{format_size(own_mem + other_mem)} of {format_size(mem_budget)} held: {format_size(own_mem)} "
            f"this queue, {format_size(other_mem)} others"
            + (f"; the machine has {format_size(avail)} available" if avail is not None else ""),
            None,
        ),
    )
    for pool in data["pools"]:
        _pool_lines(frame, pool)
    if data["peers"]:
        frame.add(
            ("others  ", "bold"),
            (
                "; ".join(f"{safe_text(o, 32)} {format_cores(c)} cores, {format_size(m)}" for o, c, m in data["peers"]),
                None,
            ),
        )
    since = ""
    if data.get("since"):
        since = (
            f", since {time.strftime('%H:%M:%S', time.localtime(data['since']))} "
            f"({format_duration(max(0.0, now - data['since']))} ago)"
        )
    frame.add(
        ("queue   ", "bold"), (f"{data['running']} running, {data['queued']} queued: {data['health']}{since}", None)
    )


def bar(label: str, own: int, other: int, total: int, width: int = BAR) -> list[Piece]:
    """``label [###===.....]  ``: this queue's share, the others', what is free, of ``total``."""
    total = max(total, own + other, 1)
    a = min(width, round(width * own / total))
    b = min(width - a, round(width * other / total))
    return [
        (f"{label[:8]:<8}", "bold"),
        ("[", None),
        ("#" * a, "own"),
        ("=" * b, "other"),
        ("." * (width - a - b), "free"),
        ("]  ", None),
    ]


def _pool_lines(frame: Frame, pool: dict) -> None:
    name = safe_text(pool["name"], 12)
    if pool["kind"] == "plain":
        own = sum(h["count"] for h in pool["holders"])
        other = max(0, pool["total"] - pool["free"] - own)
        frame.add(*bar(name, own, other, pool["total"]), (f"{pool['free']} of {pool['total']} free", None))
        return
    for d in pool["devices"]:
        holders = [h for h in pool["holders"] if d["index"] in h["devices"]]
        own = sum(h["size"] if h["size"] is not None else d["capacity"] for h in holders)
        other = max(0, d["capacity"] - d["free"] - own)
        who = ", ".join(f"{h['id'][:8]} {safe_text(h['name'], 20)}" for h in holders)
        frame.add(
            *bar(f"{name} {d['index']}", own, other, d["capacity"]),
            (f"{format_size(d['free'])} of {format_size(d['capacity'])} free" + (f": {who}" if who else ""), None),
        )


def columns(shared: bool) -> tuple[str, ...]:
    return ("id", "owner", *COLUMNS[1:]) if shared else COLUMNS


def table_header(fields: tuple[str, ...]) -> str:
    return "  ".join(
        _pad(f, "DEVICES" if f == "devices" else listing.FIELDS[f][0], i == len(fields) - 1)
        for i, f in enumerate(fields)
    )


def _devices(row: Row) -> str:
    """A row's devices (an index entry's ``assigned``), as ``qex status`` says them."""
    from qex.cli.render import devices_text

    return devices_text(row.assigned)


def row_pieces(rec: Row, fields: tuple[str, ...], now: float) -> list[Piece]:
    """One job's row: its state's cell in the state's colour, an ended job's result too."""
    pieces = []
    tone = tty.TONE.get(rec.state)
    for i, field in enumerate(fields):
        text = _devices(rec) or "-" if field == "devices" else listing.cell(rec, field, now)
        if field in WIDTHS:
            text = text if len(text) <= WIDTHS[field] else text[: WIDTHS[field] - 1] + "~"
        kind = tone if field == "state" or (field == "reason" and tone == "bad") else None
        pieces.append((_pad(field, text, i == len(fields) - 1) + ("" if i == len(fields) - 1 else "  "), kind))
    return pieces


def _pad(field: str, text: str, last: bool) -> str:
    if last:
        return text
    size = WIDTHS.get(field) or listing.FIELDS[field][1]
    return text.rjust(size) if field in listing.RIGHT else text.ljust(size)


def rows_of(data: dict, wanted: Callable[[Row], bool] | None = None) -> list[Row]:
    """The table's rows in their order, those ``wanted`` only."""
    rows = data["rows"] + data["ended"]
    return rows if wanted is None else [r for r in rows if wanted(r)]


def matcher(text: str) -> Callable[[Row], bool] | None:
    """The ``/`` filter: a row whose id, name, state, user, group or reason holds ``text`` (any case)."""
    needle = text.strip().lower()
    if not needle:
        return None

    def wanted(rec: Row) -> bool:
        hay = " ".join(getattr(rec, k) or "" for k in ("id", "name", "state", "owner", "group_name"))
        return needle in (hay + " " + listing.result_text(rec)).lower()

    return wanted


def build(
    data: dict,
    width: int | None,
    height: int | None,
    selected: str | None = None,
    wanted: Callable[[Row], bool] | None = None,
    status: list[Piece] | None = None,
) -> Frame:
    """The frame: the header, the table's header and as many rows as fit ``height``
    (all of them when None), kept so that the ``selected`` row is shown, and the
    ``status`` line at the bottom."""
    frame = Frame()
    header(frame, data)
    frame.add(("", None))
    shared = any(not r.mine for r in data["rows"])
    fields = columns(shared)
    frame.add((table_header(fields), "header"))
    rows = rows_of(data, wanted)
    room = len(rows) if height is None else max(1, height - len(frame.lines) - (1 if status else 0))
    at = next((i for i, r in enumerate(rows) if r.id == selected), 0)
    first = 0 if at < room else at - room + 1
    frame.table_at = len(frame.lines)
    for rec in rows[first : first + room]:
        try:
            pieces = row_pieces(rec, fields, data["now"])
        except (TypeError, ValueError, KeyError, AttributeError):  # a damaged line of the history, say
            pieces = [(f"{safe_text(str(rec.id), 8):<8}  (this job's row cannot be read)", "bad")]
        if selected is not None and rec.id == selected:
            pieces = [(t, "selected") for t, _ in pieces] + [(" " * max(0, (width or 0) - _len(pieces)), "selected")]
        frame.add(*pieces)
        frame.ids.append(rec.id)
    if status:
        while height is not None and len(frame.lines) < height - 1:
            frame.add(("", None))
        if height is not None and len(frame.lines) > height - 1:  # a short terminal: the status line stays
            frame.lines = frame.lines[: max(0, height - 1)]
        frame.add(*status)
    return frame


def _len(pieces: list[Piece]) -> int:
    return sum(len(t) for t, _ in pieces)


def once(data: dict, width: int | None) -> str:
    """``qex top --once``: one plain frame, every row."""
    return build(data, width, None).text(width)
