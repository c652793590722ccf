"""A job's request in Slurm's words: the table of docs/slurm.md (and `qex help slurm`).

Each row is here once: ``claims`` reads what a job claims (no local budget, no local
pool: the cluster is the scheduler), ``refuse`` refuses at submission what has no
faithful translation (SpecError, 121, a sentence that names the option), and
``sbatch_args`` writes the options. ``qex export slurm`` and the backend share them.
"""

from __future__ import annotations

import math
import time

from qex.base import units
from qex.base.errors import SpecError

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.model import Config
    from qex.store.records import Status

MiB = 1024 * 1024


def export_mode(capture: str, minimal: tuple[str, ...]) -> str:
    """``--env-capture`` as sbatch's ``--export``: all -> ALL, minimal -> those names
    (``qex.jobs.submit.MINIMAL_ENV``), none -> NONE."""
    return {"all": "ALL", "minimal": ",".join(minimal), "none": "NONE"}.get(capture, "ALL")


def claims(config: Config, req: object) -> tuple[dict, dict, list[str]]:
    """The claim map of a request on Slurm: cores, memory (0: Slurm's default), and the
    pools: ``gpu`` (GPUs, as gres), any other name a license (``--claim``, ``--lock``)."""
    refuse(config, req)
    sources, warnings, pools = {}, [], {}
    cpu = units.parse_cpu(str(req.cpu), "--cpu") if req.cpu is not None else config.default_cpu
    sources["cpu"] = "user" if req.cpu is not None else "default"
    if isinstance(cpu, str):
        option = "--cpu" if req.cpu is not None else "[defaults] cpu"
        raise SpecError(
            f"{option}: {cpu!r} is a share of this machine's budget, which a Slurm job does not have; "
            "give a number of cores, e.g. --cpu 4"
        )
    mem = units.parse_mem(str(req.mem), "--mem") if req.mem is not None else config.default_mem
    sources["mem"] = "user" if req.mem is not None else ("default" if mem is not None else "slurm")
    if isinstance(mem, str):
        option = "--mem" if req.mem is not None else "[defaults] mem"
        raise SpecError(
            f"{option}: {mem!r} is a share of this machine's budget, which a Slurm job does not have; "
            "give a size, e.g. --mem 8GB"
        )
    if req.gpu is not None or req.vram is not None:
        pools["gpu"] = _gpus(config, req, warnings)
    for item in req.claims:
        name, _, rest = item.partition("=")
        count_text, _, size = rest.partition(":")
        if size:
            raise SpecError(
                f"--claim: {units.safe_text(item)!r} claims a size on a pool's devices, which Slurm "
                "licenses do not have; claim units, e.g. --claim net=1"
            )
        if not count_text.isdigit() or int(count_text) < 1 or not name:
            raise SpecError(f"--claim: {units.safe_text(item)!r} is not NAME=N; e.g. --claim net=1")
        pools[name] = {"count": int(count_text), "size": None}
    for name in req.locks:
        if name in pools:
            raise SpecError(f"--lock: {name!r} is claimed twice; give each pool or lock once")
        pools[name] = {"count": 1, "size": None}
    return {"cpu": cpu / 1000, "mem": mem or 0, "pools": pools}, sources, warnings


def _gpus(config: Config, req: object, warnings: list[str]) -> dict:
    """--gpu N: N whole GPUs; --vram SIZE: shards of one GPU where ``[backend] shard_size``
    says what a shard of the cluster stands for, else whole GPUs with a warning."""
    count = req.gpu if req.gpu is not None else 1
    if not isinstance(count, int) or count < 1:
        raise SpecError(f"--gpu: {count!r} is not a whole number of 1 or more")
    if req.vram is None:
        return {"count": count, "size": None}
    shown = units.safe_text(str(req.vram))
    if config.slurm_shard_size is None or req.vram == "guess":
        warnings.append(
            f"--vram {shown}: no [backend] shard_size says what a shard of the cluster is; the job "
            f"gets {count} whole GPU(s) (--gres=gpu:{count})"
        )
        return {"count": count, "size": None}
    if count != 1:
        raise SpecError(
            f"--gpu {count} with --vram {shown}: Slurm's shards are a share of one GPU; claim "
            "--vram alone (one GPU's share), or whole GPUs with --gpu alone"
        )
    size = units.parse_size(str(req.vram), "--vram")
    if size <= 0:
        raise SpecError(f"--vram: {shown} must be more than zero, e.g. --vram 10GB")
    return {"count": 1, "size": size}


