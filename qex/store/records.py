"""The records qex writes: what a job is (status.json) and how to run it (spec.json).

Records are attrs classes read through the tolerant converter in
``qex.store.codec`` (unknown keys ignored, missing ones defaulted), so that a
record written by an older or newer qex still loads. ``FORMAT`` grows when a
field changes meaning; a record from a newer format is read but never
rewritten in place by an older qex.
"""

from attrs import define, field, frozen

FORMAT = 1

ACTIVE = ("queued", "starting", "running")
HOLDING = ("starting", "running")
FINAL_RAN = ("completed", "failed", "killed", "timeout", "oom")
FINAL_NOT_RAN = ("expired", "cancelled", "skipped")
FINAL = FINAL_RAN + FINAL_NOT_RAN
STATES = ACTIVE + FINAL


@frozen
class PoolClaim:
    count: int = 1
    size: int | None = None


@frozen
class Claims:
    """What a job claims: cores (a float of cores, 3 decimals), bytes, pools."""

    cpu: float = 1.0
    mem: int = 0
    pools: dict[str, PoolClaim] = field(factory=dict)

    @property
    def millicores(self) -> int:
        return round(self.cpu * 1000)


@frozen
class Assigned:
    pool: str
    devices: tuple[int, ...] = ()
    size: int | None = None


@frozen
class Usage:
    """What an attempt used. ``max_rss``: the peak in bytes, of the job's whole
    process tree from its memory cgroup (``peak_from`` "cgroup"), else of its
    largest waited-for process from getrusage ("rusage"). ``oom_kills``: OOM
    kills the kernel counted in the job's cgroup (None without a cgroup)."""

    max_rss: int | None = None
    cpu_secs: float | None = None
    peak_from: str | None = None
    oom_kills: int | None = None


@frozen
class LogsDropped:
    stdout_bytes: int = 0
    stdout_lines: int = 0
    stderr_bytes: int = 0
    stderr_lines: int = 0
    incomplete: bool = False


@frozen
class Attempt:
    number: int
    state: str
    claims: Claims = field(factory=Claims)
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    signal: str | None = None
    usage: Usage = field(factory=Usage)
    oom_evidence: str | None = None
    error: str | None = None


@frozen
class Status:
    """status.json: the public record of one job. Only qex writes it."""

    id: str
    seq: int
    state: str
    command: tuple[str, ...]
    cwd: str
    owner: str
    uid: int
    format: int = FORMAT
    name: str = ""
    group: str | None = None
    group_name: str | None = None
    tags: tuple[str, ...] = ()
    priority: int = 0
    claims: Claims = field(factory=Claims)
    claim_source: dict[str, str] = field(factory=dict)
    assigned: tuple[Assigned, ...] = ()
    forced: bool = False
    submitted_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    pid: int | None = None
    supervisor_pid: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    attempt: int = 1
    attempts: tuple[Attempt, ...] = ()
    usage: Usage = field(factory=Usage)
    error: str | None = None
    blocked_reason: str | None = None
    blocked_holder: str | None = None
    blocked_since: float | None = None
    passed_by: int = 0
    dedupe_key: str | None = None
    needs: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    skipped_root: str | None = None
    logs_dropped: LogsDropped = field(factory=LogsDropped)
    timeout: float | None = None
    retries: int = 0
    oom_retries: int = 1
    max_queue_time: float | None = None
    queue_pause_secs: float = 0.0
    queue_pauses: tuple[str, ...] = ()      # ids of the queue pauses counted in queue_pause_secs
    kill_requested: bool = False
    supervisor_lost: bool = False
    oom_evidence: str | None = None
    template: tuple[str, ...] | None = None   # a fan-out job: its command with {} (the learner's key)
    rerun_of: str | None = None               # qex rerun: the job this one repeats
    peer_lock: str | None = None    # this job's liveness file in the peer directory (qex.peers)

    @property
    def final(self) -> bool:
        return self.state in FINAL


@define
class Spec:
    """spec.json: how to run the job (mode 0600: it holds the environment)."""

    id: str
    command: tuple[str, ...]
    cwd: str
    env: dict[str, str]
    format: int = FORMAT
    nice: int | None = None
    hints: bool = False
    request: dict = field(factory=dict)


_DEFAULTS: dict | None = None


def status_defaults() -> dict:
    """Every optional field of a status record with its default, as JSON values.

    Merged under every record qex writes or prints, so a reader always finds
    every field the contract names, even in a record an older qex wrote.
    """
    global _DEFAULTS
    if _DEFAULTS is None:
        import attrs

        out = {}
        for f in attrs.fields(Status):
            if f.default is attrs.NOTHING:
                continue
            value = f.default.factory() if isinstance(f.default, attrs.Factory) else f.default
            out[f.name] = attrs.asdict(value) if attrs.has(type(value)) else (list(value) if isinstance(value, tuple) else value)
        _DEFAULTS = out
    return dict(_DEFAULTS)
