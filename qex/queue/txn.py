"""The changes of one lock hold (``Txn``): records read once, changed, and
applied to the index as they are made; committed through the journal."""

from __future__ import annotations

from qex.base.errors import QexError
from qex.store import fs
from qex.store.index import live_reason
from qex.store.records import Status, changed, load
from qex.store.state import Index, Store

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable


class Txn:
    """The changes of one lock hold, applied to the index as they are made."""

    def __init__(self, store: Store, idx: Index):
        self.store, self.idx = store, idx
        self.next_deadline: float | None = None  # the plan's earliest --max-queue-time deadline
        self.records: dict[str, Status] = {}  # each record this hold read or changed, as it stands
        self.changes: list[tuple[dict, str | None, str]] = []  # (the new record as its JSON, previous state, kind)
        self.windowed = False  # decided by the head of the queue: the index file is not saved (_admit_head)
        # (fd, name) of the peer lock of a supervisor whose job this hold ends: the first job of
        # its user that this hold starts is that supervisor's next job and keeps it (apply_plan)
        self.peer_reuse: tuple[int, str] | None = None
        self.settle_first = False  # the commit waits for this process's background syncs (specs, job dirs)

    def record(self, job_id: str) -> Status:
        """The record of ``job_id`` as this hold sees it (read once, then as changed)."""
        rec = self.records.get(job_id)
        if rec is None:
            entry = self.idx.jobs.get(job_id)
            kept = self.idx.records.get(job_id)  # this process's last commit wrote it, and nobody's since
            try:
                data = kept if kept is not None else _known(self.store.read_status_data(job_id))
            except QexError:
                if entry is None:
                    raise
                data = self._rebuilt(job_id, entry)
            if entry is not None and data.get("state") == "queued" and entry.get("reason") is not None:
                data = live_reason(data, entry)  # the words of the last pass (see set_reason_locked)
            rec = self.records[job_id] = load(Status, data)
        return rec

    def _rebuilt(self, job_id: str, entry: dict) -> dict:
        """A damaged status.json of an active job, rebuilt from its index entry and spec.

        One damaged file must never stop the pass that would record another
        job's end or start the next one; the job itself goes on. (As its JSON: ``load``
        gives the fields it lacks their defaults.)
        """
        try:
            spec = self.store.read_spec(job_id)
            command, cwd = list(spec.command), spec.cwd
        except QexError:
            command, cwd = [], ""
        pools = {k: {"count": c, "size": z} for k, (c, z) in entry["pools"].items()}
        return {
            "id": job_id,
            "seq": entry["seq"],
            "state": entry["state"],
            "name": entry["name"],
            "owner": entry["owner"],
            "uid": entry["uid"],
            "command": command,
            "cwd": cwd,
            "group": entry.get("group"),
            "group_name": entry.get("group_name"),
            "priority": entry["priority"],
            "submitted_at": entry.get("submitted_at", 0.0),
            "claims": {"cpu": entry["cpu"] / 1000, "mem": entry["mem"], "pools": pools},
            "assigned": [{"pool": p, "devices": d, "size": z} for p, d, z in entry["assigned"]],
            "needs": entry["needs"],
            "after": entry["after"],
            "dedupe_key": entry.get("dedupe_key"),
            "pid": entry.get("pid"),
            "supervisor_pid": entry.get("supervisor_pid"),
            "error": "its status.json was damaged; qex rebuilt it from the queue's index",
        }

    def put(self, rec: Status, previous: str | None, change: str = "state") -> None:
        """Record ``rec`` as the job's new record (its JSON goes to the commit and the index)."""
        data = rec.asdict()
        self.records[rec.id] = rec
        self.changes.append((data, previous, change))
        self.store.index_put(self.idx, data)

    def update(self, job_id: str, change: str = "state", **fields: object) -> Status:
        """The job's record with ``fields`` changed (a nested one given as its record or
        as its JSON: ``records.changed``), put as its new record."""
        old = self.record(job_id)
        rec = changed(old, **fields)
        self.put(rec, old.state, change)
        return rec

    def commit(self, save_index: bool = True, applied: Callable[[], None] | None = None) -> list[dict]:
        if self.settle_first:
            fs.settle()  # what the journal will point at is durable first (qex.jobs.submit.submit_many)
        return self.store.commit_locked(self.idx, self.changes, False if self.windowed else save_index, applied)


def _known(rec: dict) -> dict:
    """A record read to be written again keeps only the fields this qex knows: what
    it writes back is what it understood, never a field someone else put there."""
    from qex.store.check import STATUS_FIELDS

    return {k: v for k, v in rec.items() if k in STATUS_FIELDS}
