"""Is a record or an index that qex reads back whole? Cheap structural checks.

A status.json, an index entry or a journal line can be damaged by a disk, a
person or a bug: a field of the wrong type would otherwise surface as a
traceback far from the file. These checks run on every read (pure Python, a
few microseconds); a failure names the first bad field, and the caller turns
it into a clear message (BrokenRecord) or leaves the entry out (the index).

Every number is held to its bound by the one number check, ``qex.base.numbers``:
the tables ``*_NUMBERS`` below say which bound each field has.

Fields this qex does not know are ignored (a newer qex may add them), and
missing fields are left to the readers' defaults.
"""

from qex.base import numbers as N
from qex.base.states import ACTIVE, STATES
from qex.store.records import Attempt, Row, Spec, Status, field_types, required

NUM = (int, float)
_OPT_NUM = (int, float, type(None))
_OPT_STR = (str, type(None))
_OPT_INT = (int, type(None))

# status.json's, an attempt's and spec.json's fields -> the types each accepts: from the classes
# that declare them (qex.store.records.field_types), never typed again. (An attempt's claims and
# usage may be null: tolerated, as qex always did.)
STATUS_FIELDS = field_types(Status)
ATTEMPT_FIELDS = {**field_types(Attempt), "claims": (dict, type(None)), "usage": (dict, type(None))}
SPEC_FIELDS = field_types(Spec)
# The fields a record (and each of its attempts) cannot be without: a reader needs each.
STATUS_REQUIRED, ATTEMPT_REQUIRED = required(Status), required(Attempt)
ENTRY_FIELDS = {
    "seq": int,
    "state": str,
    "owner": str,
    "uid": int,
    "name": str,
    "priority": int,
    "cpu": int,
    "mem": int,
    "pools": dict,
    "assigned": list,
    "needs": list,
    "after": list,
    "deadline": _OPT_NUM,
    "passed_by": int,
    "reason": _OPT_STR,
    "holder": _OPT_STR,
    "submitted_at": NUM,
}

# The bound of each number (``qex.base.numbers``): field -> (least, most). A field whose value
# is None (where its type allows None) or that is missing is not a number to check.
_PRIORITY = (-N.PRIORITY, N.PRIORITY)
_PID = (1, N.PID)
STATUS_NUMBERS = {
    "seq": (0, N.SEQ),
    "uid": (0, N.UID),
    "format": (0, N.COUNT),
    "priority": _PRIORITY,
    "submitted_at": (0, N.TIME),
    "started_at": (0, N.TIME),
    "ended_at": (0, N.TIME),
    "blocked_since": (0, N.TIME),
    "pid": _PID,
    "supervisor_pid": _PID,
    "exit_code": (0, N.EXIT),
    "attempt": (0, N.SEQ),
    "passed_by": (0, N.SEQ),
    "timeout": (0, N.DURATION),
    "retries": (0, N.COUNT),
    "oom_retries": (0, N.COUNT),
    "max_queue_time": (0, N.DURATION),
    "queue_pause_secs": (0, N.DURATION),
    "nice": (-20, 19),
    "oom_score_adj": (-1000, 1000),
}
ATTEMPT_NUMBERS = {"number": (0, N.SEQ), "started_at": (0, N.TIME), "ended_at": (0, N.TIME), "exit_code": (0, N.EXIT)}
USAGE_NUMBERS = {
    "max_rss": (0, N.BYTES),
    "cpu_secs": (0, N.DURATION),
    "oom_kills": (0, N.SEQ),
    "sample_period": (0, N.DURATION),
    "vram_peak": (0, N.BYTES),
}
BY_DEVICE = "vram_peak_by_device"  # the one nested field of a usage: {device: bytes}
DROPPED_NUMBERS = {
    "stdout_bytes": (0, N.BYTES),
    "stdout_lines": (0, N.BYTES),
    "stderr_bytes": (0, N.BYTES),
    "stderr_lines": (0, N.BYTES),
}
# An entry's uid is -1 for a record that names none (``index.entry_of``); its cores are millicores.
ENTRY_NUMBERS = {
    "seq": (0, N.SEQ),
    "uid": (-1, N.UID),
    "priority": _PRIORITY,
    "cpu": (0, N.MILLICORES),
    "mem": (0, N.BYTES),
    "deadline": (0, N.DEADLINE),
    "passed_by": (0, N.SEQ),
    "submitted_at": (0, N.TIME),
    "attempt": (0, N.SEQ),
    "pid": _PID,
    "supervisor_pid": _PID,
}
INDEX_NUMBERS = {
    "format": (0, N.COUNT),
    "seq": (0, N.SEQ),
    "offset": (0, N.SEQ),
    "next_job": (0, N.SEQ),
    "synced": (0, N.SEQ),
    "journal_ino": (0, N.INODE),
    "saved_at": (0, N.TIME),
}


