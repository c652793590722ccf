"""Dedupe keys: at most one job per key and user while it is queued, starting
or running; with ``--dedupe-window T``, also a job with that key that
*completed* within T.

The test and the submission are one step under the state lock
(``qex.jobs.submit.submit_many(on_locked=Checker(...))``), so N submissions of one
key at the same instant give exactly one job.

Where a key lives:

- an active job carries its key in its index entry (``dedupe_key``): the
  check is a look at the active index the pass loads anyway;
- a job that completed leaves its key in ``<state>/dedupe-recent.json``
  (written by its supervisor's final pass, in the same lock hold), a bounded
  map ``"<uid>:<key>" -> [id, ended_at]`` of the ``MAX_RECENT`` most recent
  successes, so a window never scans history. An entry is believed only
  while the job's record still exists and says ``completed``: a cleaned
  record frees its key, and a failed job never holds one.

A key belongs to its user: in a shared state directory another user's job
with the same key does not stop yours.
"""

from __future__ import annotations

import os
import time

from qex.base import numbers
from qex.base.errors import SpecError
from qex.base.plain import Plain
from qex.store import layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.queue.txn import Txn
    from qex.store.records import Status
    from qex.store.state import Store

RECENT = layout.DEDUPE_RECENT  # (tests have it from here)
MAX_RECENT = 1000
MAX_KEY = 512


# ---- checking what a user gave ------------------------------------------------


