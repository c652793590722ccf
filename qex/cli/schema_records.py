"""The JSON Schemas of the records (status, event, job, pipeline), derived from their
attrs classes (``qex.cli.schema`` serves them): each property's ``description`` is the
comment on its field's declaration in the source (continued on the comment-only lines
right below it), so that a record and its schema can never disagree."""

from __future__ import annotations

_PRIMITIVES = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}

# The words of blocked_holder (qex/admit/admit.py decides them; "owner": qex/store/members.py).
HOLDERS = {
    "own": "your own running jobs hold what it needs",
    "peer": "another user's jobs hold what it needs",
    "outside": "memory is used outside qex (or the reserve keeps it)",
    "oversized": "it claims more than the budget will ever give: it cannot start as it is",
    "lock": "a job holds a lock (or pool unit) it claims",
    "person": "a person holds a lock it claims (qex pause lock NAME)",
    "pause": "the queue is paused (qex pause queue)",
    "dependency": "a job it --needs or runs --after has not ended yet",
    "front": "a job ahead of it in the queue is waiting for room first",
    "device": "no GPU device (or share of one) it claims is free",
    "pressure": "the machine's memory pressure is above [system] max_pressure: no job starts",
    "owner": "another member's job whose owner runs no qex now: nothing will start it",
    "slurm": "the Slurm backend: Slurm holds it (its reason is Slurm's: qex help slurm)",
}
PEAK_FROM = ("cgroup", "proc-sample", "rusage")
OOM_EVIDENCE = ("cgroup", "machine-counter")


def nullable_enum(values: tuple | list | dict) -> dict:
    return {"anyOf": [{"enum": list(values)}, {"type": "null"}]}


# ---- from the declarations: Plain records (qex.base.plain) and attrs classes (the files users write) ----


def of_type(tp: object, closed: bool) -> dict:
    import types
    import typing

    if tp in _PRIMITIVES:
        return dict(_PRIMITIVES[tp])
    if tp is dict:
        return {"type": "object"}
    if tp is list:
        return {"type": "array"}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [of_type(a, closed) for a in args]}
    if origin in (tuple, list):
        item = args[0] if args else typing.Any
        return {"type": "array", "items": of_type(item, closed) if item is not typing.Any else {}}
    if origin is dict:
        return {"type": "object", "additionalProperties": of_type(args[1], closed)}
    if _is_record(tp):
        return object_schema(tp, closed)
    return {}


def _is_record(tp: object) -> bool:
    """A Plain record, or an attrs class (the files people write): attrs is imported only
    for what is neither a Plain record nor a plain type (qex schema status never needs it)."""
    from qex.base.plain import Plain

    if not isinstance(tp, type):
        return False
    if issubclass(tp, Plain):
        return True
    import attrs

    return attrs.has(tp)


def _fields(cls: type) -> list[tuple[str, bool]]:
    """(name, whether it has a default) of each field of a record class, in order."""
    from qex.base.plain import Plain

    if issubclass(cls, Plain):
        return [(name, name in cls._defaults) for name in cls.field_names()]
    import attrs

    return [(f.name, f.default is not attrs.NOTHING) for f in attrs.fields(cls)]


def object_schema(cls: type, closed: bool, all_required: bool = False) -> dict:
    import typing

    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    props, required = {}, []
    for name, has_default in _fields(cls):
        props[name] = {"description": docs.get(name, ""), **of_type(hints[name], closed)}
        if all_required or not has_default:
            required.append(name)
    out = {"type": "object", "properties": props, "additionalProperties": not closed}
    if cls.__doc__:
        out["description"] = " ".join(cls.__doc__.split())
    if required:
        out["required"] = required
    return out


def field_docs(cls: type) -> dict[str, str]:
    """The comment of each field of ``cls`` in its source, by field name."""
    import ast
    import sys

    module = sys.modules[cls.__module__]
    try:
        with open(module.__file__, encoding="utf-8") as fh:
            source = fh.read()
    except (OSError, TypeError):
        return {}
    lines = source.split("\n")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            break
    else:
        return {}
    docs = {}
    for st in node.body:
        if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
            continue
        said = [line for line in lines[st.lineno - 1 : st.end_lineno] if "#" in line]  # (a wrapped line too)
        if not said:
            continue
        words = [said[-1].split("#", 1)[1].strip()]
        at = st.end_lineno
        while at < len(lines) and lines[at].strip().startswith("#"):
            words.append(lines[at].strip()[1:].strip())
            at += 1
        docs[st.target.id] = " ".join(w for w in words if w)
    return docs


def status_schema(all_required: bool) -> dict:
    """A job record's schema: its fields, their enums (state, blocked_holder, oom_evidence, peak_from)."""
    from qex.base.states import STATES
    from qex.store.records import Status

    body = object_schema(Status, closed=False, all_required=all_required)
    props = body["properties"]
    props["state"]["enum"] = list(STATES)
    props["blocked_holder"] = {
        "description": props["blocked_holder"]["description"]
        + ": "
        + "; ".join(f"{k}: {v}" for k, v in HOLDERS.items()),
        **nullable_enum(HOLDERS),
    }
    props["oom_evidence"] = {"description": props["oom_evidence"]["description"], **nullable_enum(OOM_EVIDENCE)}
    usage = props["usage"]
    usage["properties"]["peak_from"] = {
        "description": usage["properties"]["peak_from"]["description"],
        **nullable_enum(PEAK_FROM),
    }
    attempt = props["attempts"]["items"]["properties"]
    attempt["oom_evidence"] = {"description": attempt["oom_evidence"]["description"], **nullable_enum(OOM_EVIDENCE)}
    attempt["usage"]["properties"]["peak_from"] = usage["properties"]["peak_from"]
    return body
