"""A job's admission view (``qex.admit.Queued`` or ``Running``) from its index
entry. Kept apart from the queue's view (``qex.queue.queueview``, with its
bisect and the window's shapes): every pass builds these, and only a
supervisor's windowed pass needs that view."""

from __future__ import annotations

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.admit import Queued, Running


# A queued job's admission view, kept while its index entry is the same object: a
# process that keeps its committed index (Store._cache) builds only what changed, so
# a pass behind a long queue does not rebuild a thousand views per job start. An
# entry is never changed in place but for its reason words, which the view lacks.
QUEUED_MEMO: dict = {}


def queued_of(job_id: str, e: dict) -> Queued:
    """A queued job's admission view (kept while its entry is the same object)."""
    known = QUEUED_MEMO.get(job_id)
    if known is not None and known[0] is e:
        return known[1]
    from qex import admit as A

    claims = tuple(A.Claim(name, c, s) for name, (c, s) in sorted(e["pools"].items()))
    q = A.Queued(
        job_id,
        e["seq"],
        e["priority"],
        e["cpu"],
        e["mem"],
        claims,
        tuple(e["needs"]),
        tuple(e["after"]),
        e["deadline"],
        e["passed_by"],
        e["name"],
        e.get("attempt", 1) > 1,
    )
    QUEUED_MEMO[job_id] = (e, q)
    return q


def running_of(job_id: str, e: dict) -> Running:
    from qex import admit as A

    claims = tuple(A.Claim(name, c, s) for name, (c, s) in sorted(e["pools"].items()))
    assigned = tuple(A.DeviceUse(p, tuple(d), s) for p, d, s in e["assigned"])
    return A.Running(job_id, e["cpu"], e["mem"], claims, assigned)
