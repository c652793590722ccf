"""The admission of a long queue by its head (``qex.queue.engine``'s windowed pass).

A pass behind a thousand queued jobs gave each of them a verdict and reason
words, though after the first few they are all the same: the verdict of a job
depends on what is held, on the front and its allowance, and on the job's
*shape* (cpu, mem, claims, whether it is a retry), unless the job has
dependencies or a deadline (``shape`` is None then). What is held, the front and the allowance
change only when a job starts.

So, when every job past the head of the queue has a shape, the head and the
first job of each of those shapes (its *representative*) are admitted alone.
If no representative starts (nor expires, nor is skipped) and none of them is
the front, nothing changes past the head: each later job of a shape gets what
its representative got. The whole queue's plan is then the head's plan, plus
the representative's Wait for every other job of its shape (the property
tests check exactly that against ``admit``).
"""

from __future__ import annotations

from .admit import decide
from .model import Plan, Queued, Snapshot, Wait

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from .model import Claim


def shape(job: Queued) -> tuple[int, int, tuple[Claim, ...], bool] | None:
    """The key that decides a job's verdict with what is held, the front and the
    allowance (a retry is not held by a queue pause); None for a job whose
    verdict depends on more (needs, after, a deadline)."""
    if job.needs or job.after or job.deadline is not None:
        return None
    return (job.cpu, job.mem, job.claims, job.retry)


def admit_head(snap: Snapshot, reps: dict) -> tuple[Plan, dict[object, Wait]] | None:
    """``snap.queued``: the head of the queue, then the representatives (``reps``:
    shape -> job id, the first job of that shape past the head), all later in
    queue order than the head's jobs. Returns the plan of these jobs, and for
    each shape the Wait that every later job of that shape gets in the whole
    queue's plan; or None when that is not known (a representative does not
    wait, or the front is not in the head): admit the whole queue then."""
    plan, front = decide(snap)
    if front is not None and front in reps.values():
        return None  # set past the head: the jobs behind it may wait for it instead
    waits = {w.id: w for w in plan.wait}
    tail = {}
    for key, job_id in reps.items():
        w = waits.get(job_id)
        if w is None:
            return None
        tail[key] = w
    return plan, tail
