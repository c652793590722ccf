"""Claims of other users' queues: the peer directory (``QEX_PEER_DIR``,
``[peers] dir``, default ``/tmp/qex-peers``).

Each queue (a state directory + a user) publishes one record,
``u<uid>-<hash of the state directory>.json``, listing what its running jobs
hold: cores, memory, units of plain pools and the device indices it was
given. Locks are never published. Every pass reads every other record and
counts it against the budget and the pools.

**Liveness is a held lock, never a pid.** When a pass starts a job it creates
a fresh lock file ``<key>.<job>.<random>.lock`` in the peer directory with
``O_EXCL`` and takes an exclusive ``flock`` on it at once (a racer that got
there first makes us try another name); the job's supervisor inherits that
descriptor and holds it for its whole life; a supervisor that goes on to the
next job of its user hands that job its lock (``engine.apply_plan``). The
record names each job's lock file, not the job. A reader counts a job only while its lock file is a regular file owned
by the record's owner and cannot be locked (``LOCK_SH|LOCK_NB`` fails): when
every qex process of that queue is gone, nothing holds the locks and the
record stops counting by itself.

**The peer directory is hostile ground** (``/tmp`` is world-writable). It is
made with the sticky bit (mode 1777). Everything is opened relative to the
directory's descriptor with ``O_NOFOLLOW | O_NONBLOCK``: a symlink is never
followed, a FIFO never blocks. Non-regular files, hard-linked files, files
larger than ``MAX_RECORD`` and anything that does not parse are ignored with
a reason (``qex info`` lists them). A record's owner is the file's owner (the
kernel's word), never what the record says. A record can only make this
queue start less: amounts are checked non-negative and finite, and nothing
in a record is ever run, opened as a path outside the directory, or written.

A record of an older or newer format parses: unknown fields are ignored,
missing optional ones defaulted; a job entry keeps ``cpu``, ``mem`` and
``lock`` in every format, so its cores and memory still count.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import time

from qex.base.plain import Plain
from qex.users.peer_dir import (directory, key, list_names, lock_held, open_dir, open_entry, owner_name, read_fd,
                                unlink_quietly)
from qex.users.peer_dir import ADMIT_LOCK, dir_version, hold_job_lock, key_for, release_job_lock  # noqa: F401
from qex.users.peer_record import FORMAT, MAX_RECORD, BadRecord, job_entries, parse, record_from, state_identity
from qex.users.peer_record import KIND, MAX_BYTES, MAX_CORES, MAX_JOBS, MAX_LIST, record_of  # noqa: F401


# ---- what a scan finds ---------------------------------------------------------

class Peer(Plain, frozen=True):
    """One live record: what its owner's queue holds right now (live jobs only)."""

    file: str
    owner: str
    uid: int
    state_dir: str
    cpu: int                                   # millicores
    mem: int                                   # bytes
    units: tuple[tuple[str, int], ...] = ()
    assigned: tuple[tuple[str, tuple[int, ...], int | None], ...] = ()
    jobs: int = 0
    stale_jobs: int = 0
    format: int = FORMAT


class Ignored(Plain, frozen=True):
    file: str
    reason: str


class Scan(Plain, frozen=True):
    dir: str
    peers: tuple[Peer, ...] = ()
    ignored: tuple[Ignored, ...] = ()
    problem: str | None = None                 # the directory itself cannot be used
    note: str | None = None                    # something a user should know about it
    own: str | None = None                     # this queue's record file name


# ---- reading -------------------------------------------------------------------

