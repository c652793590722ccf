"""JSON Schemas of everything qex reads or prints as JSON: ``qex schema KIND``.

The records' schemas (status, event, job, pipeline) are derived from the attrs
classes themselves (``qex.cli.schema_records``), so that the schema and the
records can never disagree. The schemas of what the commands print (``OUTPUTS``)
are declared here, each property with its description. Every property of
every schema has one, and every ``--json`` output validates against its
schema: tests/e2e/test_json.py.
"""

from __future__ import annotations

from qex.base.version import VERSION
from qex.cli.schema_records import nullable_enum, object_schema, status_schema

# kind -> what it describes (qex schema's choices and help)
KINDS = {
    "status": "one job's record (status.json; each item of list, wait and status --json)",
    "event": "one line of qex events --json",
    "job": "a job file (submit --job)",
    "pipeline": "a pipeline file (qex pipeline FILE)",
    "submit": "qex submit --json",
    "group": "qex pipeline --json, qex submit --each-line --json",
    "rerun": "qex rerun --json",
    "list": "qex list --json and qex status --json: an array of records",
    "wait": "qex wait --json: an array of records, whatever the number of ids",
    "logs": "one line of qex logs --json: one object per line of the log",
    "kill": "qex kill --json",
    "cancel": "qex cancel --json",
    "clean": "qex clean --json",
    "info": "qex info --json",
    "config": "qex config show --json",
    "pause": "qex pause queue|lock NAME --json",
    "pauses": "qex pause --json (alone: the pauses in force)",
    "resume": "qex resume --json",
    "version": "qex version --json",
    "init": "qex init --shared DIR --json",
    "error": "under --json, a failure: one object on stderr, the exit code unchanged",
    "message": "under --json, a warning or a notice: one object a line on stderr (never prose)",
}

# command -> the kinds its --json prints (tests/e2e/test_json.py walks the parser: every
# command has --json and is here, or says in NO_JSON why not)
OUTPUTS = {
    "submit": ("submit", "group"),
    "pipeline": ("group",),
    "rerun": ("rerun",),
    "wait": ("wait",),
    "status": ("list",),
    "list": ("list",),
    "kill": ("kill",),
    "cancel": ("cancel",),
    "clean": ("clean",),
    "info": ("info",),
    "pause": ("pause", "pauses"),
    "resume": ("resume",),
    "events": ("event",),
    "config": ("config",),
    "version": ("version",),
    "init": ("init",),
    "logs": ("logs",),
}
NO_JSON = {
    "run": "its stdout and stderr are the job's own (qex submit --json, then qex wait --json)",
    "schema": "it prints JSON Schemas: always JSON",
    "help": "words for people",
    "completions": "a script for a shell",
    "top": "a full-screen view for people (qex list --json and qex info --json give the same facts)",
    "export": "it prints a bash script (the Slurm job ids are that script's output)",
}

# ---- declared here: what the commands print ------------------------------------------


def _obj(props: dict, required=None, closed: bool = False, description: str = "") -> dict:
    """An object schema from {name: (schema, description)}."""
    out = {
        "type": "object",
        "properties": {k: {"description": d, **s} for k, (s, d) in props.items()},
        "required": list(props) if required is None else list(required),
        "additionalProperties": not closed,
    }
    if description:
        out["description"] = description
    return out


_S, _I, _N, _B = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}
_NULL = {"type": "null"}


def _opt(s: dict) -> dict:
    return {"anyOf": [s, _NULL]}


def _arr(s: dict) -> dict:
    return {"type": "array", "items": s}


def _records(title: str) -> dict:
    return {"type": "array", "items": status_schema(all_required=True), "description": title}


