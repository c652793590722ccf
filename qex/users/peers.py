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

FORMAT = 1
KIND = "qex-peer"
MAX_RECORD = 1 << 20          # bytes; a larger file is not a record
MAX_JOBS = 10000
MAX_LIST = 256                # pools per job, devices per assignment
MAX_CORES = 1 << 20           # a peer claiming more is not a record
MAX_BYTES = 1 << 62
_OPEN_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


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


class BadRecord(ValueError):
    """A record that does not hold what a qex peer record holds; the message says what."""


# ---- names ---------------------------------------------------------------------

def directory(ctx) -> str:
    from qex.config.keys import peer_dir

    return peer_dir(ctx.config)


_REAL: dict[str, str] = {}


def state_identity(root: str) -> tuple[str, str]:
    """(real path, "dev:ino") of a state directory: two spellings of one
    directory give the same identity. The real path is worked out once per
    process (as ``key_for`` does): a supervisor's every pass asks twice."""
    real = _REAL.get(root)
    if real is None:
        real = _REAL[root] = os.path.realpath(root)
    try:
        st = os.stat(real)
        ident = f"{st.st_dev}:{st.st_ino}"
    except OSError:
        ident = ""
    return real, ident


def key(ctx) -> str:
    """The name of this queue's record (without .json): its user and state directory."""
    return key_for(ctx.uid, ctx.store.root)


_KEYS: dict = {}


def key_for(uid: int, root: str) -> str:
    """``u<uid>-<FNV-1a 64 of the real path, hex>``: stable across versions and
    cheap (hashlib would cost every command milliseconds of start-up). Worked out
    once per process (a supervisor's every pass names its record)."""
    known = _KEYS.get((uid, root))
    if known is not None:
        return known
    h = 0xCBF29CE484222325
    for byte in os.path.realpath(root).encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    _KEYS[(uid, root)] = name = f"u{uid}-{h:016x}"
    return name


# ---- the directory ---------------------------------------------------------------

def _describe_mode(st) -> str:
    return f"mode {stat.S_IMODE(st.st_mode):04o}"


