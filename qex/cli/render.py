"""Records in words for a terminal. Every name and command shown is safe text."""

from __future__ import annotations

import time

from qex.base import outcome
from qex.base.states import ACTIVE, FINAL_RAN
from qex.base.text import plain
from qex.base.units import format_duration, format_size, safe_text
from qex.cli.listing import claims_text, row

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.store.records import Assigned, LogsDropped, Row, Status


def devices_text(assigned: tuple[Assigned, ...]) -> str:
    return "; ".join(f"{safe_text(a.pool)} {','.join(str(d) for d in a.devices)}" for a in assigned if a.devices)


def state_text(rec: Status, now: float | None = None) -> str:
    now = time.time() if now is None else now
    state = rec.state
    if state == "running" and rec.started_at:
        return f"running for {format_duration(now - rec.started_at)} (pid {rec.pid})"
    if state == "queued":
        return f"queued for {format_duration(now - (rec.submitted_at or now))}"
    if rec.ended_at and rec.started_at:
        return f"{state} after {format_duration(rec.ended_at - rec.started_at)}"
    return state


def describe(rec: Status, stuck: str = "") -> str:
    """A record in rows for ``qex status``; ``stuck``: the words that call a queued
    job stuck (``qex.jobs.stuck``), shown below its reason."""
    import shlex

    rows = [("id", rec.id), ("name", safe_text(rec.name)), ("state", state_text(rec))]
    if rec.group:
        rows.append(("group", f"{rec.group} ({safe_text(rec.group_name or '')})"))
    rows.append(("command", plain(shlex.join(rec.command), 400)))
    rows.append(("cwd", safe_text(rec.cwd, 400)))
    rows.append(("owner", safe_text(str(rec.owner))))
    if rec.slurm_job_id:
        job = safe_text(rec.slurm_job_id)
        rows.append(("slurm", f"job {job} (scontrol show job {job})"))
    rows.append(("claims", claims_text(rec.claims) + _sources(rec.claim_source)))
    for label, text in (("devices", devices_text(rec.assigned)), ("vram", vram_text(rec))):
        if text:
            rows.append((label, text))
    if rec.nice is not None:
        from qex.linux.manners import words as manners

        rows.append(("manners", manners(rec.nice, rec.io_class, rec.oom_score_adj)))
    if rec.tags:
        rows.append(("tags", ", ".join(safe_text(t) for t in rec.tags)))
    if rec.dedupe_key:
        rows.append(("dedupe", safe_text(rec.dedupe_key, 200)))
    if rec.blocked_reason and rec.state == "queued":
        rows.append(("reason", plain(rec.blocked_reason)))  # ("waits for ..." says it once)
    if stuck:
        rows.append(("stuck", stuck))
    if rec.max_queue_time is not None and rec.state == "queued" and rec.attempt == 1:
        rows.append(("limit", queue_limit_text(rec)))
    if rec.state in FINAL_RAN:
        rows += _ran(rec)
    return "\n".join(f"{k:<9}{v}" for k, v in rows + _after(rec))


def _ran(rec: Status) -> list[tuple[str, str]]:
    """The rows of a job that ran: how it exited and what it used."""
    code, usage = rec.exit_code, rec.usage
    rows = [("exit", f"{code}" if code is not None else f"signal {rec.signal}" if rec.signal else "none")]
    if usage.max_rss is not None:
        from qex.supervisor.memory import peak_words

        peak = f"peak {format_size(usage.max_rss)}{peak_words(usage.peak_from, usage.sample_period)}"
        rows.append(("usage", f"{peak}, {usage.cpu_secs or 0:g} cpu-s"))
    return rows


def _after(rec: Status) -> list[tuple[str, str]]:
    """The last rows: its attempts, what went wrong, its logs' cut and its code."""
    rows = []
    if len(rec.attempts) > 1:
        rows.append(("attempts", str(len(rec.attempts))))
    for a in rec.attempts:
        if a.state == "oom" and a.error and a.error != rec.error:
            rows.append(("memory", a.error))
    if rec.forced:
        rows.append(("forced", "yes: larger than the budget, it ran alone"))
    if rec.error:
        rows.append(("error", plain(rec.error)))
    dropped = dropped_text(rec.logs_dropped)
    if dropped:
        rows.append(("logs", dropped))
    rows.append(("code", str(outcome.exit_code(rec)) + (" (not stopped)" if rec.state in ACTIVE else "")))
    return rows


