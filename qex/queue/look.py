"""What ``qex top`` shows, read as a reader reads: without the state lock.

It reads what a pass reads -- the active index as of the journal's end
(``Store.read_index_jobs``), the records of the jobs that run, the peer
directory (``qex.users.peer_scan``), the other members' indexes in a shared
directory -- and the last lines of the history index for the jobs that ended.
The health line is decided as a pass would decide it now
(``qex.queue.info.decide``), on that copy of the index: nothing is written,
nothing started, no lock taken but the non-blocking probes of liveness that
every reader makes.

A ``Look`` is kept across refreshes: it reads the index again only when the
index file or the journal changed, the history only when it grew, an ended
job's record once, and decides the health line again when the index changed
or ``DECIDE_EVERY`` passed (the other queues change without this one).
"""

from __future__ import annotations

import os
import time

from qex.base.states import FINAL, HOLDING

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.store.records import Row, Status

DECIDE_EVERY = 3.0  # seconds between two decisions of the health line while the index stays as it was
TAIL_BYTES = 256 << 10  # the end of history.jsonl read for the recently ended jobs


class Look:
    """The queue as ``qex top`` shows it, read again by ``read``."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self._key: tuple | None = None  # the index file's and the journal's identity when last read
        self._jobs: dict = {}  # the active index's entries
        self._running: dict[str, Status | Row] = {}  # the records of the jobs that hold, as of ``_key``
        self._queued: list[Row] = []  # the queued jobs as rows, in the queue's order
        self._decided: tuple | None = None  # (health, since, snapshot, monotonic time)
        self._tail: tuple | None = None  # (history identity, ended rows)
        self._ended: dict[str, Row] = {}  # an ended job's row (read once: it no longer changes)
        self._cgroups: dict[str, object] = {}

    def read(self, ended: int = 50) -> dict:
        """Everything one frame shows: ``rows`` in their order (holding, queued, the
        other members' active jobs, then the ``ended`` most recently ended)."""
        from qex.base import machine
        from qex.queue import info

        ctx, now = self.ctx, time.time()
        changed = self._read_index()
        if changed or self._decided is None or time.monotonic() - self._decided[3] >= DECIDE_EVERY:
            from qex.store.index import Index

            health, since, snap = info.decide(ctx, Index({"jobs": self._jobs}), now)
            self._decided = (health, since, snap, time.monotonic())
        health, since, snap = self._decided[:3]
        holding = [(j, e) for j, e in self._jobs.items() if e["state"] in HOLDING]
        cpu_budget, mem_budget = ctx.budget()
        rows = [self._holding_row(j, e) for j, e in holding]
        rows += self._queued
        rows += _others(ctx)
        return {
            "now": now,
            "load": _load(),
            "cores": ctx.cores,
            "mem_total": ctx.mem_total,
            "mem_available": machine.meminfo().get("MemAvailable"),
            "budget": (cpu_budget, mem_budget),
            "held": (sum(e["cpu"] for _, e in holding), sum(e["mem"] for _, e in holding)),
            "peers": [(p.owner, p.cpu, p.mem) for p in snap.peers],
            "pools": [info.pool_use(p, holding, snap) for p in ctx.config.pools],
            "health": health,
            "since": since,
            "state_dir": ctx.store.shared_root or ctx.store.root,
            "queued": sum(e["state"] == "queued" for e in self._jobs.values()),
            "running": len(holding),
            "rows": rows,
            "ended": self._recent(ended),
        }

    # ---- the active index ------------------------------------------------------------

    def _read_index(self) -> bool:
        """Read the index again if its file or the journal changed; whether it did."""
        store = self.ctx.store
        key = (_identity(store.index_path), _identity(store.journal_path))
        if key == self._key:
            return False
        self._key, self._jobs = key, store.read_index_jobs()
        self._running, self._queued = {}, self._queued_rows()
        return True

    def _holding_row(self, job_id: str, entry: dict) -> Row:
        from qex.store.records import Row, Usage

        rec = self._running.get(job_id)
        if rec is None:
            try:
                rec = self.ctx.store.read_status(job_id)
            except Exception:  # noqa: BLE001 - damaged or cleaned meanwhile: the entry says enough
                rec = row_of(job_id, entry)
            self._running[job_id] = rec
        peak = self._peak(job_id, rec)
        usage = rec.usage if peak is None else (rec.usage or Usage()).evolve(max_rss=peak)
        return Row.of(rec, state=entry["state"], usage=usage)

    def _peak(self, job_id: str, rec: Status | Row) -> int | None:
        """The peak memory of a running job so far: its cgroup's, else its leader's (VmHWM)."""
        from qex.linux import cgroup

        if job_id not in self._cgroups:
            self._cgroups[job_id] = cgroup.recorded(self.ctx.store.job_dir(job_id), job_id)
        cg = self._cgroups[job_id]
        if cg is not None:
            peak = cg.peak()
            if peak is not None:
                return peak
        from qex.base.machine import process_peak_rss

        return process_peak_rss(rec.pid)

    def _queued_rows(self) -> list[Row]:
        from qex.admit import order_key
        from qex.queue import views

        queued = [views.queued_of(j, e) for j, e in self._jobs.items() if e["state"] == "queued"]
        return [row_of(q.id, self._jobs[q.id]) for q in sorted(queued, key=order_key)]

    # ---- the recently ended --------------------------------------------------------------

    def _recent(self, n: int) -> list[Row]:
        """The ``n`` jobs that ended last, newest first, from the end of the history index."""
        from qex.store import history

        path = history.path_of(self.ctx.store)
        key = _identity(path)
        if self._tail is not None and self._tail[0] == key:
            return self._tail[1][:n]
        rows = []
        for _seq, job_id, line in reversed(history.scan(_tail_of(path))):
            if len(rows) >= n:
                break
            rec = self._ended.get(job_id) or self._ended_row(job_id, line)
            if rec is not None:
                rows.append(rec)
        rows.sort(key=lambda r: r.ended_at or 0, reverse=True)
        self._tail = (key, rows)
        return rows[:n]

    def _ended_row(self, job_id: str, line: bytes) -> Row | None:
        from qex.store import history
        from qex.store.records import Row

        rec = history.read_row(line)
        if rec is None or rec.usage is None or rec.state not in FINAL:  # (damaged; a qex's before the accounting)
            try:
                rec = Row.of(self.ctx.store.read_status(job_id))
            except Exception:  # noqa: BLE001 - cleaned meanwhile
                return None
        if not os.path.isdir(self.ctx.store.job_dir(job_id)):
            return None  # cleaned
        self._ended[job_id] = rec
        return rec


def row_of(job_id: str, e: dict) -> Row:
    """An index entry as a row (the fields a frame shows)."""
    from qex.store.records import Assigned, Claims, PoolClaim, Row

    pools = {k: PoolClaim(c, z) for k, (c, z) in (e.get("pools") or {}).items()}
    return Row(
        id=job_id,
        name=e.get("name", ""),
        state=e.get("state"),
        owner=e.get("owner", ""),
        uid=e.get("uid"),
        seq=e.get("seq", 0),
        priority=e.get("priority", 0),
        submitted_at=e.get("submitted_at"),
        blocked_reason=e.get("reason"),
        claims=Claims((e.get("cpu") or 0) / 1000, e.get("mem", 0), pools),
        assigned=tuple(Assigned(p, tuple(d), z) for p, d, z in e.get("assigned") or ()),
        pid=e.get("pid"),
        group=e.get("group"),
        group_name=e.get("group_name"),
    )


def _others(ctx: Context) -> list[Row]:
    """A shared directory: the other members' queued and running jobs, oldest first; a
    member with no qex running has their queued jobs say so (``members.owner_absent``)."""
    if ctx.store.shared_root is None:
        return []
    from qex.base.paths import user_name
    from qex.store import members

    out = []
    for uid, other in ctx.store.others():
        who = user_name(uid)
        absent = members.owner_absent(other.root, uid)  # (one probe per member)
        for job_id, e in other.read_index_jobs().items():
            row = row_of(job_id, e).evolve(owner=who, uid=uid, mine=False)
            if row.state == "queued" and absent is not None:
                row = row.evolve(blocked_reason=absent["blocked_reason"])
            out.append(row)
    return sorted(out, key=lambda r: r.submitted_at or 0)


def _identity(path: str) -> tuple | None:
    """The file at ``path`` as of now: opened, not ``stat``-ed, since an NFS client answers a
    ``stat`` from its attribute cache (up to a minute) but revalidates at an open (close-to-open)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _tail_of(path: str) -> bytes:
    """The last whole lines of a file (at most ``TAIL_BYTES``), or b""."""
    from qex.store import fs

    try:
        fd = fs.open_regular(path)
    except OSError:
        return b""
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - TAIL_BYTES)
        data = os.pread(fd, size - start, start)
    except OSError:
        return b""
    finally:
        os.close(fd)
    if start > 0:
        data = data[data.find(b"\n") + 1 :]  # the first bytes may end a line that starts before
    return data


def _load() -> tuple[float, float, float] | None:
    try:
        return os.getloadavg()
    except OSError:
        return None
