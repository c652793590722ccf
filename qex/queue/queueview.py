"""The queued jobs of an index in admission order, kept across the passes of one
process, for the windowed pass (``qex.admit.window``, ``engine._admit_head``).

A supervisor keeps its index between passes (``Store._cache``). Each pass
touches a few entries (the job that ended, the one that starts, those another
process changed, from the journal); the view follows those ids
(``Index.touched``) instead of walking and sorting the whole queue again. It
also counts the queued jobs per shape, and per shape and recorded holder, so
that a pass can tell without walking the rest of the queue that every job past
the head has a shape and already says the holder its representative gets.
"""

from __future__ import annotations

from bisect import bisect_left

from qex.admit import order_key
from qex.admit.window import shape
from qex.base.states import HOLDING
from qex.store.index import on_slurm

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

    from qex.admit import Queued
    from qex.store.index import Index

SCAN_MAX = 256  # the furthest past the head a pass looks for a shape's first job


class QueueView:
    __slots__ = ("keys", "jobs", "info", "shapes", "held", "unshaped", "holding")

    def __init__(self):
        self.keys: list[tuple] = []  # the queued jobs' order keys (qex.admit.order_key), ascending
        self.jobs: list = []  # their admission views (qex.admit.Queued), in the same order
        self.info: dict[str, tuple] = {}  # job id -> (order key, shape, holder recorded in its entry)
        self.shapes: dict = {}  # shape -> queued jobs of that shape
        self.held: dict = {}  # (shape, holder) -> queued jobs of that shape whose entry names that holder
        self.unshaped: dict[str, tuple] = {}  # job id -> order key, of queued jobs without a shape
        self.holding: set[str] = set()  # the jobs starting or running

    def update(self, job_id: str, entry: dict | None, queued_of: Callable[[str, dict], Queued]) -> None:
        """Take in the entry of one job now (None: dropped); ``queued_of(job_id, entry)``
        gives a queued job's admission view."""
        old = self.info.pop(job_id, None)
        if old is not None:
            key, sh, holder = old
            i = bisect_left(self.keys, key)
            del self.keys[i]
            del self.jobs[i]
            if sh is None:
                del self.unshaped[job_id]
            else:
                _count(self.shapes, sh, -1)
                _count(self.held, (sh, holder), -1)
        state = entry["state"] if entry is not None and not on_slurm(entry) else None  # (Slurm's: not here)
        if state in HOLDING:
            self.holding.add(job_id)
        else:
            self.holding.discard(job_id)
        if state != "queued":
            return
        q = queued_of(job_id, entry)
        key = order_key(q)
        i = bisect_left(self.keys, key)
        self.keys.insert(i, key)
        self.jobs.insert(i, q)
        sh, holder = shape(q), entry.get("holder")
        self.info[job_id] = (key, sh, holder)
        if sh is None:
            self.unshaped[job_id] = key
        else:
            _count(self.shapes, sh, 1)
            _count(self.held, (sh, holder), 1)

    def head(self, k: int) -> tuple[list[Queued], dict, dict] | None:
        """(the first ``k`` queued jobs, {shape: the first job of that shape past
        them}, {shape: how many jobs past them have it}), or None when a job past
        the head has no shape, or a shape's first job is far past it."""
        if len(self.jobs) <= k:
            return None
        last = self.keys[k - 1]
        if any(key > last for key in self.unshaped.values()):
            return None
        head = self.jobs[:k]
        tail = dict(self.shapes)
        for q in head:
            sh = self.info[q.id][1]
            if sh is not None:
                tail[sh] -= 1
        wanted = sum(1 for n in tail.values() if n > 0)
        reps: dict = {}
        for q in self.jobs[k : k + SCAN_MAX]:
            sh = self.info[q.id][1]
            if sh not in reps:
                reps[sh] = q
                if len(reps) == wanted:
                    return head, reps, {sh: n for sh, n in tail.items() if n > 0}
        return None

    def tail_holds(self, head: list, tail: dict, holders: dict) -> bool:
        """Whether every job past ``head`` already names the holder its shape gets
        (``holders``: shape -> holder): then its entry needs no new event."""
        in_head: dict = {}
        for q in head:
            _, sh, holder = self.info[q.id]
            if sh is not None:
                _count(in_head, (sh, holder), 1)
        return all(self.held.get((sh, h), 0) - in_head.get((sh, h), 0) == tail[sh] for sh, h in holders.items())


def _count(counts: dict, key, n: int) -> None:
    left = counts.get(key, 0) + n
    if left:
        counts[key] = left
    else:
        del counts[key]


def view_of(idx: Index, queued_of: Callable[[str, dict], Queued]) -> QueueView:
    """The index's view, brought up to date with the entries touched since it last looked."""
    view = idx.view
    if view is None:
        view = idx.view = QueueView()
        touched = list(idx.jobs)
    else:
        touched = idx.touched
    jobs = idx.jobs
    for job_id in touched:
        view.update(job_id, jobs.get(job_id), queued_of)
    idx.touched = set()
    return view