def vram_text(rec: Status) -> str:
    """A GPU job's VRAM beside its claim: its peak per device (sampled by its
    supervisor), and whether it went above what it was given ("" when not measured)."""
    by_device = rec.usage.vram_peak_by_device or {}
    if not by_device:
        return ""  # not measured: no driver answered, or it ended before its first sample
    gpu = rec.claims.pools.get("gpu")
    size = gpu.size if gpu else None
    claim = f"claim {format_size(size)} per device" if size else "claim whole devices" if gpu else "no GPU claim"
    peaks = ", ".join(
        f"{format_size(n)} on {'gpu ' + k if str(k).isdigit() else safe_text(str(k), 60)}"
        for k, n in sorted(by_device.items())
    )
    text = f"peak {peaks} ({claim})"
    if rec.vram_over:
        text += f"; {plain(rec.vram_over)}"
    return text


def queue_limit_text(rec: Status) -> str:
    """--max-queue-time of a queued job: when it gives up (time in a queue pause not counted)."""
    paused = rec.queue_pause_secs or 0.0
    at = rec.submitted_at + rec.max_queue_time + paused
    text = f"--max-queue-time {format_duration(rec.max_queue_time)}: gives up at " + time.strftime(
        "%Y-%m-%d %H:%M:%S", time.localtime(at)
    )
    text += f" ({format_duration(paused)} of queue pause not counted)" if paused else ""
    return text + (", later by the time the queue stays paused" if rec.blocked_holder == "pause" else "")


def dropped_text(dropped: LogsDropped) -> str:
    """What the output limit left out, in words ("" when nothing went)."""
    parts = []
    for stream in ("stdout", "stderr"):
        n = getattr(dropped, f"{stream}_bytes") or 0
        if n:
            parts.append(f"{format_size(n)} ({n} bytes, {getattr(dropped, f'{stream}_lines') or 0} lines) of {stream}")
    text = ""
    if parts:
        text = " and ".join(parts) + " left out by [logs] max_bytes (the file keeps the head and the tail)"
    if dropped.incomplete:
        text += ("; " if text else "") + "the output may be incomplete: a process the job left behind held it open"
    return text


def _sources(sources: dict) -> str:
    notes = [f"{k} {v}" for k, v in sorted(sources.items()) if v != "user"]
    return f" ({'; '.join(notes)})" if notes else ""


def list_row(rec: Row | Status, now: float) -> str:
    """A row of ``qex list`` in its default fields (``qex.cli.listing``)."""
    return row(rec, now)


SUMMARY_NAMES = 10  # the jobs a summary line names; the rest are counted


def group_summary(records: list[Status], group: str, name: str | None, now: float) -> str:
    """``qex status G``: one line per state with its count, the jobs that did not succeed
    named with their codes, the running ones with their time, the CPU time of all and
    the largest peak. ``--all`` (or ``--json``) gives every record."""
    from qex.base.states import STATES

    by_state: dict[str, list[Status]] = {}
    for rec in sorted(records, key=lambda r: r.seq):
        by_state.setdefault(rec.state, []).append(rec)
    ended = not any(r.state in ACTIVE for r in records)
    rows = [
        (
            "group",
            f"{group} ({safe_text(name or '')}): {len(records)} job{'s' if len(records) != 1 else ''}"
            + (f", its code {outcome.group_exit_code(records)}" if ended else ", not all ended"),
        )
    ]
    for state in STATES:
        recs = by_state.get(state) or []
        if recs:
            rows.append((state, f"{len(recs):>5}{_named(recs, state, group, now)}"))
    cpu = sum(r.usage.cpu_secs or 0 for r in records)
    rows.append(("cpu", f"{format_duration(cpu)} in all" if cpu else "none recorded yet"))
    peaks = [r for r in records if r.usage.max_rss]
    if peaks:
        top = max(peaks, key=lambda r: r.usage.max_rss)
        rows.append(("peak", f"{format_size(top.usage.max_rss)} (the largest: {top.id[:8]} {safe_text(top.name, 40)})"))
    return "\n".join(f"{k:<10}{v}" for k, v in rows)


def _named(recs: list[Status], state: str, group: str, now: float) -> str:
    """The jobs of one state named, for the states a reader acts on: those that did not
    succeed (with their code) and the running ones (with their time)."""
    from qex.base.states import FINAL

    if state == "completed" or (state not in FINAL and state != "running"):
        return ""
    parts = []
    for rec in recs[:SUMMARY_NAMES]:
        what = (
            f"exit {outcome.exit_code(rec)}"
            if state in FINAL
            else f"for {format_duration(max(0.0, now - (rec.started_at or now)))}"
        )
        parts.append(f"{rec.id[:8]} {safe_text(rec.name, 40)} ({what})")
    more = len(recs) - SUMMARY_NAMES
    tail = f"; and {more} more: qex list --group {group[:8]} --state {state}" if more > 0 else ""
    return ": " + "; ".join(parts) + tail
