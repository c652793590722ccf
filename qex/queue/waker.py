"""The waker: one detached process per state directory and user, alive only
while that user has queued work.

It holds ``waker-<uid>.lock`` (a second one cannot start), sleeps to the next
``--max-queue-time`` deadline or end of a timed pause, at most ``INTERVAL``
(``QEX_WAKER_INTERVAL``, 1 s) — looking every ``WATCH`` seconds whether the
index or the pauses changed, which may bring that time forward, or the peer
directory changed, which ends the sleep —, runs a
pass, forks what it admitted, and exits as soon as nothing of its user is
queued or running, or its lock file is gone or replaced (the state directory
was removed). It covers what only time or the outside world can clear:
another user's claim, memory used outside qex, a pause with an end, a
queue-time deadline, and a supervisor that died. While its user's jobs only
run, or wait on what only a job of this queue or a pause in force holds, it
does not run passes: it checks their liveness locks each interval and runs a
pass only when one is free, or when the index or the pauses change. It reads
the index only when its files changed (``_Look``).
"""

from __future__ import annotations

import os
import time

from qex.base.states import HOLDING
from qex.linux.proc import detach_stdio, keep_only, reap_later
from qex.queue import engine, fork
from qex.queue.context import Launch
from qex.store import layout
from qex.store.index import on_slurm
from qex.store.lock import hold, never_give_up

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context

INTERVAL = float(os.environ.get("QEX_WAKER_INTERVAL", "1.0"))
# The kinds of wait (``blocked_holder``) that only the end of a job of this state
# directory clears: that job's supervisor runs a pass when it ends, so the waker
# has nothing to add (a drain behind the user's own jobs). Any other kind (a peer,
# memory outside qex, a reservation, a new job with no reason yet...) or a
# running job whose supervisor is gone makes the waker pass.
INSIDE = frozenset({"own", "front", "dependency", "device", "lock"})
# A job held by a pause in force, the queue's ("pause") or a lock's or pool's a person
# holds ("person"), needs no pass either: only a change of the pause directory (a
# resume, a pause removed by hand), a timed pause's end or, for "person", the job's
# --max-queue-time (a lock pause does not stop that clock) can let it start.
WATCH = 0.2  # how often a sleeping waker looks for a changed queue (a few stats)
# A changed queue's deadlines are read (the whole index) once it has stopped changing
# for a WATCH, or after LOOK seconds of changes: a drain changes it every few ms, and
# reading them at each WATCH cost a drain ~4% of the machine's CPU.
LOOK = 1.0


def lock_path(ctx: Context) -> str:
    return os.path.join(ctx.store.root, layout.waker_lock(ctx.uid))


def ensure(ctx: Context, next_deadline: float | None = None) -> "Launch | None":
    """Fork a waker unless one holds the lock. Returns a Launch only in a
    supervisor forked by the waker (see ``qex.queue.launch.after_pass``).
    ``next_deadline`` is the earliest --max-queue-time deadline of the pass.
    The waker keeps no descriptor but its lock (``proc.keep_only``)."""
    # (in a shared directory the other members read it: their passes reserve capacity
    # for this user's queued jobs only while it is held, qex.store.members.starter_alive)
    fd = hold(lock_path(ctx), layout.MEMBER_FILE_MODE if ctx.store.shared else 0o600)
    if fd is None:
        return None
    try:
        from qex.store import fs

        fs.settle(frees=True)  # (a forked process has no thread of this one: fs.defer_syncs)
        pid = os.fork()
    except Exception:  # (OSError, or StoreError from the settle: the next pass tries again)
        os.close(fd)
        return None
    if pid == 0:
        try:
            keep_only((fd,))
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            detach_stdio(os.path.join(ctx.store.root, layout.WAKER_LOG))
            from qex.linux import title

            title.waker(ctx.uid, ctx.store.root)
        except BaseException:
            os._exit(70)
        launch = _loop(ctx, fd, next_deadline)
        if launch is None:
            os._exit(0)
        return launch
    os.close(fd)
    reap_later(pid)
    return None


