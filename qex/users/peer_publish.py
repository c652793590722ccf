"""Publishing this queue's record in the peer directory: what this user's
running jobs of this state directory hold (``publish_locked``, after each
pass's commit, with the state lock held), and why it cannot be
(``publish_check``, for ``qex info``).

The record is written only when what it says changes (a supervisor that goes
on to its next job of the same claims keeps its lock, and the record stays as
it is: one ``lstat``), by a temporary file renamed into place, and removed
when nothing is held. Publishing also removes this queue's lock files that
nobody holds any more and its temporary files left behind (``_sweep``).
"""

from __future__ import annotations

import json
import os
import stat
import time

from qex.users.peer_dir import (
    directory,
    key,
    list_names,
    lock_held,
    open_dir,
    open_entry,
    owner_name,
    read_fd,
    unlink_quietly,
)
from qex.users.peer_record import MAX_RECORD, BadRecord, job_entries, record_from

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.store.index import Index

# ---- publishing (the state lock is held) -------------------------------------------


def own_jobs(ctx: Context, idx: Index, holding: list[str] | None = None) -> list[tuple[str, dict]]:
    """This user's jobs of this state directory that hold capacity. ``holding``: the
    ids of the index's starting and running jobs, when the caller knows them (a
    supervisor's queue view: no walk of a long queue)."""
    from qex.base.states import HOLDING

    jobs = idx.jobs
    if holding is not None:
        return [(j, jobs[j]) for j in holding if jobs[j].get("uid") == ctx.uid]
    return [(j, e) for j, e in jobs.items() if e["state"] in HOLDING and e.get("uid") == ctx.uid]


def publish_locked(ctx: Context, idx: Index, holding: list[str] | None = None) -> str | None:
    """Make this queue's record say what its running jobs hold now (or remove it
    when they hold nothing). Call with the state lock held, after the commit.
    Returns a problem sentence, or None. Writes nothing when nothing changed.
    ``holding``: see ``own_jobs``."""
    jobs = own_jobs(ctx, idx, holding)
    name = key(ctx) + ".json"
    entries = job_entries(ctx, jobs) if jobs else None
    if entries is not None and _unchanged(directory(ctx), name, entries):
        return None
    fd, problem, _ = open_dir(directory(ctx), create=bool(jobs))
    if fd is None:
        return problem
    try:
        current = _own_record(fd, name)
        if not jobs:
            if current is not None:
                _unlink_own(fd, name)
                _sweep(fd, ctx, set())
            return None
        rec = record_from(ctx, entries)
        if current is not None and _same(current, rec):
            return None
        problem = _write(fd, name, rec)
        _sweep(fd, ctx, {j.get("lock") for j in rec["jobs"]})
        return problem
    finally:
        os.close(fd)


# The record this process last wrote or read, with what its file was then
# ((dev, inode, mtime, size)): a supervisor's next pass takes it without
# reading and parsing the file again, while the file is that one.
_OWN: dict = {}


def _unchanged(path: str, name: str, entries: list[dict]) -> bool:
    """Whether this queue's record is the file this process last wrote or read, and
    says ``entries``: one ``lstat``, where a supervisor going on to its next job would
    otherwise open the directory and the record to find nothing to write."""
    known = _OWN.get(name)
    if known is None or not isinstance(known[1], dict) or known[1].get("jobs") != entries:
        return False
    try:
        st = os.lstat(os.path.join(path, name))
    except OSError:
        return False
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size) == known[0] and st.st_uid == os.getuid()


def _own_record(dir_fd: int, name: str) -> dict | None:
    try:
        fd, st = open_entry(dir_fd, name)
    except BadRecord:
        return None
    try:
        if st.st_uid != os.getuid() or st.st_size > MAX_RECORD:
            return None
        seen = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        known = _OWN.get(name)
        if known is not None and known[0] == seen:
            return known[1]
        rec = json.loads(read_fd(fd, MAX_RECORD))
        _OWN[name] = (seen, rec)
        return rec
    except ValueError:
        return None
    finally:
        os.close(fd)


def _same(old: dict, new: dict) -> bool:
    keys = ("format", "state_dir", "state_id", "boot_id", "jobs")
    return isinstance(old, dict) and all(old.get(k) == new.get(k) for k in keys)


def _write(dir_fd: int, name: str, rec: dict) -> str | None:
    """Write the record (a temporary file renamed over it, not fsynced: a record
    outlives no reboot) through the directory's descriptor; a problem sentence, or
    None. Not ``fs.write_atomic``, made for the state directory: it goes by path,
    names its temporary file by pid alone, which anyone could plant here first
    (hence the random part), and raises a state directory's error."""
    from qex.store import fs

    data = fs.json_bytes(rec)
    tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
        try:
            os.fchmod(fd, 0o644)
            fs.write_all(fd, data)
            st = os.fstat(fd)
        finally:
            os.close(fd)
        fs.replacing(name, dir_fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        _OWN[name] = ((st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size), rec)
    except OSError as exc:
        unlink_quietly(dir_fd, tmp)
        return (
            f"cannot publish this queue's record {name} in the peer directory ({exc.strerror}); "
            "other users' queues do not see what it holds"
        )
    return None


def _unlink_own(dir_fd: int, name: str) -> None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return
    if st.st_uid == os.getuid():
        unlink_quietly(dir_fd, name)


def _sweep(dir_fd: int, ctx: Context, keep: set) -> None:
    """Remove this queue's lock files that nobody holds any more (supervisors
    killed before they could) and its temp files older than a minute."""
    prefix = key(ctx) + "."
    now = time.time()
    for entry in list_names(dir_fd):
        mine_lock = entry.startswith(prefix) and entry.endswith(".lock") and entry not in keep
        mine_tmp = entry.startswith("." + prefix) and entry.endswith(".tmp")
        if not (mine_lock or mine_tmp):
            continue
        try:
            st = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            continue
        if st.st_uid != os.getuid() or not stat.S_ISREG(st.st_mode):
            continue
        if mine_tmp and now - st.st_mtime > 60:
            unlink_quietly(dir_fd, entry)
        elif mine_lock and not lock_held(dir_fd, entry, os.getuid()):
            unlink_quietly(dir_fd, entry)


# ---- for qex info ------------------------------------------------------------------


def publish_check(ctx: Context) -> str | None:
    """Why this queue's record is not what its running jobs hold, or None."""
    fd, problem, _ = open_dir(directory(ctx), create=False)
    if fd is None:
        return problem
    try:
        name = key(ctx) + ".json"
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"this queue's record {name} cannot be checked ({exc.strerror})"
        if st.st_uid != os.getuid() or not stat.S_ISREG(st.st_mode):
            return (
                f"{name} in the peer directory is not this queue's record (it belongs to "
                f"{owner_name(st.st_uid)} or is not a regular file); this queue cannot publish what it holds"
            )
        return None
    finally:
        os.close(fd)
