"""How a process becomes a job's supervisor: after a pass that forked it
(``finish_pass``), or before its submission's commit (``early``).

A supervisor is forked, never exec'd: the forked child returns its Launch up
the stack of the process it was forked from, and the code here makes it the
supervisor (``qex.supervisor.run.main_loop``), which never returns.
"""

from __future__ import annotations

import os
import sys

from qex.queue import fork
from qex.queue.context import Launch, PassResult
from qex.store import layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

    from qex.config.context import Context

_CRASH = "QEX_CRASH_AT" in os.environ  # crash points for tests (qex.base.faults); off in normal use


def become_supervisor_if(ctx: Context, launch: Launch | None) -> None:
    """In a process forked to supervise a job: supervise, never return."""
    if launch is not None:
        from qex.supervisor.run import main_loop

        main_loop(ctx, launch)


def revive_waker(ctx: Context) -> None:
    """A reading command (list, status, info, logs) of a user whose waker is gone
    while work of theirs waits or runs (``qex.queue.waker.gone``) runs a pass
    first: what it shows is then true (no reason naming a holding that ended),
    what fits starts, and a waker lives again. In a process forked by it to
    supervise a job: supervise, never return."""
    from qex.queue import engine, waker

    if waker.gone(ctx):
        finish_pass(ctx, engine.run_pass(ctx))


def finish_pass(ctx: Context, result: PassResult, leaving: bool = False) -> None:
    """Fork what the pass admitted (``qex.queue.launch.after_pass``); in a forked
    supervisor, supervise and never return. A process that must not fork
    (``ctx.forks`` False) has a fresh one run the pass instead (``starter.kick``)."""
    from qex.queue.launch import after_pass

    if not ctx.forks:  # (a qex.api program: its pass admitted nothing; a fresh process passes)
        if result.queued_mine or result.running_mine:
            kick(ctx)
        return
    if result.launches:
        import qex.supervisor.run  # noqa: F401 (imported once here, not in each just-forked child: fork_early)
    become_supervisor_if(ctx, after_pass(ctx, result, leaving))


def early(leaving: bool) -> Callable[[Context, list[Launch], tuple[int, ...]], int]:
    """``run_pass``'s ``early``: the supervisors of what the pass admits are
    forked before its commit (``fork_early``)."""
    return lambda ctx, launches, locks: fork_early(ctx, launches, locks, leaving)


def fork_early(ctx: Context, launches: list[Launch], locks: tuple[int, ...], leaving: bool) -> int:
    """Fork the supervisors of a pass before its commit, under the lock; return the
    write end of their gate.

    A supervisor imports its code while the commit waits for its fsyncs, then
    reads the gate: one byte once the commit is written, or nothing (end of
    file) when the pass failed or died before. Only after the byte does it go on
    to start its job; without it, it leaves, and its liveness lock with it (a job
    the journal has as 'starting' is requeued by the next pass). It keeps no
    descriptor but its job's locks and the gate's read end (``fork.launch_all``):
    its copies of the state and admission locks (``locks``) and of the gate's write
    end close at once, so that it never holds them after the passing process lets
    them go.
    """
    import qex.supervisor.run  # noqa: F401 (here, not in the child: a just-forked process imports it

    #                            in ~2.4 ms, every page it touches a copy, against ~0.7 ms here)
    read_end, gate = os.pipe2(os.O_CLOEXEC)
    try:
        child = fork.launch_all(ctx, launches, leaving, keep_in_child=(read_end,))
    except BaseException:
        os.close(read_end)
        os.close(gate)
        raise
    if child is None:
        os.close(read_end)
        return gate
    try:
        if _CRASH:
            from qex.base import faults

            faults.hit("engine.early_gate")
        from qex.supervisor.run import main_loop, prepare_early

        prepare_early(ctx, child)  # while the commit waits for its fsyncs
        if os.read(read_end, 1) != b"g":
            if child.meter is not None:
                child.meter.discard()  # (the cgroup it made for a job that never starts)
            os._exit(0)
        os.close(read_end)
    except BaseException:
        os._exit(70)
    main_loop(ctx, child)  # never returns: it ends in os._exit
    os._exit(70)


_STARTERS: list = []  # this process's starters (subprocess.Popen) not seen ending yet
_STARTER = "import sys; sys.path.insert(0, sys.argv[1]); from qex.supervisor.starter import main; main()"


def starter_lock_path(ctx: Context) -> str:
    return os.path.join(ctx.store.root, layout.starter_lock(ctx.uid))


def kick(ctx: Context) -> None:
    """Have a fresh qex process pass (``qex.supervisor.starter``), unless one started
    already has yet to take the state lock (its pass will see what this process committed)."""
    import subprocess

    from qex.store.lock import hold

    try:
        fd = hold(starter_lock_path(ctx), layout.MEMBER_FILE_MODE if ctx.store.shared else 0o600)
    except OSError:
        return  # (the next look kicks again)
    if fd is None:
        return
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this qex's
    env = {**os.environ, "QEX_STATE_DIR": ctx.store.root, "QEX_CONFIG": ctx.config.path}
    _STARTERS[:] = [p for p in _STARTERS if p.poll() is None]  # (reaps those that ended: no zombie piles up)
    try:
        _STARTERS.append(
            subprocess.Popen(
                [sys.executable, "-c", _STARTER, root, str(fd)],
                pass_fds=(fd,),
                close_fds=True,
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                cwd="/",
            )
        )
    except OSError:
        pass  # (the job waits queued; the next look kicks again)
    finally:
        os.close(fd)  # the starter holds the lock now (an flock is its open file's)
