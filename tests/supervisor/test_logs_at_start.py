"""A job's stdout.log and stderr.log are made when its supervisor starts it, before its
record says 'running' (a script that sees it running opens them), not when it is queued."""

import os

from test_index_cache import add_jobs, view

from qex.queue import engine
from qex.store.state import LAZY
from qex.supervisor import run, starting
from qex.supervisor.memory import Meter
from qex.supervisor.working import Working

LOGS = ("stdout.log", "stderr.log")


def logs_of(ctx, job: str) -> set:
    return set(LOGS) & set(os.listdir(ctx.store.job_dir(job)))


def test_the_logs_exist_before_the_job_is_recorded_running(tmp_path, monkeypatch):
    ctx = view(tmp_path)
    (job,) = add_jobs(ctx)
    assert logs_of(ctx, job) == set(), "a queued job has no logs yet"
    result = engine.run_pass(ctx, save_index=LAZY)  # admits it: 'starting'
    (launch,) = result.launches
    seen = []

    def record_running(ctx_, launch_, rec, interrupt=None):
        seen.append(logs_of(ctx, job))
        return Working(rec, abandon=True)  # (start stops the job: this test needs no watch)

    monkeypatch.setattr(starting, "record_running", record_running)
    monkeypatch.chdir(ctx.store.job_dir(job))
    meter, interrupt = Meter(), run.Interrupt()
    try:
        proc, current = starting.start(ctx, launch, ctx.store.read_spec(job), meter, interrupt)
    finally:
        interrupt.close()
        meter.discard()
        run._close_and_end(launch)
    assert proc is None and current.abandon
    assert seen == [set(LOGS)]
