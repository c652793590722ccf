"""Records and schemas: every record qex writes validates against `qex schema status`,
readers tolerate unknown and missing fields, files have private modes, and a bad
config is refused (never the defaults, never a hang)."""

import json
import os
import stat

import pytest
from e2e_helpers import FINAL, gated, open_gate

jsonschema = pytest.importorskip("jsonschema")

SMALL = '[budget]\ncpu = 1\nmem = "4GB"\n[defaults]\nmem = "100MB"\n'
CONFIG = '[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "100MB"\n'


def _forced(q):
    """A job above the budget (1 core of 0.5) and within any machine: it runs alone, forced."""
    q.write_config(CONFIG.replace("cpu = 2", 'cpu = "0.5"'))
    try:
        return q.run("submit", "--wait", "--cpu", "1", "--", "true")
    finally:
        q.write_config(CONFIG)


def validator(q, kind: str):
    proc = q.run("schema", kind)
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def assert_valid(v, doc, what):
    errors = sorted(v.iter_errors(doc), key=str)
    assert not errors, f"{what}: " + "; ".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_records_of_every_state_validate_against_the_status_schema(q):
    q.write_config(SMALL)
    v = validator(q, "status")
    blocker = q.submit("--name", "blocker", "--tag", "t", "--", *gated(q, "a", "exit 3"))
    q.wait_state(blocker, "running")
    queued = q.submit("--priority", "-5", "--", "true")
    cancelled = q.submit("--", "true")
    needs = q.submit("--needs", blocker, "--", "true")  # skipped: blocker fails
    expired = q.submit("--max-queue-time", "0.3", "--", "true")
    assert q.run("cancel", cancelled).returncode == 0
    seen = {}
    for rec in q.records():  # queued, running, cancelled as they are now
        assert_valid(v, rec, f"{rec['state']} record")
        seen.setdefault(rec["state"], rec["id"])
    assert q.run("wait", "--timeout", "10", expired).returncode == 123
    open_gate(q, "a")
    assert q.run("wait", "--timeout", "10", needs).returncode == 126
    assert q.run("wait", "--timeout", "10", queued).returncode == 0

    q.write_config(CONFIG)
    made = [
        q.run("submit", "--wait", "--", "sh", "-c", "echo x; exit 0"),  # completed
        q.run("submit", "--wait", "--", "sh", "-c", "exit 200"),  # failed, 97
        q.run("submit", "--wait", "--", "sh", "-c", "kill -SEGV $$"),  # failed, signal
        q.run("submit", "--wait", "--timeout", "0.3", "--", "sleep", "30"),  # timeout
        _forced(q),  # forced (oversized)
        q.run("submit", "--wait", "--retries", "1", "--", "false"),  # two attempts
    ]
    assert [p.returncode for p in made] == [0, 97, 98, 125, 0, 1], [p.stderr for p in made]
    killme = q.submit("--", *gated(q, "never"))
    q.wait_state(killme, "running")
    assert_valid(v, json.loads(q.run("status", "--json", killme).stdout)[0], "running via status --json")
    assert q.run("kill", killme).returncode == 0
    q.wait_state(killme, "killed")

    for rec in q.records():
        rec = q.wait_state(rec["id"], FINAL)
        assert_valid(v, rec, f"{rec['state']} record on disk")
        seen.setdefault(rec["state"], rec["id"])
        shown = q.run("status", "--json", rec["id"])
        assert shown.returncode == 0
        assert_valid(v, json.loads(shown.stdout)[0], f"{rec['state']} record from status --json")
    for rec in json.loads(q.run("list", "--json").stdout):
        assert_valid(v, rec, f"{rec['state']} record from list --json")
    assert {"queued", "running", "completed", "failed", "killed", "timeout", "cancelled", "skipped", "expired"} <= set(
        seen
    ), sorted(seen)
    assert any(r.get("forced") for r in q.records())
    assert any(len(r["attempts"]) == 2 for r in q.records())


CONTRACT_FIELDS = (
    "id name state exit_code signal command cwd owner group tags priority claims claim_source "
    "assigned submitted_at started_at ended_at pid attempts usage error blocked_reason "
    "dedupe_key needs after logs_dropped forced"
).split()


def test_every_record_carries_every_field_the_contract_says_a_reader_can_rely_on(q):
    q.write_config(SMALL)
    running = q.submit("--", *gated(q, "a"))
    queued = q.submit("--", "true")
    cancelled = q.submit("--", "true")
    assert q.run("cancel", cancelled).returncode == 0
    q.wait_state(running, "running")
    missing = {}
    for job in (running, queued, cancelled):
        shown = json.loads(q.run("status", "--json", job).stdout)[0]
        missing[shown["state"]] = [k for k in CONTRACT_FIELDS if k not in shown]
    for rec in json.loads(q.run("list", "--json").stdout):
        missing["list " + rec["state"]] = [k for k in CONTRACT_FIELDS if k not in rec]
    open_gate(q, "a")
    q.wait_state(queued, "completed")
    assert not any(missing.values()), missing


def test_the_job_schema_validates_a_job_file_that_qex_accepts(q):
    q.write_config(CONFIG)
    v = validator(q, "job")
    sample = {
        "name": "sample-job",
        "command": ["sh", "-c", "echo $GREETING"],
        "resources": {"cpu": 1, "mem": "100MB"},
        "env": {"GREETING": "hello"},
        "tags": ["x", "y"],
        "timeout": "30s",
        "retries": 1,
        "priority": 2,
    }
    assert_valid(v, sample, "sample job file")
    assert not v.is_valid({**sample, "bogus": 1})
    assert not v.is_valid({"name": "no-command"})

    path = os.path.join(q.root, "job.json")
    with open(path, "w") as fh:
        json.dump(sample, fh)
    proc = q.run("submit", "--wait", "--job", path)
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(proc.stdout)
    assert (rec["name"], rec["tags"], rec["priority"]) == ("sample-job", ["x", "y"], 2)
    assert rec["claims"]["mem"] == 100 * 1024**2
    with open(os.path.join(q.state, "jobs", rec["id"], "stdout.log")) as fh:
        assert fh.read() == "hello\n"
    with open(path, "w") as fh:
        json.dump({**sample, "bogus": 1}, fh)
    assert q.run("submit", "--job", path).returncode == 121