class Damaged(ValueError):
    """What is wrong, in a few words: 'the field seq is a str'."""


def _kind(value) -> str:
    return "null" if value is None else type(value).__name__


def _fields(data: dict, table: dict, where: str) -> None:
    for key, types in table.items():
        if key in data:
            value = data[key]
            bad_bool = isinstance(value, bool) and not (types is bool or (isinstance(types, tuple) and bool in types))
            if not isinstance(value, types) or bad_bool:
                raise Damaged(f"{where}{key} is {_kind(value)}")


def _numbers(data: dict, table: dict, where: str) -> None:
    """Each number of ``data`` that ``table`` bounds is within its bounds (``qex.base.numbers``)."""
    for key, (least, most) in table.items():
        value = data.get(key)
        if value is not None:
            _number(value, most, least, f"{where}{key}")


def _number(value, most, least, what: str, whole: bool = False) -> None:
    try:
        N.number(value, most, least, whole)
    except N.BadNumber as exc:
        raise Damaged(f"{what}: {exc}") from None


def _strings(values, where: str) -> None:
    if not all(isinstance(v, str) for v in values):
        raise Damaged(f"{where} holds something other than text")


def _claims(claims: dict, where: str) -> None:
    _number(claims.get("cpu", 1.0), N.CORES, 0, f"{where}claims.cpu")
    _number(claims.get("mem", 0), N.BYTES, 0, f"{where}claims.mem", whole=True)
    pools = claims.get("pools", {})
    if not isinstance(pools, dict):
        raise Damaged(f"{where}claims.pools is {_kind(pools)}")
    for name, claim in pools.items():
        if not isinstance(claim, dict):
            raise Damaged(f"{where}claims.pools.{name} is not {{count, size}}")
        _number(claim.get("count", 1), N.COUNT, 0, f"{where}claims.pools.{name}.count", whole=True)
        if claim.get("size") is not None:
            _number(claim["size"], N.BYTES, 0, f"{where}claims.pools.{name}.size", whole=True)


def _assigned(items, where: str) -> None:
    for a in items:
        if (
            not isinstance(a, dict)
            or not isinstance(a.get("pool"), str)
            or not isinstance(a.get("devices", []), list)
            or not all(N.ok(d, N.DEVICE, whole=True) for d in a.get("devices", []))
            or not (a.get("size") is None or N.ok(a["size"], N.BYTES, whole=True))
        ):
            raise Damaged(f"{where}assigned holds a bad entry")


def status(data: object) -> None:
    """Raise Damaged unless ``data`` is a job record whose known fields have their types and bounds."""
    if not isinstance(data, dict):
        raise Damaged(f"it holds a JSON {_kind(data)}, not a record")
    if "id" not in data:
        raise Damaged("it has no id")
    _fields(data, STATUS_FIELDS, "the field ")
    if data.get("state") not in STATES:
        raise Damaged(f"the state {str(data.get('state'))[:40]!r} is not a job state")
    _numbers(data, STATUS_NUMBERS, "the field ")
    for key in ("command", "tags", "needs", "after"):
        _strings(data.get(key) or (), f"the field {key}")
    if "claims" in data:
        _claims(data["claims"], "the field ")
    _assigned(data.get("assigned") or (), "the field ")
    for i, attempt in enumerate(data.get("attempts") or ()):
        if not isinstance(attempt, dict):
            raise Damaged(f"attempts[{i}] is {_kind(attempt)}")
        _fields(attempt, ATTEMPT_FIELDS, f"attempts[{i}].")
        for name in ATTEMPT_REQUIRED:
            if name not in attempt:
                raise Damaged(f"attempts[{i}] has no {name}")
        _numbers(attempt, ATTEMPT_NUMBERS, f"attempts[{i}].")
        if attempt.get("claims"):
            _claims(attempt["claims"], f"attempts[{i}].")
        _usage(attempt.get("usage") or {}, USAGE_NUMBERS, f"attempts[{i}].usage")
    for key in ("usage", "logs_dropped", "claim_source"):
        if any(
            isinstance(v, (dict, list))
            for k, v in (data.get(key) or {}).items()
            if not (key == "usage" and k == BY_DEVICE)
        ):
            raise Damaged(f"the field {key} holds a nested value")
    _usage(data.get("usage") or {}, USAGE_NUMBERS, "the field usage")
    _usage(data.get("logs_dropped") or {}, DROPPED_NUMBERS, "the field logs_dropped")
    for name in STATUS_REQUIRED:
        if name not in data:
            raise Damaged(f"it has no {name}")


