"""Is a record or an index that qex reads back whole? Cheap structural checks.

A status.json, an index entry or a journal line can be damaged by a disk, a
person or a bug: a field of the wrong type would otherwise surface as a
traceback far from the file. These checks run on every read (pure Python, a
few microseconds); a failure names the first bad field, and the caller turns
it into a clear message (BrokenRecord) or rebuilds (the index).

Fields this qex does not know are ignored (a newer qex may add them), and
missing fields are left to the readers' defaults.
"""

from qex.base.states import ACTIVE, STATES

NUM = (int, float)
_OPT_NUM = (int, float, type(None))
_OPT_STR = (str, type(None))
_OPT_INT = (int, type(None))

# status.json: field -> accepted types (bool is refused where a number is meant). One entry per
# field of qex.store.records.Status: tests/test_record_formats.py holds the two to each other.
STATUS_FIELDS = {
    "id": str, "seq": int, "state": str, "name": str, "command": list, "cwd": str, "owner": str,
    "uid": int, "format": int, "group": _OPT_STR, "group_name": _OPT_STR, "tags": list, "priority": int,
    "claims": dict, "claim_source": dict, "assigned": list, "forced": bool, "submitted_at": NUM,
    "started_at": _OPT_NUM, "ended_at": _OPT_NUM, "pid": _OPT_INT, "supervisor_pid": _OPT_INT,
    "exit_code": _OPT_INT, "signal": _OPT_STR, "attempt": int, "attempts": list, "usage": dict,
    "error": _OPT_STR, "blocked_reason": _OPT_STR, "blocked_holder": _OPT_STR, "blocked_since": _OPT_NUM,
    "passed_by": int, "dedupe_key": _OPT_STR, "needs": list, "after": list, "skipped_root": _OPT_STR,
    "logs_dropped": dict, "timeout": _OPT_NUM, "retries": int, "oom_retries": int,
    "max_queue_time": _OPT_NUM, "queue_pause_secs": NUM, "kill_requested": bool, "oom_evidence": _OPT_STR,
    "queue_pauses": list, "supervisor_lost": bool, "template": (list, type(None)), "rerun_of": _OPT_STR,
    "peer_lock": _OPT_STR,
}
ATTEMPT_FIELDS = {"number": int, "state": str, "claims": (dict, type(None)), "started_at": _OPT_NUM,
                  "ended_at": _OPT_NUM, "exit_code": _OPT_INT, "signal": _OPT_STR, "usage": (dict, type(None)),
                  "error": _OPT_STR}
ENTRY_FIELDS = {"seq": int, "state": str, "owner": str, "uid": int, "name": str, "priority": int,
                "cpu": int, "mem": int, "pools": dict, "assigned": list, "needs": list, "after": list,
                "deadline": _OPT_NUM, "passed_by": int, "reason": _OPT_STR, "holder": _OPT_STR,
                "submitted_at": NUM}


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


def _strings(values, where: str) -> None:
    if not all(isinstance(v, str) for v in values):
        raise Damaged(f"{where} holds something other than text")


def _claims(claims: dict, where: str) -> None:
    cpu, mem = claims.get("cpu", 1.0), claims.get("mem", 0)
    if not isinstance(cpu, NUM) or isinstance(cpu, bool) or not isinstance(mem, int) or isinstance(mem, bool):
        raise Damaged(f"{where}claims has a bad cpu or mem")
    pools = claims.get("pools") or {}
    if not isinstance(pools, dict):
        raise Damaged(f"{where}claims.pools is {_kind(pools)}")
    for name, claim in pools.items():
        if not isinstance(claim, dict) or not isinstance(claim.get("count", 1), int) \
                or not isinstance(claim.get("size"), _OPT_INT):
            raise Damaged(f"{where}claims.pools.{name} is not {{count, size}}")


def _assigned(items, where: str) -> None:
    for a in items:
        if not isinstance(a, dict) or not isinstance(a.get("pool"), str) \
                or not isinstance(a.get("devices", []), list) \
                or not all(isinstance(d, int) and not isinstance(d, bool) for d in a.get("devices", [])) \
                or not isinstance(a.get("size"), _OPT_INT):
            raise Damaged(f"{where}assigned holds a bad entry")


