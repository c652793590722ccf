"""What the other queues hold: every other record of the peer directory read
(``scan``, which ``qex info`` shows) and the live jobs of each counted
(``holdings``, for the pass).

A record's owner is the file's owner (the kernel's word), never what the
record says. Files larger than ``MAX_RECORD``, entries that are not regular
files or have more than one link, and anything that does not parse are
ignored with a reason; so is a record of this queue's own state directory, a
record written before the machine last started, and one none of whose locks
is held. Nothing in a record is ever run, opened as a path outside the
directory, or written. Scanning never blocks and never raises for what is
in the directory.
"""

from __future__ import annotations

import os
import time

from qex.base.plain import Plain
from qex.users.peer_dir import directory, key, list_names, lock_held, open_dir, open_entry, owner_name, read_fd
from qex.users.peer_record import FORMAT, MAX_RECORD, BadRecord, parse, state_identity

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.admit import PeerHold
    from qex.config.context import Context

# ---- what a scan finds ---------------------------------------------------------


class Peer(Plain, frozen=True):
    """One live record: what its owner's queue holds right now (live jobs only)."""

    file: str
    owner: str
    uid: int
    state_dir: str
    cpu: int  # millicores
    mem: int  # bytes
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
    problem: str | None = None  # the directory itself cannot be used
    note: str | None = None  # something a user should know about it
    own: str | None = None  # this queue's record file name


# ---- reading -------------------------------------------------------------------


def holdings(ctx: Context) -> list[PeerHold]:
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
    if seen is not None and not found.peers and not found.ignored and found.problem is None and now - seen[2] > tick:
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


def scan(ctx: Context) -> Scan:
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
    return Peer(
        name,
        owner_name(uid),
        uid,
        rec["state_dir"],
        cpu,
        mem,
        tuple(sorted(units.items())),
        tuple(sorted(uses, key=lambda u: (u[0], u[1], -1 if u[2] is None else u[2]))),
        len(live),
        len(rec["jobs"]) - len(live),
        rec["format"],
    )
