"""Removing ended jobs' records: ``remove_ended`` (``qex clean``'s removal), and
the pruning that keeps a state directory from growing for ever with no one
typing ``qex clean`` (a crontab's queue): ``auto``.

What goes: an ended job of this user past ``[store] max_age`` (default 30
days), and the oldest ended ones beyond ``[store] max_records`` (default
10,000) -- the rule of ``qex clean --auto``, which is this module's
``past_keep`` too. Never a record that queued or running work still needs
(``qex.store.needed.still_needed``, decided under the state lock).

When: a supervisor whose job has ended and that has no next job to run calls
``auto`` (``qex.supervisor.run._finish``), off every critical path: the
follower has the final record already, and a drain of short jobs hands each
job to the next without it. At most once per ``[store] prune_every`` (default
10 minutes; 0: never) per state directory: the stamp file's time says when it
last ran (one ``stat`` per job otherwise). The candidates come from the history
index (one read of ``history.jsonl``, no record read), so a pass over 10,000
records costs a few milliseconds.
"""

from __future__ import annotations

import os
import time

from qex.store import layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

    from qex.config.context import Context
    from qex.store.records import Status


def remove_ended(
    ctx: Context, job_ids: list[str], check: Callable[[Status], None] | None = None
) -> tuple[list[str], dict[str, str], dict[str, dict]]:
    """Remove the directories of ended jobs. Returns (removed, refused: id -> why,
    kept: id -> {"why", "needed_by"}): a record that queued or running work still
    needs stays (``qex.store.needed.still_needed``, decided under the lock).
    ``check(record)``: raises ``PermissionRefused`` for a job this caller may not remove."""
    import shutil

    from qex.base.errors import PermissionRefused
    from qex.store.needed import still_needed

    removed, refused, trash = [], {}, []
    with ctx.store.lock():
        idx = ctx.store.load_index_locked()
        candidates = {}
        for job_id in job_ids:
            if job_id in idx.jobs:
                refused[job_id] = f"it is {idx.jobs[job_id]['state']}; kill or cancel it first"
                continue
            try:
                rec = ctx.store.read_status(job_id)
                if check is not None:
                    check(rec)
            except PermissionRefused as exc:
                refused[job_id] = str(exc)
                continue
            except Exception:
                rec = None  # a broken record may always be cleaned by whoever can
            candidates[job_id] = rec.group if rec is not None else None
        kept = still_needed(_active_everywhere(ctx, idx), candidates) if candidates else {}
        for job_id in candidates:
            if job_id in kept:
                continue
            _remove_cgroup(ctx, job_id)
            hidden = os.path.join(ctx.store.jobs, layout.cleaned_job_dir(job_id))
            try:
                os.rename(ctx.store.job_dir(job_id), hidden)
            except OSError as exc:
                refused[job_id] = exc.strerror or str(exc)
                continue
            trash.append(hidden)
            removed.append(job_id)
        if removed:
            from qex.store import history

            history.forget_locked(ctx.store, removed)  # qex list shows no cleaned job
        _sweep_cgroups(ctx, idx, removed)
    for path in trash:
        shutil.rmtree(path, ignore_errors=True)
    return removed, refused, kept


def past_keep(ended: list[tuple[float, str]], now: float, max_age: float, max_records: int) -> list[str]:
    """Of ``ended`` ((ended_at, id) of one user's ended jobs), those the keep rule lets go:
    older than ``max_age`` seconds, or beyond the newest ``max_records``. Oldest first."""
    ended = sorted(ended)
    chosen = {j for t, j in ended if now - t >= max_age}
    if len(ended) > max_records:
        chosen |= {j for _, j in ended[: len(ended) - max_records]}
    return [j for _, j in ended if j in chosen]


def due(ctx: Context, now: float | None = None) -> bool:
    """Whether ``auto`` should look now: ``[store] prune_every`` has passed since it last did.
    Claims the turn (the stamp's time moves to now) so that one of several supervisors looks."""
    every = ctx.config.store_prune_every
    if not every or every <= 0:
        return False
    now = time.time() if now is None else now
    stamp = os.path.join(ctx.store.root, layout.PRUNED)
    try:
        if now - os.stat(stamp).st_mtime < every:
            return False
    except FileNotFoundError:
        pass
    except OSError:
        return False
    try:
        with open(stamp, "a"):
            pass
        os.utime(stamp, (now, now))
    except OSError:
        return False
    return True


def auto(ctx: Context, now: float | None = None) -> list[str]:
    """Prune this user's ended records past the keep rule, if it is time (``due``); the ids removed."""
    now = time.time() if now is None else now
    if not due(ctx, now):
        return []
    chosen = past_keep(_ended_from_history(ctx), now, ctx.config.store_max_age, ctx.config.store_max_records)
    if not chosen:
        return []
    removed, _refused, _kept = remove_ended(ctx, chosen)
    return removed


def _ended_from_history(ctx: Context) -> list[tuple[float, str]]:
    """(ended_at, id) of this user's ended jobs, from the history index (no record read)."""
    import json

    from qex.store import history

    mine = []
    for _seq, job_id, line in history.scan(history._read(ctx.store)):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row.get("uid") not in (ctx.uid, None, -1) and ctx.uid != 0:
            continue
        at = row.get("ended_at") or row.get("submitted_at")
        if isinstance(at, (int, float)) and not isinstance(at, bool):
            mine.append((float(at), job_id))
    return mine


def _active_everywhere(ctx: Context, idx) -> list[tuple[str, dict]]:
    """The active jobs of this queue (its index, lock held) and, in a shared state
    directory, of the other members (their index files, read)."""
    active = list(idx.jobs.items())
    for _uid, other in ctx.store.others():
        active += list(other.read_index_jobs().items())
    return active


def _remove_cgroup(ctx: Context, job_id: str) -> None:
    """An ended job's memory cgroup goes with its record (if a process it left keeps it, it stays)."""
    from qex.linux import cgroup

    try:
        cgroup.stop_and_remove(ctx.store.job_dir(job_id), job_id, kill=False)
    except OSError:
        pass


def _sweep_cgroups(ctx: Context, idx, removed: list[str]) -> None:
    from qex.linux import cgroup

    try:
        cgroup.sweep(ctx.store, set(idx.jobs), known=set(removed))
    except OSError:
        pass
