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
``NewSpec``, which tests/store/test_records_plain.py checks against the classes.
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
    Status.final = property(lambda self: self.state in FINAL, doc="whether its state is final")
    Spec = _spec_class(define, field)
    for cls in (PoolClaim, Claims, Assigned, Usage, LogsDropped, Attempt, Status, Spec):
        cls.__qualname__ = cls.__name__  # records.Status, as if declared at the top
        globals()[cls.__name__] = cls


def _claim_classes(frozen, field) -> tuple:
    """What a job claims, and what it was given (``_declare``)."""

    @frozen
    class PoolClaim:
        count: int = 1  # units of the pool claimed (devices for a GPU pool)
        size: int | None = None  # bytes of each device claimed (--vram, --claim NAME=N:SIZE); null: whole devices

    @frozen
    class Claims:
        """What a job claims: cores (a float of cores, 3 decimals), bytes, pools."""

        cpu: float = 1.0  # cores claimed, a number (0.5 is half a core; 3 decimals)
        mem: int = 0  # bytes of memory claimed (an integer)
        pools: dict[str, PoolClaim] = field(factory=dict)  # units claimed of each pool, by pool name (locks are pools
        # of one unit)

        @property
        def millicores(self) -> int:
            return round(self.cpu * 1000)

    @frozen
    class Assigned:
        pool: str  # the pool the units were taken from
        devices: tuple[int, ...] = ()  # the indices of the pool's devices given to the job (empty for a pool without
        # devices)
        size: int | None = None  # bytes of each device given (a share of a GPU); null: whole devices

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

        max_rss: int | None = None  # peak memory in bytes (see peak_from); null: not measured
        cpu_secs: float | None = None  # CPU seconds used (user + system) of the job's processes; null: not measured
        peak_from: str | None = None  # where max_rss comes from: cgroup (the whole process tree), proc-sample (the
        # whole tree's Pss sampled from /proc every sample_period seconds, without a
        # cgroup), rusage (the largest waited-for process), null (not measured)
        sample_period: float | None = None  # seconds between the /proc samples of a proc-sample peak; null: other
        oom_kills: int | None = None  # OOM kills the kernel counted in the job's cgroup; null: the job had no cgroup
        vram_peak: int | None = None  # the most VRAM its processes held on one GPU, in bytes; null: not measured
        vram_peak_by_device: dict[str, int] | None = None  # that peak per device: qex's number of a device of the
        # pool gpu ("0"), or a GPU's UUID; null: not measured

    @frozen
    class LogsDropped:
        stdout_bytes: int = 0  # bytes of stdout the output limit ([logs] max_bytes) left out of the log file
        stdout_lines: int = 0  # lines of stdout left out of the log file
        stderr_bytes: int = 0  # bytes of stderr left out of the log file
        stderr_lines: int = 0  # lines of stderr left out of the log file
        incomplete: bool = False  # true when the counts are a lower bound (the supervisor was lost)

    @frozen
    class Attempt:
        number: int  # the attempt's number, from 1
        state: str  # how this attempt ended (a final state; a retried one is failed or oom)
        claims: Claims = field(factory=Claims)  # what this attempt claimed (an OOM retry doubles the memory)
        started_at: float | None = None  # when it started, seconds since the epoch
        ended_at: float | None = None  # when it ended, seconds since the epoch
        exit_code: int | None = None  # the command's exit code; null when a signal ended it
        signal: str | None = None  # the signal that ended it (SIGKILL, ...); null when it exited
        usage: Usage = field(factory=Usage)  # what this attempt used
        oom_evidence: str | None = None  # why qex says oom: cgroup (the job's cgroup counted an OOM kill),
        # machine-counter (the machine's counter rose: circumstantial), null (no OOM
        # evidence)
        error: str | None = None  # what went wrong, in words; null when nothing did

    return Usage, LogsDropped, Attempt


