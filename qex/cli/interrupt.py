"""Ctrl-C, SIGTERM and SIGHUP on a command that waits for a job: the one rule.

``qex run`` owns its job (``Interrupts(owner=True)``): the first of these
signals stops the job through the rule of kill and cancel
(``qex.control.actions.stop_jobs``): a job still queued is cancelled and never
runs, a running one is killed. The command goes on following it until its
record is final, and returns that record's code (125). A second signal stops
the wait at once: 125 if the stop was recorded, else 122 and a sentence that
says the job may go on.

Every other wait (``submit --wait|--follow``, ``status --wait|--follow``,
``wait``) leaves the job alone: the signal ends the wait with 122 (``left``),
and says so on stderr.

The owner's handler only notes the signal: the stop is made from the wait's
loop (``act``), never from inside a pass the signal interrupted (a pass of the
wait's own, which holds the state lock). So is ``qex run``'s when it follows
another caller's job (``--dedupe-key``): it leaves the job, from the loop. A
waiter's handler raises KeyboardInterrupt at once, so that a wait held up by a
lock ends too.
"""

from __future__ import annotations

import signal

from qex.base import outcome
from qex.cli.common import err

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupts:
    """The handlers of ``SIGNALS`` while a command waits (a context manager)."""

    def __init__(self, owner: bool = False):
        self.owner = owner
        self.noting = owner  # the first signal is noted for act(), not raised (qex run's, owner or not)
        self.job_id: str | None = None  # the owner's job, once it is submitted
        self.signum: int | None = None  # the first signal that came
        self.stop: str | None = None  # what the owner's stop did: "cancelled", "signal", "ended:..."
        self._old: dict = {}

    def __enter__(self) -> Interrupts:
        # A signal the command was started ignoring stays ignored: `nohup qex run` survives
        # the hang-up, and a background job of a script its Ctrl-C, as nohup and sh intend.
        self._old = {s: signal.signal(s, self._handle) for s in SIGNALS if signal.getsignal(s) is not signal.SIG_IGN}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)

    def _handle(self, signum, frame) -> None:
        if self.noting and self.signum is None:
            self.signum = signum  # acted on by act(), from the wait's loop
            return
        self.signum = self.signum or signum
        raise KeyboardInterrupt

    def act(self, ctx: Context) -> None:
        """Called on every round of a wait: a signal noted and not yet acted on is.
        A waiter (or an owner that follows someone else's job) raises KeyboardInterrupt."""
        if self.signum is None or self.stop is not None:
            return
        if not self.owner:
            raise KeyboardInterrupt
        if self.job_id is None:
            return  # (the submission goes on; its first round acts)
        self.stop = "stopping"
        self.stop = stop_owned(ctx, self.job_id, signal.Signals(self.signum).name)

    def ended(self, job_id: str) -> int:
        """The wait was cut (a waiter's signal, or an owner's second): its exit code."""
        if not self.owner:
            return left()
        if self.stop in ("cancelled", "signal"):
            say("qex: stopped waiting; the job is being stopped")
            return outcome.JOB_CODES["killed"]
        if self.stop is not None and self.stop.startswith("ended:"):
            say(f"qex: stopped waiting; the job had ended by itself: qex status {job_id[:8]}")
            return outcome.INTERRUPTED
        say(f"qex: stopped waiting before the job could be stopped; it may go on: qex kill {job_id[:8]}")
        return outcome.INTERRUPTED


def stop_owned(ctx: Context, job_id: str, name: str) -> str:
    """``qex run``'s signal: stop its job (``stop_jobs``, the rule of kill and
    cancel) and say what was done. Returns the rule's answer for the job."""
    from qex.control.actions import KILL, stop_jobs

    answer = stop_jobs(ctx, [job_id], KILL, wait=False, why=f"cancelled before it started: its qex run got {name}")[
        job_id
    ]
    if answer == "cancelled":
        say(f"qex: {name}: job {job_id[:8]} was still queued; cancelled, it will not run")
    elif answer == "signal":
        say(f"qex: {name}: stopping job {job_id[:8]} (Ctrl-C again to stop waiting)")
    return answer


def left(jobs: int = 1) -> int:
    """A wait that leaves its job(s) was stopped: say so; 122."""
    say("qex: stopped waiting; the job continues" if jobs == 1 else "qex: stopped waiting; the jobs continue")
    return outcome.INTERRUPTED


def say(text: str) -> None:
    """A line on stderr that a hung-up terminal (SIGHUP) cannot turn into a traceback."""
    try:
        err(text)
    except OSError:
        pass
