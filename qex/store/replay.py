"""How a pass loads the active index under the state lock: the index it kept or the
file, then the journal's events after it replayed (in full after a pass that died
between its writes), the repair of the first pass after a reboot, the rebuild of a
lost index, and the lock file's ``applied`` line that tells these apart
(docs/design.md, "The journal is the write-ahead log").

``Replay`` is a part of ``qex.store.state.Store``, which has the paths, the lock
and the records these methods use (and the commit: ``qex.store.commit``).
"""

from __future__ import annotations

import json
import os

from qex.base import numbers
from qex.base.errors import BrokenRecord, QexError, StoreError
from qex.store import check, fs, history, journal, layout
from qex.store.index import INDEX_FORMAT, Index, usable_event

KEPT_REPLAY_BYTES = 1 << 20  # a kept index is taken while the journal grew less since (a long job's
#                             supervisor reads the file rather than replay the day's journal)
_HEAD_BYTES = 512  # enough for the counters at the start of the index file (Store._saved_elsewhere)
_APPLIED_WIDTH = 128  # the line in the lock file (Store._applied_upto)


def _boot_id() -> str:
    from qex.base.machine import boot_id

    return boot_id()


def _rebooted(words: list[bytes] | None) -> bool:
    """Whether an ``applied`` line's words name another boot than this one."""
    if not words or len(words) < 2 or words[0] != b"applied" or not _boot_id():
        return False
    return words[1].decode(errors="replace") != _boot_id()