def open_dir(path: str, create: bool) -> tuple[int | None, str | None, str | None]:
    """Open the peer directory safely: (fd, problem, note). fd is None when it
    is missing (and not created) or unusable (then ``problem`` says why)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return None, None, None
        made = _make_dir(path)
        if made is not None:
            return None, made, None
        st = os.lstat(path)
    except OSError as exc:
        return None, f"the peer directory {path} cannot be read ({exc.strerror})", None
    if stat.S_ISLNK(st.st_mode):
        return None, (f"the peer directory {path} is a symbolic link, which qex does not follow; "
                      "remove it or set [peers] dir to a real directory"), None
    if not stat.S_ISDIR(st.st_mode):
        return None, f"the peer directory {path} is not a directory; remove it or set [peers] dir", None
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022 and not mode & stat.S_ISVTX:
        return None, (f"the peer directory {path} is writable by other users without the sticky bit "
                      f"({_describe_mode(st)}): anyone could replace the records in it; "
                      f"chmod 1777 {path} (as its owner) or set [peers] dir"), None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        return None, f"the peer directory {path} cannot be opened ({exc.strerror})", None
    again = os.fstat(fd)
    if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        return None, f"the peer directory {path} changed while it was opened; try again", None
    note = None
    if st.st_uid not in (0, os.getuid()):
        note = (f"the peer directory {path} belongs to {_user(st.st_uid)}, who can remove other users' "
                f"records; an administrator can make it as root: install -d -m 1777 {path}")
    return fd, None, note


def _make_dir(path: str) -> str | None:
    parent = os.path.dirname(path.rstrip("/")) or "/"
    try:
        os.makedirs(parent, 0o755, exist_ok=True)
        os.mkdir(path, 0o700)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchmod(fd, 0o1777)   # like /tmp: everyone may add a record, nobody may touch another's
        finally:
            os.close(fd)
    except FileExistsError:
        return None                 # made by someone else meanwhile: checked by the caller
    except OSError as exc:
        return f"cannot create the peer directory {path} ({exc.strerror}); set [peers] dir to a directory you can create"
    return None


def _user(uid: int) -> str:
    from qex.base.paths import user_name

    return user_name(uid)


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
        for name in sorted(_names(fd)):
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


def _names(fd: int) -> list[str]:
    try:
        return os.listdir(fd)
    except OSError:
        return []


def _boot_id() -> str:
    from qex.base.machine import boot_id

    return boot_id()


def _open_entry(dir_fd: int, name: str):
    """Open one entry for reading: (fd, stat), or BadRecord with the reason."""
    try:
        fd = os.open(name, _OPEN_READ, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BadRecord("a symbolic link: not followed") from None
        if exc.errno == errno.ENOENT:
            raise BadRecord("removed while it was read") from None
        raise BadRecord(f"cannot be opened ({exc.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode) else "special"
        raise BadRecord(f"not a regular file ({kind})")
    if st.st_nlink != 1:
        os.close(fd)
        raise BadRecord(f"has {st.st_nlink} hard links: a planted link is not read")
    return fd, st


def _read_one(dir_fd: int, name: str, me: tuple[str, str], boot: str, own: str) -> Peer | None:
    fd, st = _open_entry(dir_fd, name)
    try:
        if name == own and st.st_uid == os.getuid():
            return None  # this queue's own record: its jobs are in the index
        if st.st_size > MAX_RECORD:
            raise BadRecord(f"larger than {MAX_RECORD // 1024}KB: not a record")
        data = _read_fd(fd, MAX_RECORD)
    finally:
        os.close(fd)
    if len(data) > MAX_RECORD:
        raise BadRecord(f"larger than {MAX_RECORD // 1024}KB: not a record")
    rec = parse(data)
    if (rec["state_dir"] and rec["state_dir"] == me[0]) or (rec["state_id"] and rec["state_id"] == me[1]):
        raise BadRecord("the same state directory as this queue: its jobs are counted from the queue itself")
    if rec["boot_id"] and boot and rec["boot_id"] != boot:
        raise BadRecord("stale: written before the machine last started")
    live = [j for j in rec["jobs"] if _lock_held(dir_fd, j["lock"], st.st_uid)]
    if not live:
        if not rec["jobs"]:
            raise BadRecord("holds nothing")
        one = len(rec["jobs"]) == 1
        what, it = ("its job's lock is not", "it") if one else ("no lock of its jobs is", "them")
        raise BadRecord(f"stale: {what} held (the qex processes of {_user(st.st_uid)} that held {it} are gone)")
    return _sum(name, st.st_uid, rec, live)


def _read_fd(fd: int, limit: int) -> bytes:
    chunks, total = [], 0
    while total <= limit:
        try:
            chunk = os.read(fd, min(1 << 16, limit + 1 - total))
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _sum(name: str, uid: int, rec: dict, live: list[dict]) -> Peer:
    cpu = sum(j["cpu"] for j in live)
    mem = sum(j["mem"] for j in live)
    units: dict[str, int] = {}
    uses = []
    for j in live:
        for pool, n in j["pools"].items():
            units[pool] = units.get(pool, 0) + n
        uses.extend(j["devices"])
    return Peer(name, _user(uid), uid, rec["state_dir"], cpu, mem, tuple(sorted(units.items())),
                tuple(sorted(uses, key=lambda u: (u[0], u[1], -1 if u[2] is None else u[2]))),
                len(live), len(rec["jobs"]) - len(live), rec["format"])


def _lock_held(dir_fd: int, name, uid: int) -> bool:
    """True while the job's supervisor holds its lock file (owned by the record's owner)."""
    if not name:
        return False
    try:
        fd, st = _open_entry(dir_fd, name)
    except BadRecord:
        return False
    try:
        if st.st_uid != uid:
            return False  # a lock planted by someone else proves nothing
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
        return False
    finally:
        os.close(fd)  # releases the shared lock we may have taken


# ---- parsing (tolerant: unknown keys ignored, missing ones defaulted) ------------

def _reject_constant(word):
    raise BadRecord(f"holds {word}, which is not a number")


def parse(data: bytes) -> dict:
    """A record's bytes -> a checked dict; BadRecord says why not."""
    try:
        raw = json.loads(data, parse_constant=_reject_constant)
    except BadRecord:
        raise
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BadRecord("truncated or not JSON") from None
    if not isinstance(raw, dict) or raw.get("kind") != KIND:
        raise BadRecord("not a qex peer record (a foreign format)")
    fmt = raw.get("format", FORMAT)
    if not _is_int(fmt):
        raise BadRecord("format is not a whole number")
    jobs = raw.get("jobs", [])
    if not isinstance(jobs, list):
        raise BadRecord("jobs is not a list")
    if len(jobs) > MAX_JOBS:
        raise BadRecord(f"lists more than {MAX_JOBS} jobs")
    checked = [_job(j, i) for i, j in enumerate(jobs)]
    return {"format": fmt, "state_dir": _text(raw.get("state_dir"), 4096),
            "state_id": _text(raw.get("state_id"), 64), "boot_id": _text(raw.get("boot_id"), 64),
            "jobs": checked}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    """A finite number: ``v - v`` is 0 for one, nan for inf and nan (math.isfinite without importing math)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v - v == 0


def _text(v, limit: int) -> str:
    return v[:limit] if isinstance(v, str) else ""


def _job(j, i: int) -> dict:
    where = f"jobs[{i}]"
    if not isinstance(j, dict):
        raise BadRecord(f"{where} is not an object")
    cpu, mem = j.get("cpu", 0), j.get("mem", 0)
    if not _is_num(cpu) or not 0 <= cpu <= MAX_CORES:
        raise BadRecord(f"{where}.cpu is not a number of cores from 0 to {MAX_CORES}")
    if not _is_int(mem) or not 0 <= mem <= MAX_BYTES:
        raise BadRecord(f"{where}.mem is not a whole number of bytes >= 0")
    lock = j.get("lock")
    if lock is not None and (not isinstance(lock, str) or "/" in lock or lock.startswith(".")
                             or not lock.endswith(".lock") or len(lock) > 255):
        raise BadRecord(f"{where}.lock is not the name of a lock file in the peer directory")
    return {"cpu": round(cpu * 1000), "mem": mem, "lock": lock,
            "pools": _pools(j.get("pools", {}), where), "devices": _devices(j.get("devices", []), where)}


def _pools(pools, where: str) -> dict[str, int]:
    if not isinstance(pools, dict) or len(pools) > MAX_LIST:
        raise BadRecord(f"{where}.pools is not a map of pool names to counts")
    out = {}
    for name, n in pools.items():
        if not isinstance(name, str) or not 0 < len(name) <= 64 or not _is_int(n) or not 0 <= n <= MAX_BYTES:
            raise BadRecord(f"{where}.pools holds a bad entry")
        out[name] = n
    return out


def _devices(uses, where: str) -> list[tuple[str, tuple[int, ...], int | None]]:
    if not isinstance(uses, list) or len(uses) > MAX_LIST:
        raise BadRecord(f"{where}.devices is not a list")
    out = []
    for u in uses:
        if not isinstance(u, dict):
            raise BadRecord(f"{where}.devices holds a bad entry")
        pool, devs, size = u.get("pool"), u.get("devices", []), u.get("size")
        if not isinstance(pool, str) or not 0 < len(pool) <= 64:
            raise BadRecord(f"{where}.devices holds an entry without a pool name")
        if not isinstance(devs, list) or len(devs) > MAX_LIST or not all(_is_int(d) and 0 <= d < 4096 for d in devs):
            raise BadRecord(f"{where}.devices holds bad device indices")
        if size is not None and (not _is_int(size) or not 0 <= size <= MAX_BYTES):
            raise BadRecord(f"{where}.devices holds a bad size")
        out.append((pool, tuple(sorted(set(devs))), size))
    return out


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


def record_of(ctx, jobs: list[tuple[str, dict]]) -> dict:
    """The record of what ``jobs`` hold. A job entry names no job: what it holds
    and the lock its supervisor holds, in the order of their locks, so that a
    supervisor that goes on to its next job of the same claims (it keeps its
    lock: ``engine.apply_plan``) leaves the record as it is, and nothing is
    written (``publish_locked``)."""
    return _record(ctx, _entries(ctx, jobs))


def _entries(ctx, jobs: list[tuple[str, dict]]) -> list[dict]:
    plain = {p.name for p in ctx.config.pools if p.count is not None}  # locks are never published
    entries = []
    for _job_id, e in jobs:
        entries.append({
            "cpu": e["cpu"] / 1000, "mem": e["mem"],
            "pools": {name: cs[0] for name, cs in sorted(e.get("pools", {}).items()) if name in plain},
            "devices": [{"pool": p, "devices": list(d), "size": s} for p, d, s in e.get("assigned") or ()],
            "lock": e.get("peer_lock"),
        })
    entries.sort(key=_entry_order)
    return entries


def _record(ctx, entries: list[dict]) -> dict:
    from qex.base import machine
    from qex.base.version import VERSION

    real, ident = state_identity(ctx.store.root)
    return {"format": FORMAT, "kind": KIND, "qex": VERSION, "user": ctx.user, "uid": ctx.uid,
            "state_dir": real, "state_id": ident, "boot_id": machine.boot_id(), "host": os.uname().nodename,
            "cpu": sum(j["cpu"] for j in entries), "mem": sum(j["mem"] for j in entries), "jobs": entries}


def _entry_order(entry: dict):
    return entry["lock"] or "", entry["cpu"], entry["mem"], sorted(entry["pools"].items()), \
        [(u["pool"], u["devices"], u["size"] or 0) for u in entry["devices"]]


def publish_locked(ctx, idx, holding=None) -> str | None:
    """Make this queue's record say what its running jobs hold now (or remove it
    when they hold nothing). Call with the state lock held, after the commit.
    Returns a problem sentence, or None. Writes nothing when nothing changed.
    ``holding``: see ``own_jobs``."""
    jobs = own_jobs(ctx, idx, holding)
    name = key(ctx) + ".json"
    entries = _entries(ctx, jobs) if jobs else None
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
        rec = _record(ctx, entries)
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
        fd, st = _open_entry(dir_fd, name)
    except BadRecord:
        return None
    try:
        if st.st_uid != os.getuid() or st.st_size > MAX_RECORD:
            return None
        seen = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        known = _OWN.get(name)
        if known is not None and known[0] == seen:
            return known[1]
        rec = json.loads(_read_fd(fd, MAX_RECORD))
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

    data = json.dumps(rec, separators=(",", ":"), sort_keys=True).encode() + b"\n"
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
        _unlink_quietly(dir_fd, tmp)
        return (f"cannot publish this queue's record {name} in the peer directory ({exc.strerror}); "
                "other users' queues do not see what it holds")
    return None


def _unlink_own(dir_fd: int, name: str) -> None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return
    if st.st_uid == os.getuid():
        _unlink_quietly(dir_fd, name)


def _unlink_quietly(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def _sweep(dir_fd: int, ctx, keep: set) -> None:
    """Remove this queue's lock files that nobody holds any more (supervisors
    killed before they could) and its temp files older than a minute."""
    prefix = key(ctx) + "."
    now = time.time()
    for entry in _names(dir_fd):
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
            _unlink_quietly(dir_fd, entry)
        elif mine_lock and not _lock_held(dir_fd, entry, os.getuid()):
            _unlink_quietly(dir_fd, entry)


# ---- the liveness lock of one job ----------------------------------------------

def hold_job_lock(ctx, job_id: str) -> tuple[int, str | None]:
    """Create and lock this job's liveness file in the peer directory.

    Returns (fd, name); the caller's supervisor keeps fd for the job's life.
    (-1, None) when the peer directory cannot be used (``qex info`` says why).
    """
    fd_dir, _problem, _ = open_dir(directory(ctx), create=True)
    if fd_dir is None:
        return -1, None
    try:
        for _ in range(8):
            name = f"{key(ctx)}.{job_id[:8]}.{os.urandom(6).hex()}.lock"
            try:
                fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                             | os.O_NONBLOCK, 0o644, dir_fd=fd_dir)
            except FileExistsError:
                continue
            except OSError:
                return -1, None
            try:
                os.fchmod(fd, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd, name
            except OSError:
                os.close(fd)  # someone opened and locked it between our create and lock: another name
                _unlink_quietly(fd_dir, name)
        return -1, None
    finally:
        os.close(fd_dir)


def release_job_lock(ctx, fd: int, name: str | None) -> None:
    """The job has ended and its record says so: remove its lock file, then let go."""
    if name:
        try:
            dfd = os.open(directory(ctx), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            dfd = None
        if dfd is not None:
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if st.st_uid == os.getuid() and (fd < 0 or (st.st_dev, st.st_ino) == _ident(fd)):
                    _unlink_quietly(dfd, name)
            except OSError:
                pass
            finally:
                os.close(dfd)
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass


def _ident(fd: int):
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


# ---- one admission at a time across the queues of the machine --------------------------

ADMIT_LOCK = ".admit.lock"
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


# ---- for the waker ------------------------------------------------------------------

def dir_version(ctx, since=None):
    """Changes whenever another queue's record or lock file in the peer directory
    is added, replaced or removed (a peer's job started or ended). ``since``: the
    version returned before; while the directory's own stat is unchanged, that is
    the answer (one stat). This queue's own files are left out: its jobs' starts
    and ends run passes of their own."""
    path = directory(ctx)
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    stamp = (st.st_ino, st.st_mtime_ns)
    if since is not None and since[0] == stamp:
        return since
    mine = key(ctx) + "."
    try:
        names = sorted(n for n in os.listdir(path) if not n.startswith(mine) and n != ".admit.lock")
    except OSError:
        return stamp, None
    return stamp, tuple(names)


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
                    f"{_user(st.st_uid)} or is not a regular file); this queue cannot publish what it holds")
        return None
    finally:
        os.close(fd)