def _stopped(done: str) -> dict:
    job = _obj(
        {
            "id": (_S, "the job's id"),
            "result": (
                {"enum": ["stopped", "cancelled", "signalled", "ended", "running"]},
                "what was done: stopped (it was running and has ended: state says how), cancelled (it was "
                "queued), signalled (it was signalled and had not ended after the kill grace), ended (it "
                "had already ended: nothing done), running (cancel leaves a running job)",
            ),
            "state": (_opt(_S), "its state now"),
        }
    )
    return _obj(
        {
            "jobs": (
                _arr(job),
                f"every job named (a group: each of its jobs), or selected by --tag, --group, "
                f"--state, --name, --mine (your own queued or running jobs; none: 127), in "
                f"order; exit 1 when a job named by its own id could not be {done}",
            )
        }
    )


_PAUSE = _obj(
    {
        "kind": ({"enum": ["queue", "lock"]}, "what is paused: the queue, or a lock a person holds"),
        "name": (_opt(_S), "the lock's (or pool's) name; null for the queue"),
        "reason": (_S, "why, as given with --reason (empty when none)"),
        "user": (_opt(_S), "who paused"),
        "uid": (_opt(_I), "their uid"),
        "pid": (_opt(_I), "the pid of the qex that paused"),
        "ppid": (_opt(_I), "its parent (the shell it ran from)"),
        "since": (_opt(_N), "when, seconds since the epoch"),
        "until": (_opt(_N), "when it ends by itself (--for), seconds since the epoch; null: at qex resume"),
        "broken": (_opt(_S), "a pause file that cannot be read holds all the same; this says why; null when sound"),
        "file": (_S, "the pause's file"),
        "held_by_jobs": (_arr(_S), "a lock: the jobs that hold it now (the person has it when they end)"),
    },
    required=["kind", "name", "reason", "since", "until", "broken", "file"],
)


def _info() -> dict:
    any_obj = {"type": "object"}
    return _obj(
        {
            "machine": (any_obj, "this machine: cores, mem_total and mem_available (bytes)"),
            "budget": (any_obj, "the budget qex admits against: cpu (cores), mem (bytes), reserve_mem (bytes), mode"),
            "held": (any_obj, "what the running jobs hold: cpu (cores), mem (bytes), and each job"),
            "defaults": (
                any_obj,
                "what a job that claims nothing claims: cpu (cores), mem (bytes), and fit: how "
                "many such jobs the budget runs at once",
            ),
            "pools": (_arr(any_obj), "each pool of the config: its units and who holds them"),
            "peers": (_arr(any_obj), "what other users' queues hold (the peer directory): cpu in cores, mem in bytes"),
            "peer_dir": (any_obj, "the peer directory: its path, its problems, each record read or ignored"),
            "memory": (
                any_obj,
                "how a job's memory is measured (a cgroup of qex's own, a systemd scope, /proc samples), "
                "what an OOM verdict rests on, and where there is no cgroup the remedy",
            ),
            "queue": (any_obj, "running and queued counts, the health line and since when it holds, the state dir"),
            "pauses": (_arr(_PAUSE), "the pauses in force (as qex pause --json)"),
            "shared": ({}, "a shared state directory: its members; null when private"),
            "hooks": ({}, "the stop hook in force and whose it is; null when none"),
            "manners": (any_obj, "what every job runs with ([politeness]): nice, io_class, oom_score_adj"),
            "pressure": (
                any_obj,
                "the memory pressure: some_avg10 (PSI, a percentage; null: the kernel gives "
                "none) and max ([system] max_pressure; null: off)",
            ),
            "damaged": (_arr(any_obj), "records a pass cannot use: id, file, problem"),
            "gpu_check": ({}, "the GPU driver checked against the pool gpu (present when there is one)"),
            "backend": (
                any_obj,
                "where jobs run: kind (local or slurm) and, for slurm, controller: what "
                "`scontrol ping` answered (present with kind slurm)",
            ),
        },
        required=["machine", "budget", "held", "pools", "peers", "queue", "pauses", "damaged"],
    )