class Replay:
    """Store's loading of the active index (lock held, but ``rebooted_since_applied``)."""

    # ---- how far the journal's effects are applied (lock held) -------------
    # The lock file holds one line: "applied <boot id> <journal inode> <offset>":
    # every event of that journal up to that byte has its status.json and its
    # history line written. A commit moves it after its writes; a pass that
    # dies before leaves it behind its events, and the next pass replays those
    # in full. A process that dies loses nothing of the page cache, so within a
    # boot the line is exact without an fsync; after a reboot (another boot id)
    # nothing is taken from it, and every unapplied event is replayed in full.
    def _applied_upto(self, journal_ino: int | None) -> int:
        fd = self._lock_fd
        if fd is None or journal_ino is None:
            return -1
        try:
            word, boot, ino, end = os.pread(fd, _APPLIED_WIDTH, 0).split()[:4]
            if word != b"applied" or boot.decode() != _boot_id() or int(ino) != journal_ino:
                return -1
            return int(end)
        except (OSError, ValueError, UnicodeDecodeError):
            return -1

    def _mark_applied(self, end: int) -> None:
        fd = self._lock_fd
        if fd is None:
            return
        try:
            ino = os.stat(self.journal_path).st_ino
            line = f"applied {_boot_id()} {ino} {end}".encode().ljust(_APPLIED_WIDTH - 1) + b"\n"
            os.pwrite(fd, line, 0)
        except OSError:
            pass  # without the line the next pass replays in full: slower, never wrong

    # ---- the index kept between passes (lock held) -------------------------
    # A process that commits keeps the index it committed, with the journal it
    # is current against (``_journal_mark``). Its next pass takes that index
    # while the journal is still that file, and replays the journal from where
    # the index stands: the journal is the truth and the index file only a
    # checkpoint of it, so the file another process saved since would parse to
    # the same jobs (but for the reason words a pass recomputes anyway). A
    # supervisor in a drain thus neither reads, parses nor checks a large index
    # per job, and saves it only now and then (LAZY_*).
    _cache: tuple[tuple[int, bytes], Index] | None = None

    def load_index_locked(self, save_replayed: bool = True) -> Index:
        """The active index, with the journal events it has not applied yet replayed
        (those a dead pass left, and those of a commit that let the next one save
        the index: ``commit_locked(save_index=False)``). ``save_replayed=False``:
        the caller's commit saves it (``Index.unsaved``)."""
        cached, self._cache = self._cache, None  # given back only by a commit that completes
        if cached is not None:
            mark, size = self._journal_mark()
            if mark == cached[0] and cached[1].offset <= size <= cached[1].offset + KEPT_REPLAY_BYTES:
                self._replay_locked(cached[1], save_replayed)
                self._saved_elsewhere(cached[1])
                return cached[1]
        bad = {}
        try:
            raw = fs.read_bytes(self.index_path, 64 << 20)
            data = json.loads(raw)
            bad = check.index(data)  # a damaged index is rebuilt from the records and the journal
            if data.get("format", INDEX_FORMAT) > INDEX_FORMAT:
                raise StoreError(f"{self.index_path} was written by a newer qex; upgrade qex")
            idx = Index(data)
        except FileNotFoundError:
            idx = self._rebuild_index_locked()
        except (OSError, ValueError, TypeError, AttributeError):
            idx = self._rebuild_index_locked()
        healed = False
        if bad:
            idx.damaged = {j: w for j, w in (data.get("damaged") or {}).items() if j in bad}  # (as the file has it)
            healed = self._take_again_locked(idx, bad)
        self._replay_locked(idx, save_replayed)
        if healed and save_replayed and idx.unsaved:
            self.save_index_locked(idx)
        return idx

    def _take_again_locked(self, idx: Index, bad: dict[str, str]) -> bool:
        """The jobs whose index entries cannot be used (``check.index``: a number out of
        its bounds, a field of the wrong type), and those an earlier pass left out: each is
        taken again from its record. A job whose record cannot be used either is left out
        of the pass, not counted, not started, not rewritten, and named in ``idx.damaged``
        (qex info says which file; qex clean removes it); every other job goes on.
        Returns whether the index changed."""
        before = dict(idx.damaged)
        changed = False
        for job_id in bad:
            changed |= idx.jobs.pop(job_id, None) is not None
            idx.damaged.pop(job_id, None)
        for job_id in bad:
            if not check.job_name(job_id):
                continue
            try:
                rec = self.read_status_dict(job_id)
            except BrokenRecord as exc:
                idx.damaged[job_id] = str(exc)
                continue
            except QexError:
                continue  # no record (cleaned; its directory removed): no job
            self.index_put(idx, rec)
        changed |= idx.damaged != before
        if changed:
            idx.unsaved = True  # (the file holds what was left out, or less than that)
        return changed

    _index_seen: tuple | None = None  # (inode, mtime, size) of the index file last looked at

    def _saved_elsewhere(self, idx: Index) -> None:
        """Take from the index file that another process saved since this one kept
        ``idx`` what that save made durable: the saver synced every record of the
        events up to its seq (``save_index_locked``), so this process need neither
        sync them nor save the file again for them. Two supervisors in a drain
        otherwise each saved a large index, one pass after the other. Only the
        file's first bytes are read, and only when it changed."""
        try:
            st = os.lstat(self.index_path)
        except OSError:
            return
        seen = (st.st_ino, st.st_mtime_ns, st.st_size)
        if seen == self._index_seen:
            return
        self._index_seen = seen
        try:
            fd = fs.open_regular(self.index_path)
        except OSError:
            return
        try:
            head = os.pread(fd, _HEAD_BYTES, 0)
        except OSError:
            return
        finally:
            os.close(fd)
        cut = head.find(b',"jobs":')  # Index.dump puts the counters first
        try:
            saved = json.loads(head[:cut] + b"}") if cut > 0 else None
            seq, at = saved["seq"], numbers.number(saved["saved_at"], numbers.TIME)
        except (ValueError, TypeError, KeyError):
            return
        if saved.get("stream") != idx.stream or type(seq) is not int or not idx.saved_seq < seq <= idx.seq:
            return
        idx.saved_seq, idx.saved_at = seq, max(idx.saved_at, at)
        synced = saved.get("synced")
        if (
            type(synced) is int
            and idx.synced < synced <= idx.offset
            and saved.get("journal_ino", idx.journal_ino) == idx.journal_ino
        ):  # (the kept index's journal file)
            idx.synced = synced

    def _replay_locked(self, idx: Index, save: bool = True) -> None:
        """Apply the journal's events after the index to it. Events whose commit
        completed (``_applied_upto``: the usual case, an index saved lazily) change
        only the index; the others (a pass died after its append) also get each
        job's last record written to status.json and its history line, once:
        never an older form over a newer one."""
        if idx.synced < idx.offset and not self._applied_this_boot():
            self._repair_locked(idx)
        info: dict = {}
        events, end, highest = journal.read_committed(self.journal_path, idx.offset, info, idx.journal_ino)
        full = bool(events) and self._applied_upto(info.get("ino")) < end
        applied, last = False, {}
        if info.get("ino", idx.journal_ino) != idx.journal_ino:
            idx.journal_ino = info["ino"]
            applied = True
        for event in events:
            rec = usable_event(event, idx.seq)
            if rec is None:
                continue  # a damaged line, or one already applied
            idx.records.pop(rec["id"], None)  # another process's change of the job: its file is the record
            idx.damaged.pop(rec["id"], None)
            if os.path.isdir(self.job_dir(rec["id"])):
                self.index_put(idx, rec)  # (its writer may have left its status.json unsynced: idx.synced stays)
                if full:
                    last[rec["id"]] = rec
            idx.seq = event["seq"]
            applied = True
        for rec in last.values():
            self._write_status_locked(rec, unless_same=True)  # (unsynced: idx.synced stays, as for any record)
        if end != idx.offset or info.get("other"):
            if end < idx.offset or info.get("other"):
                idx.synced = 0  # another journal file than the one the index counted in: nothing of it is known durable
            idx.offset = end
            applied = True
        if highest > idx.seq:  # a cut append's seqs are never given again (a reader may have seen them)
            idx.seq = highest
            applied = True
        if info.get("size", 0) > end:
            journal.trim(self.journal_path, end)  # the torn tail of a cut append
        if full:
            history.note_replayed_locked(self, list(last.values()))
            self._mark_applied(end)
        if applied:
            if save:
                self.save_index_locked(idx)
            else:
                idx.unsaved = True

    def _applied_this_boot(self) -> bool:
        """Whether the lock file's ``applied`` line was written since the machine last
        started: its records were then written to the page cache, which only a
        reboot loses (a process that dies loses none of it)."""
        fd = self._lock_fd
        if fd is None or not _boot_id():
            return True  # (no lock held: nothing is written here; no boot id: no reboot can be told)
        try:
            word, boot = os.pread(fd, _APPLIED_WIDTH, 0).split()[:2]
            return word == b"applied" and boot.decode() == _boot_id()
        except (OSError, ValueError, UnicodeDecodeError):
            return False

    def rebooted_since_applied(self) -> bool:
        """Without the lock: whether the lock file's ``applied`` line was written before
        the machine last started (a reader then asks for the repair: ``repair_after_reboot``)."""
        return _rebooted(self._applied_line())

    def _applied_line(self) -> list[bytes] | None:
        """Without the lock: the words of the lock file's ``applied`` line ([] if it has
        none yet), or None without a lock file (nothing was ever applied here)."""
        try:
            fd = os.open(
                os.path.join(self.root, layout.LOCK), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            )
        except OSError:
            return None
        try:
            return os.pread(fd, _APPLIED_WIDTH, 0).split()[:4]
        except OSError:
            return None
        finally:
            os.close(fd)

    def _left_behind(self, words: list[bytes] | None) -> bool:
        """Without the lock: whether the journal has an append past the ``applied`` line
        (of this boot): a pass died between its append and its writes (or one is
        making them now). One ``stat`` of the journal."""
        if words is None:
            return False
        try:
            st = os.stat(self.journal_path)
        except OSError:
            return False  # (none yet, or rotated away: its next append is a commit's, which marks it)
        if st.st_size == 0:
            return False
        try:
            if words[0] == b"applied" and int(words[2]) == st.st_ino:
                return int(words[3]) < st.st_size
        except (IndexError, ValueError):
            pass
        return True  # no line, or one of another journal file: nothing of this one is said applied

    def repair_after_reboot(self) -> None:
        """The first command after a reboot, even one that reads without the lock, has the
        records the power cut may have lost written again from the journal first
        (``_repair_locked``, in the load of the index). So does a command after a pass
        that died between its journal append and its writes, if no pass holds the lock
        now: the load replays that append in full (each job's record, its history line).
        Else, when that user had nothing else queued or running, no pass ever came (a
        reader passes only for work it sees: ``waker.gone``), and their records said
        'starting' or 'running' for good where the journal said otherwise."""
        words = self._applied_line()
        if _rebooted(words):
            with self.lock():
                idx = self.load_index_locked(save_replayed=False)
                self.commit_locked(idx, [], save_index=True)
        elif self._left_behind(words):
            from qex.store.lock import Busy

            try:
                with self.lock(wait=False):
                    idx = self.load_index_locked(save_replayed=False)
                    self.commit_locked(idx, [], save_index=True)
                    self._mark_applied(idx.offset)  # (loaded: every event up to its end is applied)
            except Busy:
                pass  # a pass holds it: its load replays what the dead one left
            except OSError:
                pass  # (a full disk...: a reader still answers; the next pass that can write replays)

    def _repair_locked(self, idx: Index) -> None:
        """The first pass after a reboot: the records of the events past the synced
        offset, up to the applied one, may not have reached the disk (a supervisor's
        lazy commit writes them without an fsync, and an index save syncs none:
        docs/design.md). Each job's last form among them is written again where its
        status.json differs, with its history line, then one ``syncfs`` makes them
        durable and the synced offset moves up to the applied one."""
        events = journal.read_committed(self.journal_path, idx.synced, None, idx.journal_ino)[0]
        last = {}
        for event in events:
            rec = usable_event(event, -1)
            if rec is not None and event["seq"] <= idx.seq:  # (later events are the replay's, below)
                last[rec["id"]] = rec
        for rec in last.values():
            self._write_status_locked(rec, unless_same=True)
        history.note_replayed_locked(self, list(last.values()))
        fs.syncfs(self.root)
        idx.synced = idx.offset
        idx.unsaved = True
        self._mark_applied(idx.offset)  # (this boot's, from here on: no second repair)

    def _rebuild_index_locked(self) -> Index:
        """Scan every record, then the journal over them: only when the index is missing or damaged.

        Without an index nobody knows which events were applied, so each job's
        last event in the journal (its newest change: a status.json is always
        written after its event) is applied again where status.json differs.
        The sequence goes on from the rotated journal when the current one is empty.
        """
        events, end, highest = journal.read_committed(self.journal_path, 0)  # whole appends only
        history = events or journal.read_from(os.path.join(self.root, layout.JOURNAL_ROTATED), 0)[0]
        seq = max([highest] + [e["seq"] for e in history if numbers.ok(e.get("seq"), numbers.SEQ, whole=True)])
        stream = next((e.get("stream") for e in history if isinstance(e.get("stream"), str)), None)
        idx = Index({"seq": seq, "offset": end, "stream": stream, "synced": 0})  # (a record equal to its last
        latest = {}  # event may still be unsynced)
        for event in events:
            rec = usable_event(event, -1)
            if rec is not None:
                latest[rec["id"]] = rec
        for job_id in self.job_ids():
            try:
                rec = self.read_status_dict(job_id)
            except BrokenRecord as exc:
                rec = None
                idx.damaged[job_id] = str(exc)  # (unless its last event, below, is whole)
            except QexError:
                rec = None  # a job directory still being made
            newer = latest.get(job_id)
            if newer is not None and newer != rec:
                self._write_status_locked(newer)
                rec = newer
                idx.damaged.pop(job_id, None)
            if rec is None:
                continue
            try:
                self.index_put(idx, rec)
            except (KeyError, TypeError, ValueError, AttributeError):
                continue  # a damaged record: qex list names it, qex clean removes it
        return idx
