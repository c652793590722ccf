"""Pauses: files in ``<state>/pause/`` that hold the queue or a lock for a person.

::

    pause/queue.json        the queue is paused: nothing new starts; running
                            jobs go on, and so do their retries
    pause/lock-NAME.json    a person holds the lock (or pool) NAME: no job gets
                            it; the person has it as soon as no job holds it

A pause is a file (written temp -> fsync -> rename), so it survives every
process and a reboot. A pause file that cannot be read (damaged, not a regular
file, unreadable) holds what its name says all the same, and the reason says
so; a pause directory that cannot be read holds the whole queue. Other names
in the directory are not pauses and are ignored.

A pause with ``until`` ends by itself: the first pass at or after that time
(the waker sleeps to it) ends it. A queue pause stops every queued job's
``--max-queue-time`` clock: when it ends, the pass that ends it adds the time
each queued job spent in it to the job's ``queue_pause_secs`` (so its
deadline moves), once per pause: the record keeps the pause ids it counted in
``queue_pauses``. To survive a crash between ending a pause and committing
that pass, ending writes ``.ended-<id>.json`` first; the next pass applies it
again (a no-op where it was counted) and removes it.

Functions whose name ends in ``_locked`` must be called with the state lock held.
"""

from __future__ import annotations

import os
import time

from qex.base import numbers
from qex.base.plain import Plain
from qex.store import layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.admit import Pause
    from qex.config.context import Context
    from qex.queue.txn import Txn
    from qex.store.state import Store
FORMAT = 1
KEEP_IDS = 16


class PauseFile(Plain):
    """One pause as read from its file. ``broken`` says why it cannot be read
    (it holds all the same)."""

    path: str
    kind: str  # "queue" | "lock"
    name: str | None = None  # the lock or pool, for kind "lock"
    id: str = ""
    reason: str = ""
    user: str = "?"
    uid: int | None = None
    pid: int | None = None
    ppid: int | None = None
    since: float | None = None
    until: float | None = None
    broken: str | None = None

    def in_force(self, now: float) -> bool:
        return self.broken is not None or self.until is None or now < self.until

    def dump(self) -> dict:
        return {
            "format": FORMAT,
            "kind": self.kind,
            "name": self.name,
            "id": self.id,
            "reason": self.reason,
            "user": self.user,
            "uid": self.uid,
            "pid": self.pid,
            "ppid": self.ppid,
            "since": self.since,
            "until": self.until,
        }


# ---- where pauses live ----------------------------------------------------------


def directory(store: Store) -> str:
    return os.path.join(store.root, layout.PAUSE)


def path_for(store: Store, kind: str, name: str | None = None) -> str:
    return os.path.join(directory(store), layout.PAUSE_QUEUE if kind == "queue" else layout.pause_lock(name))


def valid_name(name: object) -> bool:
    """A lock or pool name (``qex.base.names``)."""
    from qex.base.names import is_pool_name

    return is_pool_name(name)


def _kind_of(filename: str) -> tuple[str, str | None] | None:
    if filename == layout.PAUSE_QUEUE:
        return "queue", None
    name = layout.paused_lock_of(filename)
    if name is not None and valid_name(name):
        return "lock", name
    return None


def read_all(store: Store) -> list[PauseFile]:
    """Every pause file, in force or not, broken ones included."""
    d = directory(store)
    try:
        names = sorted(os.listdir(d))
    except FileNotFoundError:
        return []
    except OSError as exc:
        return [PauseFile(d, "queue", broken=f"the pause directory {d} cannot be read, {exc.strerror or exc}")]
    out = []
    for filename in names:
        kind = _kind_of(filename)
        if kind is not None:
            out.append(read_file(os.path.join(d, filename), *kind))
    return out


def read_file(path: str, kind: str, name: str | None) -> PauseFile:
    from qex.store import fs

    try:
        data = fs.read_json(path, 1 << 16)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return _broken(path, kind, name, f"the pause file {path} cannot be read, {why}")
    try:
        owner = os.lstat(path).st_uid  # who paused is the file's owner (a field could say anyone)
    except OSError as exc:
        return _broken(path, kind, name, f"the pause file {path} cannot be read, {exc.strerror}")
    from qex.base.paths import user_name

    try:
        return PauseFile(
            path,
            kind,
            name,
            id=str(data["id"]),
            reason=str(data.get("reason") or ""),
            user=user_name(owner),
            uid=owner,
            pid=numbers.optional(data.get("pid"), numbers.PID, 1, whole=True),
            ppid=numbers.optional(data.get("ppid"), numbers.PID, whole=True),  # (0: a parent in another namespace)
            since=_time(data.get("since")),
            until=_time(data.get("until")),
        )
    except numbers.BadNumber as exc:
        return _broken(path, kind, name, f"the pause file {path} is not a pause record ({exc})")
    except (KeyError, TypeError, ValueError, AttributeError):
        return _broken(path, kind, name, f"the pause file {path} is not a pause record")


