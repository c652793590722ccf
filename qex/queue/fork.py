"""Forking supervisors: one detached process per job a pass admitted.

The caller that will become a supervisor's code (a command, ``qex.supervisor.become``)
imports ``qex.supervisor.run`` before it forks, so that each just-forked child
does not (its pages are copies there); this module does not know that code:
a forked child returns its Launch to the caller, which becomes the supervisor.
"""

from __future__ import annotations

import os

from qex.base.errors import QexError
from qex.linux.proc import close_quietly, detach_stdio, keep_only, reap_later
from qex.queue.context import Launch
from qex.store import fs, layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context

_CRASH = "QEX_CRASH_AT" in os.environ  # crash points for tests (qex.base.faults); off in normal use
if _CRASH:
    from qex.base import faults


def launch_all(
    ctx: Context, launches: list[Launch], leaving: bool = False, keep_in_child: tuple[int, ...] = ()
) -> Launch | None:
    """Fork one supervisor per launch, in a session of its own.

    A double fork, so that no supervisor is the child of a process that lives on
    (a supervisor that starts other jobs, a waker, a command that waits): its
    end would leave a zombie there. ``leaving``: the caller exits as soon as it
    has answered (``qex submit`` without ``--wait``), so its supervisors are
    orphaned at once, as a double fork's are; a single fork then spares the
    second fork's copy of the process, 1-2 ms before the job's first instruction.

    A supervisor keeps no descriptor but its job's locks (and ``keep_in_child``),
    from the moment it is forked (``proc.keep_only``): nothing of the command it
    was forked from, nor of the caller of that command. Its title says whose
    supervisor it is.

    In the parent: returns None once every supervisor is forked, and closes
    the liveness descriptors (each child keeps its own). In a supervisor:
    returns its Launch, and the caller becomes the supervisor from a flat loop
    (never from inside this stack, which would grow with every job).
    """
    try:
        if launches:
            fs.settle(frees=True)  # a supervisor starts its job on the strength of a durable commit
        forking = launches
    except QexError:
        forking = []  # not durable: their jobs, left 'starting' with no pid file, are requeued by the next pass
    for i, launch in enumerate(forking):
        if _CRASH:
            faults.hit("engine.before_fork")
        try:
            pid = os.fork()
        except OSError:
            break  # the job stays 'starting' with no pid: the next pass requeues it
        if pid == 0:
            try:
                keep_only((launch.alive_fd, launch.peer_fd, *keep_in_child))
                os.setsid()
                if not leaving and os.fork() != 0:
                    os._exit(0)
                detach_stdio(ctx.store.path(launch.job_id, layout.SUPERVISOR_LOG))
                launch.fresh = True  # admitted by the pass just before this fork (qex.supervisor.starting.start)
                return launch
            except BaseException:
                os._exit(70)
        reap_later(pid)
    for launch in launches:
        close_quietly(launch.alive_fd)
        close_quietly(launch.peer_fd)
    return None
