"""A request's claims: cores, memory, pools, locks and GPUs, each resolved from the
options, the config's defaults and what qex learned, and checked against the budget
and the pools (``qex.jobs.submit.build`` asks here)."""

from __future__ import annotations

import functools

from qex.base import units
from qex.base.errors import SpecError

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.jobs.request import Request


def explicit_env_names(req: Request) -> set[str]:
    """The variables a request sets itself (``--env``, the job file's ``env``)."""
    return set(req.job_env) | {item.partition("=")[0] for item in req.env}


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