def holdings(ctx) -> list:
    """What every live peer holds, as ``qex.admit.PeerHold`` (for the pass).

    A pass in a queue that no other queue shares the peer directory with (its
    own record and locks only) finds nothing every time: while the directory is
    unchanged since a scan that found nothing, nothing is read again (one
    ``lstat``). A scan that found a peer is made again, since a peer's jobs stop
    counting when their locks are let go, which does not change the directory.
    The directory's time is trusted only once it is older than the scan by more
    than the clock's tick (a file made in the same tick as the scan, after it,
    leaves the time as it was), or by two seconds where the file system keeps
    whole seconds."""
    from qex import admit as A

    path = directory(ctx)
    mine = (path, key(ctx))
    try:
        st = os.lstat(path)
        seen = (st.st_dev, st.st_ino, st.st_mtime_ns)
    except OSError:
        seen = None
    if seen is not None and _NOTHING.get(mine) == seen:
        return []
    now = time.time_ns()
    found = scan(ctx)
    tick = _TICK_NS if seen is None or seen[2] % 1_000_000_000 else _COARSE_NS  # (whole seconds: NFS, old ext4)
    if (seen is not None and not found.peers and not found.ignored and found.problem is None
            and now - seen[2] > tick):
        _NOTHING[mine] = seen
    else:
        _NOTHING.pop(mine, None)
    out = []
    for p in found.peers:
        uses = tuple(A.DeviceUse(pool, devs, size) for pool, devs, size in p.assigned)
        out.append(A.PeerHold(p.owner, p.cpu, p.mem, p.units, uses))
    return out


_NOTHING: dict = {}  # (peer directory, own key) -> its (dev, inode, mtime) when a scan found nothing
_TICK_NS = 20_000_000  # a file time is the kernel's coarse clock: a tick is at most 10 ms
_COARSE_NS = 2_000_000_000  # a file system that keeps whole seconds


def scan(ctx) -> Scan:
    """Read every record of the peer directory but this queue's own; never
    blocks, never raises for what is in the directory."""
    path = directory(ctx)
    fd, problem, note = open_dir(path, create=False)
    own = key(ctx) + ".json"
    if fd is None:
        return Scan(path, problem=problem, note=note, own=own)
    try:
        me = state_identity(ctx.store.root)
        peers, ignored = [], []
        boot = _boot_id()
        for name in sorted(list_names(fd)):
            if name.startswith(".") or name.endswith(".lock"):
                continue
            try:
                peer = _read_one(fd, name, me, boot, own)
            except BadRecord as exc:
                ignored.append(Ignored(name, str(exc)))
                continue
            if peer is not None:
                peers.append(peer)
        return Scan(path, tuple(peers), tuple(ignored), None, note, own)
    finally:
        os.close(fd)


def _boot_id() -> str:
    from qex.base.machine import boot_id

    return boot_id()


def _read_one(dir_fd: int, name: str, me: tuple[str, str], boot: str, own: str) -> Peer | None:
    fd, st = open_entry(dir_fd, name)
    try:
        if name == own and st.st_uid == os.getuid():
            return None  # this queue's own record: its jobs are in the index
        if st.st_size > MAX_RECORD:
            raise BadRecord(f"larger than {MAX_RECORD // 1024}KB: not a record")
        data = read_fd(fd, MAX_RECORD)
    finally:
        os.close(fd)
    if len(data) > MAX_RECORD:
        raise BadRecord(f"larger than {MAX_RECORD // 1024}KB: not a record")
    rec = parse(data)
    if (rec["state_dir"] and rec["state_dir"] == me[0]) or (rec["state_id"] and rec["state_id"] == me[1]):
        raise BadRecord("the same state directory as this queue: its jobs are counted from the queue itself")
    if rec["boot_id"] and boot and rec["boot_id"] != boot:
        raise BadRecord("stale: written before the machine last started")
    live = [j for j in rec["jobs"] if lock_held(dir_fd, j["lock"], st.st_uid)]
    if not live:
        if not rec["jobs"]:
            raise BadRecord("holds nothing")
        one = len(rec["jobs"]) == 1
        what, it = ("its job's lock is not", "it") if one else ("no lock of its jobs is", "them")
        raise BadRecord(f"stale: {what} held (the qex processes of {owner_name(st.st_uid)} that held {it} are gone)")
    return _sum(name, st.st_uid, rec, live)