def _broken(path: str, kind: str, name: str | None, why: str) -> PauseFile:
    try:
        since = os.lstat(path).st_mtime
    except OSError:
        since = None
    return PauseFile(path, kind, name, id=f"broken-{since}", since=since, broken=why)


def _time(v: object) -> float | None:
    """A time of a pause file (``qex.base.numbers``: seconds since 1970, to the year 3000), or None."""
    return None if v is None else float(numbers.number(v, numbers.TIME))


def in_force(store: Store, now: float) -> list[PauseFile]:
    return [p for p in read_all(store) if p.in_force(now)]


def next_end(store: Store | None, now: float, pauses: list[PauseFile] | None = None) -> float | None:
    """When the earliest timed pause in force ends (the waker sleeps to it); ``pauses``:
    the pause files as read already (``read_all``), else they are read now."""
    held = in_force(store, now) if pauses is None else [p for p in pauses if p.in_force(now)]
    ends = [p.until for p in held if p.until is not None and p.broken is None]
    return min(ends, default=None)


# ---- what the admission sees ----------------------------------------------------


def current(ctx: Context, now: float) -> Pause:
    """The pauses in force as ``qex.admit.Pause``: the queue with its words, and
    the locks a person holds with theirs."""
    from qex import admit as A

    pauses = in_force(ctx.store, now) if os.path.lexists(directory(ctx.store)) else []
    pauses += _others_in_force(ctx, now)
    if not pauses:
        return A.Pause()
    queue = [p for p in pauses if p.kind == "queue"]
    locks = tuple(sorted((p.name, lock_words(p)) for p in pauses if p.kind == "lock"))
    return A.Pause(queue=bool(queue), queue_reason=queue_words(queue[0]) if queue else "", locks=locks)


def _others_in_force(ctx: Context, now: float) -> list[PauseFile]:
    """In a shared directory: the other members' pauses that hold this member's jobs
    too: every lock a member paused, and the queue if the directory's owner (or
    root) paused it. Whose a pause is comes from its file's owner, never a field."""

    out = []
    for uid, other in ctx.store.others():
        for p in in_force(other, now):
            if p.broken is None and p.uid == uid and (p.kind == "lock" or uid in (0, ctx.store.owner_uid)):
                out.append(p)
    return out


def clock(t: float, ref: float | None = None) -> str:
    """A time as a person reads it: 14:03:05, with the date when not the day of ``ref``."""
    day = time.strftime("%Y-%m-%d", time.localtime(t))
    if ref is not None and time.strftime("%Y-%m-%d", time.localtime(ref)) == day:
        return time.strftime("%H:%M:%S", time.localtime(t))
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _tail(p: PauseFile) -> str:
    from qex.base.units import safe_text

    until = f" until {clock(p.until, p.since)}" if p.until is not None else ""
    reason = f": {safe_text(p.reason, 200)}" if p.reason else ""
    return until + reason


def queue_words(p: PauseFile) -> str:
    """The reason every queued job gives while the queue is paused (no changing
    numbers; only characters that `qex list` shows as they are)."""
    from qex.base.units import safe_text

    if p.broken is not None:
        return f"the queue is held: {p.broken}. qex resume queue removes it"
    return f"the queue is paused by {safe_text(p.user)}{_tail(p)}. qex resume queue ends it"


def lock_words(p: PauseFile) -> str:
    """What follows "waits for lock NAME, which a person holds: "."""
    from qex.base.units import safe_text

    if p.broken is not None:
        return f"{p.broken}. qex resume lock {p.name} removes it"
    return f"{safe_text(p.user)} paused it{_tail(p)}. qex resume lock {p.name} ends it"


# ---- making and ending pauses (under the lock) ------------------------------------


def pause_locked(
    ctx: Context, txn: Txn, kind: str, name: str | None, reason: str, until: float | None, now: float
) -> tuple[PauseFile, bool]:
    """Pause the queue or a lock. A pause already in force is kept as it is
    (its end and its reason): returns (the pause in force, made now?)."""
    from qex.store import fs

    path = path_for(ctx.store, kind, name)
    existing = _existing(path, kind, name)
    if existing is not None and existing.in_force(now):
        return existing, False
    if existing is not None:  # a timed pause that ended and no pass has removed yet
        end_locked(ctx, txn, existing, existing.until)
    _ensure_dir(ctx.store)
    p = PauseFile(
        path,
        kind,
        name,
        id=f"{now:.6f}-{os.getpid()}",
        reason=reason,
        user=ctx.user,
        uid=ctx.uid,
        pid=os.getpid(),
        ppid=os.getppid(),
        since=now,
        until=until,
    )
    fs.write_json(path, p.dump(), mode=0o644)
    return p, True


def _existing(path: str, kind: str, name: str | None) -> PauseFile | None:
    if not os.path.lexists(path):
        return None
    try:
        return read_file(path, kind, name)
    except FileNotFoundError:
        return None


