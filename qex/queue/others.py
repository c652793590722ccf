"""The other members' queued jobs in a shared state directory's one order.

A member's pass decides on its own jobs and on the others' queued ones
together (one order for everybody), and applies only what concerns its own:
an admitted job of another member reserves its capacity in this pass (the jobs
behind it wait) and is started by its owner's qex; nothing of it is written
here. Its entry is read from that member's index (``qex.store.members``:
their file, checked like any record) and counts only

- while a process of that member that will start it is alive (their waker
  holds its lock): a reservation nobody can honour would stall everyone, so
  a job whose owner has no qex running is plainly queued and holds nothing,
  and its reason says so (``qex.store.members.waiting_for_owner``);
- while it waits for capacity: a job that waits for a dependency, a pause or
  a time holds nothing either (its owner's pass decides those).

Their running jobs count through the peer records (``qex.users.peer_scan``),
as every other user's do: liveness is a lock the job holds.
"""

from __future__ import annotations

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.admit import Queued
    from qex.config.context import Context
    from qex.store.state import Store

# The kinds of wait (``blocked_holder``) for which a job would start once capacity frees.
CAPACITY = frozenset({None, "own", "peer", "front", "reserved", "outside", "device", "lock"})


def queued(ctx: Context) -> list[tuple[float, int, Queued]]:
    """(submitted_at, uid, view) of each queued job of another member that counts now."""
    from qex.queue import views
    from qex.store import check, members
    from qex.store.index import on_slurm

    out = []
    for uid, other in ctx.store.others():
        entries = read_entries(other)
        if not any(e.get("state") == "queued" for e in entries.values()):
            continue
        if not members.starter_alive(other.root, uid):
            continue
        for job_id, e in entries.items():
            try:
                check.index_entry(job_id, e)  # (first: every field below has its type and bounds then)
            except check.Damaged:
                continue  # a damaged entry (a number out of its bounds too: -2 cores would free two) holds nothing
            if e["state"] != "queued" or e["uid"] != uid or e["holder"] not in CAPACITY or on_slurm(e):
                continue
            q = views.queued_of(job_id, {**e, "needs": [], "after": [], "deadline": None, "attempt": 1})
            out.append((float(e["submitted_at"]), uid, q))
    return out


def read_entries(other: Store) -> dict:
    """Another member's active index (their file only; {} when it is not theirs or is unreadable)."""
    from qex.store import fs

    try:
        data = fs.read_json(other.index_path, limit=64 << 20, owner=other.member_uid)
    except (OSError, ValueError):
        return {}
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, dict):
        return {}
    return {k: v for k, v in jobs.items() if isinstance(k, str) and isinstance(v, dict)}


def order(own: list[tuple[float, int, Queued]], foreign: list[tuple[float, int, Queued]]) -> list[Queued]:
    """Every member's queued jobs in one order: by submission time (each member's
    own order kept), each given its place as its ``seq``."""
    from qex.admit import Queued as Q

    both = sorted(own + foreign, key=lambda t: (t[0], t[1], t[2].seq))
    out = []
    for place, (_at, _uid, q) in enumerate(both, 1):
        out.append(
            Q(
                q.id,
                place,
                q.priority,
                q.cpu,
                q.mem,
                q.claims,
                q.needs,
                q.after,
                q.deadline,
                q.passed_by,
                q.name,
                q.retry,
            )
        )
    return out
