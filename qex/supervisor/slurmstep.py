"""The qex step: what a Slurm job of qex runs on its node (``python -m qex.supervisor.slurmstep ID``).

The batch script qex submitted (``qex.slurm.script``) execs this, with the same
interpreter and qex as the submitting command and the state directory on the shared
file system. It takes its job as a pass takes a job it admits (queued -> starting,
the liveness lock held, under the state lock), then forks the job's supervisor: the
local supervisor's own code (``qex.supervisor.run.main_loop``), which writes the logs,
the usage and the final record into the job's directory as it does on one machine.
So a job's result never depends on Slurm's accounting (``sacct``, ``slurmdbd``) nor on
``scontrol`` still knowing the job.

This process stays the batch step's first process: it forwards ``SIGUSR1`` (``qex kill``
sends it with ``scancel --batch --signal=USR1``) and ``SIGTERM`` (``scancel``, a time limit)
to the supervisor, and exits with the job's own exit code, so that Slurm's state of the
job (COMPLETED, FAILED) and its dependencies (``afterok``) follow the job.
"""

from __future__ import annotations

import os
import signal
import sys

from qex.base import outcome
from qex.queue import engine
from qex.queue.context import Launch
from qex.store import layout
from qex.store.index import on_slurm
from qex.store.lock import hold

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.queue.txn import Txn


def take(ctx: Context, job_id: str) -> tuple[Launch | None, str]:
    """Start the job as a pass starts one it admits; (its Launch, "") or (None, why not)."""

    def start(txn: Txn) -> object:
        entry = txn.idx.jobs.get(job_id)
        if entry is None or not on_slurm(entry):
            return None, "it is not a queued Slurm job of this state directory (cancelled, or ended)"
        if entry["state"] != "queued":
            return None, f"it is {entry['state']} already (a second start of the same job is refused)"
        fd = hold(ctx.store.path(job_id, layout.ALIVE))
        if fd is None:
            return None, "its liveness lock is held by another process"
        rec = txn.update(
            job_id,
            state="starting",
            assigned=[],
            forced=False,
            blocked_reason=None,
            blocked_holder=None,
            blocked_since=None,
        )
        launch = Launch(job_id, fd)
        launch.attempt = rec.attempt
        return launch, ""

    return engine.run_pass(ctx, start).value


def supervise(ctx: Context, launch: Launch) -> None:
    """In the forked child: become the job's supervisor; never returns."""
    from qex.linux.proc import detach_stdio
    from qex.slurm import clients
    from qex.supervisor.run import main_loop

    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # until the supervisor's own handler: the record says it
    try:
        os.setsid()
        detach_stdio(ctx.store.path(launch.job_id, layout.SUPERVISOR_LOG))
        spec = ctx.store.read_spec(launch.job_id, must_own=True)
        spec.env.update(clients.environment_of_step())  # its ids and its devices, as Slurm gave them
        launch.spec, launch.fresh = spec, True
    except BaseException:
        launch.spec = None
    main_loop(ctx, launch)
    os._exit(70)


def main(argv: list[str]) -> int:
    from qex.config.context import Context

    if len(argv) != 1:
        print("usage: python -m qex.supervisor.slurmstep JOB_ID (qex's batch scripts run it)", file=sys.stderr)
        return 2
    job_id = argv[0]
    ctx = Context.load()
    launch, why = take(ctx, job_id)
    if launch is None:
        print(f"qex: job {job_id[:8]} is not started: {why}", file=sys.stderr)
        return 0
    pid = os.fork()
    if pid == 0:
        supervise(ctx, launch)
    os.close(launch.alive_fd)
    for signum in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda n, frame: _forward(pid, signal.SIGUSR1 if n == signal.SIGUSR1 else n))
    while True:
        try:
            os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            break
    try:
        rec = ctx.store.read_status(job_id)
    except Exception:
        return 1
    if rec.state != "completed":
        from qex.queue import slurmsync

        try:
            slurmsync.skip_needing(ctx, job_id)  # (what needs it is skipped now, as a local pass skips it)
        except Exception:
            pass  # (qex wait and status still find them: DependencyNeverSatisfied)
    return outcome.exit_code(rec) % 256


def _forward(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
