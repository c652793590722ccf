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
run (none queued), it does not run passes: it checks their liveness locks
each interval and runs a pass only when one is free.
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
# memory outside qex, a pause, a reservation, a new job with no reason yet...) or a
# running job whose supervisor is gone makes the waker pass.
INSIDE = frozenset({"own", "front", "dependency", "device", "lock"})
WATCH = 0.2  # how often a sleeping waker looks for a changed queue (two stats)
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


def wake_time(ctx: Context, next_deadline: float | None, now: float) -> float:
    """The next pass: at the earliest deadline or end of a timed pause still to
    come, and at most ``INTERVAL`` from now."""
    from qex.queue import pause

    wake = now + INTERVAL
    try:
        end = pause.next_end(ctx.store, now)
    except Exception:
        end = None
    for t in (next_deadline, end):
        if t is not None and t > now:
            wake = min(wake, t + 0.005)  # a hair after, so the pass sees it reached
    return wake


def _sleep_until(ctx: Context, wake: float) -> None:
    """Sleep to ``wake``, but look every ``WATCH`` seconds whether the queue or
    the pauses changed (a file's mtime): a new or moved deadline, or a new
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
            wake = min(wake, wake_time(ctx, _earliest_deadline(ctx, now), now))


def _stamp(ctx: Context) -> tuple:
    out = []
    for path in (ctx.store.index_path, ctx.store.journal_path, os.path.join(ctx.store.root, layout.PAUSE)):
        try:
            out.append(os.stat(path).st_mtime_ns)
        except OSError:
            out.append(None)
    return tuple(out)


def _earliest_deadline(ctx: Context, now: float) -> float | None:
    """The earliest deadline still to come of a queued job, read from the index without the lock."""
    try:
        jobs = ctx.store.read_index_jobs()
        times = [e["deadline"] for e in jobs.values() if e.get("state") == "queued" and e.get("deadline")]
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        return None
    return min((t for t in times if t > now), default=None)


def _loop(ctx: Context, fd: int, next_deadline: float | None = None) -> "Launch | None":
    """Pass until nothing of this user is queued; return a Launch in a forked supervisor."""
    import traceback

    never_give_up()  # a pass waits for the state lock as long as it takes (no --lock-timeout)
    while True:
        _sleep_until(ctx, wake_time(ctx, next_deadline, time.time()))
        if not _still_found(ctx, fd):
            return None  # its state directory was removed or replaced: nothing here is its to wake
        need = _needs_pass(ctx)
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


def _needs_pass(ctx: Context) -> bool | None:
    """True: a job of this user waits on something only a pass notices (see
    ``INSIDE``), or a job lost its supervisor; False: their jobs run, or wait on
    jobs of this queue that run, all supervised; None: nothing of theirs left."""
    from qex.store import fs

    if not os.path.exists(ctx.store.index_path):
        return True  # let a pass read (and if need be rebuild) the index
    jobs = ctx.store.read_index_jobs()
    if not jobs:
        try:
            from qex.store import check

            if check.index(fs.read_json(ctx.store.index_path)):
                return True  # entries a pass takes again from their records
        except (OSError, ValueError, check.Damaged):
            return True  # unreadable or damaged: a pass rebuilds it
    mine = {j: e for j, e in jobs.items() if e.get("uid") == ctx.uid and not on_slurm(e)}  # (Slurm runs its own)
    if not mine:
        return None
    queued = [e for e in mine.values() if e.get("state") == "queued"]
    now = time.time()
    if any(e.get("holder") not in INSIDE or (e.get("deadline") or now + 1) <= now for e in queued):
        return True  # (a --max-queue-time reached expires the job)
    if queued and ctx.store.shared_root is not None:
        return True  # the other members' jobs take part in the order: only a pass sees them go
    # Every queued job of theirs waits on what a job of this queue holds, whose end
    # runs a pass: none is needed unless a job's supervisor is gone.
    holding = [(j, e) for j, e in jobs.items() if e.get("state") in HOLDING]
    if queued and not holding:
        return True
    return any(_lost(ctx, j, e) for j, e in holding)


def _lost(ctx: Context, job_id: str, entry: dict) -> bool:
    from qex.store.lock import is_held

    try:
        return not is_held(ctx.store.path(job_id, layout.ALIVE))
    except OSError:
        return entry.get("uid") == ctx.uid  # another user's private file: assume alive, as a pass does