def refuse(config: Config, req: object) -> None:
    """What has no faithful translation to Slurm is refused, by its option."""

    def no(option: str, why: str) -> None:
        raise SpecError(
            f"{option} has no faithful translation to Slurm ({why}); remove it, or submit with QEX_BACKEND=local"
        )

    retries = req.retries if req.retries is not None else config.default_retries
    if retries:
        no(
            "--retries" if req.retries is not None else "[defaults] retries",
            "a retry would be a new Slurm job qex is not there to submit",
        )
    if req.oom_retries:
        no("--oom-retries", "an out-of-memory end is final on Slurm: claim the memory the job needs with --mem")
    if req.stdin == "-":
        no(
            "--stdin -",
            "the job runs on a node that cannot read this terminal; give --stdin FILE on the shared file system",
        )
    queue_time = req.max_queue_time if req.max_queue_time is not None else config.default_max_queue_time
    if queue_time is not None and req.timeout is None and config.default_timeout is None:
        no(
            "--max-queue-time" if req.max_queue_time is not None else "[defaults] max_queue_time",
            "Slurm's --deadline counts to the job's end: it needs --timeout",
        )
    if req.dedupe_window is not None:
        no("--dedupe-window", "it asks the ended jobs' records on this machine's clock")


def sbatch_args(
    config: Config,
    rec: Status,
    deps: list[str],
    script_log: str | None,
    array: int | None = None,
    exported: str | None = None,
) -> list[str]:
    """The options of the sbatch call that submits ``rec`` (an array of ``array`` tasks:
    their records differ only in command and name). ``deps``: the Slurm dependency
    terms (``afterok:123``, ``afterany:124_3``). ``exported``: ``qex export slurm``'s
    (``--export`` of the job's --env-capture; Slurm cancels what can never start;
    Slurm's own output file), else qex's own submission (the step gives the job the
    environment qex captured; qex records a job that can never start skipped)."""
    out = [f"--job-name={rec.name if array is None else rec.group_name or rec.name}", f"--chdir={rec.cwd}"]
    if exported is None:
        out += [f"--output={script_log}", "--export=NONE", "--kill-on-invalid-dep=no"]
    else:
        out += [f"--export={exported}", "--kill-on-invalid-dep=yes"]
    claims = rec.claims
    out.append(f"--cpus-per-task={max(1, math.ceil(float(claims.cpu) - 1e-9))}")
    if claims.mem:
        out.append(f"--mem={max(1, math.ceil(int(claims.mem) / MiB))}M")
    licenses = []
    for name, claim in sorted(claims.pools.items()):
        if name == "gpu" and claim.size and config.slurm_shard_size:
            out.append(f"--gres=shard:{math.ceil(claim.size / config.slurm_shard_size)}")
        elif name == "gpu":
            out.append(f"--gres=gpu:{claim.count}")
        else:
            licenses.append(f"{name}:{claim.count}")
    if licenses:
        out.append("--licenses=" + ",".join(licenses))
    if rec.timeout:
        out.append(f"--time={max(1, math.ceil(rec.timeout / 60))}")
    if rec.max_queue_time is not None and rec.timeout:
        end = rec.submitted_at + rec.max_queue_time + rec.timeout
        out.append("--deadline=" + time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(math.ceil(end))))
    if rec.priority:
        out.append(f"--nice={-int(rec.priority)}")
    if deps:
        out.append("--dependency=" + ",".join(deps))
    comment = [] if exported is not None else [f"qex:{rec.id if array is None else rec.group or rec.id}"]
    if rec.tags:
        comment.append("tags:" + ",".join(rec.tags))
    if comment:
        out.append("--comment=" + " ".join(comment))
    if array is not None:
        out.append(f"--array=0-{array - 1}")
    for option, value in (
        ("--partition", config.slurm_partition),
        ("--account", config.slurm_account),
        ("--qos", config.slurm_qos),
    ):
        if value:
            out.append(f"{option}={value}")
    return out + list(config.slurm_sbatch_args)
