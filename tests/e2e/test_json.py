"""Scripts and agents (issue 25): every command that reports or changes something has
--json and a schema (`qex schema KIND`) that describes every field; everything it
prints validates; under --json a failure is one JSON object on stderr, with the
exit code it has without --json."""

import json
import os

import pytest
from e2e_helpers import gated, open_gate

jsonschema = pytest.importorskip("jsonschema")

CONFIG = '[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "100MB"\n'


def _schemas(q) -> dict:
    from qex.cli.schema import KINDS

    out = {}
    for kind in KINDS:
        proc = q.run("schema", kind, check=0)
        schema = json.loads(proc.stdout)
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        out[kind] = cls(schema)
    return out


def _valid(validators, kind, text, what):
    doc = json.loads(text)
    errors = sorted(validators[kind].iter_errors(doc), key=str)
    assert not errors, f"{what}: " + "; ".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
    return doc


def test_every_command_that_reports_has_json_and_a_schema():
    """A walk of the parser: a new command cannot forget --json or its schema."""
    import argparse

    from qex.cli import parser
    from qex.cli.schema import KINDS, NO_JSON, OUTPUTS

    top = parser.build()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(parser.COMMANDS)
    for name, command in sub.choices.items():
        options = {o for a in command._actions for o in a.option_strings}
        if name in NO_JSON:
            assert name not in OUTPUTS, name
            continue
        assert "--json" in options, f"qex {name} reports or changes something and has no --json"
        assert name in OUTPUTS and OUTPUTS[name], f"qex {name} --json has no schema (qex.cli.schema.OUTPUTS)"
        assert all(k in KINDS for k in OUTPUTS[name]), (name, OUTPUTS[name])


def _properties(schema, path="$"):
    """Every (path, property schema) of a schema, nested ones included."""
    if isinstance(schema, dict):
        for name, prop in (schema.get("properties") or {}).items():
            yield f"{path}.{name}", prop
            yield from _properties(prop, f"{path}.{name}")
        for key in ("items", "additionalProperties"):
            if isinstance(schema.get(key), dict):
                yield from _properties(schema[key], f"{path}[]")
        for alt in schema.get("anyOf") or ():
            yield from _properties(alt, path)


def test_every_property_of_every_schema_has_a_description(q):
    from qex.cli.schema import KINDS
    from qex.cli.schema_records import HOLDERS

    missing = []
    for kind in KINDS:
        schema = json.loads(q.run("schema", kind, check=0).stdout)
        assert schema["$id"].startswith(f"urn:qex:schema:{kind}:"), schema.get("$id")
        missing += [f"{kind} {p}" for p, prop in _properties(schema) if not prop.get("description")]
    assert not missing, missing
    status = json.loads(q.run("schema", "status", check=0).stdout)
    holder = status["properties"]["blocked_holder"]
    assert set(holder["anyOf"][0]["enum"]) == set(HOLDERS)
    assert all(word in holder["description"] for word in HOLDERS)
    assert status["properties"]["usage"]["properties"]["peak_from"]["anyOf"][0]["enum"] == [
        "cgroup",
        "proc-sample",
        "rusage",
    ]
    assert len(status["properties"]) >= 49


def test_every_json_output_validates_against_its_schema(q, tmp_path):
    q.write_config(CONFIG)
    v = _schemas(q)

    done = _valid(v, "submit", q.run("submit", "--json", "--name", "quick", "--", "true", check=0).stdout, "submit")
    waited = _valid(v, "wait", q.run("wait", "--json", done["id"], check=0).stdout, "wait")
    assert [r["id"] for r in waited] == [done["id"]]  # an array, even for one id
    shown = _valid(v, "list", q.run("status", "--json", done["id"], check=0).stdout, "status")
    assert [r["id"] for r in shown] == [done["id"]]
    again = _valid(v, "rerun", q.run("rerun", "--json", "quick", check=0).stdout, "rerun")
    assert again["rerun_of"] == done["id"]

    lines = tmp_path / "lines"
    lines.write_text("a\nb\n")
    fan = _valid(
        v, "group", q.run("submit", "--each-line", lines, "--json", "--", "echo", "{}", check=0).stdout, "each-line"
    )
    assert len(fan["jobs"]) == 2
    pipe = tmp_path / "p.toml"
    pipe.write_text(
        '[[jobs]]\nname = "one"\ncommand = ["true"]\n[[jobs]]\nname = "two"\ncommand = ["true"]\nneeds = ["one"]\n'
    )
    group = _valid(v, "group", q.run("pipeline", "--json", pipe, check=0).stdout, "pipeline")
    assert [j["name"] for j in group["jobs"]] == ["one", "two"]
    members = _valid(v, "wait", q.run("wait", "--json", group["group"], fan["group"], check=0).stdout, "wait group")
    assert len(members) == 4
    _valid(v, "list", q.run("status", "--json", group["group"], check=0).stdout, "status group")

    running = q.submit("--", *gated(q, "run"))
    q.wait_state(running, "running")
    _valid(v, "pauses", q.run("pause", "--json", check=0).stdout, "pause alone")
    paused = _valid(v, "pause", q.run("pause", "queue", "--json", "--reason", "test", check=0).stdout, "pause")
    assert paused["made"] is True
    queued = q.submit("--", "true")
    _valid(v, "pauses", q.run("pause", "--json", check=0).stdout, "pause alone")
    _valid(v, "list", q.run("list", "--json", check=0).stdout, "list")
    _valid(v, "info", q.run("info", "--json", check=0).stdout, "info")
    cancelled = _valid(v, "cancel", q.run("cancel", "--json", queued, check=0).stdout, "cancel")
    assert cancelled["jobs"] == [{"id": queued, "result": "cancelled", "state": "cancelled"}]
    _valid(v, "resume", q.run("resume", "--json", check=0).stdout, "resume")
    killed = _valid(v, "kill", q.run("kill", "--json", running, check=0).stdout, "kill")
    assert killed["jobs"][0]["result"] == "stopped" and killed["jobs"][0]["state"] == "killed"
    open_gate(q, "run")

    config = _valid(v, "config", q.run("config", "show", "--json", check=0).stdout, "config")
    assert config["values"]["budget.cpu"]["value"] == 2 and config["values"]["budget.cpu"]["resolved"] == 2
    assert config["values"]["defaults.cpu"]["resolved"] == 1  # cores, not millicores
    _valid(v, "version", q.run("version", "--json", check=0).stdout, "version")
    echoed = q.run("logs", "--json", fan["jobs"][1]["id"], check=0).stdout.splitlines()
    assert [_valid(v, "logs", line, "logs")["text"] for line in echoed] == ["b"]
    events = q.run("events", "--json", "--since", "start", "--count", "3", "--timeout", "5", check=0)
    for line in events.stdout.splitlines():
        _valid(v, "event", line, "event")
    _valid(v, "clean", q.run("clean", "--json", "--all", check=0).stdout, "clean")
    shared = tmp_path / "shared"
    made = q.run("init", "--shared", shared, "--json")
    if made.returncode == 0:  # (a machine whose user has no group of its own may refuse)
        _valid(v, "init", made.stdout, "init")


