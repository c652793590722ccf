"""From what a user asked (options, a job file) to records on disk.

``build`` validates one request completely and makes its Spec and its first
record without touching the queue; ``submit_many`` then writes every job of a
submission in one lock hold and runs the pass that may start them.
"""

from __future__ import annotations

import functools
import os
import time

from qex.base import numbers, units
from qex.base.errors import SpecError
from qex.base.plain import Factory, Plain
from qex.jobs.request import Request
from qex.store import layout
from qex.store.records import Claims, Spec, Status, load

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

    from qex.config.context import Context
    from qex.queue.context import Launch, PassResult
    from qex.queue.txn import Txn

MINIMAL_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TZ")


class Built(Plain):
    spec: Spec
    record: Status
    warnings: list[str] = Factory(list)


def build(ctx: Context, req: Request, now: float | None = None, found: set | None = None) -> Built:
    """Validate ``req`` and make its spec and first record; raises SpecError (121).
    ``found``: see ``_check_program`` (one set for the jobs of one submission)."""
    from qex.base.ids import new_id

    now = time.time() if now is None else now
    if not req.command:
        raise SpecError("no command: put the command after --, e.g. qex submit -- ./train.sh")
    if not all(isinstance(a, str) for a in req.command):
        raise SpecError("the command must be a list of strings")
    job_id = new_id()
    cwd = _cwd(req.cwd)
    env = _environment(req)
    _check_program(req.command[0], cwd, env, found)
    from qex.jobs import slurmjobs  # (Slurm is the scheduler: no budget here, its own claims)
    from qex.jobs.claims import resolve_claims

    claims, sources, warnings = slurmjobs.claims(ctx, req) if slurmjobs.on_slurm(ctx) else resolve_claims(ctx, req)
    hints = sources.get("cpu") == "user" and sources.get("mem") == "user"
    name = units.check_name(req.name, "--name") if req.name else units.safe_name(os.path.basename(req.command[0]))
    tags = [units.check_name(t, "--tag") for t in req.tags]
    limits = _limits(ctx.config, req)
    if req.stdin not in (None, "-"):
        req.stdin = os.path.abspath(req.stdin)  # (as a shell's < FILE: from here; a rerun finds it again)
    from qex.jobs import polite

    nice, io_class, oom, said = polite.resolve(ctx, req.nice, req.io_class, req.oom_score_adj)
    warnings += said
    spec = Spec(
        id=job_id,
        command=tuple(req.command),
        cwd=cwd,
        env=env,
        nice=nice,
        io_class=io_class,
        oom_score_adj=oom,
        hints=hints,
        request=_request_words(req),
    )
    record = _first_record(ctx, req, job_id, cwd, name, tags, claims, sources, now, limits, (nice, io_class, oom))
    return Built(spec, record, warnings)


def _first_record(
    ctx: Context,
    req: Request,
    job_id: str,
    cwd: str,
    name: str,
    tags: list,
    claims: dict,
    sources: dict,
    now: float,
    limits: dict,
    manners: tuple,
) -> Status:
    """The job's record as it enters the queue (state queued, attempt 1; its ``seq`` is
    given when the submission commits)."""
    nice, io_class, oom = manners
    return Status(
        id=job_id,
        seq=0,
        state="queued",
        name=name,
        command=tuple(req.command),
        cwd=cwd,
        owner=ctx.user,
        uid=ctx.uid,
        group=req.group,
        group_name=req.group_name,
        tags=tuple(tags),
        priority=req.priority,
        claims=load(Claims, claims),
        claim_source=sources,
        submitted_at=now,
        **limits,
        needs=tuple(req.needs),
        after=tuple(req.after),
        dedupe_key=req.dedupe_key,
        nice=nice,
        io_class=io_class,
        oom_score_adj=oom,
        template=None if req.template is None else tuple(req.template),
        rerun_of=req.rerun_of,
    )


