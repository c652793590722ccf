"""The records qex writes: what a job is (status.json) and how to run it (spec.json).

The attrs classes below (``Status``, ``Spec``, ``Attempt``...) are the one
declaration of a record's shape: records are read through the tolerant
converter in ``qex.store.codec`` (unknown keys ignored, missing ones
defaulted), so that a record written by an older or newer qex still loads, and
``qex schema status`` is derived from them. ``FORMAT`` grows when a field
changes meaning; a record from a newer format is read but never rewritten in
place by an older qex.

The classes are declared on first use (``from qex.store.records import
Status`` declares them): importing attrs and building them costs ~20 ms, and
the submit path needs only the plain forms below, ``status_defaults()`` and
``NewSpec``, which tests/test_records_plain.py checks against the classes.
"""

from qex.base.plain import Factory, Plain
from qex.base.states import FINAL

FORMAT = 1


_CLASSES = ("PoolClaim", "Claims", "Assigned", "Usage", "LogsDropped", "Attempt", "Status", "Spec")


def __getattr__(name: str):
    if name in _CLASSES:
        _declare()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _declare() -> None:
    """Declare the record classes (once) as attributes of this module."""
    from attrs import define, field, frozen

    PoolClaim, Claims, Assigned = _claim_classes(frozen, field)
    Usage, LogsDropped, Attempt = _attempt_classes(frozen, field, Claims)
    Status = _status_class(frozen, field, Claims, Assigned, Usage, LogsDropped, Attempt)
    Spec = _spec_class(define, field)
    for cls in (PoolClaim, Claims, Assigned, Usage, LogsDropped, Attempt, Status, Spec):
        cls.__qualname__ = cls.__name__  # records.Status, as if declared at the top
        globals()[cls.__name__] = cls


def _claim_classes(frozen, field) -> tuple:
    """What a job claims, and what it was given (``_declare``)."""
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

    return PoolClaim, Claims, Assigned


def _attempt_classes(frozen, field, Claims) -> tuple:
    """What an attempt used and was (``_declare``)."""
    @frozen
    class Usage:
        """What an attempt used. ``max_rss``: the peak in bytes, of the job's whole
        process tree from its memory cgroup (``peak_from`` "cgroup"), else of its
        largest waited-for process from getrusage ("rusage"). ``oom_kills``: OOM
        kills the kernel counted in the job's cgroup (None without a cgroup).
        ``vram_peak``: the most VRAM its processes held on one GPU, in bytes, and
        ``vram_peak_by_device`` that peak per device (qex's number of a device of the
        pool gpu, or a GPU's UUID), sampled by its supervisor where the driver
        answers (None: not measured)."""

        max_rss: int | None = None
        cpu_secs: float | None = None
        peak_from: str | None = None
        oom_kills: int | None = None
        vram_peak: int | None = None
        vram_peak_by_device: dict[str, int] | None = None

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

    return Usage, LogsDropped, Attempt


def _status_class(frozen, field, Claims, Assigned, Usage, LogsDropped, Attempt) -> type:  # (_declare)
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
        peer_lock: str | None = None    # this job's liveness file in the peer directory (qex.users.peer_dir)
        vram_over: str | None = None    # its VRAM above what it was given, in words (qex.supervisor.vram)

        @property
        def final(self) -> bool:
            return self.state in FINAL
    return Status


def _spec_class(define, field) -> type:
    """spec.json's class (``_declare``)."""
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

    return Spec


# ---- the plain forms of the submit path ------------------------------------------

def status_defaults() -> dict:
    """Every optional field of a status record with its default, as JSON values
    (``Status`` declares them; a test checks that this is what it declares).

    Merged under every record qex writes or prints, so a reader always finds
    every field the contract names, even in a record an older qex wrote.
    """
    return {
        "format": FORMAT, "name": "", "group": None, "group_name": None, "tags": [], "priority": 0,
        "claims": {"cpu": 1.0, "mem": 0, "pools": {}}, "claim_source": {}, "assigned": [], "forced": False,
        "submitted_at": 0.0, "started_at": None, "ended_at": None, "pid": None, "supervisor_pid": None,
        "exit_code": None, "signal": None, "attempt": 1, "attempts": [],
        "usage": {"max_rss": None, "cpu_secs": None, "peak_from": None, "oom_kills": None, "vram_peak": None,
                  "vram_peak_by_device": None},
        "error": None, "blocked_reason": None, "blocked_holder": None, "blocked_since": None,
        "passed_by": 0, "dedupe_key": None, "needs": [], "after": [], "skipped_root": None,
        "logs_dropped": {"stdout_bytes": 0, "stdout_lines": 0, "stderr_bytes": 0, "stderr_lines": 0,
                         "incomplete": False},
        "timeout": None, "retries": 0, "oom_retries": 1, "max_queue_time": None, "queue_pause_secs": 0.0,
        "queue_pauses": [], "kill_requested": False, "supervisor_lost": False, "oom_evidence": None,
        "template": None, "rerun_of": None, "peer_lock": None, "vram_over": None,
    }


class NewSpec(Plain):
    """The spec of a job being submitted: ``Spec``'s fields, as a plain record
    (``qex.jobs.submit`` makes one per job without attrs). ``as_json()`` is what
    ``Store.create_job_dir`` writes to spec.json; a test checks that it equals
    ``attrs.asdict`` of the same ``Spec``."""

    id: str
    command: tuple
    cwd: str
    env: dict
    format: int = FORMAT
    nice: int | None = None
    hints: bool = False
    request: dict = Factory(dict)

    def as_json(self) -> dict:
        return self.asdict()


def spec_json(spec: object) -> dict:
    """spec.json's content for a ``NewSpec`` (or a ``Spec`` read back)."""
    if isinstance(spec, NewSpec):
        return spec.as_json()
    import attrs

    return attrs.asdict(spec)