def gone(ctx: Context) -> bool:
    """This user has work queued or running and no waker lives (it was SIGKILLed:
    the OOM killer, a logout): nothing would pass for it. Costs a lock test when
    a waker lives (``qex.supervisor.become.revive_waker``)."""
    from qex.base.states import ACTIVE
    from qex.store.lock import is_held

    try:
        if is_held(lock_path(ctx)):
            return False
        jobs = ctx.store.read_index_jobs()
    except OSError:
        return False
    return any(e.get("state") in ACTIVE and e.get("uid") == ctx.uid and not on_slurm(e) for e in jobs.values())


def wake_time(ctx: Context, next_deadline: float | None, now: float, look: "_Look | None" = None) -> float:
    """The next pass: at the earliest deadline or end of a timed pause still to
    come, and at most ``INTERVAL`` from now. ``look``: the pauses as the waker
    last read them (``_Look``), else they are read now."""
    from qex.queue import pause

    wake = now + INTERVAL
    try:
        end = pause.next_end(ctx.store, now) if look is None else look.pause_end(now)
    except Exception:
        end = None
    for t in (next_deadline, end):
        if t is not None and t > now:
            wake = min(wake, t + 0.005)  # a hair after, so the pass sees it reached
    return wake


def _sleep_until(ctx: Context, wake: float, look: "_Look | None" = None) -> None:
    """Sleep to ``wake``, but look every ``WATCH`` seconds whether the queue or
    the pauses changed (``_stamp``): a new or moved deadline, or a new
    timed pause, may call for an earlier pass. A queue that keeps changing is
    being passed by others (each pass expires the jobs it finds due): its
    deadlines are read when it rests, or at least every ``LOOK`` seconds."""
    from qex.users import peer_dir

    stamp, peer = _stamp(ctx), peer_dir.dir_version(ctx)
    changed = None  # since when the queue has changed without a look at its deadlines
    while True:
        now = time.time()
        if now >= wake:
            return
        time.sleep(min(wake - now, WATCH))
        seen_peer = peer_dir.dir_version(ctx, peer)
        if seen_peer is not peer:
            if seen_peer is None or peer is None or seen_peer[1] != peer[1]:
                return  # another queue's job ended (or started): what waited for it may start now
            peer = seen_peer  # only this queue's own files changed
        seen, now = _stamp(ctx), time.time()
        if seen != stamp:
            stamp, changed = seen, changed or now
            if now - changed < LOOK:
                continue  # still changing: the passes changing it expire what they find due
        if changed is not None:
            changed = None
            wake = min(wake, wake_time(ctx, _earliest_deadline(ctx, now, look), now, look))


def _stamp(ctx: Context) -> tuple:
    """What changes whenever the queue or the pauses do: the index file and the
    journal (inode, size, mtime: every commit appends to the journal, a save or a
    rotation replaces a file), and each file in the pause directory (name and
    inode: a pause is written by a rename, a resume unlinks it). It decides whether
    the waker reads the index again (``_Look``), so a change must never leave it
    the same: an mtime alone can stay the same across two writes (a coarse clock)."""
    out = []
    for path in (ctx.store.index_path, ctx.store.journal_path):
        try:
            st = os.stat(path)
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    try:
        with os.scandir(os.path.join(ctx.store.root, layout.PAUSE)) as entries:
            out.append(tuple(sorted((e.name, e.inode()) for e in entries)))
    except FileNotFoundError:
        out.append(None)
    except OSError as exc:
        out.append(exc.errno)  # (unreadable: it holds the whole queue, qex.queue.pause.read_all)
    return tuple(out)


def _earliest_deadline(ctx: Context, now: float, look: "_Look | None" = None) -> float | None:
    """The earliest deadline still to come of a queued job that may expire, from
    the index read without the lock (``look``: only if its files changed)."""
    look = look or _Look()
    look.refresh(ctx)
    return min((t for t in look.deadlines if t > now), default=None)


