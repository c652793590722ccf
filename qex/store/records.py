"""The records qex writes: what a job is (status.json) and how to run it (spec.json).

The classes below (``Status``, ``Spec``, ``Attempt``...) are the one declaration
of a record's shape, as ``Plain`` records (``qex.base.plain``: nothing to
import, nothing generated): a field, its type, its default and, in the comment
on its line, its description. From them come ``status_defaults()`` (merged
under every record qex writes or prints), the types ``qex.store.check``
accepts (``field_types``) and ``qex schema status`` (``qex.cli.schema_records``).
A record read is an object (``load``; ``Store.read_status``); it is a dict only
at the edge of a file or of JSON (``asdict``). A record written by an older or
newer qex still loads (unknown keys are kept, missing ones defaulted). The
transaction of a lock hold (``qex.queue.txn``) gives and takes records too;
the store below it writes their JSON.
``FORMAT`` grows when a field changes meaning; a record from a newer format is
read but never rewritten in place by an older qex.
"""

from __future__ import annotations

from qex.base.plain import Factory, Plain, json_value
from qex.base.states import FINAL

FORMAT = 1


class PoolClaim(Plain, frozen=True):
    count: int = 1  # units of the pool claimed (devices for a GPU pool)
    size: int | None = None  # bytes of each device claimed (--vram, --claim NAME=N:SIZE); null: whole devices


class Claims(Plain, frozen=True):
    """What a job claims: cores (a float of cores, 3 decimals), bytes, pools."""

    cpu: float = 1.0  # cores claimed, a number (0.5 is half a core; 3 decimals)
    mem: int = 0  # bytes of memory claimed (an integer)
    pools: dict[str, PoolClaim] = Factory(dict)  # units claimed of each pool, by pool name (locks are pools
    # of one unit)

    @property
    def millicores(self) -> int:
        return round(self.cpu * 1000)


class Assigned(Plain, frozen=True):
    pool: str  # the pool the units were taken from
    devices: tuple[int, ...] = ()  # the indices of the pool's devices given to the job (empty for a pool without
    # devices)
    size: int | None = None  # bytes of each device given (a share of a GPU); null: whole devices


class Usage(Plain, frozen=True):
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


class LogsDropped(Plain, frozen=True):
    stdout_bytes: int = 0  # bytes of stdout the output limit ([logs] max_bytes) left out of the log file
    stdout_lines: int = 0  # lines of stdout left out of the log file
    stderr_bytes: int = 0  # bytes of stderr left out of the log file
    stderr_lines: int = 0  # lines of stderr left out of the log file
    incomplete: bool = False  # true when the counts are a lower bound (the supervisor was lost)


class Attempt(Plain, frozen=True):
    number: int  # the attempt's number, from 1
    state: str  # how this attempt ended (a final state; a retried one is failed or oom)
    claims: Claims = Factory(Claims)  # what this attempt claimed (an OOM retry doubles the memory)
    started_at: float | None = None  # when it started, seconds since the epoch
    ended_at: float | None = None  # when it ended, seconds since the epoch
    exit_code: int | None = None  # the command's exit code; null when a signal ended it
    signal: str | None = None  # the signal that ended it (SIGKILL, ...); null when it exited
    usage: Usage = Factory(Usage)  # what this attempt used
    oom_evidence: str | None = None  # why qex says oom: cgroup (the job's cgroup counted an OOM kill),
    # machine-counter (the machine's counter rose: circumstantial), null (no OOM
    # evidence)
    error: str | None = None  # what went wrong, in words; null when nothing did


class Status(Plain, frozen=True):
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
    claims: Claims = Factory(Claims)  # what it claims: cores (a number), bytes, pool units
    claim_source: dict[str, str] = Factory(dict)  # where each claim came from (option, job file, default...)
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
    usage: Usage = Factory(Usage)  # what the last attempt used
    error: str | None = None  # what went wrong, in words; null when nothing did
    blocked_reason: str | None = None  # why a queued job waits, in words (each pass refreshes it); null when not
    blocked_holder: str | None = None  # what kind of wait blocked_reason is (one word, stable; null: not waiting)
    blocked_since: float | None = None  # since when it waits for the same kind of thing (epoch seconds)
    passed_by: int = 0  # how many later jobs started before it while it waited
    dedupe_key: str | None = None  # its --dedupe-key; null when none
    needs: tuple[str, ...] = ()  # the ids of the jobs that must succeed before it starts (--needs)
    after: tuple[str, ...] = ()  # the ids of the jobs that must end (any result) before it starts (--after)
    skipped_root: str | None = None  # for a skipped job: the id of the job whose failure skipped it
    logs_dropped: LogsDropped = Factory(LogsDropped)  # what the output limit left out of its log files
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

    @property
    def final(self) -> bool:
        """Whether its state is final."""
        return self.state in FINAL


class Row(Plain, frozen=True):
    """A job as a row of ``qex list`` and ``qex top``: an ended job's history line
    (``qex.store.history.line_of`` writes it, ``read_row`` reads it), an active job's
    index entry (``qex.queue.look.row_of``), or the same fields of its record
    (``Row.of``). Its fields are ``Status``'s of the same names, so a reader of rows
    reads a ``Status`` the same way; a row keeps no other field of the record."""

    id: str
    state: str
    seq: int = 0
    name: str = ""
    owner: str = ""
    uid: int | None = None
    priority: int = 0
    submitted_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    claims: Claims = Factory(Claims)  # (a history line: the pools' counts and sizes, cores, memory)
    assigned: tuple[Assigned, ...] = ()
    usage: Usage | None = None  # its peak and CPU (max_rss, cpu_secs); null: a line of a qex before them
    exit_code: int | None = None
    signal: str | None = None
    supervisor_lost: bool = False
    error: str | None = None  # (a history line: its first ERROR_CHARS characters)
    blocked_reason: str | None = None
    vram_over: str | None = None
    tags: tuple[str, ...] = ()
    cwd: str | None = None
    group: str | None = None
    group_name: str | None = None
    pid: int | None = None
    mine: bool = True  # false: another member's job (a shared directory)
    st: list[int] | None = None  # a history line: the identity of its status.json then (``history.identity``)

    @classmethod
    def of(cls, rec: Status, **changes: object) -> Row:
        """The row of a record, with ``changes``."""
        made = {n: getattr(rec, n) for n in _ROW_OF_STATUS}
        made.update(changes)
        return cls(**made)