def _status_class(frozen, field, Claims, Assigned, Usage, LogsDropped, Attempt) -> type:  # (_declare)
    @frozen
    class Status:
        """status.json: the public record of one job. Only qex writes it."""

        id: str  # the job's id (a UUID); a unique prefix of at least 4 characters names it too
        seq: int  # its place in submission order in this state directory
        state: str  # the job's state (qex help states)
        command: tuple[str, ...]  # the command and its arguments, as given
        cwd: str  # the directory it runs in
        owner: str  # the user who submitted it
        uid: int  # that user's uid
        format: int = FORMAT  # the record's format; grows when a field changes meaning
        name: str = ""  # its name (--name, a stage's, or derived from the program); names it on the command line
        group: str | None = None  # the id of its group (a pipeline or an --each-line fan-out); null when none
        group_name: str | None = None  # the name of its group; null when none
        tags: tuple[str, ...] = ()  # its tags (--tag)
        priority: int = 0  # higher starts first among this user's jobs
        claims: Claims = field(factory=Claims)  # what it claims: cores (a number), bytes, pool units
        claim_source: dict[str, str] = field(factory=dict)  # where each claim came from (option, job file, default...)
        assigned: tuple[Assigned, ...] = ()  # the pool units it was given when it started
        forced: bool = False  # started above the budget, as nothing else ran (a job larger than the budget)
        submitted_at: float = 0.0  # when it was submitted, seconds since the epoch
        started_at: float | None = None  # when its current or last attempt started (epoch seconds); null before
        ended_at: float | None = None  # when it ended, seconds since the epoch; null while active
        pid: int | None = None  # the pid of the job's command while it runs
        supervisor_pid: int | None = None  # the pid of its supervisor (qex: supervisor of ID)
        exit_code: int | None = None  # the command's exit code; null when a signal ended it or it never ran
        signal: str | None = None  # the signal that ended it (SIGKILL, ...); null when it exited
        attempt: int = 1  # the number of the current (or last) attempt, from 1
        attempts: tuple[Attempt, ...] = ()  # every attempt that ended, oldest first
        usage: Usage = field(factory=Usage)  # what the last attempt used
        error: str | None = None  # what went wrong, in words; null when nothing did
        blocked_reason: str | None = None  # why a queued job waits, in words (each pass refreshes it); null when not
        blocked_holder: str | None = None  # what kind of wait blocked_reason is (one word, stable; null: not waiting)
        blocked_since: float | None = None  # since when it waits for the same kind of thing (epoch seconds)
        passed_by: int = 0  # how many later jobs started before it while it waited
        dedupe_key: str | None = None  # its --dedupe-key; null when none
        needs: tuple[str, ...] = ()  # the ids of the jobs that must succeed before it starts (--needs)
        after: tuple[str, ...] = ()  # the ids of the jobs that must end (any result) before it starts (--after)
        skipped_root: str | None = None  # for a skipped job: the id of the job whose failure skipped it
        logs_dropped: LogsDropped = field(factory=LogsDropped)  # what the output limit left out of its log files
        timeout: float | None = None  # seconds it may run before it is stopped (--timeout); null: no limit
        retries: int = 0  # how many times a failed attempt is retried (--retries)
        oom_retries: int = 1  # retries of an out-of-memory attempt with twice the memory (--oom-retries)
        max_queue_time: float | None = None  # seconds it may wait before it expires (--max-queue-time); null: none
        queue_pause_secs: float = 0.0  # seconds the queue was paused while it waited (not counted in max_queue_time)
        queue_pauses: tuple[str, ...] = ()  # ids of the queue pauses counted in queue_pause_secs
        kill_requested: bool = False  # true once qex kill (or a signal to qex run) asked it to stop
        supervisor_lost: bool = False  # true when its supervisor died and a pass ended it (failed)
        oom_evidence: str | None = None  # why qex says oom (see an attempt's oom_evidence); null: no OOM evidence
        template: tuple[str, ...] | None = None  # a fan-out job: its command with {} (the learner's key)
        rerun_of: str | None = None  # qex rerun: the id of the job this one repeats; null otherwise
        peer_lock: str | None = None  # its liveness file in the peer directory (several users); null when none
        vram_over: str | None = None  # its VRAM above what it was given on a device, in words; null: not above
        slurm_job_id: str | None = None  # the Slurm backend: its job id ("123", an array task "123_4"); null: local
        nice: int | None = None  # the niceness it runs at ([politeness] nice, --nice); null: an older qex's
        io_class: str | None = None  # its I/O class: best-effort (level 7), idle, none (inherited); null: as nice
        oom_score_adj: int | None = None  # its oom_score_adj ([politeness], --oom-score-adj); null: inherited

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
        io_class: str | None = None
        oom_score_adj: int | None = None
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
        "format": FORMAT,
        "name": "",
        "group": None,
        "group_name": None,
        "tags": [],
        "priority": 0,
        "claims": {"cpu": 1.0, "mem": 0, "pools": {}},
        "claim_source": {},
        "assigned": [],
        "forced": False,
        "submitted_at": 0.0,
        "started_at": None,
        "ended_at": None,
        "pid": None,
        "supervisor_pid": None,
        "exit_code": None,
        "signal": None,
        "attempt": 1,
        "attempts": [],
        "usage": {
            "max_rss": None,
            "cpu_secs": None,
            "peak_from": None,
            "sample_period": None,
            "oom_kills": None,
            "vram_peak": None,
            "vram_peak_by_device": None,
        },
        "error": None,
        "blocked_reason": None,
        "blocked_holder": None,
        "blocked_since": None,
        "passed_by": 0,
        "dedupe_key": None,
        "needs": [],
        "after": [],
        "skipped_root": None,
        "logs_dropped": {
            "stdout_bytes": 0,
            "stdout_lines": 0,
            "stderr_bytes": 0,
            "stderr_lines": 0,
            "incomplete": False,
        },
        "timeout": None,
        "retries": 0,
        "oom_retries": 1,
        "max_queue_time": None,
        "queue_pause_secs": 0.0,
        "queue_pauses": [],
        "kill_requested": False,
        "supervisor_lost": False,
        "oom_evidence": None,
        "template": None,
        "rerun_of": None,
        "peer_lock": None,
        "vram_over": None,
        "slurm_job_id": None,
        "nice": None,
        "io_class": None,
        "oom_score_adj": None,
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
    io_class: str | None = None
    oom_score_adj: int | None = None
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
