"""A long job's supervisor slims down: two execs around the minimal watcher.

The forked supervisor (a copy of the CLI process with everything it imported,
about 9 MB of private memory) starts the job and watches it for
``watch.GRACE``. If the job still runs then, ``qex.supervisor.slim.become_watcher``
re-executes the same process (same pid: the record's ``supervisor_pid`` stays
right; same session) into ``qex.supervisor.watch.main``, a ``python -I -S``
that holds about 3 MB. It keeps exactly: the job's stdout and stderr pipes, the
log files (and their ``.cut`` records), the liveness lock (``alive.lock``), the
peer lock, and one memfd with what it needs (marshal). Every other fd closes on
the exec. The job stays its child, so ``wait4`` still gives its status and
rusage.

When the job has ended the watcher execs back into the full qex, ``finish``
below, which classifies the end and records it exactly as a forked supervisor
does (``ending.classify``, ``run._finish`` through ``run.resume``). The memory
``Meter`` (the job's cgroup, the OOM counters read at the start) travels in the
memfd, so the cgroup peak and OOM attribution survive both execs.

A crash of the watcher is a crash of the supervisor: its liveness lock goes
with it, and the next pass records ``supervisor_lost`` and stops the job.
"""

import os
import sys

from qex.supervisor import watch

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.supervisor.working import Working


def finish() -> None:
    """The full qex again, after the watcher: ``python -c ... qex-finish JOB FD``. Never returns."""
    import marshal
    import signal

    from qex.supervisor import ending, run

    interrupt = run.Interrupt()
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as proc.detach_stdio left a forked supervisor
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    ended, passed = watch.read_handover(int(sys.argv[3]))
    from qex.linux import title

    title.supervisor(sys.argv[2])
    passed = marshal.loads(passed)
    interrupt.requested = ended["requested"]
    signal.pthread_sigmask(signal.SIG_UNBLOCK, watch.STOP_SIGNALS)
    from qex.queue.context import Launch

    launch = Launch(*passed["launch"])
    ctx = _context(passed["root"])

    def ended_rec() -> "Working":
        """Inside resume's guard: a failure here is recorded as the supervisor's own."""
        from qex.supervisor.logs import Sink

        meter = _meter(passed["meter"])
        sinks = [Sink.resume(s) for s in ended["sinks"]]
        for sink in sinks:
            sink.close()  # the counted marker, as _watch closes them
        rusage = _Rusage(*ended["rusage"]) if ended["rusage"] is not None else None
        from qex.store.records import Status, load
        from qex.supervisor.working import Working  # noqa: F811 (the class; above: its name for the annotation)

        return ending.classify(
            Working(load(Status, passed["rec"])),
            ended["wait_status"],
            rusage,
            ended["stop_reason"],
            interrupt,
            {i: s for i, s in enumerate(sinks)},
            ended["incomplete"],
            meter,
            ended.get("vram"),
            ended.get("rss"),
        )

    run.resume(ctx, launch, interrupt, ended_rec)


class _Rusage:
    """The fields of the job's rusage the record uses (``Meter.end``)."""

    __slots__ = ("ru_maxrss", "ru_utime", "ru_stime")

    def __init__(self, maxrss, utime, stime):
        self.ru_maxrss, self.ru_utime, self.ru_stime = maxrss, utime, stime


def _context(root: str):
    from qex.base import machine, paths
    from qex.base.errors import QexError
    from qex.config.context import Context
    from qex.config.file import load_config
    from qex.config.model import Config
    from qex.store.state import Store

    store = Store(root)
    store.ensure()
    try:
        config = load_config()
    except QexError as exc:  # broken while the job ran: the defaults (and say so); _finish reads it again
        print(f"qex: the config cannot be read, using the defaults: {exc}", file=sys.stderr, flush=True)
        config = Config.default(paths.config_path())
    return Context(
        store=store,
        config=config,
        uid=os.getuid(),
        user=paths.user_name(),
        cores=machine.cores(),
        mem_total=machine.mem_total(),
    )


def _meter(state: dict | None):
    from qex.linux import cgroup
    from qex.supervisor.memory import Meter

    meter = Meter()
    if state is not None:
        meter.cg = cgroup.JobCgroup(*state["cg"]) if state["cg"] else None
        meter.why_not, meter.cg_kills0 = state["why_not"], state["cg_kills0"]
        meter.machine0, meter.job_dir = state["machine0"], state["job_dir"]
        meter.unit = state.get("unit")
    return meter
