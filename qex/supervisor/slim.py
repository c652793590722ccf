"""The first of a long job's two execs (``qex.supervisor.handoff``): the full supervisor
hands what it watches to the minimal watcher (``qex.supervisor.watch.main``) in a memfd
and execs into it. Runs in the full supervisor, never in the watcher."""

import os

from qex.linux.whose import WATCHER_TAG
from qex.supervisor import watch

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Iterable

    from qex.config.context import Context
    from qex.queue.context import Launch
    from qex.supervisor.memory import Meter
    from qex.supervisor.working import Working


def become_watcher(
    ctx: "Context",
    launch: "Launch",
    pid: int,
    work: "Working",
    interrupt: object,
    meter: "Meter",
    sinks: dict,
    open_pipes: "Iterable[int]",
    timeout_at: float | None,
    kill_grace: float,
    drain: float,
    sampler: object = None,
    peak: object = None,
) -> None:
    """Exec into the minimal watcher (see ``qex.supervisor.handoff``). Returns only
    if the exec failed (the caller then goes on watching in this process). Runs in
    the full supervisor, never in the watcher: its imports stay inside it."""
    from qex.store import fs

    try:
        fs.settle(frees=True)  # (an exec ends the thread that makes this supervisor's last commit durable)
    except Exception:
        pass  # said nowhere better: the job goes on, and its end is recorded as usual
    import marshal

    passed = _passed(ctx, launch, work, meter)
    watched = {
        "pid": pid,
        "sinks": [(p, s.handover()) for p, s in sinks.items()],
        "open": list(open_pipes),
        "timeout_at": timeout_at,
        "kill_grace": kill_grace,
        "drain": drain,
        "requested": None,
        "keep": [launch.alive_fd, launch.peer_fd],
        "here": watch.package_parent(),
        "vram": sampler.state() if sampler is not None else None,
        "rss": peak.state() if peak is not None else None,
    }
    # From here a kill waits (blocked) for the watcher's handler; one that came during the
    # grace after the loop last looked is in interrupt.requested: it is handed over too.
    import signal

    signal.pthread_sigmask(signal.SIG_BLOCK, watch.STOP_SIGNALS)
    watched["requested"] = interrupt.requested
    fd = watch.write_handover((watched, marshal.dumps(passed)))
    keep = [fd, *sinks, launch.alive_fd, launch.peer_fd, *(f for s in sinks.values() for f in (s.fd, s.cut_fd, s.tee))]
    argv = watch.entry_argv(
        watched["here"], "qex.supervisor.watch", "main", WATCHER_TAG, launch.job_id, fd, minimal=True
    )
    watch.exec_keeping(argv, keep)  # unblocks the signals if it returns
    os.close(fd)


def _passed(ctx: "Context", launch: "Launch", work: "Working", meter: "Meter") -> dict:
    """What the full qex needs back after the watcher (the memfd's marshal part): the
    state directory, the launch, the record (its JSON: the job's 'running' is recorded
    before a hand-over, so the working record is its record), and the memory meter's state."""
    cg = meter.cg if meter is not None else None
    return {
        "root": ctx.store.root,
        "launch": (launch.job_id, launch.alive_fd, launch.peer_fd, launch.peer_lock),
        "rec": work.rec.asdict(),
        "meter": None
        if meter is None
        else {
            "cg": (cg.kind, cg.path, cg.scoped, cg.home) if cg is not None else None,
            "why_not": meter.why_not,
            "cg_kills0": meter.cg_kills0,
            "machine0": meter.machine0,
            "job_dir": meter.job_dir,
            "unit": meter.unit,
        },
    }
