"""A job as asked for, in the user's words (``Request``): what ``qex submit``'s options
(``qex.jobs.options``), a job file (``qex.jobs.jobfile``), a pipeline stage or
``qex.submit``'s keywords say, before ``qex.jobs.submit.build`` checks it."""

from __future__ import annotations

from qex.base.plain import Factory, Plain


class Request(Plain):
    """One job as asked for, in the user's words (already split into values)."""

    command: list[str]
    cpu: str | None = None
    mem: str | None = None
    gpu: int | None = None
    vram: str | None = None
    claims: list[str] = Factory(list)  # "NAME=N" or "NAME=N:SIZE"
    locks: list[str] = Factory(list)
    name: str | None = None
    tags: list[str] = Factory(list)
    priority: int = 0
    timeout: str | None = None
    max_queue_time: str | None = None
    retries: int | None = None
    oom_retries: int | None = None
    needs: list[str] = Factory(list)
    after: list[str] = Factory(list)
    dedupe_key: str | None = None
    dedupe_window: str | None = None  # asks: also a job with the key that succeeded within T
    env: list[str] = Factory(list)  # "K=V"
    env_capture: str = "all"
    cwd: str | None = None
    nice: int | None = None
    io_class: str | None = None
    oom_score_adj: int | None = None
    group: str | None = None
    group_name: str | None = None
    job_env: dict[str, str] = Factory(dict)  # from a job file
    origin: str = "submit"  # option names in messages
    template: list[str] | None = None  # a fan-out's command with {} (the learner's key)
    rerun_of: str | None = None  # qex rerun: the job it repeats
    stdin: str | None = None  # --stdin FILE|- (qex.supervisor.pipes.give_input)