def _limits(config, req: Request) -> dict:
    """The record's time and retry limits (the config's defaults where the request has
    none), its priority and dedupe options checked; raises SpecError (121)."""
    limits = {
        "timeout": _duration(req.timeout, "--timeout", config.default_timeout),
        "retries": _count(req.retries, "--retries", config.default_retries),
        "oom_retries": _count(req.oom_retries, "--oom-retries", config.default_oom_retries),
        "max_queue_time": _duration(req.max_queue_time, "--max-queue-time", config.default_max_queue_time),
    }
    if req.dedupe_key is not None or req.dedupe_window is not None:
        from qex.jobs import dedupe

        dedupe.check_request(req)
    if not numbers.ok(req.priority, numbers.PRIORITY, -numbers.PRIORITY, whole=True):
        raise SpecError(
            f"--priority: {numbers.shown(req.priority)} is not a whole number "
            f"from {-numbers.PRIORITY} to {numbers.PRIORITY}"
        )
    return limits


def build_like(first: Built, command: list[str], name: str, found: set | None = None) -> Built:
    """Another job of the submission that ``first`` belongs to, differing from it only
    in its command and its name (a fan-out's next line): what ``build`` checks and
    works out from everything else (claims, environment, times, counts) is the same,
    and is taken from ``first``; the program is checked as ``build`` checks it."""
    from qex.base.ids import new_id

    base = first.spec
    if not command or not all(isinstance(a, str) for a in command):
        raise SpecError("the command must be a list of strings")
    _check_program(command[0], base.cwd, base.env, found)
    name = units.check_name(name, "--name")
    job_id = new_id()
    spec = Spec(
        id=job_id,
        command=tuple(command),
        cwd=base.cwd,
        env=base.env,
        nice=base.nice,
        io_class=base.io_class,
        oom_score_adj=base.oom_score_adj,
        hints=base.hints,
        request={**base.request, "command": list(command), "name": name},
    )
    return Built(spec, first.record.evolve(id=job_id, name=name, command=tuple(command)), first.warnings)


def _request_words(req: Request) -> dict:
    return {k: v for k, v in req.asdict().items() if v not in (None, [], {})}


def _cwd(cwd: str | None) -> str:
    if not cwd:
        return os.getcwd()  # (a directory, or it raises)
    path = os.path.abspath(cwd)
    if not os.path.isdir(path):
        raise SpecError(f"--cwd: {units.safe_text(path)!s} is not a directory; give an existing directory")
    return path


def _environment(req: Request) -> dict[str, str]:
    mode = req.env_capture
    if mode == "all":
        env = dict(_whole_environment())
    elif mode == "minimal":
        env = {k: os.environ[k] for k in MINIMAL_ENV if k in os.environ}
    elif mode == "none":
        env = {}
    else:
        raise SpecError(f"--env-capture: {units.safe_text(mode)!r} is not a mode; use all, minimal or none")
    env.update(req.job_env)
    for item in req.env:
        key, sep, value = item.partition("=")
        if not sep or not key or "\0" in item:
            raise SpecError(f"--env: {units.safe_text(item)!r} is not KEY=VALUE; e.g. --env OMP_NUM_THREADS=4")
        env[key] = value
    return env


@functools.cache
def _whole_environment() -> dict[str, str]:
    """The caller's environment, read once per process (a fan-out builds a thousand jobs)."""
    return dict(os.environ)


def _check_program(program: str, cwd: str, env: dict, found: set | None = None) -> None:
    """Refuse a program the job could not start. ``found``: the (program, cwd, PATH)
    already found by this submission (a fan-out's jobs mostly run one program)."""
    key = (program, cwd, env.get("PATH"))
    if found is not None and key in found:
        return
    _find_program(program, cwd, env)
    if found is not None:
        found.add(key)


