"""How a job ended: its state and words from its wait status and what the
supervisor saw (``classify``), and the record that says so, or its retry
(``record_end``, in the pass after the job)."""

from __future__ import annotations

import os
import time

from qex.store.records import Attempt, LogsDropped, Usage, load
from qex.supervisor.memory import Meter, settle
from qex.supervisor.working import Outcome, Working

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

    from qex.config.context import Context
    from qex.queue.context import Launch
    from qex.queue.txn import Txn
    from qex.store.records import Status
    from qex.supervisor.logs import Sink

DRAIN_AFTER_EXIT = 2.0  # seconds the job's output is still read after it exited (a child may hold it)


def classify(
    work: Working,
    wait_status: int,
    rusage: object,
    stop_reason: str | None,
    interrupt: object,
    sinks: dict[int, Sink],
    incomplete: bool,
    meter: Meter | None = None,
    vram: dict | None = None,
    sampled: dict | None = None,
) -> Working:
    """The working record with the attempt's ``Outcome``. ``vram``: what a GPU job's
    sampler found (``Sampler.result``), or None; ``sampled``: what the /proc sampler of
    a job without a cgroup found (``rss.TreePeak.result``)."""
    out, err = sinks.values()
    usage, oom_evidence = (meter or Meter()).end(
        rusage, wait_status, stopped_by_qex=stop_reason is not None, sampled=sampled
    )
    vram_over = None
    if vram is not None:
        from qex.supervisor import vram_note

        found = vram_note.fields(vram)
        usage.update(found["usage"])
        vram_over = found["vram_over"]
    dropped = LogsDropped(out.dropped_bytes, out.dropped_lines, err.dropped_bytes, err.dropped_lines, incomplete)
    state, exit_code, signal, error = _judge(work.rec, wait_status, stop_reason, interrupt, oom_evidence)
    problems = [f"{name} log stopped: {s.failed}" for name, s in (("stdout", out), ("stderr", err)) if s.failed]
    if incomplete:
        problems.append(
            "a process the job left behind still held its output open; "
            f"qex stopped reading {DRAIN_AFTER_EXIT:g}s after the job exited"
        )
    if problems:
        error = "; ".join(filter(None, [error, *problems]))
    outcome = Outcome(
        state,
        time.time(),
        started_at=work.rec.started_at,
        exit_code=exit_code,
        signal=signal,
        error=error,
        oom_evidence=oom_evidence,
        vram_over=vram_over,
        usage=load(Usage, usage),
        logs_dropped=dropped,
    )
    return work.evolve(outcome=outcome)


def _judge(
    rec: Status, wait_status: int, stop_reason: str | None, interrupt: object, oom_evidence: str | None
) -> tuple[str, int | None, str | None, str | None]:
    """The job's state, exit code or signal, and the words of a stop by qex (a kill, a
    SIGTERM, the timeout). A stop by qex wins over OOM evidence, OOM evidence over the
    exit code."""
    exit_code = signal = error = None
    if os.WIFEXITED(wait_status):
        exit_code = os.WEXITSTATUS(wait_status)
    elif os.WIFSIGNALED(wait_status):
        from signal import Signals  # the name only: after the job, never before its first instruction

        signal = Signals(os.WTERMSIG(wait_status)).name
    if stop_reason == "killed":
        state = "killed"
        error = (
            "stopped by qex kill"
            if interrupt.requested == "kill"
            else "stopped because its supervisor received SIGTERM"
        )
    elif stop_reason == "timeout":
        from qex.base.units import format_duration

        state, error = "timeout", f"stopped after its --timeout of {format_duration(rec.timeout)}"
    elif oom_evidence is not None:
        state = "oom"
    elif exit_code == 0:
        state = "completed"
    else:
        state = "failed"
    return state, exit_code, signal, error


def record_end(
    ctx: Context, txn: Txn, launch: Launch, work: Working, lessons: list, let_go: Callable[[], None]
) -> None:
    """In the pass after the job ended (lock held): its final record, or its retry
    queued (``--retries``, or a bigger claim after an OOM). ``let_go()`` lets go of
    the job's locks (the supervisor's ``_close_and_end``): a retry frees its
    liveness lock first, so that this same pass can start it again."""
    current, rec = txn.record(launch.job_id), work.rec
    if work.unrecorded and current.state == "starting":  # ended before RUNNING_AFTER
        current = txn.update(
            launch.job_id, state="running", pid=rec.pid, supervisor_pid=rec.supervisor_pid, started_at=rec.started_at
        )
    outcome, oom_retry = settle(ctx, current, work.outcome, lessons)  # a kill wins over OOM evidence; OOM retry
    attempt = current.attempt
    attempts = (*current.attempts, _attempt(attempt, current, outcome))
    fields = outcome.recorded()
    failed_before = sum(1 for a in current.attempts if a.state == "failed")
    if oom_retry is not None:
        # Like a --retries retry, and it keeps no capacity: it waits in the queue for the bigger claim to fit.
        _requeue(
            txn,
            launch,
            let_go,
            attempt,
            attempts,
            **oom_retry,
            **{k: v for k, v in fields.items() if k in ("usage", "logs_dropped", "oom_evidence", "vram_over")},
        )
    elif (
        outcome.state == "failed" and failed_before < current.retries and not current.kill_requested
    ):  # a job someone is killing is not retried
        _requeue(
            txn,
            launch,
            let_go,
            attempt,
            attempts,
            **{k: v for k, v in fields.items() if k in ("usage", "logs_dropped", "vram_over")},
            blocked_reason=f"queued for retry {failed_before + 1} of {current.retries} after attempt {attempt} failed",
        )
    else:
        final = txn.update(launch.job_id, state=outcome.state, attempts=attempts, **fields)
        if launch.peer_fd >= 0 and launch.peer_lock:
            # The next job this pass starts for this user is this process's next job
            # (run._finish): it keeps this supervisor's peer lock, and a queue that goes from
            # one job to the next of the same claims rewrites nothing in the peer directory.
            txn.peer_reuse = (launch.peer_fd, launch.peer_lock)
        if final.dedupe_key:
            from qex.jobs import dedupe

            dedupe.remember_locked(ctx.store, final)


def _requeue(txn: Txn, launch: Launch, let_go: Callable[[], None], attempt: int, attempts: tuple, **fields) -> None:
    """Queue the job's next attempt (a retry): it lets go of the job's liveness lock
    first, so that this same pass can start it again, and keeps no capacity (no
    devices assigned, no pid, no start); ``fields``: what the record keeps or adds."""
    launch.alive_fd = let_go() or -1
    txn.update(
        launch.job_id,
        state="queued",
        attempt=attempt + 1,
        attempts=attempts,
        assigned=[],
        pid=None,
        forced=False,
        started_at=None,
        **fields,
    )


def _attempt(number: int, current: Status, outcome: Outcome) -> Attempt:
    """The attempt that just ended, as the record's ``attempts`` lists it."""
    return Attempt(
        number,
        outcome.state,
        claims=current.claims,
        started_at=outcome.started_at,
        ended_at=outcome.ended_at,
        exit_code=outcome.exit_code,
        signal=outcome.signal,
        usage=outcome.usage or Usage(),
        error=outcome.error,
        oom_evidence=outcome.oom_evidence,
    )