ROW_FIELDS = field_types(Row)  # (exact: ``type(v) in ...``, so a bool is no number here)
_NUMBER_OR_NULL = (int, float, type(None))


def row(data: object) -> None:
    """Raise Damaged unless ``data`` is a history line (``qex.store.history.line_of``)
    whose fields have the types a row is read with: the types only, in one pass (a
    listing reads thousands of lines; ``st`` says the line is still its record's)."""
    if type(data) is not dict:
        raise Damaged(f"it holds a JSON {_kind(data)}, not a row")
    for key, value in data.items():
        types = ROW_FIELDS.get(key)
        if types is not None and type(value) not in types:
            raise Damaged(f"the field {key} is {_kind(value)}")
    if "id" not in data or data.get("state") not in STATES:
        raise Damaged("it has no id or no job state")
    claims = data.get("claims")
    if claims is not None:
        pools = claims.get("pools") or {}
        if (
            type(claims.get("cpu", 1.0)) not in NUM
            or type(claims.get("mem", 0)) is not int
            or type(pools) is not dict
            or any(type(c) is not dict or type(c.get("count", 1)) is not int for c in pools.values())
        ):
            raise Damaged("the field claims is not {cpu, mem, pools}")
    if any(type(v) not in _NUMBER_OR_NULL for v in (data.get("usage") or {}).values()):
        raise Damaged("the field usage holds something other than numbers")
    if any(type(t) is not str for t in data.get("tags") or ()):
        raise Damaged("the field tags holds something other than text")


def _usage(data: dict, table: dict, where: str) -> None:
    """What an attempt used, or what its logs dropped: a known field is a number or null."""
    if not isinstance(data, dict):
        raise Damaged(f"{where} is {_kind(data)}")
    _numbers(data, table, f"{where}.")
    by_device = data.get(BY_DEVICE) if table is USAGE_NUMBERS else None
    if by_device is not None:
        if not isinstance(by_device, dict) or len(by_device) > N.DEVICE + 1:
            raise Damaged(f"{where}.{BY_DEVICE} is not {{device: bytes}}")
        for device, nbytes in by_device.items():
            _number(nbytes, N.BYTES, 0, f"{where}.{BY_DEVICE}.{str(device)[:40]}", whole=True)


# The exact types an index entry's fields may have (``type(v) in ...``: a bool is no int here),
# for the fast look at every entry a pass loads; a miss goes to the slow check for its words.
_EXACT = {
    int: frozenset({int}),
    str: frozenset({str}),
    dict: frozenset({dict}),
    list: frozenset({list}),
    NUM: frozenset({int, float}),
    _OPT_NUM: frozenset({int, float, type(None)}),
    _OPT_STR: frozenset({str, type(None)}),
}
_ENTRY_EXACT = tuple((key, _EXACT[types]) for key, types in ENTRY_FIELDS.items())
_ENTRY_BOUNDS = tuple(
    (key, least, most, ENTRY_FIELDS.get(key, int) is int)  # (attempt, pid: ints)
    for key, (least, most) in ENTRY_NUMBERS.items()
)
_ACTIVE = frozenset(ACTIVE)


def _plain_entry(entry) -> bool:
    """The common entry: every field of its exact type and within its bounds, no pools,
    nothing assigned, no dependencies."""
    if type(entry) is not dict:
        return False
    try:
        for key, types in _ENTRY_EXACT:
            if type(entry[key]) not in types:
                return False
    except KeyError:
        return False
    return (
        N.all_ok(entry, _ENTRY_BOUNDS)
        and entry["state"] in _ACTIVE
        and not entry["pools"]
        and not entry["assigned"]
        and not entry["needs"]
        and not entry["after"]
    )


