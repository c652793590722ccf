"""The stop hook: ``[hooks] on_stop`` runs once for each job that reaches a
state listed in ``on_stop_states`` -- whichever process made the state final
(a supervisor, a command, the waker; with or without a supervisor: expired,
skipped, cancelled, a lost supervisor).

How it stays exactly once and off the queue's path:

1. ``mark_locked`` -- in the pass that makes a job final, under the lock and
   before the commit -- creates ``<state>/hooks-pending/<uid>.<id>``. The
   marker is on disk before the final record, so a process killed after the
   commit leaves the marker behind, and any later pass (a command, the
   waker, another supervisor) picks it up: no scan of history is needed.
2. ``start_pending`` (``qex.hooks.pending``) -- after the pass, after the supervisors of what that
   pass admitted are forked -- forks one detached runner for the markers of
   this user. A hook never holds the lock, a pass or the next job.
3. The runner creates ``jobs/<id>/hook.ran`` with ``O_EXCL`` *before* it starts
   the hook, then removes the marker. Two runners racing for one job: one
   wins. A runner killed between ``hook.ran`` and the hook loses that one
   message -- a message twice is worse than a message lost.

The hook runs with no shell, the argv as written, in ``jobs/<id>/``, in its
own process group, with the ``QEX_*`` variables of the job; TERM at
``[hooks] timeout`` and KILL ``QEX_KILL_GRACE`` seconds later; its stdout
and stderr go to ``hook.log``, at most 1MB (then the pipe is shut and the
hook stopped). ``hook.ran`` then holds the verdict (``qex logs ID --hook``).
The config is read when the job ends, so a change applies to the next job.
This module is what every pass may touch; the runner is ``qex.hooks.runner``, and its start ``qex.hooks.pending``.
"""

from __future__ import annotations

import os

from qex.base.states import FINAL
from qex.store import layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.config.model import Config
    from qex.store.state import Store

FAULT = "QEX_TEST_FAULT"  # "before-hook": SIGKILL this process where a crash would leave a hook pending


def pending_dir(store: Store) -> str:
    return os.path.join(store.root, layout.HOOKS_PENDING)


def wanted(config: Config, state: str) -> bool:
    return bool(config.hook_on_stop) and state in config.hook_states


# ---- 1. under the lock: mark --------------------------------------------------------


def mark_locked(ctx: Context, txn: object) -> None:
    """A marker for each job this pass makes final (lock held, before the commit)."""
    directory = None
    for rec, previous, _change in txn.changes:
        if rec.get("state") not in FINAL or previous in FINAL:
            continue
        uid = rec.get("uid", -1)
        if uid == ctx.uid and not wanted(ctx.config, rec["state"]):
            continue  # our own job and our config wants no hook for it
        if directory is None:
            directory = _ensure_dir(ctx.store)
        try:
            os.close(
                os.open(
                    os.path.join(directory, layout.hook_marker(uid, rec["id"])),
                    os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                    0o600,
                )
            )
        except OSError:
            pass  # the hook is a message: it never fails a pass


def _ensure_dir(store) -> str:
    directory = pending_dir(store)
    try:
        os.mkdir(directory, 0o700)
    except OSError:
        pass  # it exists, or cannot be made: a hook is a message and never fails a pass
    return directory


def decide(ctx: Context, job_id: str) -> str:
    """ "run", "drop" (the marker is done with), or "wait" (the record is not final yet)."""
    if os.path.lexists(ctx.store.path(job_id, layout.HOOK_RAN)):
        return "drop"
    try:
        state = ctx.store.read_status(job_id).state
    except Exception:
        return "drop" if not os.path.isdir(ctx.store.job_dir(job_id)) else "wait"
    if state not in FINAL:
        return "wait"  # its pass is still committing (or failed to): keep the marker
    return "run" if wanted(ctx.config, state) else "drop"