class Spec(Plain):
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
    request: dict = Factory(dict)

    def as_json(self) -> dict:
        """spec.json's content (``Store.create_job_dir`` writes it)."""
        return self.asdict()


def field_types(cls: type) -> dict[str, tuple[type, ...]]:
    """The JSON types each field of ``cls`` accepts, from its annotation: a nested
    record or a dict is an object, a tuple or a list an array, a float any number;
    ``| None`` adds null (``qex.store.check`` refuses a bool where a number is meant)."""
    kinds = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "None": (type(None),)}
    out = {}
    for name in cls.field_names():
        accepted: tuple = ()
        for part in cls.__annotations__[name].split(" | "):
            base = part.partition("[")[0].strip()
            if base in kinds:
                accepted += kinds[base]
            elif base in ("tuple", "list"):
                accepted += (list,)
            else:  # dict, or a nested record
                accepted += (dict,)
        out[name] = accepted
    return out


def required(cls: type) -> tuple[str, ...]:
    """The fields of ``cls`` without a default: a record lacks none of them (``qex.store.check``
    refuses one that does, before ``load`` makes it)."""
    return tuple(n for n in cls.field_names() if n not in cls._defaults)


def load(cls: type, data: dict) -> Plain:
    """A record of ``cls`` from a dict qex wrote (any format version; ``qex.store.check``
    has checked its types), cheaply: the dict's items become the record's attributes
    (one copy), nested records are made from their dicts, arrays of a tuple field
    become tuples, missing fields get their defaults. Keys it does not know (a newer
    qex's fields) are kept, not fields: ``asdict`` gives them back as they were (a
    writer drops them first: ``qex.queue.txn``)."""
    nested, static, factories = _plan(cls)
    values = {**static, **data}
    for name, make in factories:
        if name not in values:
            values[name] = make()
    for name, convert in nested:
        value = values[name]
        if value is not None:
            values[name] = convert(value)
    rec = object.__new__(cls)
    object.__setattr__(rec, "__dict__", values)
    return rec


def changed(rec: Plain, **fields: object) -> Plain:
    """``rec.evolve(**fields)``, where a field that holds records or a tuple may be
    given as what its JSON holds (a dict, a list): made into its records as ``load``
    makes them."""
    nested = _plan(type(rec))[0]
    for name, convert in nested:
        value = fields.get(name)
        if value is not None:
            fields[name] = convert(value)
    return rec.evolve(**fields)


_PLANS: dict = {}


def _plan(cls: type) -> tuple:
    """How ``load`` makes a ``cls``, worked out once: (field, converter) for each field
    that holds records or a tuple, the static defaults, and (field, factory) for the others."""
    plan = _PLANS.get(cls)
    if plan is None:
        nested = []
        for name in cls.field_names():
            convert = _converter(cls.__annotations__[name])
            if convert is not None:
                nested.append((name, convert))
        static = {n: v for n, v in cls._defaults.items() if not isinstance(v, Factory)}
        factories = [(n, v.make) for n, v in cls._defaults.items() if isinstance(v, Factory)]
        plan = _PLANS[cls] = (tuple(nested), static, tuple(factories))
    return plan


def _converter(annotation: str):
    """What turns a JSON value of a field with ``annotation`` into the field's value; None: as it is."""
    kind, _, inner = annotation.split(" | ")[0].partition("[")
    record = _RECORDS.get(kind)
    if record is not None:
        return lambda value: load(record, value) if type(value) is dict else value
    if kind == "tuple":
        item = _RECORDS.get(inner.split(",")[0])
        if item is None:
            return lambda value: tuple(value) if type(value) is list else value
        return lambda value: (
            tuple(load(item, v) if type(v) is dict else v for v in value) if type(value) is list else value
        )
    if kind == "dict":
        item = _RECORDS.get(inner.rstrip("]").split(", ", 1)[-1])
        if item is not None:
            return lambda value: {k: load(item, v) for k, v in value.items()} if type(value) is dict else value
    return None


_DEFAULTS: list = []  # the defaults of Status as JSON values, made once


def status_defaults() -> dict:
    """Every optional field of a status record with its default, as JSON values (a
    fresh copy each call: callers may change it). Merged under every record qex
    writes or prints, so a reader always finds every field the contract names, even
    in a record an older qex wrote."""
    if not _DEFAULTS:
        made = {}
        for name, value in Status._defaults.items():
            made[name] = json_value(value.make() if isinstance(value, Factory) else value)
        _DEFAULTS.append(made)
    return {k: _copy(v) for k, v in _DEFAULTS[0].items()}


def _copy(value: object) -> object:
    if type(value) is dict:
        return {k: _copy(v) for k, v in value.items()}
    if type(value) is list:
        return [_copy(v) for v in value]
    return value


_RECORDS = {cls.__name__: cls for cls in (PoolClaim, Claims, Assigned, Usage, LogsDropped, Attempt, Status, Row, Spec)}
_ROW_OF_STATUS = tuple(n for n in Row.field_names() if n in Status.field_names())  # (Row.of)