def _config() -> dict:
    value = _obj(
        {
            "value": (
                {},
                "the setting as written (null: unset); cores are numbers of cores, sizes bytes, times "
                'seconds, a percentage a string such as "75%"',
            ),
            "resolved": ({}, "what it means on this machine (cores, bytes, seconds); otherwise equal to value"),
            "source": (_S, "where it comes from: the config file's path, default, or environment (VARIABLE)"),
        }
    )
    return _obj(
        {
            "path": (_S, "the config file"),
            "exists": (_B, "false: it is missing and the defaults are in force"),
            "from_cache": (_B, "read from the parsed-config cache (unchanged since qex last parsed it)"),
            "values": (
                {"type": "object", "additionalProperties": value},
                "every key (budget.cpu, ..., pool) with its value, resolved value and source",
            ),
        }
    )


def _outputs(kind: str) -> tuple[dict, str]:
    if kind == "submit":
        return _obj(
            {
                "id": (_S, "the job's id (of the job that holds the key when deduplicated)"),
                "deduplicated": (_B, "true: --dedupe-key found an active (or recent) job; no job was made"),
            },
            closed=True,
        ), "qex submit --json"
    if kind == "group":
        job = _obj({"id": (_S, "the job's id"), "name": (_S, "its name")}, closed=True)
        return _obj(
            {
                "group": (_S, "the group's id: a handle for wait, status, kill, cancel, clean, --needs"),
                "name": (_S, "the group's name (also a handle)"),
                "jobs": (_arr(job), "its jobs in submission order"),
            },
            closed=True,
        ), "a group submitted"
    if kind == "rerun":
        return _obj(
            {"id": (_S, "the new job's id"), "rerun_of": (_S, "the id of the job it repeats")}, closed=True
        ), "qex rerun --json"
    if kind in ("list", "wait"):
        return _records(KINDS[kind]), f"qex {kind} --json"
    if kind in ("kill", "cancel"):
        return _stopped("killed" if kind == "kill" else "cancelled"), f"qex {kind} --json"
    return _more_outputs(kind)


def _more_outputs(kind: str) -> tuple[dict, str]:
    if kind == "clean":
        job = _obj({"id": (_S, "the job's id"), "why": (_S, "why, in words")})
        kept = _obj(
            {
                "id": (_S, "the job's id"),
                "why": (_S, "why, in words"),
                "needed_by": (_arr(_S), "the queued or running jobs that need its record"),
            }
        )
        return _obj(
            {
                "removed": (_arr(_S), "the ids of the records removed"),
                "kept": (_arr(kept), "records kept: queued or running work still needs them"),
                "refused": (_arr(job), "records not removed: active, or another user's"),
                "unfinished_dirs_removed": (_I, "job directories that never got a record, removed (--auto, --all)"),
            }
        ), "qex clean --json"
    if kind == "info":
        return _info(), "qex info --json"
    if kind == "config":
        return _config(), "qex config show --json"
    if kind == "pause":
        return _obj(
            {
                "pause": ({"anyOf": [_PAUSE, _NULL]}, "the pause in force (null: it ended at once)"),
                "made": (_B, "false: it was already paused; that pause stays as it was"),
            }
        ), "qex pause --json"
    if kind == "pauses":
        return {"type": "array", "items": _PAUSE, "description": KINDS[kind]}, "the pauses in force"
    if kind == "resume":
        return _obj(
            {
                "kind": ({"enum": ["queue", "lock"]}, "what was resumed"),
                "name": (_opt(_S), "the lock's name; null for the queue"),
                "paused_by": (_opt(_S), "who had paused it (null: a pause file that could not be read)"),
                "paused_secs": (_opt(_N), "how long it was paused, in seconds"),
            }
        ), "qex resume --json"
    if kind == "version":
        return _obj(
            {
                "version": (_S, "qex's version"),
                "record_format": (_I, "the format of the records it writes (status.json's format)"),
            }
        ), "qex version --json"
    if kind == "init":
        return _obj(
            {
                "path": (_S, "the shared state directory"),
                "group": (_S, "the group that shares it"),
                "created": (_B, "false: it existed and was set up (repaired)"),
                "warnings": (_arr(_S), "what to look at, in words"),
            }
        ), "qex init --json"
    return _lines_out(kind)