def _find_program(program: str, cwd: str, env: dict) -> None:
    if "/" in program:
        path = program if os.path.isabs(program) else os.path.join(cwd, program)
        if not os.path.isfile(path) or not os.access(path, os.X_OK):
            raise SpecError(f"cannot run {units.safe_text(program)!r}: no executable file at {units.safe_text(path)}")
        return
    for d in (env.get("PATH") or os.defpath).split(os.pathsep):
        candidate = os.path.join(d or ".", program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return
    raise SpecError(
        f"cannot run {units.safe_text(program)!r}: it is not on the job's PATH; "
        "give a path (./script.sh) or check --env-capture"
    )


def _duration(text, option: str, default):
    if text is None:
        return default
    value = units.parse_duration(str(text), option)
    if value <= 0:
        raise SpecError(f"{option}: {units.safe_text(str(text))!r} must be longer than zero, e.g. 90s, 30m, 4h")
    return value


def _count(value, option: str, default: int) -> int:
    if value is None:
        return default
    if not numbers.ok(value, numbers.COUNT, whole=True):
        raise SpecError(f"{option}: {numbers.shown(value)} is not a whole number from 0 to {numbers.COUNT}")
    return value


# ---- writing ------------------------------------------------------------------


def submit_many(
    ctx: Context,
    built: list[Built],
    on_locked: Callable[[Txn, list[Built]], list[str] | None] | None = None,
    early: Callable[[Context, list[Launch], tuple[int, int]], int] | None = None,
    prepare: Callable[[str], None] | None = None,
) -> tuple[list[str], PassResult]:
    """Write every job in one lock hold, then the pass; returns (ids, PassResult).

    ``on_locked(txn, built)`` may replace the submission (dedupe) and returns
    the ids to report, or None to go on. ``early``: see ``engine.run_pass``.
    ``prepare(job_dir)``: what else a job's directory holds before any pass can
    start it (its input, a follower's pipes: ``qex.supervisor.pipes``).
    """
    from qex.queue import engine

    _make_dirs(ctx, built, prepare)
    from qex.jobs import slurmjobs

    slurm = slurmjobs.on_slurm(ctx)

    def add(txn: Txn) -> list[str]:
        txn.settle_first = True  # (the flush of the job directories, or one job's fsyncs: durable first)
        if on_locked is not None:
            answer = on_locked(txn, built)
            if answer is not None:
                return answer
        if slurm:
            return slurmjobs.queue_locked(ctx, txn, built)  # sbatch, then the records: Slurm admits them
        ids = []
        for b in built:
            rec = b.record.evolve(seq=txn.idx.next_job)
            txn.idx.next_job += 1
            txn.put(rec, None)
            ids.append(rec.id)
        return ids

    if not slurm and any("gpu" in b.record.claims.pools for b in built):
        from qex.queue import gpuseen

        gpuseen.prefetch(ctx)  # the VRAM in use, read before the lock if it is not fresh (its pass admits it)
    try:
        result = engine.run_pass(ctx, add, early=early)
    except BaseException:
        _discard(ctx, built)
        raise
    made = set(result.value or ())
    _discard(ctx, [b for b in built if b.spec.id not in made])
    return result.value, result


def _make_dirs(ctx: Context, built: list[Built], prepare: Callable[[str], None] | None) -> None:
    """Every job's directory, before the lock: one job's fsynced as the pass admits it, many
    flushed at once beside the pass. Nothing of them is left if one cannot be made."""
    bulk = len(built) > 1
    try:
        for b in built:  # (one job: its fsyncs overlap the pass's admission; the commit settles them)
            ctx.store.create_job_dir(b.spec, sync=not bulk, later=not bulk)
            if prepare is not None:
                prepare(ctx.store.job_dir(b.spec.id))
        if bulk:
            from qex.store import fs

            fs.syncfs_in_background(ctx.store.jobs)  # one flush for every job directory, beside the pass
    except BaseException:
        _discard(ctx, built)
        raise


def _discard(ctx: Context, built: list[Built]) -> None:
    for b in built:
        if not os.path.exists(ctx.store.path(b.spec.id, layout.STATUS)):
            import shutil  # only here: shutil (and bz2, lzma) cost ~1.5 ms

            shutil.rmtree(ctx.store.job_dir(b.spec.id), ignore_errors=True)