def _loop(ctx: Context, fd: int, next_deadline: float | None = None) -> "Launch | None":
    """Pass until nothing of this user is queued; return a Launch in a forked supervisor."""
    import traceback

    never_give_up()  # a pass waits for the state lock as long as it takes (no --lock-timeout)
    look = _Look()
    look.refresh(ctx)  # (then each _needs_pass keeps it current)
    while True:
        _sleep_until(ctx, wake_time(ctx, next_deadline, time.time(), look), look)
        if not _still_found(ctx, fd):
            return None  # its state directory was removed or replaced: nothing here is its to wake
        need = _needs_pass(ctx, look)
        if need is None:
            return None
        if not need:
            continue
        try:
            ctx.reload_config()
            _prefetch_vram(ctx)
            result = engine.run_pass(ctx)
        except Exception:
            traceback.print_exc()
            next_deadline = None
            continue
        next_deadline = result.next_deadline
        child = fork.launch_all(ctx, result.launches)
        if child is not None:
            return child
        from qex.hooks.pending import start_pending

        start_pending(ctx)
        if not (result.queued_mine or result.running_mine):
            return None


def _prefetch_vram(ctx: Context) -> None:
    """A GPU claim waits: the VRAM in use is read now, outside the state lock, if the
    kept reading is too old (``qex.queue.gpuseen``), so that the pass does not wait on
    the driver (nvidia-smi without persistence mode takes ~1.5 s)."""
    if ctx.config.pool("gpu") is None:
        return
    from qex.queue import gpuseen

    try:
        if gpuseen.entries_want(ctx, ctx.store.read_index_jobs().values()):
            gpuseen.prefetch(ctx)
    except (OSError, ValueError):
        pass


def _still_found(ctx: Context, fd: int) -> bool:
    """Whether the lock this waker holds is still the file at its path. Once
    someone removes (or replaces) the state directory, no command can find this
    waker any more and every pass would fail: it must end, not loop."""
    try:
        seen = os.stat(lock_path(ctx))
    except FileNotFoundError:
        return False
    except OSError:
        return True  # (a path it cannot stat just now: the pass says what is wrong)
    held = os.fstat(fd)
    return (seen.st_dev, seen.st_ino) == (held.st_dev, held.st_ino)


def _needs_pass(ctx: Context, look: "_Look | None" = None) -> bool | None:
    """True: a job of this user waits on something only a pass notices (see
    ``INSIDE``), or a job lost its supervisor; False: their jobs
    run, or wait on jobs of this queue that run, all supervised, or on a pause
    still in force; None: nothing of theirs left. ``look``: what the waker read
    of the index before, read again only if its files changed."""
    look = look or _Look()
    look.refresh(ctx)
    if look.broken:
        return True  # let a pass read (and if need be rebuild) the index
    if not look.mine:
        return None
    now = time.time()
    if look.loud or any(t <= now for t in look.deadlines):
        return True  # (a --max-queue-time reached expires the job)
    if look.inside and ctx.store.shared_root is not None:
        return True  # the other members' jobs take part in the order: only a pass sees them go
    if (look.paused or look.person) and _pause_ended(ctx, look, now):
        return True
    # Every other queued job of theirs waits on what a job of this queue holds, whose
    # end runs a pass: none is needed unless a job's supervisor is gone.
    if look.inside and not look.holding:
        return True
    return any(_lost(ctx, j, uid) for j, uid in look.holding)


