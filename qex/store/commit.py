"""The commit of a pass: its events appended to the journal (the write-ahead log),
then each job's status.json, the history lines, the lock file's ``applied`` line,
then the index file (docs/design.md, "The journal is the write-ahead log").

``Commit`` is a part of ``qex.store.state.Store``, which has the paths, the lock
and the records these methods use (and the loading of the index: ``qex.store.replay``).
Functions whose name ends in ``_locked`` must be called with the state lock held.
"""

from __future__ import annotations

import json
import os
import time

from qex.base.errors import StoreError
from qex.base.states import ACTIVE
from qex.store import fs, history, journal, layout
from qex.store.index import LAZY, Index

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

_MARK_BYTES = 128  # the first bytes of the journal that tell one journal file from another (Store._journal_mark)
_CRASH = "QEX_CRASH_AT" in os.environ  # crash points for tests (qex.base.faults); off in normal use
if _CRASH:
    from qex.base import faults


class Commit:
    """Store's commit, and the writes of the index file and of a record (lock held)."""

    def save_index_locked(self, idx: Index, journal_synced: bool = False) -> None:
        """Write the index file, after making durable the journal it counts (a lazy
        commit's append is fsynced only once its lock is let go, maybe by another
        process still: ``fs.sync_at_release``). It syncs no record: those of events
        past ``idx.synced`` are written again from the journal after a reboot
        (``_repair_locked``)."""
        if not journal_synced:
            self._sync_journal()
        idx.saved_at, idx.saved_seq = time.time(), idx.seq
        data = json.dumps(idx.dump(), separators=(",", ":")).encode() + b"\n"
        fs.write_atomic(self.index_path, data, mode=self.file_mode, sync_dir=False)
        idx.unsaved = False

    def _sync_journal(self) -> None:
        try:
            fd = fs.open_regular(self.journal_path, os.O_RDONLY)
        except OSError:
            return  # no journal yet (or not one of ours: the load said so)
        try:
            os.fsync(fd)
        except OSError as exc:
            raise StoreError(fs.describe_write_failure(self.journal_path, exc)) from None
        finally:
            os.close(fd)

    def _write_status_locked(self, rec: dict, unless_same: bool = False, data: bytes | None = None) -> bool:
        """Write a job's status.json, never fsynced: the journal holds every record,
        and the first pass after a reboot writes again those a power cut may have
        lost (``Index.synced``, ``_repair_locked``). The file takes the old one's
        place by an exchange (``fs.write_atomic``): a record the job's next state
        replaces a moment later is then never written out. ``data``: the file's
        bytes, as ``_encoded`` made them for this record (a commit). Returns
        whether it wrote: no job directory, no record."""
        from qex.store.records import status_defaults

        directory = self.job_dir(rec["id"])
        if data is not None:
            if not os.path.isdir(directory):
                return False
            fs.write_atomic(
                os.path.join(directory, layout.STATUS),
                data,
                mode=self.status_mode,
                sync_dir=False,
                sync=False,
                exchange=True,
            )
            return True
        if not os.path.isdir(directory):
            return False
        path = os.path.join(directory, layout.STATUS)
        full = {**status_defaults(), **rec}
        if unless_same:  # a replayed event whose record was written: no second write
            try:
                if fs.read_json(path) == full:
                    return False
            except (OSError, ValueError):
                pass
        data = fs.json_bytes(full)
        fs.write_atomic(path, data, mode=self.status_mode, sync_dir=False, sync=False, exchange=True)
        return True

    def commit_locked(
        self,
        idx: Index,
        changes: list[tuple[dict, str | None, str]],
        save_index: bool = True,
        applied: Callable[[], None] | None = None,
    ) -> list[dict]:
        """Apply changes: (new record dict, previous state, change kind).

        Journal first (fsynced), then each status.json, then the index.
        Returns the events written. ``save_index=False`` leaves the index file
        behind the journal: the next pass replays these events into it (the
        journal is the write-ahead log), which spares a supervisor that only
        records its job running the rewrite of a large index. No commit fsyncs
        its status.json files, and ``Index.synced`` stays where it was: a power
        cut that loses one loses nothing, since the first pass after the reboot
        writes the records of the events past that offset again from the fsynced
        journal (``_repair_locked``). ``applied()``, when given, is called once
        every effect of the commit is written, before the index file is saved.
        """
        if save_index == LAZY:
            save_index = idx.save_due(len(changes))
        if not changes:
            if applied is not None:
                applied()  # (nothing to write: applied already)
            if save_index and idx.unsaved:
                self.save_index_locked(idx)
            self._keep(idx)
            return []
        changes = _coalesced(changes)
        events = _events(idx, changes)
        last = {rec["id"]: rec for rec, _previous, _change in changes}
        data, statuses = _encoded(events, last)
        self._append_locked(idx, events, data, changes, sync=bool(save_index))
        if _CRASH:
            faults.hit("commit.after_journal")
        self._write_statuses_locked(idx, last, statuses)
        for rec, _previous, _change in changes:
            self.index_put(idx, rec)
        history.note_final_locked(self, changes)  # the jobs it made final, for qex list (history.py)
        self._mark_applied(idx.offset)  # every effect of this append is written
        if applied is not None:
            applied()  # (a submission's early supervisor may start its job: the index file is only a checkpoint)
        if _CRASH:
            faults.hit("commit.before_index")
        if not save_index:
            idx.unsaved = True
            self._keep(idx)
            return events
        self._save_and_rotate_locked(idx)
        if _CRASH:
            faults.hit("commit.after_index")
        self._keep(idx)
        return events

    def _write_statuses_locked(
        self, idx: Index, last: dict[str, dict], statuses: dict[str, tuple[bytes, dict]]
    ) -> None:
        """Write the status.json of each job of a commit once, in its last form (``last``,
        encoded in ``statuses`` by ``_encoded``), and keep in ``idx.records`` those that
        stay active. None is fsynced (``commit_locked`` says why)."""
        for rec in last.values():
            data, written = statuses[rec["id"]]
            if self._write_status_locked(rec, data=data) and written["state"] in ACTIVE:
                idx.records[rec["id"]] = written
            else:
                idx.records.pop(rec["id"], None)
            if _CRASH:
                faults.hit("commit.after_status")

    def _append_locked(
        self, idx: Index, events: list[dict], data: bytes, changes: list[tuple[dict, str | None, str]], sync: bool
    ) -> None:
        """Append a commit's ``events`` (``data``: their lines) to the journal, fsynced if
        ``sync``; the index then counts its new end, in that file."""
        # Keep room for the records of running jobs: a new job needs more than an ending one.
        fs.ensure_room(self.root, fs.SUBMIT_ROOM if any(p is None for _, p, _ in changes) else fs.COMMIT_ROOM)
        appended: dict = {}
        try:  # a lazy commit's fsync is made once the lock is let go (fs.sync_at_release)
            idx.offset = journal.append(self.journal_path, events, self.file_mode, sync=sync, data=data, info=appended)
        except OSError as exc:
            raise StoreError(fs.describe_write_failure(self.journal_path, exc)) from None
        idx.journal_ino = appended.get("ino", idx.journal_ino)

    def _save_and_rotate_locked(self, idx: Index) -> None:
        """Save the index file of a commit whose append is fsynced, then rotate the
        journal if it grew past ``journal.max_bytes()``."""
        self.save_index_locked(idx, journal_synced=True)
        if idx.offset > journal.max_bytes():
            # Rotate only once the index says every event is applied: an index
            # that still points into the moved file would lose those events. And
            # every record of its events durable first: a repair after a reboot
            # reads only the current file (_repair_locked).
            fs.syncfs(self.root)
            journal.rotate(self.root)
            idx.offset = idx.synced = 0
            idx.journal_ino = None  # (the next append makes the new file)
            self.save_index_locked(idx)

    def _keep(self, idx: Index) -> None:
        """Remember the index this process committed, with the journal it is current against."""
        mark, size = self._journal_mark()
        self._cache = (mark, idx) if mark is not None and idx.offset <= size else None

    def _journal_mark(self) -> tuple[tuple[int, bytes] | None, int]:
        """(the journal file's inode and first bytes, its size). A rotated journal is
        another file: another inode, or (an inode reused two rotations later) other
        first bytes, since every event has its own ``seq``. A journal too short to
        tell gives no mark (no index is kept against it), and so does anything but a
        regular file (a link or FIFO planted there is never followed nor waited on)."""
        try:
            fd = fs.open_regular(self.journal_path)
        except OSError:
            return None, 0
        try:
            st = os.fstat(fd)
            head = os.pread(fd, _MARK_BYTES, 0)
        except OSError:
            return None, 0
        finally:
            os.close(fd)
        return ((st.st_ino, head) if len(head) == _MARK_BYTES else None), st.st_size