def _ensure_dir(store) -> None:
    d = directory(store)
    if os.path.isdir(d) and not os.path.islink(d):
        return
    from qex.base.errors import StoreError

    try:
        mode = os.stat(store.root).st_mode & 0o2777
        os.mkdir(d, mode | 0o700)
        if store.shared:
            os.chmod(d, layout.MEMBER_MODE)  # whatever the umask: the other members read the pauses
    except FileExistsError:
        if os.path.islink(d) or not os.path.isdir(d):
            raise StoreError(f"{d} is not a directory; remove it (qex keeps its pauses there)") from None
    except OSError as exc:
        raise StoreError(f"cannot create {d}: {exc.strerror or exc}") from None


def resume_locked(ctx: Context, txn: Txn, kind: str, name: str | None, now: float) -> PauseFile | None:
    """End the pause in force; None if there is none. Refuses another user's pause."""
    existing = _existing(path_for(ctx.store, kind, name), kind, name)
    if existing is None or not existing.in_force(now):
        return None
    check_may_end(ctx, existing)
    end_locked(ctx, txn, existing, now)
    return existing


def check_may_end(ctx: Context, p: PauseFile) -> None:
    """The person who paused, the owner of the state directory, or root."""
    from qex.base.errors import PermissionRefused

    if ctx.uid == 0 or p.uid == ctx.uid or state_owner(ctx) == ctx.uid:
        return
    what = "the queue" if p.kind == "queue" else f"lock {p.name}"
    raise PermissionRefused(
        f"{what} was paused by {p.user}; only they, the owner of the state directory or root can resume it"
    )


def state_owner(ctx: Context) -> int | None:
    if ctx.store.shared_root is not None:
        return ctx.store.owner_uid  # the shared directory's owner
    try:
        return os.stat(ctx.store.root).st_uid
    except OSError:
        return None


def check_may_pause_queue(ctx: Context) -> None:
    """In a state directory shared with others, only its owner (or root) pauses the whole queue."""
    from qex.base.errors import PermissionRefused

    owner = state_owner(ctx)
    if ctx.uid == 0 or owner is None or owner == ctx.uid:
        return
    from qex.base.paths import user_name

    raise PermissionRefused(
        f"the state directory {ctx.store.shared_root or ctx.store.root} belongs to {user_name(owner)}: only its "
        "owner (or root) can pause the whole queue; hold what you need with "
        "qex pause lock NAME instead"
    )


def end_locked(ctx: Context, txn: Txn, p: PauseFile, end: float) -> None:
    """End pause ``p`` at ``end``: stop its clock for every queued job, remove its file."""
    from qex.store import fs

    if p.kind == "queue":
        ended = os.path.join(directory(ctx.store), layout.pause_ended(_file_id(p.id)))
        fs.write_json(ended, {**p.dump(), "ended_at": end}, mode=0o644, sync_dir=False)
        txn.__dict__.setdefault("_fresh_pause_ends", set()).add(ended)  # removed by the next pass
        _unlink(p.path)
        _account_locked(txn, p.id, p.since if p.since is not None else end, end)
    else:
        _unlink(p.path)


def settle_locked(ctx: Context, txn: Txn, now: float) -> None:
    """Each pass: end the timed pauses whose time has come, and finish the
    accounting of queue pauses ended by a pass that did not commit."""
    d = directory(ctx.store)
    if not os.path.isdir(d):
        return
    try:
        names = os.listdir(d)
    except OSError:
        return
    live_ids = set()
    for p in read_all(ctx.store):
        if p.broken is None and p.until is not None and now >= p.until:
            end_locked(ctx, txn, p, p.until)
        else:
            live_ids.add(p.id)
    for filename in names:
        if layout.is_pause_ended(filename):
            _replay_end(txn, os.path.join(d, filename), live_ids)


def _replay_end(txn, path: str, live_ids: set) -> None:
    from qex.store import fs

    try:
        data = fs.read_json(path, 1 << 16)
        pause_id, since, end = (
            str(data["id"]),
            _time(data.get("since")),
            float(numbers.number(data["ended_at"], numbers.TIME)),
        )
    except (OSError, ValueError, KeyError, TypeError):
        _unlink(path)
        return
    if pause_id not in live_ids:  # else the pass that ended it died before removing the live file: not over
        _account_locked(txn, pause_id, since if since is not None else end, end)
    # Leave this pass's own end for the next pass (its changes are not committed yet).
    if path not in getattr(txn, "_fresh_pause_ends", ()):
        _unlink(path)


def _account_locked(txn, pause_id: str, since: float, end: float) -> None:
    """Add to each queued job the time it spent in the pause, once per pause."""
    for job_id, e in list(txn.idx.jobs.items()):
        if e["state"] != "queued":
            continue
        secs = end - max(since, e.get("submitted_at", 0.0))
        if secs <= 0:
            continue
        try:
            rec = txn.record(job_id)
        except Exception:
            continue
        if pause_id in rec.queue_pauses:
            continue
        txn.update(
            job_id,
            change="reason",
            queue_pause_secs=round(rec.queue_pause_secs + secs, 3),
            queue_pauses=(*rec.queue_pauses, pause_id)[-KEEP_IDS:],
        )


def _file_id(pause_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-." else "_" for c in pause_id)[:80]


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
