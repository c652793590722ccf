"""A pass run by a fresh qex process, for a program that must not fork: a Python
program using ``qex.api`` (``Context.forks`` is False there).

Such a program's passes only commit (its submission, a cancel); they admit
nothing (``qex.queue.engine.run_pass``). ``qex.supervisor.become.kick`` then starts
``python -c 'import qex.supervisor.starter ...'`` detached (its own session, no
descriptor of the program but one lock, stdio on /dev/null, then the waker's log): that small process
runs the one pass there is (``engine.run_pass``, the supervisors forked before
its commit as ``qex submit``'s are: ``become.early``), forks the waker and the
hook runner as any command does (``become.finish_pass``) and exits. No
supervisor is a copy of the program, of its threads' locks or of its memory.

Starters coalesce: the kicking program takes ``starter-UID.lock`` and hands it
to the starter, which lets it go once it holds the state lock. A kick that finds
it held does nothing: that starter's pass comes after the kicker's commit and
sees it. A kick that finds it free starts one. A starter that dies first leaves
the job queued, and the program's next look (``qex.control.waiting.nudge``) kicks
again.
"""

from __future__ import annotations

import os
import sys

from qex.store import layout


def main() -> None:
    """The starter: one pass, its supervisors forked from here, then exit."""
    from qex.linux.proc import detach_stdio

    handed = int(sys.argv[2])
    try:
        from qex.config.context import Context
        from qex.linux.cgroup import warm
        from qex.queue import engine
        from qex.store.lock import never_give_up
        from qex.supervisor import become

        warm()  # as qex submit does: the first cgroup move's wait runs beside this pass
        ctx = Context.load()
        detach_stdio(os.path.join(ctx.store.root, layout.WAKER_LOG))
        never_give_up()  # (a background process: its pass waits for the state lock as long as it takes)
        result = engine.run_pass(ctx, lambda txn: os.close(handed), early=become.early(leaving=True))
        become.finish_pass(ctx, result, leaving=True)  # in a forked supervisor: never returns
    except BaseException:
        import traceback

        traceback.print_exc()
        os._exit(1)
    os._exit(0)
