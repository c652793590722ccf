"""Job files (TOML, YAML or JSON by extension), read strictly: an unknown key is an error."""

import os

from attrs import field, frozen

from qex.base.errors import SpecError

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.jobs.request import Request


@frozen
class Resources:
    cpu: str | int | float | None = None  # cores: a number, or guess|half|full|max (as --cpu)
    mem: str | int | None = None  # memory: a size (512MB, 2GB) or bytes, or guess|half|full|max (as --mem)
    gpu: int | None = None  # whole GPU devices of the pool gpu (as --gpu)
    vram: str | int | None = None  # memory on each GPU device (as --vram)
    claims: dict[str, int | str | dict] = field(factory=dict)  # units of pools, by pool name: N, "N:SIZE" or {count,
    # size} (as --claim)
    locks: list[str] = field(factory=list)  # locks to hold (as --lock)


@frozen
class JobFile:
    command: list[str] | str  # the command: a list of words, or one string run by sh -c
    name: str | None = None  # a name: letters, digits, - _ . (at most 128)
    cwd: str | None = None  # the directory to run in (default: where qex submit runs)
    env: dict[str, str] = field(factory=dict)  # variables to set for the job (as --env)
    env_capture: str | None = None  # which of the submitter's environment the job gets: all, minimal or none
    tags: list[str] = field(factory=list)  # tags (as --tag)
    priority: int | None = None  # higher starts first (as --priority)
    timeout: str | int | float | None = None  # stop the job after this long: 90s, 30m, 4h or seconds (as --timeout)
    retries: int | None = None  # retry a failed attempt N times (as --retries)
    oom_retries: int | None = None  # retry an out-of-memory attempt with twice the memory N times (as --oom-retries)
    max_queue_time: str | int | float | None = None  # give up if not started after this long (as --max-queue-time)
    needs: list[str] = field(factory=list)  # ids or names of jobs that must succeed first (as --needs)
    after: list[str] = field(factory=list)  # ids or names of jobs that must end first, whatever their result (as
    # --after)
    dedupe_key: str | None = None  # while a job of yours with this key is active, give its id instead (as
    # --dedupe-key)
    nice: int | None = None  # niceness of the job, absolute (as --nice)
    io_class: str | None = None  # I/O class of the job: best-effort, idle or none (as --io-class)
    oom_score_adj: int | None = None  # oom_score_adj of the job, -1000 to 1000 (as --oom-score-adj)
    resources: Resources = field(factory=Resources)  # what the job claims


def read_document(path: str, what: str = "job file") -> dict:
    """Parse a TOML, YAML or JSON file into a dict; every failure names the file."""
    from qex.store import fs

    ext = os.path.splitext(path)[1].lower()
    if ext not in (".toml", ".yaml", ".yml", ".json"):
        raise SpecError(f"{what} {path}: unknown extension {ext or '(none)'!r}; use .toml, .yaml, .yml or .json")
    try:
        raw = fs.read_bytes(path, 16 << 20)
    except FileNotFoundError:
        raise SpecError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise SpecError(f"{what} {path} cannot be read: {exc.strerror or exc}; it must be a regular file") from None
    if len(raw) > 16 << 20:
        raise SpecError(f"{what} {path} is larger than 16MB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{what} {path} is not UTF-8 (byte {exc.start})") from None
    try:
        if ext == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif ext == ".json":
            import json

            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # each parser has its own error class; all mean "not valid"
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecError(f"{what} {path} is not valid {ext[1:].upper()}: {first}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{what} {path} must hold a table (a mapping) at the top")
    return data


def load(path: str) -> JobFile:
    return structure(read_document(path), path)


def structure(data: dict, where: str) -> JobFile:
    from qex.store import codec

    try:
        job = codec.strict().structure(data, JobFile)
    except Exception as exc:
        raise SpecError(f"{where}: {codec.describe(exc, os.path.basename(where))}") from None
    return job


def apply_to(req: "Request", job: JobFile, path: str) -> None:
    """What a job file (or a pipeline stage, qex.jobs.pipeline) says, put into ``req``."""
    command = job.command
    if isinstance(command, str):
        import shlex

        try:
            command = shlex.split(command)
        except ValueError as exc:
            raise SpecError(f"{path}: the command {command!r} cannot be split ({exc}); give a list") from None
    req.command = list(command)
    r = job.resources
    req.cpu = None if r.cpu is None else str(r.cpu)
    req.mem = None if r.mem is None else str(r.mem)
    req.gpu = r.gpu
    req.vram = None if r.vram is None else str(r.vram)
    for name, value in r.claims.items():
        req.claims.append(_claim_text(name, value, path))
    req.locks += list(r.locks)
    req.name, req.cwd, req.nice = job.name, job.cwd, job.nice
    req.io_class, req.oom_score_adj = job.io_class, job.oom_score_adj
    req.job_env = {str(k): str(v) for k, v in job.env.items()}
    req.env_capture = job.env_capture or req.env_capture
    req.tags, req.priority = list(job.tags), job.priority or 0
    req.timeout = None if job.timeout is None else str(job.timeout)
    req.max_queue_time = None if job.max_queue_time is None else str(job.max_queue_time)
    req.retries, req.oom_retries = job.retries, job.oom_retries
    req.needs, req.after = list(job.needs), list(job.after)
    req.dedupe_key = job.dedupe_key


def _claim_text(name: str, value, path: str) -> str:
    if isinstance(value, bool):
        raise SpecError(f'{path}: [resources.claims] {name} must be a count or {{ count = N, size = "8GB" }}')
    if isinstance(value, int):
        return f"{name}={value}"
    if isinstance(value, dict) and set(value) <= {"count", "size"} and "count" in value:
        size = value.get("size")
        return f"{name}={value['count']}" + (f":{size}" if size is not None else "")
    raise SpecError(f'{path}: [resources.claims] {name} = {value!r} is not a count or {{ count = N, size = "8GB" }}')
