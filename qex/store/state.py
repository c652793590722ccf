"""The state directory (``Store``): its paths and lock, the records read, the job
directories made; the active index is loaded by ``qex.store.replay`` and written by
the commit, ``qex.store.commit`` (both parts of ``Store``; the index: ``qex.store.index``).

The names in the directory, and their layout: ``qex.store.layout``.

Functions whose name ends in ``_locked`` must be called with the state lock held.
"""

from __future__ import annotations  # the record classes are declared on first use (qex.store.records)

import os

from qex.base import numbers
from qex.base.errors import BrokenRecord, NoSuchJob, StoreError
from qex.base.states import ACTIVE
from qex.store import check, fs, journal, layout
from qex.store.commit import Commit
from qex.store.index import (
    LAZY,  # noqa: F401 (the callers of commit_locked have it from here)
    Index,
    entry_of,
    journal_ino,
    live_words,
    usable_event,
)
from qex.store.lock import StateLock
from qex.store.replay import Replay

TYPE_CHECKING = False  # (typing itself is not imported: qex submit's start-up)
if TYPE_CHECKING:
    from qex.store.records import Spec, Status


class Store(Replay, Commit):
    # Its loading of the index and its commit are in their own modules (Replay, Commit).
    # In a shared state directory (qex init --shared; qex.store.members) the store is
    # this user's member directory in it (``ensure`` finds out): the group reads
    # it, only its user writes it, and a pass also holds the shared lock.
    shared = False
    shared_root: str | None = None
    owner_uid: int | None = None  # the shared directory's owner
    member_uid: int | None = None  # another member's store (qex.store.members.others): its uid

    def __init__(self, root: str):
        self.root = root
        self.jobs = os.path.join(root, layout.JOBS)
        self.index_path = os.path.join(root, layout.INDEX)
        self.journal_path = os.path.join(root, layout.JOURNAL)

    # ---- paths -----------------------------------------------------------
    def job_dir(self, job_id: str) -> str:
        return os.path.join(self.jobs, job_id)

    def path(self, job_id: str, name: str) -> str:
        return os.path.join(self.jobs, job_id, name)

    _lock_fd: int | None = None  # the state lock's descriptor while this process holds it

    def lock(self, wait: bool = True) -> StateLock:
        """The state lock; ``wait=False``: ``qex.store.lock.Busy`` if another process holds it."""
        outer = None if self.shared_root is None else os.path.join(self.shared_root, layout.LOCK)
        return StateLock(os.path.join(self.root, layout.LOCK), on_hold=self._held, wait=wait, outer=outer)

    def _held(self, fd: int | None) -> None:
        self._lock_fd = fd
        if fd is not None:
            fs.free_later()
        else:
            fs.free_replaced()

    def ensure(self) -> None:
        fs.ensure_private_dir(self.root)
        st = fs.check_state_dir(self.root)
        if layout.is_shared(st):
            from qex.store import members

            root = self.root
            self.__init__(members.enter(root, st))  # the store is now this user's member directory in it
            self.shared, self.shared_root, self.owner_uid = True, root, st.st_uid
            fs.check_state_dir(self.root)
        fs.ensure_private_dir(self.jobs, layout.MEMBER_MODE if self.shared else 0o700)
        if self.shared:
            members.readable(self.jobs)  # whatever the umask: the other members read the records

    @property
    def file_mode(self) -> int:
        """Mode of the files every pass writes (index, journal, history): the other
        members of a shared directory read them."""
        return layout.MEMBER_FILE_MODE if self.shared else 0o600

    @property
    def status_mode(self) -> int:
        """Mode of status.json and pid."""
        return layout.MEMBER_FILE_MODE if self.shared else 0o644

    # ---- records (no lock needed to read) ---------------------------------
    def read_status(self, job_id: str) -> Status:
        """The job's record (``qex.store.records.Status``); NoSuchJob, BrokenRecord
        (damaged, with the remedy) as ``read_status_dict``."""
        from qex.store.records import Status, load

        return load(Status, self.read_status_data(job_id))

    def read_status_dict(self, job_id: str) -> dict:
        """The job's record as a dict, every field the contract names present: the
        file's edge, for the store's own replay (``qex.store.replay``), which writes it
        back; everything above the store takes ``read_status``."""
        from qex.store.records import status_defaults

        return {**status_defaults(), **self.read_status_data(job_id)}

    def read_status_data(self, job_id: str) -> dict:
        """status.json of ``job_id`` as written, its types checked (another member's:
        its owner from where it is), no defaults merged: what ``records.load`` takes."""
        path = self.path(job_id, layout.STATUS)
        try:
            data = fs.read_json(path, owner=self.member_uid)
        except FileNotFoundError:
            other = self.other_member_of(job_id)
            if other is not None:
                return other.read_status_data(job_id)
            raise NoSuchJob(f"no job or group with the id {job_id}") from None
        except (OSError, ValueError) as exc:
            raise _broken(
                job_id, f"the record {path} cannot be read ({_why(exc)}); qex clean {job_id} removes it"
            ) from None
        try:
            check.status(data)
        except check.Damaged as exc:
            raise _broken(job_id, f"the record {path} is damaged ({exc}); qex clean {job_id} removes it") from None
        if self.member_uid is not None:  # another member's: whose it is comes from where it is, never a field
            from qex.base.paths import user_name

            data = {**data, "uid": self.member_uid, "owner": user_name(self.member_uid)}
        return data

    def other_member_of(self, job_id: str) -> Store | None:
        """In a shared directory: the store of the other member whose job ``job_id`` is
        (to read and show; a pass never writes into it), else None."""
        if self.shared_root is None or self.member_uid is not None or "/" in job_id or job_id.startswith("."):
            return None
        for _uid, other in self.others():
            if os.path.isdir(other.job_dir(job_id)):
                return other
        return None

    def others(self) -> list[tuple[int, Store]]:
        """In a shared directory: the other members' state directories, as stores to
        read (never to write; ``qex.store.members``)."""
        if self.shared_root is None:
            return []
        from qex.store import members

        out = []
        for uid, path in sorted(members.members(self.shared_root).items()):
            if path != self.root:
                other = Store(path)
                other.shared, other.shared_root, other.owner_uid, other.member_uid = (
                    True,
                    self.shared_root,
                    self.owner_uid,
                    uid,
                )
                out.append((uid, other))
        return out

    def cached_status(self, job_id: str) -> Status | None:
        """The record of ``job_id`` as this process's last commit wrote it, if nothing
        was appended to the journal since (a read without the lock: the kept index's
        ``records``); else None, and the caller reads the file."""
        cached = self._cache
        if cached is None:
            return None
        (ino, _head), idx = cached
        rec = idx.records.get(job_id)
        if rec is None:
            return None
        try:
            st = os.stat(self.journal_path, follow_symlinks=False)
        except OSError:
            return None
        if (st.st_ino, st.st_size) != (ino, idx.offset):
            return None
        from qex.store.records import Status, load

        return load(Status, dict(rec))

    def read_live(self, job_id: str, index: dict | None = None) -> Status:
        """The record as a reader should see it: a queued job's reason is the one
        its last pass gave (the active index keeps the words; the record keeps
        the kind of wait). ``index``: the index's jobs, read once by a caller
        that reads many records."""
        if self.shared_root is not None and self.member_uid is None and not os.path.isdir(self.job_dir(job_id)):
            other = self.other_member_of(job_id)
            if other is not None:
                return other.read_live(job_id)
        rec = self.read_status(job_id)
        if rec.state != "queued":
            if rec.state == "running" and "gpu" in rec.claims.pools:
                rec = self._live_vram(rec)
            return rec
        entry = (self.read_index_jobs() if index is None else index).get(job_id)
        if isinstance(entry, dict) and isinstance(entry.get("reason"), str):
            changes = live_words(rec.blocked_reason, entry)
            if changes is not None:
                rec = rec.evolve(**changes)
        if self.member_uid is not None:
            from qex.store import members

            rec = members.waiting_for_owner(self.root, self.member_uid, rec)
        return rec

    def _live_vram(self, rec: Status) -> Status:
        """A running GPU job's VRAM peak so far, from what its supervisor samples
        (``layout.VRAM``, ``qex.base.gpu_files.live_text``), in its ``usage``."""
        from qex.base import gpu_files

        try:
            data = fs.read_bytes(self.path(rec.id, layout.VRAM), 1 << 16)
        except OSError:
            return rec
        peaks = gpu_files.read_live(data, rec.attempt)
        if not peaks:
            return rec
        return rec.evolve(usage=rec.usage.evolve(vram_peak=max(peaks.values()), vram_peak_by_device=peaks))

    def read_index_jobs(self) -> dict:
        """The active index's entries as of the journal's end, read without the lock
        (a reader's view; {} if unreadable). The file may be behind the journal by a
        few events (``LAZY``): those are applied here, as the next pass would. No file
        yet (the first pass died before its save): the journal is read from its start,
        as that pass's successor does; else its jobs, left 'starting' by the dead pass,
        would be no work to ``waker.gone`` and no command would pass for them."""
        try:
            data = fs.read_json(self.index_path, owner=self.member_uid)
            jobs = check.usable_jobs(data.get("jobs", {}))  # (the next pass takes the others from their records)
            seq, offset = (numbers.number(data.get(k, 0), numbers.SEQ, whole=True) for k in ("seq", "offset"))
        except FileNotFoundError:
            data, jobs, seq, offset = {}, {}, 0, 0
        except (OSError, ValueError, AttributeError, TypeError):
            return {}  # (a counter out of its bounds too: the next pass rebuilds the index)
        try:
            events = journal.read_committed(self.journal_path, offset, None, journal_ino(data))[0]
        except (StoreError, OSError):
            return jobs
        idx = Index({"jobs": jobs, "seq": seq})
        for event in events:
            rec = usable_event(event, idx.seq)
            if rec is not None:
                try:
                    self.index_put(idx, rec)
                except (KeyError, TypeError, ValueError, AttributeError):
                    continue
                idx.seq = event["seq"]
        return idx.jobs

    def read_spec(self, job_id: str, must_own: bool = False) -> Spec:
        """The job's spec (a ``records.Spec``: its known fields, checked); ``must_own``:
        only a spec.json of this process's user (a supervisor never runs a spec
        another user could have put there)."""
        from qex.store.records import Spec

        path = self.path(job_id, layout.SPEC)
        try:
            if must_own:
                _own_dir(self.job_dir(job_id))
            data = fs.read_json(path, owner=os.getuid() if must_own else None)
            check.spec(data)
            if must_own and data["id"] != job_id:
                raise ValueError(f"it is the spec of job {str(data['id'])[:40]!r}")
        except Exception as exc:
            raise BrokenRecord(f"the job spec {path} cannot be read ({_why(exc)})") from None
        known = {k: data[k] for k in Spec.field_names() if k in data}
        return Spec(**{**known, "command": tuple(data["command"])})

    def job_ids(self) -> list[str]:
        """Every job directory, oldest first (ids sort in submission order)."""
        try:
            names = os.listdir(self.jobs)
        except FileNotFoundError:
            return []
        return sorted(n for n in names if not n.startswith("."))

    @staticmethod
    def index_put(idx: Index, rec: dict) -> None:
        idx.touched.add(rec["id"])
        if rec.get("state") in ACTIVE:
            idx.jobs[rec["id"]] = entry_of(rec)
        else:
            idx.jobs.pop(rec["id"], None)
        idx.next_job = max(idx.next_job, int(rec.get("seq", 0)) + 1)

    # ---- making a job directory (before its first event) ------------------
    def create_job_dir(self, spec: Spec, sync: bool = True, later: bool = False) -> None:
        """Make jobs/<id>/ with its spec, under a hidden name renamed into view: the
        rename makes the whole directory appear at once, so the spec in it is
        written in place (no file of its own to rename; a fan-out makes a thousand).
        Its logs are made by its supervisor when it starts (a queued job's are read
        as empty): two files fewer for each job of a fan-out before any can start.

        ``sync=False`` (a bulk submission) leaves the flush to the caller: one
        ``fs.syncfs_in_background``, settled before the jobs are committed. ``later``:
        the spec's and the directory's fsyncs go to this process's syncer thread
        (``fs.sync_in_background``), and the caller settles them before the job's
        first event (``Txn.settle_first``)."""
        final = self.job_dir(spec.id)
        tmp = os.path.join(self.jobs, layout.new_job_dir(spec.id))
        fd = -1
        try:
            os.mkdir(tmp, 0o700)
            data = fs.json_bytes(spec.as_json())
            fd = os.open(
                os.path.join(tmp, layout.SPEC),
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
            )
            try:
                fs.write_all(fd, data)
                if sync and not later:
                    os.fsync(fd)
            finally:
                if not later:
                    os.close(fd)
                    fd = -1
            if self.shared:
                os.chmod(tmp, layout.MEMBER_MODE)  # the group reads its record; spec.json stays 0600
            os.rename(tmp, final)
            if later:
                dir_fd = os.open(self.jobs, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                fs.sync_in_background([(fd, os.path.join(final, layout.SPEC)), (dir_fd, self.jobs)])
                fd = -1  # (the syncer's now: it closes both)
            elif sync:
                fs.fsync_dir(self.jobs)
        except OSError as exc:
            if fd >= 0:
                os.close(fd)
            _remove_tree(tmp)
            raise StoreError(fs.describe_write_failure(final, exc)) from None
        except StoreError:
            _remove_tree(tmp)
            raise


def _own_dir(path: str) -> None:
    """A directory of this user's that nobody else can write (a job's, before its spec is run)."""
    import stat

    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ValueError(f"its directory {path} is not this user's alone")


def _broken(job_id: str, message: str) -> BrokenRecord:
    exc = BrokenRecord(message)
    exc.job_id = job_id
    return exc


def _remove_tree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _why(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
