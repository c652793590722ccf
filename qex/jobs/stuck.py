"""A job that looks stuck: queued for longer than ``[system] stuck_after`` while
nothing of its own user ran (``stuck_words``, the one rule; ``qex status`` and
``submit --dedupe-key`` say it).

A job that waits behind its user's own long job is not stuck: it starts when
that one ends. One that waits while none of its user's jobs runs waits for
something else (another user, memory outside qex, a claim that cannot fit
now), and a script that resubmits with ``--dedupe-key`` would otherwise be
handed its id forever without a word. The wait is counted from the latest of:
when it was queued (its submission, or the end of its last attempt), and when
a job of its user last ended after running (the newest lines of the history
index). A wait a person chose (a pause) is never called stuck.
"""

from __future__ import annotations

import json
import os

from qex.base.states import FINAL_RAN, HOLDING

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.store.records import Status

CHOSEN = ("pause", "person")  # waits a person chose (blocked_holder)
TAIL = 1 << 20  # how much of the end of the history index is read for the user's last end


def stuck_words(ctx: Context, rec: Status, active: dict, now: float) -> str:
    """The words that call the queued job ``rec`` stuck (the record as the last pass
    left it; ``active``: the index entries of the queue that holds it), or "" when it
    is not."""
    from qex.base.units import format_duration

    if rec.state != "queued" or rec.id not in active or rec.blocked_holder in CHOSEN:
        return ""
    uid = rec.uid
    if any(e.get("uid") == uid and e.get("state") in HOLDING for e in active.values()):
        return ""  # its user has a job running: it waits its turn
    limit = ctx.config.stuck_after
    since = _queued_since(rec)
    if now - since <= limit:
        return ""  # (before the history is read: the common answer costs nothing)
    since = max(since, _last_run_end(ctx, uid))
    waited = now - since
    if waited <= limit:
        return ""
    return (
        f"job {rec.id[:8]} looks stuck: it has waited {format_duration(waited)} while none of "
        f"its user's jobs ran, more than [system] stuck_after ({format_duration(limit)})"
    )


def _queued_since(rec: Status) -> float:
    from qex.base import numbers

    since = rec.submitted_at if numbers.ok(rec.submitted_at, numbers.TIME) else 0.0
    for attempt in rec.attempts:
        if numbers.ok(attempt.ended_at, numbers.TIME):
            since = max(since, attempt.ended_at)
    return float(since)


def _last_run_end(ctx: Context, uid: object) -> float:
    """When a job of ``uid`` that ran last ended, from the newest lines of the history
    index (0 when none is there: a cache, so at worst a job is called stuck early)."""
    from qex.store import history

    try:
        fd = os.open(history.path_of(ctx.store), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return 0.0
    try:
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, uid)
        if key in _LAST:  # (qex status of a group: one read for all its jobs)
            return _LAST[key]
        data = os.pread(fd, TAIL, max(0, st.st_size - TAIL))
    except OSError:
        return 0.0
    finally:
        os.close(fd)
    _LAST.clear()
    _LAST[key] = latest = _latest(data, uid)
    return latest


_LAST: dict = {}  # the last answer of _last_run_end, by the file's identity and the uid


def _latest(data: bytes, uid: object) -> float:
    from qex.base import numbers

    latest = 0.0
    marker = f'"uid":{uid},'.encode() if isinstance(uid, int) else None
    for line in data.split(b"\n"):
        if marker is None or marker not in line:
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue  # the first (cut) line, or a torn last one
        if not isinstance(row, dict):
            continue
        ended = row.get("ended_at")
        if row.get("uid") == uid and row.get("state") in FINAL_RAN and numbers.ok(ended, numbers.TIME):
            latest = max(latest, float(ended))
    return latest
