"""The active index in memory: a compact entry per queued, starting or running job,
and how far into the journal it is (docs/design.md, "The journal is the write-ahead
log"). ``qex.store.state.Store`` loads it, replays the journal into it and saves it.
"""

import time

from qex.base import numbers
from qex.store import check, journal

INDEX_FORMAT = 1
LAZY = "lazy"  # commit_locked(save_index=LAZY): save the index only every so often:
LAZY_EVENTS = 32  # when this many events are not in the file yet (or one per LAZY_ENTRIES of its jobs,
LAZY_ENTRIES = 4  # if more: a save costs what the file holds, a reader's replay what it lacks),
LAZY_SECS = 1.0  # or when it was saved this long ago (readers replay the journal after it)


class Index:
    """The active index in memory: an entry per active job, plus counters."""

    def __init__(self, data: dict):
        self.stream: str = data.get("stream") or journal.new_stream()
        self.seq: int = int(data.get("seq", 0))  # last journal seq applied
        self.offset: int = int(data.get("offset", 0))  # journal bytes applied
        # the inode of the journal file ``offset`` counts in (None: an index of an earlier qex,
        # or of no journal yet): a pass that reads another file reads it whole (read_committed)
        self.journal_ino: int | None = journal_ino(data)
        self.next_job: int = int(data.get("next_job", 1))  # next job seq number
        self.jobs: dict[str, dict] = dict(data.get("jobs", {}))
        self.unsaved = False  # applied journal events the file does not have yet
        # The journal offset up to which every event's record is durable (its status.json
        # fsynced, or flushed by a syncfs): after a reboot the first pass writes the
        # records of the events past it again from the journal (``_repair_locked``). An
        # index file of an earlier qex, which synced every record it counted, has none.
        self.synced: int = min(int(data.get("synced", self.offset)), self.offset)
        self.saved_at = float(data.get("saved_at", 0.0))  # when the file was written
        self.saved_seq = self.seq  # the seq the file has
        self.touched: set[str] = set()  # jobs whose entry was put or dropped since ``view`` last looked
        self.view = None  # the engine's queue in admission order (qex.queue.queueview), built on first use
        # the status.json of each active job this process's commits wrote last, as written: a pass
        # of the process that keeps this index reads it here, not from the file, unless an event of
        # another process's commit for that job was replayed since (``Txn.record``, ``cached_status``)
        self.records: dict[str, dict] = {}
        # the jobs a pass leaves out, neither their entry nor their record can be used (a number
        # out of its bounds, a field of the wrong type): id -> the sentence that names the record.
        # Not counted, not started, not rewritten; qex info names them, qex clean removes them.
        # Saved in the file, so that the next load looks at each again (``Replay._take_again``).
        self.damaged: dict[str, str] = {}

    def drop(self, job_id: str) -> None:
        """Forget a job (its directory is gone)."""
        self.jobs.pop(job_id, None)
        self.records.pop(job_id, None)
        self.damaged.pop(job_id, None)
        self.touched.add(job_id)

    def save_due(self, events: int = 0) -> bool:
        """Whether a lazy commit of ``events`` more events saves the index file (LAZY_*)."""
        behind = max(LAZY_EVENTS, len(self.jobs) // LAZY_ENTRIES)
        return self.seq + events - self.saved_seq >= behind or time.time() - self.saved_at >= LAZY_SECS

    def dump(self) -> dict:
        data = {
            "format": INDEX_FORMAT,
            "stream": self.stream,
            "seq": self.seq,
            "offset": self.offset,
            "journal_ino": self.journal_ino,
            "synced": self.synced,
            "next_job": self.next_job,
            "saved_at": self.saved_at,
            "jobs": self.jobs,
        }
        if self.damaged:
            data["damaged"] = self.damaged  # (after the jobs: the counters come first, Replay._saved_elsewhere)
        return data


def journal_ino(data: dict) -> int | None:
    """The journal inode an index file's offset counts in (None: not said)."""
    ino = data.get("journal_ino")
    return ino if numbers.ok(ino, numbers.INODE, whole=True) else None


def entry_of(rec: dict) -> dict:
    """The compact view of an active job that a pass needs (from a status dict)."""
    claims = rec.get("claims") or {}
    mqt = rec.get("max_queue_time")
    entry = {
        "seq": rec["seq"],
        "state": rec["state"],
        "owner": rec.get("owner", ""),
        "uid": rec.get("uid", -1),
        "name": rec.get("name", ""),
        "group": rec.get("group"),
        "group_name": rec.get("group_name"),
        "priority": rec.get("priority", 0),
        "cpu": round(float(claims.get("cpu", 1.0)) * 1000),
        "mem": int(claims.get("mem", 0)),
        "pools": {k: [v.get("count", 1), v.get("size")] for k, v in (claims.get("pools") or {}).items()},
        "assigned": [[a["pool"], list(a.get("devices", ())), a.get("size")] for a in rec.get("assigned") or ()],
        "needs": list(rec.get("needs") or ()),
        "after": list(rec.get("after") or ()),
        "deadline": (rec.get("submitted_at", 0.0) + mqt + rec.get("queue_pause_secs", 0.0))
        if mqt is not None and rec.get("attempt", 1) == 1
        else None,  # a retry has started once
        "attempt": rec.get("attempt", 1),
        "passed_by": rec.get("passed_by", 0),
        "reason": rec.get("blocked_reason"),
        "holder": rec.get("blocked_holder"),
        "dedupe_key": rec.get("dedupe_key"),
        "pid": rec.get("pid"),
        "supervisor_pid": rec.get("supervisor_pid"),
        "kill": rec.get("kill_requested", False),
        "submitted_at": rec.get("submitted_at", 0.0),
        "peer_lock": rec.get("peer_lock"),
    }
    if rec.get("slurm_job_id"):
        entry["slurm"] = rec["slurm_job_id"]  # a Slurm job: never admitted here (on_slurm)
    return entry


def on_slurm(entry: dict) -> bool:
    """Whether an index entry is a Slurm job's: Slurm admits and runs it, never a pass or a
    waker here (``[backend] kind = "slurm"``, qex/slurm/)."""
    return "slurm" in entry


def live_reason(rec: dict, entry: dict) -> dict:
    """A queued job's record with the reason the last pass gave it (its index entry)."""
    changes = live_words(rec.get("blocked_reason"), entry)
    return rec if changes is None else {**rec, **changes}


def live_words(reason: str | None, entry: dict) -> dict | None:
    """What a queued job's record, whose reason is ``reason``, shows instead: the words
    and the kind of wait the last pass gave it (its index ``entry``); None: the same."""
    if entry.get("reason") == reason:
        return None
    return {"blocked_reason": entry["reason"], "blocked_holder": entry.get("holder")}


def usable_event(event: object, applied_seq: int) -> dict | None:
    """The record an unapplied journal event carries, if it is whole and names a job directory."""
    if not isinstance(event, dict) or event.get("event") != "job":
        return None
    seq, rec = event.get("seq"), event.get("job")
    if not numbers.ok(seq, numbers.SEQ, whole=True) or seq <= applied_seq:
        return None
    try:
        check.status(rec)
    except check.Damaged:
        return None
    return rec if check.job_name(rec["id"]) else None