def _events(idx: Index, changes: list[tuple[dict, str | None, str]]) -> list[dict]:
    """The journal events of a commit's ``changes``, numbered on from ``idx.seq`` (which
    moves to the last), each carrying ``commit``: the seq of the append's last event."""
    now = time.time()
    events = []
    for rec, previous, change in changes:
        idx.seq += 1
        events.append(
            {
                "event": "job",
                "seq": idx.seq,
                "stream": idx.stream,
                "time": now,
                "id": rec["id"],
                "name": rec.get("name", ""),
                "state": rec["state"],
                "previous": previous,
                "change": change,
                "job": rec,
            }
        )
    for event in events:  # the seq of the append's last event: replay takes whole appends only
        event["commit"] = idx.seq
    return events


def _encoded(events: list[dict], last: dict[str, dict]) -> tuple[bytes, dict[str, tuple[bytes, dict]]]:
    """(the journal lines of ``events``, {job id: (its status.json, that record)}) with
    each record encoded once: a record the defaults add nothing to (every record read
    back, and every one qex makes) is the same JSON in its event and in its file.
    ``last``: each job's last form in the commit, the one its file gets."""
    from qex.store.records import status_defaults

    defaults = status_defaults()
    dumps = json.dumps
    lines, statuses = [], {}
    for event in events:
        rec = event["job"]
        full = {**defaults, **rec}
        job = dumps(full, separators=(",", ":"), sort_keys=True).encode()
        if last.get(rec["id"]) is rec:
            statuses[rec["id"]] = (job + b"\n", full)  # what fs.json_bytes makes of it
        if len(full) != len(rec):
            job = dumps(rec, separators=(",", ":"), sort_keys=True).encode()  # the event carries it as it is
        lines.append(journal.encode_job_event(event, job))
    return b"".join(lines), statuses


def _coalesced(changes: list[tuple[dict, str | None, str]]) -> list[tuple[dict, str | None, str]]:
    """A reason written in the same hold as a job's change of state rides on that
    change's event (a reason is no change of state): a fan-out of a thousand jobs
    journals a thousand events, each with the reason the pass gave it."""
    out, last = [], {}
    for rec, previous, change in changes:
        i = last.get(rec["id"])
        if change == "reason" and i is not None:
            out[i] = (rec, out[i][1], out[i][2])
            continue
        last[rec["id"]] = len(out)
        out.append((rec, previous, change))
    return out
