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
from qex.store import layout
from qex.store.records import FORMAT, NewSpec

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

    from qex.config.context import Context
    from qex.queue.context import Launch, PassResult
    from qex.queue.txn import Txn

MINIMAL_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TZ")


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


class Built(Plain):
    spec: NewSpec
    record: dict
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

    claims, sources, warnings = slurmjobs.claims(ctx, req) if slurmjobs.on_slurm(ctx) else resolve_claims(ctx, req)
    hints = sources.get("cpu") == "user" and sources.get("mem") == "user"
    name = units.check_name(req.name, "--name") if req.name else units.safe_name(os.path.basename(req.command[0]))
    tags = [units.check_name(t, "--tag") for t in req.tags]
    config = ctx.config
    timeout = _duration(req.timeout, "--timeout", config.default_timeout)
    mqt = _duration(req.max_queue_time, "--max-queue-time", config.default_max_queue_time)
    retries = _count(req.retries, "--retries", config.default_retries)
    if req.dedupe_key is not None or req.dedupe_window is not None:
        from qex.jobs import dedupe

        dedupe.check_request(req)
    oom_retries = _count(req.oom_retries, "--oom-retries", config.default_oom_retries)
    if not numbers.ok(req.priority, numbers.PRIORITY, -numbers.PRIORITY, whole=True):
        raise SpecError(
            f"--priority: {numbers.shown(req.priority)} is not a whole number "
            f"from {-numbers.PRIORITY} to {numbers.PRIORITY}"
        )
    if req.stdin not in (None, "-"):
        req.stdin = os.path.abspath(req.stdin)  # (as a shell's < FILE: from here; a rerun finds it again)
    from qex.jobs import polite

    nice, io_class, oom, said = polite.resolve(ctx, req.nice, req.io_class, req.oom_score_adj)
    warnings += said
    spec = NewSpec(
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
    record = {
        "format": FORMAT,
        "id": job_id,
        "seq": 0,
        "state": "queued",
        "name": name,
        "command": list(req.command),
        "cwd": cwd,
        "owner": ctx.user,
        "uid": ctx.uid,
        "group": req.group,
        "group_name": req.group_name,
        "tags": tags,
        "priority": req.priority,
        "claims": claims,
        "claim_source": sources,
        "submitted_at": now,
        "timeout": timeout,
        "retries": retries,
        "oom_retries": oom_retries,
        "max_queue_time": mqt,
        "needs": list(req.needs),
        "after": list(req.after),
        "dedupe_key": req.dedupe_key,
        "attempt": 1,
        "attempts": [],
        "nice": nice,
        "io_class": io_class,
        "oom_score_adj": oom,
    }
    if req.template is not None:
        record["template"] = list(req.template)
    if req.rerun_of is not None:
        record["rerun_of"] = req.rerun_of
    return Built(spec, record, warnings)


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
    spec = NewSpec(
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
    record = {k: (v.copy() if type(v) in (list, dict) else v) for k, v in first.record.items()}
    record.update(id=job_id, name=name, command=list(command))
    return Built(spec, record, first.warnings)


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


def explicit_env_names(req: Request) -> set[str]:
    return set(req.job_env) | {item.partition("=")[0] for item in req.env}


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


# ---- claims -------------------------------------------------------------------


def resolve_claims(ctx: Context, req: Request) -> tuple[dict, dict, list[str]]:
    """The claim map of a request: cores, memory, pools and locks, all checked."""
    from qex.config.keys import resolve_word

    config = ctx.config
    cpu_budget, mem_budget = ctx.budget()
    sources, warnings = {}, []
    cpu = config.default_cpu if req.cpu is None else units.parse_cpu(str(req.cpu), "--cpu")
    sources["cpu"] = "default" if req.cpu is None else "user"
    if isinstance(cpu, str):
        cpu = resolve_word(cpu, cpu_budget)
    mem = config.default_mem if req.mem is None else units.parse_mem(str(req.mem), "--mem")
    sources["mem"] = "default" if req.mem is None else "user"
    if mem is None:  # (a 1-core machine: never more than an idle machine holds, which is less the reserve)
        mem = min(ctx.mem_total // max(1, ctx.cores), ctx.holdable()[1] or ctx.mem_total)
    if isinstance(mem, str):
        mem = resolve_word(mem, mem_budget)
    if req.mem is None and config.learn_enabled:
        mem = _learned_mem(ctx, req, mem, mem_budget, sources, warnings)
    ctx.check_holdable(
        cpu,
        mem,
        "--cpu" if req.cpu is not None else "[defaults] cpu",
        "--mem" if req.mem is not None else "[defaults] mem",
    )
    pools = pool_claims(ctx, req, sources, warnings)
    for given, option in ((req.mem, "--mem"), (req.vram if req.vram != "guess" else None, "--vram")):
        slip = units.bare_size_warning(given, option) if given is not None else None
        if slip:
            warnings.append(slip)  # --mem 100 is 100 bytes, as documented; most likely a slip
    over = []
    if cpu > cpu_budget:
        over.append(f"{units.format_cores(cpu)} cores (budget {units.format_cores(cpu_budget)})")
    if mem > mem_budget:
        over.append(f"{units.format_size(mem)} of memory (budget {units.format_size(mem_budget)})")
    if over:
        what = " and ".join(over)
        if config.oversized == "reject":
            raise SpecError(
                f'this job claims {what}, more than the budget, and [queue] oversized = "reject"; '
                "claim less, or raise [budget] in the config"
            )
        if config.oversized == "run-when-idle":
            warnings.append(
                f"this job claims {what}, more than the budget: it will run alone, "
                "when nothing else runs (record forced: true)"
            )
        else:
            warnings.append(
                f'this job claims {what}, more than the budget: with [queue] oversized = "queue" '
                "it waits until the budget grows"
            )
    claims = {
        "cpu": cpu / 1000,
        "mem": mem,
        "pools": {n: {"count": c, "size": s} for n, (c, s) in sorted(pools.items())},
    }
    return claims, sources, warnings


def _learned_mem(ctx: Context, req: Request, default: int, budget: int, sources: dict, warnings: list) -> int:
    """What the learner knows about this command (a fan-out: its template), capped at the budget
    (and at what an idle machine holds: an absolute budget may be above it)."""
    from qex.jobs import learn

    template = getattr(req, "template", None)
    found, warning = _claim_once(
        ctx.store.root,
        () if template else tuple(req.command),
        tuple(template) if template else None,
        ctx.config.learn_margin,
        min(learn.MIN_CLAIM, default),
        ctx.mem_total,
    )
    if warning:
        warnings.append(warning)
    if found is None:
        return default
    nbytes, words = found
    most = ctx.holdable()[1]
    if most is not None and most < budget:
        budget = most
    sources["mem"] = words if nbytes <= budget else f"{words}, capped at the budget"
    return min(nbytes, budget)


@functools.lru_cache(maxsize=64)
def _claim_once(root: str, command: tuple, template: tuple | None, margin: float, minimum: int, most: int):
    """The learner asked once per process and key: the jobs of a fan-out share their template."""
    from qex.jobs import learn

    return learn.claim_for(root, command, template, margin, minimum=minimum, most=most)


def pool_claims(ctx: Context, req: Request, sources: dict, warnings: list) -> dict[str, tuple[int, int | None]]:
    """--gpu/--vram (``qex.jobs.gpuclaim``), --claim and --lock as one map: name -> (count, size)."""
    config = ctx.config
    pools = {p.name: p for p in config.pools}
    out: dict[str, tuple[int, int | None]] = {}
    if req.gpu is not None or req.vram is not None:
        from qex.jobs.gpuclaim import claim

        out["gpu"] = claim(
            ctx, req.gpu, req.vram, req.command, getattr(req, "template", None), pools.get("gpu"), sources, warnings
        )
    for item in req.claims:
        name, count, size = _parse_claim(item)
        _add(out, name, count, size, "--claim")
    for name in req.locks:
        _add(out, _claim_name(name, "--lock"), 1, None, "--lock")
    for name, (count, size) in out.items():
        _check_claim(config, pools.get(name), name, count, size)
    _check_env(req, pools, out)
    return out


def _check_env(req: Request, pools: dict, claimed: dict) -> None:
    """Refuse a job whose own env (--env, its job file) sets what qex sets from a
    pool: the variables of one it claims (and CUDA_DEVICE_ORDER beside them), or of a
    fenced one it does not claim."""
    explicit = explicit_env_names(req)
    for name, pool in pools.items():
        mine = [v for v in pool.variables if v in explicit]
        if name in claimed and mine:
            raise SpecError(
                f"this job sets {mine[0]} itself (--env or its job file), but qex sets it to the "
                f"devices of the pool {name!r} it assigns; remove it from the job's env"
            )
        if name in claimed and "CUDA_VISIBLE_DEVICES" in pool.variables and "CUDA_DEVICE_ORDER" in explicit:
            if _explicit_value(req, "CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
                raise SpecError(
                    "this job sets CUDA_DEVICE_ORDER itself, but the indices qex gives in "
                    "CUDA_VISIBLE_DEVICES count in PCI bus order (nvidia-smi's); remove it"
                )
        if name not in claimed and pool.fenced and mine:
            raise SpecError(
                f"this job sets {mine[0]} itself (--env or its job file) but claims no device of the "
                f"pool {name!r}, whose jobs without a claim get no device (its fence); claim "
                f"{'--gpu N' if name == 'gpu' else f'--claim {name}=N'}, or set fence = false on the pool"
            )


def _explicit_value(req: Request, var: str) -> str | None:
    value = req.job_env.get(var)
    for item in req.env:
        key, _, v = item.partition("=")
        if key == var:
            value = v
    return value


def _add(out: dict, name: str, count: int, size, option: str) -> None:
    if name in out:
        raise SpecError(f"{option}: {name!r} is claimed twice; give each pool or lock once")
    out[name] = (count, size)


def _parse_claim(item: str) -> tuple[str, int, int | None]:
    name, sep, rest = item.partition("=")
    if not sep:
        raise SpecError(f"--claim: {units.safe_text(item)!r} is not NAME=N or NAME=N:SIZE; e.g. --claim net=1")
    name = _claim_name(name, "--claim")
    count_text, _, size_text = rest.partition(":")
    try:
        count = int(count_text)
    except ValueError:
        count = 0
    if count < 1:
        raise SpecError(f"--claim: {units.safe_text(item)!r} needs a whole number of 1 or more after '='")
    size = units.parse_size(size_text, "--claim") if size_text else None
    if size is not None and size <= 0:
        raise SpecError(f"--claim: the size in {units.safe_text(item)!r} must be more than zero")
    return name, count, size


def _claim_name(name: str, option: str) -> str:
    from qex.base import names

    name = name.strip()
    if names.is_reserved(name):
        raise SpecError(f"{option}: {name!r} is not a pool; use --{name.lower()} to claim it")
    if not names.is_pool_name(name):
        raise SpecError(f"{option}: {units.safe_text(name)!r} is not a pool or lock name; {names.RULE}")
    return name


def _check_claim(config, pool, name: str, count: int, size) -> None:
    """Refuse at submission what could never fit an empty machine."""
    where = f"the config ({config.path})"
    if pool is None:
        if name == "gpu":
            from qex.jobs.gpuclaim import no_gpu_pool

            raise SpecError(no_gpu_pool(where))
        if count != 1:
            raise SpecError(
                f"{name!r} is not a pool in {where}, so it is a lock of one unit and "
                f'{count} units of it can never be had; declare [[pool]] name = "{name}", count = N'
            )
        if size is not None:
            raise SpecError(
                f"{name!r} is not a pool in {where}, so it has no devices to claim a size on; "
                "declare it with devices = [...]"
            )
        return
    if pool.count is not None:
        if size is not None:
            raise SpecError(
                f"the pool {name!r} counts units and has no devices, so a size cannot be claimed "
                f"on it; claim --claim {name}=N" + (" (no --vram)" if name == "gpu" else "")
            )
        if count > pool.count:
            raise SpecError(
                f"this job claims {count} units of {name!r}, but the pool has {pool.count}: "
                "it could never start; claim fewer"
            )
        return
    if count > len(pool.devices):
        raise SpecError(
            f"this job claims {count} devices of {name!r}, but the pool has {len(pool.devices)}: "
            "it could never start; claim fewer"
        )
    if size is not None and size > max(pool.devices):
        raise SpecError(
            f"this job claims {units.format_size(size)} on one device of {name!r}, but the largest "
            f"has {units.format_size(max(pool.devices))}: it could never start (VRAM is never added "
            "across devices); claim less per device"
        )


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

    from qex.jobs import slurmjobs

    slurm = slurmjobs.on_slurm(ctx)

    def add(txn):
        txn.settle_first = True  # (the flush of the job directories, or one job's fsyncs: durable first)
        if on_locked is not None:
            answer = on_locked(txn, built)
            if answer is not None:
                return answer
        if slurm:
            return slurmjobs.queue_locked(ctx, txn, built)  # sbatch, then the records: Slurm admits them
        ids = []
        for b in built:
            rec = {**b.record, "seq": txn.idx.next_job}
            txn.idx.next_job += 1
            txn.put(rec, None)
            ids.append(rec["id"])
        return ids

    if not slurm and any("gpu" in (b.record["claims"].get("pools") or {}) for b in built):
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


def _discard(ctx: Context, built: list[Built]) -> None:
    for b in built:
        if not os.path.exists(ctx.store.path(b.spec.id, layout.STATUS)):
            import shutil  # only here: shutil (and bz2, lzma) cost ~1.5 ms

            shutil.rmtree(ctx.store.job_dir(b.spec.id), ignore_errors=True)