def _pause_ended(ctx: Context, look: "_Look", now: float) -> bool:
    """Whether a pause that holds a queued job of theirs is no longer in force (a
    resume whose pass did not start it, a pause file removed by hand, an end). In
    a shared directory the other members' pauses count too (``pause.current``:
    read each time, since their resumes change nothing of this member's)."""
    if ctx.store.shared_root is not None:
        from qex.queue import pause

        try:
            held = pause.current(ctx, now)
        except Exception:
            return True
        queue, locks = held.queue, {name for name, _words in held.locks}
    else:
        pauses = look.in_force(now)
        if pauses is None:
            return True  # (a pause file gone between the listing and the read: look again by a pass)
        queue, locks = any(p.kind == "queue" for p in pauses), {p.name for p in pauses if p.kind == "lock"}
    if look.paused and not queue:
        return True
    return any(not (pools & locks) for pools in look.person)


def _lost(ctx: Context, job_id: str, uid: object) -> bool:
    from qex.store.lock import is_held

    try:
        return not is_held(ctx.store.path(job_id, layout.ALIVE))
    except OSError:
        return uid == ctx.uid  # another user's private file: assume alive, as a pass does


class _Look:
    """What the waker last read of the index, kept with the ``_stamp`` its files had
    just before: while that stamp is the same, nothing read can have changed, and
    the index is not read again. (A paused queue of 10,000 jobs had it read, and a
    pass run, every second: a quarter of a core.)"""

    def __init__(self) -> None:
        self.stamp: tuple | None = None
        self._clear()

    def _clear(self) -> None:
        self.broken = False  # no index, or one a pass must rebuild
        self.mine = False  # a job of this user (not Slurm's) queued or running
        self.loud = False  # a queued job waits on what only a pass notices (a peer, ...)
        self.inside = False  # a queued job waits on a job of this queue (``INSIDE``)
        self.paused = False  # a queued job waits on the queue's pause
        self.person: set[frozenset] = set()  # the pools of each job that waits on a paused lock
        self.deadlines: list[float] = []  # of the queued jobs a pause in force does not stop
        self.holding: list[tuple[str, object]] = []  # (id, uid) of every starting or running job
        self.pauses: list | None = []  # every pause file (``qex.queue.pause.read_all``); None: unreadable

    def refresh(self, ctx: Context) -> None:
        stamp = _stamp(ctx)
        if stamp == self.stamp:
            return
        self._clear()
        self.stamp = stamp
        from qex.queue import pause

        try:
            self.pauses = pause.read_all(ctx.store)
        except Exception:
            self.pauses = None
        if not os.path.exists(ctx.store.index_path):
            self.broken = True
            return
        jobs = ctx.store.read_index_jobs()
        if not jobs and _damaged(ctx):
            self.broken = True
            return
        self._take(ctx, jobs)

    def in_force(self, now: float) -> list | None:
        return None if self.pauses is None else [p for p in self.pauses if p.in_force(now)]

    def pause_end(self, now: float) -> float | None:
        """When the earliest timed pause in force ends, of the pauses last read."""
        from qex.queue import pause

        return None if self.pauses is None else pause.next_end(None, now, self.pauses)

    def _take(self, ctx: Context, jobs: dict) -> None:
        uid = ctx.uid
        for job_id, e in jobs.items():
            state = e.get("state")
            if state in HOLDING:
                self.holding.append((job_id, e.get("uid")))
            if e.get("uid") != uid or on_slurm(e):  # (Slurm runs its own)
                continue
            self.mine = True
            if state != "queued":
                continue
            holder = e.get("holder")
            if holder in INSIDE:
                self.inside = True
            elif holder == "pause":
                self.paused = True
                continue  # (no job expires while the queue is paused: its clock stops)
            elif holder == "person":
                self.person.add(frozenset(e.get("pools") or ()))
            else:
                self.loud = True
            if e.get("deadline"):
                self.deadlines.append(e["deadline"])


def _damaged(ctx: Context) -> bool:
    """An index that reads as empty but has entries a pass takes again from their
    records, or that cannot be read or is damaged: a pass rebuilds it."""
    from qex.store import check, fs

    try:
        return bool(check.index(fs.read_json(ctx.store.index_path)))
    except (OSError, ValueError, check.Damaged):
        return True
