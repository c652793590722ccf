"""Pauses as people see them: the pauses in force for `qex pause`, `qex info` and their
``--json`` (``listing``, ``render``), and the notes after a submission or during a wait
that a job waits for a pause (``qex.queue.pause`` keeps the pauses themselves)."""

from __future__ import annotations

import os

from qex.base.states import HOLDING
from qex.queue.pause import clock, directory, in_force

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.store.records import Status
    from qex.store.state import Store


def holders(index_jobs: dict, name: str) -> list[str]:
    """Jobs that still hold ``name`` (starting or running) — the person has it when none."""
    return sorted(j for j, e in index_jobs.items() if e.get("state") in HOLDING and name in (e.get("pools") or {}))


def listing(store: Store, index_jobs: dict, now: float) -> list[dict]:
    """The pauses in force, for `qex pause`, `qex info` and their --json."""
    out = []
    for p in in_force(store, now):
        item = {
            "kind": p.kind,
            "name": p.name,
            "reason": p.reason,
            "user": p.user,
            "uid": p.uid,
            "pid": p.pid,
            "ppid": p.ppid,
            "since": p.since,
            "until": p.until,
            "broken": p.broken,
            "file": p.path,
        }
        if p.kind == "lock":
            item["held_by_jobs"] = holders(index_jobs, p.name)
        out.append(item)
    return out


def render(item: dict, now: float) -> str:
    """One line per pause, in safe form."""
    from qex.base.units import format_duration, safe_text

    what = "queue" if item["kind"] == "queue" else f"lock {safe_text(item['name'])}"
    if item.get("broken"):
        return f"{what}: held: {item['broken']}"
    who = f"by {safe_text(item['user'])} (pid {item.get('ppid') or item.get('pid')})"
    since = f" since {clock(item['since'], now)}" if item.get("since") else ""
    until = (
        f", until {clock(item['until'], now)} (in {format_duration(max(0.0, item['until'] - now))})"
        if item.get("until")
        else ", until resumed"
    )
    line = f"{what}: paused {who}{since}{until}"
    if item.get("reason"):
        line += f": {safe_text(item['reason'], 200)}"
    if item["kind"] == "lock":
        held = item.get("held_by_jobs") or []
        line += (
            f"; the person has it as soon as job {', '.join(j[:8] for j in held)} ends"
            if held
            else "; the person has it"
        )
    return line


def submission_note(ctx: Context, job_id: str) -> str | None:
    """After a submission: the pause it waits for, if any (costs a listdir when nothing is paused)."""
    try:
        if not os.listdir(directory(ctx.store)):
            return None
        rec = ctx.store.read_live(job_id)
    except Exception:
        return None
    if rec.state == "queued" and rec.blocked_holder in ("pause", "person"):
        return f"job {job_id[:8]} waits: {rec.blocked_reason}"
    return None


class WaitNotes:
    """For `qex wait` (``on_record``): say once per job and reason that it waits for a pause."""

    def __init__(self, say):
        self.say = say
        self.said: dict[str, str] = {}

    def __call__(self, rec: Status) -> None:
        job_id, reason = rec.id, rec.blocked_reason
        if rec.state == "queued" and rec.blocked_holder in ("pause", "person") and self.said.get(job_id) != reason:
            self.said[job_id] = reason
            self.say(f"qex: job {job_id[:8]} waits: {reason}")