def _lines_out(kind: str) -> tuple[dict, str]:
    """What is printed a line at a time: an error, a message (stderr), a line of a log."""
    if kind == "error":
        from qex.base.errors import KINDS as ERRORS

        return _obj(
            {
                "error": (_S, "what went wrong and the remedy, the sentence qex prints without --json"),
                "code": (_I, "the exit code, the same as without --json (qex help exit-codes)"),
                "kind": (
                    {"enum": list(ERRORS)},
                    "a stable word for the kind of failure: usage (a bad command "
                    "line), spec (a bad submission), refused, config, lock_timeout, no_such_job (127), "
                    "ambiguous, store, permission, broken_record, interrupted, ended and running (kill, "
                    "cancel), not_paused (resume), not_cleaned (clean), error (any other)",
                ),
                "option": (_opt(_S), "the option at fault (--mem), where one is; else null"),
                "value": (_opt(_S), "the value given to it, where known; else null"),
            }
        ), "a failure under --json (one line on stderr)"
    if kind == "logs":
        return _obj(
            {
                "stream": (
                    {"enum": ["stdout", "stderr", "hook"]},
                    "the log the line is from: the job's stdout or "
                    "stderr, or the stop hook's output (--hook); stdout's lines come before stderr's",
                ),
                "line": (_I, "its number in that log, from 1 (as grep -n and --lines count: at newlines)"),
                "text": (_S, "the line without its newline; bytes that are not UTF-8 become U+FFFD"),
                "context": (_B, "true: a line shown only as -C context of a --grep match; false otherwise"),
            },
            closed=True,
        ), "one line of qex logs --json"
    if kind == "message":
        from qex.base.say import LEVELS

        return _obj(
            {
                "level": (
                    {"enum": list(LEVELS)},
                    "warning: something to look at (the command did what was asked all "
                    "the same); notice: what happened, for a person (a job joined, a pause in force, ...)",
                ),
                "message": (_S, "the sentence qex prints without --json (after 'qex: ' or 'qex: warning: ')"),
            }
        ), "a warning or a notice under --json (one line on stderr)"
    raise ValueError(kind)


def schema_body(kind: str) -> tuple[dict, str]:
    if kind == "status":
        return status_schema(all_required=True), "qex job record (status.json)"  # qex writes every field
    if kind == "event":
        from qex.base.states import STATES
        from qex.store.events import CHANGES, Event
        from qex.store.events import KINDS as EVENTS

        body = object_schema(Event, closed=False)
        p = body["properties"]
        p["event"] = {"description": p["event"]["description"], "enum": list(EVENTS)}
        for name in ("state", "previous"):
            p[name] = {"description": p[name]["description"], **nullable_enum(STATES)}
        p["change"] = {"description": p["change"]["description"], **nullable_enum(list(CHANGES))}
        p["job"] = {"description": p["job"]["description"], "anyOf": [status_schema(all_required=False), _NULL]}
        return body, "qex event (one line of qex events --json)"
    if kind == "job":
        from qex.jobs.jobfile import JobFile

        return object_schema(JobFile, closed=True), "qex job file"
    if kind == "pipeline":
        from qex.jobs.pipeline import PipelineFile

        body = object_schema(PipelineFile, closed=True)
        jobs = body["properties"]["jobs"]
        jobs["minItems"] = 1
        jobs["items"]["required"] = ["command", "name"]  # a stage is a job-file table with a name
        dedupe = jobs["items"]["properties"]["dedupe_key"]
        jobs["items"]["properties"]["dedupe_key"] = {
            "description": dedupe["description"] + " (not in a stage)",
            "type": "null",
        }  # a stage cannot be deduplicated
        return body, "qex pipeline file"
    return _outputs(kind)


def schema_for(kind: str) -> dict:
    if kind not in KINDS:
        raise ValueError(kind)
    body, title = schema_body(kind)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:qex:schema:{kind}:{VERSION}",
        "title": title,
        "$comment": f"qex {VERSION}: {KINDS[kind]}",
        **body,
    }