def test_a_record_with_an_unknown_field_and_missing_optional_fields_still_loads(q):
    q.write_config(CONFIG)
    v = validator(q, "status")
    job = json.loads(q.run("submit", "--wait", "--tag", "t", "--", "true", check=0).stdout)["id"]
    other = json.loads(q.run("submit", "--wait", "--", "true", check=0).stdout)["id"]
    rec = q.record(job)
    # as an older qex would have written it: these fields missing (a reader fills the defaults)
    dropped = [
        k
        for k in (
            "tags",
            "usage",
            "logs_dropped",
            "claim_source",
            "dedupe_key",
            "forced",
            "after",
            "needs",
            "group",
            "blocked_reason",
            "attempts",
            "signal",
        )
        if k in rec
    ]
    assert len(dropped) >= 6
    for key in dropped:
        del rec[key]
    rec["from_the_future"] = {"nested": [1, 2, 3]}
    path = os.path.join(q.state, "jobs", job, "status.json")
    with open(path + ".tmp", "w") as fh:
        json.dump(rec, fh)
    os.replace(path + ".tmp", path)

    status = q.run("status", job)
    assert status.returncode == 0, status.stderr
    assert "completed" in status.stdout and "Traceback" not in status.stderr
    as_json = q.run("status", "--json", job)
    assert as_json.returncode == 0, as_json.stderr
    loaded = json.loads(as_json.stdout)[0]
    assert loaded["id"] == job and loaded["state"] == "completed"
    assert_valid(v, loaded, "a record with fields left out, as status --json shows it")
    assert q.run("wait", job).returncode == 0
    assert q.run("status", "--quiet", job).returncode == 0
    listing = q.run("list", "--json")
    assert listing.returncode == 0 and "Traceback" not in listing.stderr
    assert {r["id"] for r in json.loads(listing.stdout)} == {job, other}
    assert q.run("submit", "--wait", "--", "true").returncode == 0  # a pass reads it too


def test_the_private_spec_is_0600_in_a_0700_job_directory(q):
    q.write_config(CONFIG)
    job = q.submit("--env", "TOKEN_E2E=s3cret", "--", "true")
    q.wait_state(job, "completed")
    jobdir = os.path.join(q.state, "jobs", job)
    assert stat.S_IMODE(os.stat(q.state).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(jobdir).st_mode) == 0o700
    holders = []
    for name in os.listdir(jobdir):
        path = os.path.join(jobdir, name)
        with open(path, "rb") as fh:
            if b"s3cret" in fh.read():
                holders.append(name)
                assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, name
    assert holders, "the spec (command, environment) is in the job directory"
    assert "status.json" not in holders  # the record does not carry the environment


def test_config_show_lists_budget_cpu_with_its_source(q):
    shown = q.run("config", "show")  # no config file: the defaults
    assert shown.returncode == 0, shown.stderr
    line = next(ln for ln in shown.stdout.splitlines() if ln.startswith("budget.cpu"))
    assert "default" in line
    as_json = json.loads(q.run("config", "show", "--json").stdout)
    assert as_json["values"]["budget.cpu"]["source"] == "default"

    q.write_config(CONFIG)
    shown = q.run("config", "show")
    line = next(ln for ln in shown.stdout.splitlines() if ln.startswith("budget.cpu"))
    assert q.config in line and "2" in line
    as_json = json.loads(q.run("config", "show", "--json").stdout)
    assert as_json["values"]["budget.cpu"]["source"] == q.config
    assert as_json["values"]["budget.mem"]["source"] == q.config
    assert as_json["values"]["defaults.cpu"]["source"] == "default"


BAD_CONFIGS = {
    "fifo": (None, None),
    "directory": (None, None),
    "unknown-key": ("[budget]\ncpu = 2\nfrobnicate = 1\n", "frobnicate"),
    "unknown-table": ("[budget]\ncpu = 2\n[nonsense]\nx = 1\n", "nonsense"),
    "bad-value": ('[budget]\ncpu = "lots"\n', "cpu"),
    "not-toml": ("[budget\ncpu = = 2\n", None),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_a_bad_config_makes_submit_exit_121_naming_file_and_key_and_runs_nothing(q, case):
    text, key = BAD_CONFIGS[case]
    if case == "fifo":
        os.mkfifo(q.config)
    elif case == "directory":
        os.mkdir(q.config)
    else:
        q.write_config(text)
    marker = os.path.join(q.root, "ran")
    proc = q.run("submit", "--", "touch", marker, timeout=5)  # a hang fails here
    assert proc.returncode == 121, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    assert q.config in proc.stderr
    if key:
        assert key in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not os.path.exists(marker)
    jobs = os.path.join(q.state, "jobs")
    assert not os.path.isdir(jobs) or os.listdir(jobs) == []
    for args in (["run", "--", "touch", marker], ["list"], ["info"]):
        other = q.run(*args, timeout=5)
        assert other.returncode in (1, 121), (args, other.returncode, other.stderr)
        assert q.config in other.stderr and "Traceback" not in other.stderr
    assert not os.path.exists(marker)