def check_key(key: object, option: str = "--dedupe-key") -> str:
    """A key is any text of 1 to MAX_KEY characters without control characters."""
    from qex.base.units import safe_text

    if not isinstance(key, str) or not key.strip():
        raise SpecError(f"{option}: the key is empty; give a text that names the work, e.g. --dedupe-key build:$(pwd)")
    if len(key) > MAX_KEY:
        raise SpecError(
            f"{option}: the key has {len(key)} characters; at most {MAX_KEY} "
            '(a hash of a long text works: --dedupe-key "$(echo ... | sha1sum)")'
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise SpecError(
            f"{option}: {safe_text(key, 60)!r} holds a control character "
            "(a newline, a tab...); give a key of printable characters"
        )
    return key


def parse_window(text: object, option: str = "--dedupe-window") -> float:
    from qex.base.units import parse_duration, safe_text

    value = parse_duration(str(text), option)
    if value <= 0:
        raise SpecError(f"{option}: {safe_text(str(text), 60)!r} must be longer than zero, e.g. 30m, 4h, 7d")
    return value


def check_request(req: object) -> None:
    """Refuse a bad key, a bad window, or a window without a key (121)."""
    if req.dedupe_key is not None:
        check_key(req.dedupe_key)
    if req.dedupe_window is not None:
        if req.dedupe_key is None:
            raise SpecError("--dedupe-window asks for a job with a key: give --dedupe-key KEY with it")
        parse_window(req.dedupe_window)


def refuse_key_for(kind: str, key: str | None) -> None:
    """A pipeline stage or a fan-out takes no key: N jobs cannot share one
    (``kind`` = "a pipeline stage" | "a fan-out (--each-line)")."""
    if key is not None:
        raise SpecError(
            f"{kind} cannot take a --dedupe-key: a key names one job, and {kind} makes "
            "several; submit the work as one job with the key, or drop the key"
        )


def without_key(request_words: dict) -> dict:
    """The request words of a spec for ``qex rerun``: a rerun never keeps the key
    (nor the window), or it would only ever return the job it reruns."""
    return {k: v for k, v in request_words.items() if k not in ("dedupe_key", "dedupe_window")}


# ---- the test, under the lock ---------------------------------------------------


class Hit(Plain):
    """The job that holds the key: its id, state and command (as recorded)."""

    id: str
    state: str
    command: list
    key: str
    ended_at: float | None = None  # set when found through the window
    stuck: str = ""  # words when the holder looks stuck (``qex.jobs.stuck``)


class Checker:
    """``on_locked`` for ``submit_many``: the ids of the holder, or None to submit.

    After the submission, ``hit`` says which job holds the key (None: a new job).
    """

    def __init__(self, ctx: Context, key: str, window: float | None = None):
        self.ctx, self.key, self.window = ctx, key, window
        self.hit: Hit | None = None

    def __call__(self, txn, built) -> list[str] | None:
        self.hit = find_locked(self.ctx, txn, self.key, self.window, time.time())
        return [self.hit.id] if self.hit is not None else None


def checker_for(ctx: Context, req: object) -> "Checker | None":
    if req.dedupe_key is None:
        return None
    window = parse_window(req.dedupe_window) if req.dedupe_window is not None else None
    return Checker(ctx, req.dedupe_key, window)


def find_locked(ctx: Context, txn: Txn, key: str, window: float | None, now: float) -> Hit | None:
    """The job of this user that holds ``key``: an active one, else (with a
    window) one that completed within it. The state lock must be held."""
    holders = sorted(
        (e["seq"], job_id)
        for job_id, e in txn.idx.jobs.items()
        if e.get("dedupe_key") == key and e.get("uid") == ctx.uid
    )
    if holders:
        from qex.jobs.stuck import stuck_words
        from qex.store.index import live_words

        job_id = holders[0][1]
        rec = txn.record(job_id)
        words = live_words(rec.blocked_reason, txn.idx.jobs[job_id])
        rec = rec if words is None else rec.evolve(**words)
        return Hit(job_id, rec.state, list(rec.command), key, stuck=stuck_words(ctx, rec, txn.idx.jobs, now))
    if window is None:
        return None
    entry = _read_recent(ctx.store).get(_slot(ctx.uid, key))
    if not entry:
        return None
    job_id, ended_at = entry[0], float(entry[1])
    if now - ended_at > window:
        return None
    try:
        rec = ctx.store.read_status(job_id)
    except Exception:  # cleaned (or broken): the key is free
        return None
    if rec.state != "completed" or rec.dedupe_key != key:
        return None
    return Hit(job_id, "completed", list(rec.command), key, rec.ended_at or ended_at)


# ---- what a success leaves behind (the supervisor's final pass) -----------------


def remember_locked(store: Store, rec: Status) -> None:
    """A job with a key completed: keep its key for later windows. Lock held.

    Written before the pass commits; a reader believes it only while the
    record says completed, so a pass that dies here leaves nothing false.
    """
    key = rec.dedupe_key
    if not key or rec.state != "completed":
        return
    from qex.store import fs

    recent = _read_recent(store)
    recent[_slot(rec.uid, key)] = [rec.id, rec.ended_at or time.time()]
    if len(recent) > MAX_RECENT:
        newest = sorted(recent.items(), key=lambda kv: kv[1][1], reverse=True)[:MAX_RECENT]
        recent = dict(newest)
    try:
        fs.write_json(
            os.path.join(store.root, layout.DEDUPE_RECENT), {"format": 1, "keys": recent}, mode=0o644, sync_dir=False
        )
    except Exception:
        from qex.base import say

        say.warning(
            "could not remember the dedupe key of a completed job "
            f"(a later --dedupe-window will not find job {rec.id[:8]})"
        )


def _slot(uid, key: str) -> str:
    return f"{uid}:{key}"


def _read_recent(store) -> dict:
    from qex.store import fs

    try:
        data = fs.read_json(os.path.join(store.root, layout.DEDUPE_RECENT))
        keys = data.get("keys") if isinstance(data, dict) else None
        return (
            {
                k: v
                for k, v in keys.items()
                if isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and numbers.ok(v[1], numbers.TIME)
            }
            if isinstance(keys, dict)
            else {}
        )
    except (OSError, ValueError):
        return {}  # none yet, or damaged: a window finds nothing (never a wrong job)


# ---- words ----------------------------------------------------------------------


def describe(hit: Hit, now: float | None = None) -> str:
    """The stderr line: which job holds the key, in safe form."""
    from qex.base.units import format_duration, safe_text

    command = safe_text(" ".join(str(a) for a in hit.command), 160)
    key = safe_text(hit.key, 120)
    if hit.ended_at is not None:
        ago = format_duration(max(0.0, (now or time.time()) - hit.ended_at))
        return (
            f"deduplicated: job {hit.id} completed {ago} ago with the key '{key}' "
            f"(within --dedupe-window): {command}; no new job was made"
        )
    said = f"deduplicated: job {hit.id} ({safe_text(hit.state)}) holds the key '{key}': {command}; no new job was made"
    if hit.stuck:
        said += (
            f". Warning: {hit.stuck}, and every submission with this key gets it until it ends; "
            f"qex status {hit.id[:8]} says what it waits for, qex cancel {hit.id[:8]} lets the key go"
        )
    return said
