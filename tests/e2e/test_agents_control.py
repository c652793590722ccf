"""Scripts and agents (issue 25), the rest: bulk stop by selection (kill/cancel --tag,
--group, --state, --name, --mine), every line on stderr JSON under --json (warnings and
notices too), and a bad value on a command outside the exit-code table is 2 there."""

import json

import pytest
from e2e_helpers import gated, open_gate

jsonschema = pytest.importorskip("jsonschema")

CONFIG = '[budget]\ncpu = 4\nmem = "4GB"\n[defaults]\ncpu = 1\nmem = "50MB"\n'


def _validator(q, kind):
    schema = json.loads(q.run("schema", kind, check=0).stdout)
    return jsonschema.validators.validator_for(schema)(schema)


def _states(q, ids):
    return [q.record(j)["state"] for j in ids]


def test_kill_and_cancel_select_by_tag_name_state_group_and_mine(q):
    q.write_config(CONFIG)
    kill_schema, error_schema = _validator(q, "kill"), _validator(q, "error")
    a = q.submit("--tag", "sweep", "--name", "train-a", "--", *gated(q, "a"))
    b = q.submit("--tag", "sweep", "--tag", "lr", "--name", "train-b", "--", *gated(q, "b"))
    c = q.submit("--name", "other", "--", *gated(q, "c"))
    for job in (a, b, c):
        q.wait_state(job, "running")
    d = q.submit("--tag", "sweep", "--after", a, "--", "true")  # queued behind a
    done = q.submit("--tag", "sweep", "--", "true")
    q.wait_state(done, "completed")

    proc = q.run("kill", "--tag", "sweep", "--tag", "lr", "--json", check=0)  # every tag given must match
    answer = json.loads(proc.stdout)
    assert not list(kill_schema.iter_errors(answer)), answer
    assert answer["jobs"] == [{"id": b, "result": "stopped", "state": "killed"}]
    assert _states(q, (a, b, c, d)) == ["running", "killed", "running", "queued"]

    proc = q.run("cancel", "--tag", "sweep", check=0)  # the running one goes on: no fault in a selection
    assert proc.stdout.split() == [d, "cancelled"] and f"{a[:8]} is running and goes on" in proc.stderr
    assert _states(q, (a, d, done)) == ["running", "cancelled", "completed"]  # an ended job is never selected

    for argv in (("--tag", "nothing-has-it"), ("--name", "train-b"), ("--state", "queued")):
        plain = q.run("kill", *argv)
        assert plain.returncode == 127 and "of yours" in plain.stderr, (argv, plain.returncode, plain.stderr)
        as_json = q.run("kill", "--json", *argv)
        doc = json.loads(as_json.stderr)
        assert as_json.returncode == 127 and as_json.stdout == "", (argv, as_json.stdout)
        assert not list(error_schema.iter_errors(doc)) and doc["kind"] == "no_such_job" and doc["code"] == 127

    for argv, words in (
        (("kill",), "needs ids, or --tag"),
        (("kill", a, "--tag", "sweep"), "not both"),
        (("cancel", "--state", "completed"), "no active state"),
        (("kill", "--group", a), "is a job, not a group"),
    ):
        proc = q.run(*argv)
        assert proc.returncode == 2 and words in proc.stderr, (argv, proc.returncode, proc.stderr)
    assert _states(q, (a, c)) == ["running", "running"]

    proc = q.run("kill", "--name", "train-*", "--state", "running", check=0)  # a shell pattern, as list --name
    assert proc.stdout.split() == [a, "killed"]
    proc = q.run("kill", "--mine", "--json", check=0)
    assert [(j["id"], j["state"]) for j in json.loads(proc.stdout)["jobs"]] == [(c, "killed")]
    assert _states(q, (a, b, c)) == ["killed", "killed", "killed"]
    for name in "abc":
        open_gate(q, name)


def test_kill_group_selection_takes_only_the_groups_active_jobs(q, tmp_path):
    q.write_config(CONFIG)
    lines = tmp_path / "lines"
    lines.write_text("1\n2\n")
    script = f"[ \"$1\" = 1 ] || exit 0; while [ ! -e '{q.gate('g')}' ]; do sleep 0.02; done"
    group = json.loads(
        q.run("submit", "--json", "--each-line", lines, "--", "sh", "-c", script, "sh", "{}", check=0).stdout
    )
    first, second = (j["id"] for j in group["jobs"])
    q.wait_state(second, "completed")
    q.wait_state(first, "running")
    loner = q.submit("--", *gated(q, "l"))
    proc = q.run("kill", "--group", group["name"], "--json", check=0)
    assert [j["id"] for j in json.loads(proc.stdout)["jobs"]] == [first]
    assert _states(q, (first, second)) == ["killed", "completed"] and q.record(loner)["state"] in ("queued", "running")
    q.run("kill", loner, check=0)
    open_gate(q, "g")


def test_under_json_every_line_on_stderr_is_json_warnings_and_notices_too(q):
    q.write_config(CONFIG)
    message = _validator(q, "message")
    q.run("pause", "queue", check=0)
    proc = q.run("submit", "--json", "--mem", "100", "--", "true", check=0)  # a bare size: a warning; a pause: a notice
    plain = q.run("submit", "--mem", "100", "--", "true", check=0)
    docs = [json.loads(line) for line in proc.stderr.splitlines()]
    assert docs and all(not list(message.iter_errors(d)) for d in docs), proc.stderr
    assert [d["level"] for d in docs] == ["warning", "notice"], docs
    said = [f"qex: warning: {docs[0]['message']}", f"qex: {docs[1]['message']}"]
    assert said == plain.stderr.replace(plain.stdout.strip()[:8], json.loads(proc.stdout)["id"][:8]).splitlines()
    q.run("resume", check=0)


def test_a_bad_value_on_a_command_outside_the_exit_code_table_is_2(q):
    """`list --last abc` was 121 while `list --since abc` was 2: every bad value on the
    command line of a command outside the table is 2 (qex.cli.error_exit_code)."""
    for argv in (
        ("list", "--last", "abc"),
        ("list", "--since", "abc"),
        ("clean", "--older-than", "abc"),
        ("events", "--timeout", "abc"),
        ("events", "--count", "x"),
        ("logs", "--tail", "y", "x"),
        ("list", "--lock-timeout", "soon"),
    ):
        proc = q.run(*argv)
        assert proc.returncode == 2 and proc.stderr.startswith(f"qex: {argv[1]}: "), (
            argv,
            proc.returncode,
            proc.stderr,
        )
    assert q.run("submit", "--priority", "high", "--", "true").returncode == 121  # the table's commands: 121
