"""JSON Schemas derived from the attrs classes themselves, so the schema and
the records can never disagree. ``qex schema status|job|pipeline`` prints them."""

import types
import typing

import attrs

from qex.base.version import VERSION

_PRIMITIVES = {str: {"type": "string"}, int: {"type": "integer"}, float: {"type": "number"},
               bool: {"type": "boolean"}, type(None): {"type": "null"}}


def _of(tp, closed: bool) -> dict:
    if tp in _PRIMITIVES:
        return dict(_PRIMITIVES[tp])
    if tp is dict:
        return {"type": "object"}
    if tp is list:
        return {"type": "array"}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_of(a, closed) for a in args]}
    if origin in (tuple, list):
        item = args[0] if args else typing.Any
        return {"type": "array", "items": _of(item, closed) if item is not typing.Any else {}}
    if origin is dict:
        return {"type": "object", "additionalProperties": _of(args[1], closed)}
    if attrs.has(tp):
        return _object(tp, closed)
    return {}


def _object(cls, closed: bool, all_required: bool = False) -> dict:
    hints = typing.get_type_hints(cls)
    props, required = {}, []
    for f in attrs.fields(cls):
        props[f.name] = _of(hints[f.name], closed)
        if all_required or f.default is attrs.NOTHING:
            required.append(f.name)
    out = {"type": "object", "properties": props, "additionalProperties": not closed}
    if required:
        out["required"] = required
    return out


def schema_for(kind: str) -> dict:
    if kind == "status":
        from qex.base.states import STATES
        from qex.store.records import Status

        body = _object(Status, closed=False, all_required=True)  # qex writes every field
        body["properties"]["state"] = {"enum": list(STATES)}
        title = "qex job record (status.json)"
    elif kind == "event":
        from qex.base.states import STATES
        from qex.store.events import CHANGES, KINDS, Event

        body = _object(Event, closed=False)
        body["properties"]["event"] = {"enum": list(KINDS)}
        body["properties"]["state"] = {"anyOf": [{"enum": list(STATES)}, {"type": "null"}]}
        body["properties"]["previous"] = {"anyOf": [{"enum": list(STATES)}, {"type": "null"}]}
        body["properties"]["change"] = {"anyOf": [{"enum": list(CHANGES)}, {"type": "null"}]}
        title = "qex event (one line of qex events --json)"
    elif kind == "job":
        from qex.jobs.jobfile import JobFile

        body = _object(JobFile, closed=True)
        title = "qex job file"
    elif kind == "pipeline":
        from qex.jobs.pipeline import PipelineFile

        body = _object(PipelineFile, closed=True)
        jobs = body["properties"]["jobs"]
        jobs["minItems"] = 1
        jobs["items"]["required"] = ["command", "name"]  # a stage is a job-file table with a name
        jobs["items"]["properties"]["dedupe_key"] = {"type": "null"}  # a stage cannot be deduplicated
        title = "qex pipeline file"
    else:
        raise ValueError(kind)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title,
            "$comment": f"qex {VERSION}", **body}
