"""After a pass: fork one detached runner for this user's pending stop hooks
(``qex.hooks.markers`` says when a marker is made; ``qex.hooks.runner`` is
what the runner runs). Light on purpose: every command and supervisor that
ends a pass imports this module, and only the forked runner imports the rest.
"""

from __future__ import annotations

import os

from qex.hooks.markers import FAULT, decide, pending_dir
from qex.linux.proc import detach_stdio, keep_only, reap_later
from qex.store import fs, layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context


def start_pending(ctx: Context) -> None:
    """Fork a detached runner for this user's pending hooks (none: no fork)."""
    directory = pending_dir(ctx.store)
    try:
        names = os.listdir(directory)
    except OSError:
        return
    todo = []
    for name in names:
        job_id = layout.hook_marker_job(name, ctx.uid)
        if job_id is None:
            continue  # another user's job: their own qex runs their hook
        marker = os.path.join(directory, name)
        decision = decide(ctx, job_id)
        if decision == "run":
            todo.append(job_id)
        elif decision == "drop":
            fs.unlink_quietly(marker)
    if not todo:
        return
    if os.environ.get(FAULT) == "before-hook":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    _fork_runner(ctx, todo)


def _fork_runner(ctx: Context, job_ids: list[str]) -> None:
    try:
        fs.settle(frees=True)  # a hook runs for a final record that is durable (fs.defer_syncs)
        pid = os.fork()
    except Exception:  # (OSError, or StoreError from the settle)
        return  # the markers stay: a later pass starts them
    if pid == 0:
        code = 0
        try:
            keep_only()  # no lock, no liveness descriptor, nothing of the caller
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            detach_stdio(os.path.join(ctx.store.root, layout.HOOKS_LOG))
            from qex.linux import title

            title.hook_runner(ctx.uid, ctx.store.root)
            from qex.hooks.runner import run_hooks  # (in the runner only: every pass imports this module)

            run_hooks(ctx, job_ids)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 70
        os._exit(code)
    reap_later(pid)