def _error(v, proc, what):
    """stderr is one JSON object (the error), whose code is the exit code."""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, (what, proc.stderr)
    doc = _valid(v, "error", lines[0], what)
    assert doc["code"] == proc.returncode, (what, doc, proc.returncode)
    return doc


def test_under_json_a_failure_is_one_json_object_on_stderr_with_the_same_exit_code(q):
    q.write_config(CONFIG)
    v = _schemas(q)
    ended = q.submit("--", "true")
    q.wait_state(ended, "completed")
    running = q.submit("--", *gated(q, "run"))
    q.wait_state(running, "running")
    cases = [
        (["status", "nosuchjob"], 127, "no_such_job", None),
        (["wait", "nosuchjob"], 127, "no_such_job", None),
        (["submit", "--mem", "-5GB", "--", "true"], 121, "spec", ("--mem", "-5GB")),
        (["submit", "--cpu", "lots", "--", "true"], 121, "spec", ("--cpu", "lots")),
        (["list", "--bogus"], 2, "usage", ("--bogus", None)),
        (["clean", "--state", "nope"], 2, "usage", ("--state", "nope")),
        (["kill", ended], 1, "ended", None),
        (["cancel", running], 1, "running", None),
        (["clean", running], 1, "not_cleaned", None),
        (["resume"], 1, "not_paused", None),
        (["pause", "lock", "bad name"], 2, "usage", None),
    ]
    for argv, code, kind, at_fault in cases:
        plain = q.run(*argv)
        assert plain.returncode == code, (argv, plain.returncode, plain.stderr)
        assert plain.stderr.startswith("qex: "), (argv, plain.stderr)
        proc = q.run(*argv, "--json") if "--" not in argv else q.run(argv[0], "--json", *argv[1:])
        assert proc.returncode == code, (argv, proc.returncode, proc.stderr)
        doc = _error(v, proc, argv)
        assert doc["kind"] == kind, (argv, doc)
        if at_fault is not None:
            assert (doc["option"], doc["value"]) == at_fault, (argv, doc)
        assert doc["error"] == plain.stderr.strip().splitlines()[-1].removeprefix("qex: ") or kind in (
            "ended",
            "running",
            "not_cleaned",
        ), (argv, doc, plain.stderr)
    open_gate(q, "run")
    q.wait_state(running, "completed")


def test_status_json_with_show_env_stays_json(q):
    job = q.submit("--env", "SECRET_FOR_TEST=1", "--", "true")
    q.wait_state(job, "completed")
    records = json.loads(q.run("status", job, "--json", "--show-env", check=0).stdout)
    assert records[0]["env"]["SECRET_FOR_TEST"] == "1"
    assert os.path.isdir(q.state)


def test_help_agents_is_the_page_for_agents_and_ships_as_docs_agents_md(q):
    text = q.run("help", "agents", check=0).stdout
    for needed in (
        "events --json",
        "--since",
        "qex schema",
        "--id-file",
        "--dedupe-key",
        '"error"',
        '"kind"',
        "blocked_holder",
        "blocked_reason",
        "121",
        "127",
        "never poll".capitalize()[:5],
    ):
        assert needed in text, needed
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(here, "docs", "agents.md")) as fh:
        assert text in fh.read()
    with open(os.path.join(here, "skills", "qex", "SKILL.md")) as fh:  # the skill a coding agent loads
        skill = fh.read()
    assert skill.startswith("---\nname: qex\ndescription: ") and text in skill


def test_every_error_kind_is_in_the_error_schema():
    from qex.base import errors

    kinds = {cls.kind for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, errors.QexError)}
    assert kinds <= set(errors.KINDS)