def _sum(name: str, uid: int, rec: dict, live: list[dict]) -> Peer:
    cpu = sum(j["cpu"] for j in live)
    mem = sum(j["mem"] for j in live)
    units: dict[str, int] = {}
    uses = []
    for j in live:
        for pool, n in j["pools"].items():
            units[pool] = units.get(pool, 0) + n
        uses.extend(j["devices"])
    return Peer(name, owner_name(uid), uid, rec["state_dir"], cpu, mem, tuple(sorted(units.items())),
                tuple(sorted(uses, key=lambda u: (u[0], u[1], -1 if u[2] is None else u[2]))),
                len(live), len(rec["jobs"]) - len(live), rec["format"])


# ---- publishing (the state lock is held) -------------------------------------------

def own_jobs(ctx, idx, holding=None) -> list[tuple[str, dict]]:
    """This user's jobs of this state directory that hold capacity. ``holding``: the
    ids of the index's starting and running jobs, when the caller knows them (a
    supervisor's queue view: no walk of a long queue)."""
    from qex.store.records import HOLDING

    jobs = idx.jobs
    if holding is not None:
        return [(j, jobs[j]) for j in holding if jobs[j].get("uid") == ctx.uid]
    return [(j, e) for j, e in jobs.items() if e["state"] in HOLDING and e.get("uid") == ctx.uid]


def publish_locked(ctx, idx, holding=None) -> str | None:
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
        return (f"cannot publish this queue's record {name} in the peer directory ({exc.strerror}); "
                "other users' queues do not see what it holds")
    return None


def _unlink_own(dir_fd: int, name: str) -> None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return
    if st.st_uid == os.getuid():
        unlink_quietly(dir_fd, name)


def _sweep(dir_fd: int, ctx, keep: set) -> None:
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


# ---- one admission at a time across the queues of the machine --------------------------

ADMIT_WAIT = 0.5


class admission:
    """Held around read peers -> admit -> commit -> publish of a pass that may
    start something, so that two queues never admit against each other's old
    records (two 3-core jobs in a 4-core budget). Taken after the state lock,
    never before. Anyone can hold this file's lock (it must be readable to be
    lockable): after ``ADMIT_WAIT`` seconds a pass goes on without it, so a
    hostile holder slows passes down but never stops a queue."""

    def __init__(self, ctx, wanted: bool):
        self.ctx, self.wanted, self.fd = ctx, wanted, None

    def __enter__(self):
        if self.wanted:
            try:
                self.fd = _take_admit_lock(directory(self.ctx))
            except OSError:
                self.fd = None
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _take_admit_lock(path: str) -> int | None:
    dfd, _problem, _ = open_dir(path, create=True)
    if dfd is None:
        return None
    try:
        fd = _open_admit_file(dfd)
    finally:
        os.close(dfd)
    if fd is None:
        return None
    deadline = time.monotonic() + ADMIT_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN) or time.monotonic() >= deadline:
                os.close(fd)
                return None
        time.sleep(0.002)


def _open_admit_file(dfd: int) -> int | None:
    """Open (or make) the lock file read-only: O_CREAT on another user's file in
    a sticky directory is refused where fs.protected_regular is set."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _ in range(3):
        try:
            fd = os.open(ADMIT_LOCK, flags, dir_fd=dfd)
        except FileNotFoundError:
            try:
                fd = os.open(ADMIT_LOCK, flags | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=dfd)
                os.fchmod(fd, 0o644)
            except FileExistsError:
                continue
        except OSError:
            return None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            return None
        return fd
    return None


# ---- for qex info ------------------------------------------------------------------

def publish_check(ctx) -> str | None:
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
            return (f"{name} in the peer directory is not this queue's record (it belongs to "
                    f"{owner_name(st.st_uid)} or is not a regular file); this queue cannot publish what it holds")
        return None
    finally:
        os.close(fd)