def spec(data: object) -> None:
    """Raise Damaged unless ``data`` is a job spec whose known fields have their types."""
    if not isinstance(data, dict):
        raise Damaged(f"it holds a JSON {_kind(data)}, not a spec")
    for key in ("id", "command", "cwd", "env"):
        if key not in data:
            raise Damaged(f"it has no {key}")
    _fields(data, SPEC_FIELDS, "the field ")
    if not data["command"]:
        raise Damaged("the field command is empty")
    _strings(data["command"], "the field command")
    _strings(data["env"], "the field env")
    _strings(data["env"].values(), "the field env")


def job_name(job_id: object) -> bool:
    """Whether ``job_id`` can name a job directory (a journal event's, an index entry's)."""
    return (
        isinstance(job_id, str)
        and 0 < len(job_id) <= 255
        and "/" not in job_id
        and not job_id.startswith(".")
        and "\0" not in job_id
    )


def index(data: object) -> dict[str, str]:
    """Raise Damaged unless ``data`` is an active index a pass can use; returns its entries
    that it cannot (id -> what is wrong), which the caller leaves out and takes again from
    their records (``qex.store.replay``), and the jobs an earlier pass left out (``damaged``)."""
    if not isinstance(data, dict):
        raise Damaged(f"it holds a JSON {_kind(data)}")
    _fields(
        data,
        {
            "format": int,
            "stream": _OPT_STR,
            "seq": int,
            "offset": int,
            "journal_ino": _OPT_INT,
            "next_job": int,
            "synced": int,
            "jobs": dict,
            "damaged": dict,
        },
        "",
    )
    _numbers(data, INDEX_NUMBERS, "")
    bad = {}
    for job_id, entry in (data.get("jobs") or {}).items():
        if not _plain_entry(entry) or not job_name(job_id):
            try:
                index_entry(job_id, entry)
            except Damaged as exc:
                bad[job_id] = str(exc)
    for job_id, why in (data.get("damaged") or {}).items():
        if job_name(job_id):
            bad.setdefault(job_id, why if isinstance(why, str) else "")
    return bad


def usable_jobs(jobs: object) -> dict:
    """The entries of an index's ``jobs`` that pass ``index_entry`` (a reader's view: the
    next pass takes the others again from their records)."""
    if not isinstance(jobs, dict):
        return {}
    out = {}
    for job_id, entry in jobs.items():
        if _plain_entry(entry) and job_name(job_id):
            out[job_id] = entry
            continue
        try:
            index_entry(job_id, entry)
        except Damaged:
            continue
        out[job_id] = entry
    return out


def index_entry(job_id: object, entry: object) -> None:
    """Raise Damaged unless ``entry`` is an active index entry a pass can use."""
    where = f"jobs.{str(job_id)[:8]}."
    if not job_name(job_id):
        raise Damaged(f"{where} does not name a job directory")
    if not isinstance(entry, dict) or set(ENTRY_FIELDS) - set(entry):
        raise Damaged(f"{where} is not a whole entry")
    _fields(entry, ENTRY_FIELDS, where)
    for key in ("attempt", "pid", "supervisor_pid"):
        if type(entry.get(key)) not in (int, type(None)):
            raise Damaged(f"{where}{key} is {_kind(entry.get(key))}")
    _numbers(entry, ENTRY_NUMBERS, where)
    if entry["state"] not in ACTIVE:
        raise Damaged(f"{where}state is {str(entry['state'])[:20]!r}")
    for name, claim in entry["pools"].items():
        if not (
            isinstance(claim, list)
            and len(claim) == 2
            and N.ok(claim[0], N.COUNT, whole=True)
            and (claim[1] is None or N.ok(claim[1], N.BYTES, whole=True))
        ):
            raise Damaged(f"{where}pools.{name} is not [count, size]")
    for a in entry["assigned"]:
        if not (
            isinstance(a, list)
            and len(a) == 3
            and isinstance(a[0], str)
            and isinstance(a[1], list)
            and all(N.ok(d, N.DEVICE, whole=True) for d in a[1])
            and (a[2] is None or N.ok(a[2], N.BYTES, whole=True))
        ):
            raise Damaged(f"{where}assigned is not [[pool, devices, size]]")
    _strings(entry["needs"], f"{where}needs")
    _strings(entry["after"], f"{where}after")
