"""The whole-tree peak of a job without a cgroup: sampled from /proc by its supervisor.

Where no cgroup can be had (no systemd, cron without lingering, a container, or
``QEX_CGROUP=off``), ``getrusage`` gives only the largest single process the job waited
for: a ``make -j8`` or a data loader's workers are undercounted. The supervisor is the
job's subreaper, so every process of the job is its descendant: every ``EVERY`` seconds
it walks them (``/proc/PID/task/TID/children``) and sums their anonymous resident
memory (``/proc/PID/statm``: resident less file-backed and shared pages, which are the
page cache's and counted once however many processes map them). The peak of those sums
is the record's ``max_rss`` with ``peak_from`` "proc-sample" and ``sample_period``
(``qex.supervisor.memory.Meter.end``). A peak shorter than the period can be missed, and
pages a fork shares with its parent until either writes them are counted in both: the
record says the period, so that a reader knows. (``Pss`` from ``smaps_rollup`` would
count shared pages once, but reading it walks every page table of the process: 2 ms for
a 50MB process here, against 35 us for ``statm``.)

Cost: a sample reads two small files per process of the job; the period grows so that
sampling stays under 1% of a core (``BUDGET``) however many processes the job has (by
the least recent cost of a sample: one the scheduler preempted does not stretch it). The
record's ``sample_period`` is the last period.

Imports nothing but builtin modules: the minimal watcher (``qex.supervisor.watch``) runs it.
"""

import posix as os
import time

EVERY = 0.2  # seconds between samples (at least)
FIRST = 0.05  # seconds after the start of the first sample
BUDGET = 0.01  # of a core: the period grows to keep a sample's CPU time under this share
PAGE = os.sysconf("SC_PAGE_SIZE")
FIELDS = ("every", "next_at", "peak", "samples", "cpu", "low")


class TreePeak:
    __slots__ = FIELDS

    def __init__(self, every=EVERY, next_at=0.0, peak=0, samples=0, cpu=0.0, low=None):
        self.every, self.next_at, self.peak, self.samples, self.cpu = every, next_at, peak, samples, cpu
        self.low = low  # what a sample costs: the least of the recent ones, rising 50% a sample

    @classmethod
    def start(cls, started: float) -> "TreePeak":
        return cls(next_at=started + FIRST)

    def state(self) -> tuple:
        return tuple(getattr(self, name) for name in FIELDS)

    @classmethod
    def resume(cls, state: tuple | None) -> "TreePeak | None":
        return cls(*state) if state else None

    def tick(self, now: float) -> float:
        """Sample when one is due; when the next one is."""
        if now >= self.next_at:
            t0 = time.thread_time()
            total = tree_memory(os.getpid())
            cost = time.thread_time() - t0
            self.cpu += cost
            self.samples += 1
            self.peak = max(self.peak, total)
            # A sample the scheduler preempted looks costly once: the period follows the least
            # recent cost (which rises with a tree that really grows), not every spike.
            self.low = cost if self.low is None else min(cost, self.low * 1.5)
            self.every = max(EVERY, self.low / BUDGET)
            self.next_at = now + self.every
        return self.next_at

    def result(self) -> dict | None:
        """What the record gets (``Meter.end``): None if nothing was sampled."""
        if not self.samples:
            return None
        return {"peak": self.peak, "period": round(self.every, 3), "samples": self.samples, "cpu": self.cpu}


def descendants(root: int) -> list[int]:
    """Every descendant of ``root``."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                fd = os.open(f"/proc/{pid}/task/{tid}/children", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                words = os.read(fd, 1 << 16).split()
            except OSError:
                words = []
            finally:
                os.close(fd)
            for w in words:
                out.append(int(w))
                todo.append(int(w))
    return out


def tree_memory(root: int) -> int:
    """Bytes the descendants of ``root`` hold now: the sum of their anonymous resident pages."""
    total = 0
    for pid in descendants(root):
        words = _read(f"/proc/{pid}/statm").split()
        try:
            total += (int(words[1]) - int(words[2])) * PAGE  # resident less file-backed and shared memory
        except (IndexError, ValueError):
            pass
    return total


def _read(path: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        return os.read(fd, 4096)
    except OSError:
        return b""
    finally:
        os.close(fd)
