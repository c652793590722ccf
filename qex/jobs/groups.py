"""Groups: the handle of a pipeline or a fan-out.

A group is the file ``<state>/groups/<gid>.json`` = ``{"id", "name",
"members": [job ids in submission order], "owner", "uid", "kind",
"submitted_at"}``; each member's record also names it (``group``,
``group_name``). The file is written under the state lock in the same hold
that queues its jobs, so a reader never sees a group without its jobs; a
member that is absent (cleaned, or a submission killed before its commit) is
left out by ``qex.jobs.resolve``. ``clean`` removes the file with its last member.
"""

from __future__ import annotations

import os
import time

from qex.store import fs, layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from qex.config.context import Context
    from qex.jobs.submit import Built
    from qex.queue.context import PassResult
    from qex.queue.txn import Txn
    from qex.store.state import Store


def directory(store: Store) -> str:
    return os.path.join(store.root, layout.GROUPS)


def path(store: Store, group_id: str) -> str:
    return os.path.join(directory(store), layout.group_file(group_id))


def write_locked(ctx: Context, group_id: str, name: str, members: list[str], kind: str, sync: bool = True) -> None:
    """Write the group file (the state lock must be held)."""
    d = directory(ctx.store)
    if not os.path.isdir(d):
        fs.ensure_private_dir(d)  # a shared directory has it already (qex init --shared: 2770)
    data = {
        "id": group_id,
        "name": name,
        "members": list(members),
        "kind": kind,
        "owner": ctx.user,
        "uid": ctx.uid,
        "submitted_at": time.time(),
    }
    fs.write_json(path(ctx.store, group_id), data, mode=ctx.store.status_mode, sync_dir=sync, sync=sync)


def remove_quietly(store: Store, group_id: str) -> None:
    try:
        os.unlink(path(store, group_id))
    except OSError:
        pass


def submit(
    ctx: Context, built: list[Built], group_id: str, name: str, kind: str, prepare: Callable[[str], None] | None = None
) -> tuple[list[str], PassResult]:
    """Queue every job of ``built`` and the group file in one lock hold.
    ``prepare``: as ``submit_many``'s (a Python call's file, ``qex.api``).

    Returns (ids, PassResult). Nothing is left behind if it fails.
    """
    from qex.jobs.submit import submit_many

    def write_group(txn: Txn, jobs: list) -> None:
        # Durable before its jobs' events: the journal does not hold it (records are repaired from it).
        write_locked(ctx, group_id, name, [b.spec.id for b in jobs], kind, sync=True)
        return None  # go on: submit_many queues the jobs in this same hold

    try:
        return submit_many(ctx, built, on_locked=write_group, prepare=prepare)
    except BaseException:
        remove_quietly(ctx.store, group_id)
        raise


def of_jobs(store: Store, job_ids: list[str]) -> set[str]:
    """The groups that these jobs belong to (from their records)."""
    found = set()
    for job_id in job_ids:
        try:
            gid = store.read_status(job_id).group
        except Exception:
            continue
        if isinstance(gid, str) and gid and "/" not in gid:
            found.add(gid)
    return found


def all_ids(store: Store) -> list[str]:
    try:
        names = os.listdir(directory(store))
        return sorted(g for n in names if not n.startswith(".") and (g := layout.group_of(n)) is not None)
    except FileNotFoundError:
        return []


def prune(ctx: Context, group_ids: Iterable[str] | None = None) -> list[str]:
    """Remove the files of groups none of whose members exist any more (None: look at every group)."""
    removed = []
    if group_ids is None:
        group_ids = all_ids(ctx.store)
    with ctx.store.lock():
        for gid in sorted(set(g for g in group_ids if g)):
            data = _read(ctx.store, gid)
            if data is None:
                continue
            if not any(os.path.exists(ctx.store.path(m, layout.STATUS)) for m in data.get("members", [])):
                remove_quietly(ctx.store, gid)
                removed.append(gid)
    return removed


def _read(store, group_id: str) -> dict | None:
    try:
        data = fs.read_json(path(store, group_id))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def stage_names(store: Store, members: list[str], limit: int = 20) -> str:
    """'prep (1a2b3c4d), train (5e6f7a8b) and 3 more' for a message."""
    from qex.base.units import safe_text

    shown = []
    for job_id in members[:limit]:
        try:
            name = store.read_status(job_id).name
        except Exception:
            name = ""
        shown.append(f"{safe_text(name, 40)} ({job_id[:8]})" if name else job_id[:8])
    more = len(members) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")