def status(data: object) -> None:
    """Raise Damaged unless ``data`` is a job record whose known fields have their types."""
    if not isinstance(data, dict):
        raise Damaged(f"it holds a JSON {_kind(data)}, not a record")
    if "id" not in data:
        raise Damaged("it has no id")
    _fields(data, STATUS_FIELDS, "the field ")
    if data.get("state") not in STATES:
        raise Damaged(f"the state {str(data.get('state'))[:40]!r} is not a job state")
    for key in ("command", "tags", "needs", "after"):
        _strings(data.get(key) or (), f"the field {key}")
    if "claims" in data:
        _claims(data["claims"], "the field ")
    _assigned(data.get("assigned") or (), "the field ")
    for i, attempt in enumerate(data.get("attempts") or ()):
        if not isinstance(attempt, dict):
            raise Damaged(f"attempts[{i}] is {_kind(attempt)}")
        _fields(attempt, ATTEMPT_FIELDS, f"attempts[{i}].")
    for key in ("usage", "logs_dropped", "claim_source"):
        if any(isinstance(v, (dict, list)) for v in (data.get(key) or {}).values()):
            raise Damaged(f"the field {key} holds a nested value")


# The exact types an index entry's fields may have (``type(v) in ...``: a bool is no int here),
# for the fast look at every entry a pass loads; a miss goes to the slow check for its words.
_EXACT = {int: frozenset({int}), str: frozenset({str}), dict: frozenset({dict}), list: frozenset({list}),
          NUM: frozenset({int, float}), _OPT_NUM: frozenset({int, float, type(None)}),
          _OPT_STR: frozenset({str, type(None)})}
_ENTRY_EXACT = tuple((key, _EXACT[types]) for key, types in ENTRY_FIELDS.items())
_ACTIVE = frozenset(ACTIVE)


def _plain_entry(entry) -> bool:
    """The common entry: every field of its exact type, no pools, nothing assigned, no dependencies."""
    if type(entry) is not dict:
        return False
    try:
        for key, types in _ENTRY_EXACT:
            if type(entry[key]) not in types:
                return False
    except KeyError:
        return False
    return (entry["state"] in _ACTIVE and not entry["pools"] and not entry["assigned"]
            and not entry["needs"] and not entry["after"])


SPEC_FIELDS = {"id": str, "command": list, "cwd": str, "env": dict, "format": int, "nice": _OPT_INT,
               "hints": bool, "request": dict}


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


def index(data: object) -> None:
    """Raise Damaged unless ``data`` is an active index whose entries a pass can use."""
    if not isinstance(data, dict):
        raise Damaged(f"it holds a JSON {_kind(data)}")
    _fields(data, {"format": int, "stream": _OPT_STR, "seq": int, "offset": int, "journal_ino": _OPT_INT,
                   "next_job": int, "synced": int, "jobs": dict}, "")
    if any(data.get(k, 0) < 0 for k in ("seq", "offset", "next_job", "synced")):
        raise Damaged("a negative counter")
    for job_id, entry in (data.get("jobs") or {}).items():
        if _plain_entry(entry):
            continue
        where = f"jobs.{job_id[:8]}."
        if not isinstance(entry, dict) or set(ENTRY_FIELDS) - set(entry):
            raise Damaged(f"{where} is not a whole entry")
        _fields(entry, ENTRY_FIELDS, where)
        if entry["state"] not in ACTIVE:
            raise Damaged(f"{where}state is {str(entry['state'])[:20]!r}")
        for name, claim in entry["pools"].items():
            if not (isinstance(claim, list) and len(claim) == 2 and isinstance(claim[0], int)
                    and isinstance(claim[1], _OPT_INT)):
                raise Damaged(f"{where}pools.{name} is not [count, size]")
        for a in entry["assigned"]:
            if not (isinstance(a, list) and len(a) == 3 and isinstance(a[0], str) and isinstance(a[1], list)
                    and all(isinstance(d, int) for d in a[1]) and isinstance(a[2], _OPT_INT)):
                raise Damaged(f"{where}assigned is not [[pool, devices, size]]")
        _strings(entry["needs"], f"{where}needs")
        _strings(entry["after"], f"{where}after")
