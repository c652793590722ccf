"""Work in stages, seen from outside: dependencies, pipelines, a group as a handle, rerun.

Every test runs the real `qex` in real processes on a private state directory;
jobs wait on gate files the test creates, never on sleeps.
"""

import json
import os
import subprocess

import pytest
from e2e_helpers import gated, open_gate

CONFIG = '[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "100MB"\n'
FINAL = {"completed", "failed", "killed", "timeout", "oom", "expired", "cancelled", "skipped"}


@pytest.fixture
def qq(q):
    q.write_config(CONFIG)
    return q


def write(q, name: str, text: str) -> str:
    path = os.path.join(q.root, name)
    with open(path, "w") as fh:
        fh.write(text)
    return path


def toml_list(argv: list[str]) -> str:
    return json.dumps(argv)  # a JSON list of strings is a TOML array


def pipeline(q, text: str, name: str = "pipe.toml", *extra) -> tuple[str, subprocess.CompletedProcess]:
    proc = q.run("pipeline", write(q, name, text), *extra)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    group = proc.stdout.strip()
    assert len(group) == 36 and "\n" not in group, proc.stdout
    return group, proc


def group_file(q, group: str) -> str:
    return os.path.join(q.state, "groups", f"{group}.json")


def members(q, group: str) -> list[dict]:
    with open(group_file(q, group)) as fh:
        ids = json.load(fh)["members"]
    return [q.record(j) for j in ids]


def by_name(q, group: str) -> dict[str, dict]:
    return {r["name"]: r for r in members(q, group)}


def job_dirs(q) -> list[str]:
    jobs = os.path.join(q.state, "jobs")
    return sorted(n for n in os.listdir(jobs)) if os.path.isdir(jobs) else []


def three_stages(q, second_then="exit 3", first_gate=None) -> str:
    first = gated(q, first_gate) if first_gate else ["true"]
    return f"""
name = "three"
[[jobs]]
name = "third"
command = ["sh", "-c", "echo third ran"]
needs = ["second"]
[[jobs]]
name = "first"
command = {toml_list(first)}
[[jobs]]
name = "second"
command = ["sh", "-c", "{second_then}"]
needs = ["first"]
"""


# -- the must-show pipeline ----------------------------------------------------------------------


def test_a_pipeline_whose_second_stage_fails_skips_the_third_naming_the_second(qq):
    group, proc = pipeline(qq, three_stages(qq))
    assert qq.run("wait", group).returncode == 3  # the second's own code
    stages = by_name(qq, group)
    assert [r["name"] for r in members(qq, group)] == ["first", "second", "third"]  # a stage after what it needs
    assert stages["first"]["state"] == "completed"
    assert stages["second"]["state"] == "failed" and stages["second"]["exit_code"] == 3
    third = stages["third"]
    assert third["state"] == "skipped"
    assert third["skipped_root"] == stages["second"]["id"]
    assert stages["second"]["id"][:8] in third["error"] and "failed" in third["error"]
    assert third["needs"] == [stages["second"]["id"]]
    assert all(r["group"] == group and r["group_name"] == "three" for r in stages.values())
    # the group is a handle: status --json is an array in submission order, and for a job too
    status = qq.run("status", group, "--json")
    assert status.returncode == 0, status.stderr
    assert [r["name"] for r in json.loads(status.stdout)] == ["first", "second", "third"]
    one = qq.run("status", stages["third"]["id"], "--json")
    assert json.loads(one.stdout)[0]["state"] == "skipped"
    assert qq.run("status", group, "--quiet").returncode == 3
    assert qq.run("wait", "three").returncode == 3  # by the group's name too
    for r in stages.values():  # stderr named every stage with its id
        assert f"{r['id']}  {r['name']}" in proc.stderr


def test_a_skipped_chain_names_the_first_failed_job_not_the_one_before_it(qq):
    root = qq.submit("--name", "root", "--", *gated(qq, "a", "exit 5"))
    middle = qq.submit("--needs", root, "--", "true")
    last = qq.submit("--needs", middle, "--", "true")
    qq.wait_state(root, "running")
    assert qq.record(last)["state"] == "queued"
    assert middle[:8] in qq.record(last)["blocked_reason"]
    open_gate(qq, "a")
    assert qq.run("wait", last).returncode == 126
    rec = qq.record(last)
    assert rec["skipped_root"] == root
    assert root[:8] in rec["error"] and "failed" in rec["error"]
    assert qq.record(middle)["state"] == "skipped"


def test_after_runs_a_cleanup_stage_after_a_failure(qq):
    group, _ = pipeline(
        qq,
        """
[[jobs]]
name = "cleanup"
command = ["sh", "-c", "echo cleaned"]
after = ["work"]
[[jobs]]
name = "work"
command = ["sh", "-c", "exit 7"]
[[jobs]]
name = "report"
command = ["true"]
needs = ["work"]
""",
    )
    assert qq.run("wait", group).returncode == 7
    stages = by_name(qq, group)
    assert stages["work"]["state"] == "failed"
    assert stages["cleanup"]["state"] == "completed"
    assert stages["report"]["state"] == "skipped"
    assert qq.run("logs", stages["cleanup"]["id"]).stdout == "cleaned\n"
    assert stages["cleanup"]["started_at"] >= stages["work"]["ended_at"]


def test_kill_of_a_group_ends_the_running_stage_and_takes_out_the_waiting_ones(qq):
    group, _ = pipeline(qq, three_stages(qq, second_then="exit 0", first_gate="never"))
    first = qq.wait_state(by_name(qq, group)["first"]["id"], "running")
    assert os.path.exists(f"/proc/{first['pid']}")
    proc = qq.run("kill", group)
    assert proc.returncode == 0, proc.stderr
    stages = by_name(qq, group)
    assert stages["first"]["state"] == "killed"
    assert stages["second"]["state"] == "cancelled" and stages["third"]["state"] == "cancelled"
    assert qq.run("wait", group).returncode == 125

    def gone():
        try:
            with open(f"/proc/{first['pid']}/stat") as fh:
                return fh.read().split(") ")[1][0] in "ZX"
        except OSError:
            return True

    qq.wait_for(gone, timeout=10, what="the stage's process to be gone")
    again = qq.run("kill", group)  # every stage has ended: nothing to do, and no fault
    assert again.returncode == 0, again.stderr


def test_clean_of_a_group_removes_every_record_and_the_group(qq):
    group, _ = pipeline(qq, three_stages(qq))
    qq.run("wait", group)
    ids = [r["id"] for r in members(qq, group)]
    proc = qq.run("clean", group)
    assert proc.returncode == 0, proc.stderr
    assert not any(j in job_dirs(qq) for j in ids)
    assert not os.path.exists(group_file(qq, group))
    for verb in ("wait", "status", "kill", "cancel", "clean", "logs"):
        gone = qq.run(verb, group)
        assert gone.returncode == 127, (verb, gone.stderr)
        assert "no job or group" in gone.stderr


def test_clean_of_a_group_with_a_running_stage_keeps_it_and_the_group(qq):
    group, _ = pipeline(qq, three_stages(qq, second_then="exit 0", first_gate="a"))
    first = by_name(qq, group)["first"]["id"]
    qq.wait_state(first, "running")
    proc = qq.run("clean", group)
    assert proc.returncode == 1 and "kill or cancel it first" in proc.stderr
    assert os.path.exists(group_file(qq, group)) and first in job_dirs(qq)
    open_gate(qq, "a")
    assert qq.run("wait", group).returncode == 0


def test_cancel_of_a_group_takes_out_the_queued_stages_and_leaves_the_running_one(qq):
    group, _ = pipeline(qq, three_stages(qq, second_then="exit 0", first_gate="a"))
    first = by_name(qq, group)["first"]["id"]
    qq.wait_state(first, "running")
    proc = qq.run("cancel", group)
    assert proc.returncode == 0, proc.stderr
    assert "goes on" in proc.stderr
    stages = by_name(qq, group)
    assert stages["second"]["state"] == "cancelled" and stages["third"]["state"] == "cancelled"
    assert stages["first"]["state"] == "running"
    open_gate(qq, "a")
    assert qq.wait_state(first, FINAL)["state"] == "completed"
    assert qq.run("wait", group).returncode == 125  # the first that did not succeed: cancelled


def test_logs_of_a_group_refuses_and_names_the_stages(qq):
    group, _ = pipeline(qq, three_stages(qq))
    qq.run("wait", group)
    proc = qq.run("logs", group)
    assert proc.returncode == 2, proc.stderr
    for name in ("first", "second", "third"):
        assert name in proc.stderr
    assert proc.stdout == ""


def test_list_group_shows_the_members_in_order_by_id_prefix_or_name(qq):
    group, _ = pipeline(qq, three_stages(qq))
    other = qq.submit("--", "true")
    qq.run("wait", group, other)
    for word in (group, group[:8], "three"):
        listing = qq.run("list", "--group", word, "--json")
        assert listing.returncode == 0, listing.stderr
        assert [r["name"] for r in json.loads(listing.stdout)] == ["first", "second", "third"]
    text = qq.run("list", "--group", "three").stdout
    assert other[:8] not in text and "second" in text
    assert qq.run("list", "--group", other).returncode == 2  # a job is not a group: a bad command line of list
    assert qq.run("list", "--group", "nothing-here").returncode == 127


def test_needs_a_group_waits_for_every_member(qq):
    group, _ = pipeline(
        qq,
        """
[[jobs]]
name = "a"
command = %s
[[jobs]]
name = "b"
command = %s
"""
        % (toml_list(gated(qq, "a")), toml_list(gated(qq, "b"))),
    )
    after = qq.submit("--needs", group, "--", "true")
    assert qq.record(after)["needs"] == [r["id"] for r in members(qq, group)]
    open_gate(qq, "a")
    qq.wait_state(by_name(qq, group)["a"]["id"], "completed")
    assert qq.record(after)["state"] == "queued"
    open_gate(qq, "b")
    assert qq.wait_state(after, FINAL)["state"] == "completed"


def test_id_file_holds_the_group_then_every_stage(qq):
    id_file = os.path.join(qq.root, "ids")
    group, _ = pipeline(qq, three_stages(qq), "pipe.toml", "--id-file", id_file)
    with open(id_file) as fh:
        lines = [line.split() for line in fh.read().splitlines()]
    assert lines[0] == [group, "three"]
    assert lines[1:] == [[r["id"], r["name"]] for r in members(qq, group)]


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_a_pipeline_in_yaml_or_json_runs_with_its_claims_tags_env_and_times(qq, fmt):
    doc = {
        "jobs": [
            {
                "name": "x",
                "command": ["true"],
                "resources": {"cpu": 1, "mem": "64MB"},
                "tags": ["t1"],
                "timeout": "1h",
                "env": {"K": "v"},
            },
            {
                "name": "y",
                "command": ["sh", "-c", 'test "$K" = w'],
                "needs": ["x"],
                "env": {"K": "w"},
                "max_queue_time": "1h",
            },
        ]
    }
    if fmt == "yaml":
        import yaml

        text = yaml.safe_dump(doc)
    else:
        text = json.dumps(doc)
    group, _ = pipeline(qq, text, f"stages.{fmt}")
    assert qq.run("wait", group).returncode == 0
    x, y = members(qq, group)
    assert x["claims"]["mem"] == 64 << 20 and x["claims"]["cpu"] == 1 and x["tags"] == ["t1"]
    assert x["timeout"] == 3600 and y["max_queue_time"] == 3600
    assert x["group_name"] == "stages"  # the file's stem


@pytest.mark.parametrize(
    "text, words",
    [
        (
            '[[jobs]]\nname = "a"\ncommand = ["true"]\nneeds = ["b"]\n'
            '[[jobs]]\nname = "b"\ncommand = ["true"]\nneeds = ["c"]\n'
            '[[jobs]]\nname = "c"\ncommand = ["true"]\nafter = ["a"]\n',
            "circle",
        ),
        ('[[jobs]]\nname = "a"\ncommand = ["true"]\nneeds = ["nope"]\n', "nope"),
        ('[[jobs]]\nname = "a"\ncommand = ["true"]\n[[jobs]]\nname = "a"\ncommand = ["true"]\n', "jobs[0] and jobs[1]"),
        ('[[jobs]]\ncommand = ["true"]\n', "no name"),
        ('[[jobs]]\nname = "a"\ncommand = ["true"]\ngpu_count = 1\n', "gpu_count"),
        ('[[jobs]]\nname = "a"\ncommand = ["true"]\n[jobs.resources]\ncpu = "lots"\n', "--cpu"),
        (
            '[[jobs]]\nname = "ok"\ncommand = ["true"]\n[[jobs]]\nname = "a"\ncommand = ["./no-such-program"]\n',
            "no-such-program",
        ),
        ('[[jobs]]\nname = "a b"\ncommand = ["true"]\n', "not a valid name"),
        ("jobs = []\n", "no jobs"),
    ],
)
def test_a_bad_pipeline_submits_nothing(qq, text, words):
    proc = qq.run("pipeline", write(qq, "bad.toml", text))
    assert proc.returncode == 121, (proc.stdout, proc.stderr)
    assert words in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert job_dirs(qq) == []
    assert not os.path.isdir(os.path.join(qq.state, "groups")) or not os.listdir(os.path.join(qq.state, "groups"))


def test_schema_pipeline_requires_a_name_and_a_command_for_every_stage(qq):
    proc = qq.run("schema", "pipeline")
    assert proc.returncode == 0
    schema = json.loads(proc.stdout)
    items = schema["properties"]["jobs"]["items"]
    assert set(items["required"]) == {"name", "command"}
    assert schema["additionalProperties"] is False and items["additionalProperties"] is False
    assert "resources" in items["properties"] and "needs" in items["properties"]


# -- dependencies on the command line ---------------------------------------------------------------


def test_a_name_of_an_ended_job_names_the_newest_ended_one_for_needs(qq):
    """--needs takes an ID (CONTRACT.md): a name whose job has ended, however fast, still
    names it; the newest ended one, unless one of that name is queued or running."""
    old = json.loads(qq.run("submit", "--name", "prep", "--wait", "--", "true", check=0).stdout)["id"]
    dep = qq.submit("--needs", "prep", "--", "true")
    assert qq.record(dep)["needs"] == [old]
    assert qq.wait_state(dep, FINAL)["state"] == "completed"
    newer = json.loads(qq.run("submit", "--name", "prep", "--wait", "--", "sh", "-c", "exit 4").stdout)["id"]
    skipped = qq.submit("--needs", "prep", "--", "true")  # the newest ended prep failed
    assert qq.record(skipped)["needs"] == [newer] and newer != old
    assert qq.wait_state(skipped, FINAL)["state"] == "skipped"
    before = job_dirs(qq)
    gone = qq.run("submit", "--after", "0000dead", "--", "true")
    assert gone.returncode == 121 and "--after" in gone.stderr  # 127 is never a bad command line
    assert job_dirs(qq) == before
    live = qq.submit("--name", "prep", "--", *gated(qq, "a"))
    dep = qq.submit("--needs", "prep", "--", "true")  # a live name names the live job
    assert qq.record(dep)["needs"] == [live]
    open_gate(qq, "a")
    assert qq.wait_state(dep, FINAL)["state"] == "completed"


def test_an_ended_groups_name_names_it_for_needs_as_its_id_does(qq):
    group, _ = pipeline(qq, three_stages(qq))
    qq.run("wait", group)
    ids = [r["id"] for r in members(qq, group)]
    by_name = qq.submit("--needs", "three", "--", "true")
    assert qq.record(by_name)["needs"] == ids
    assert qq.wait_state(by_name, FINAL)["state"] == "skipped"  # its second stage failed
    by_id = qq.submit("--after", group, "--", "true")
    assert qq.record(by_id)["after"] == ids
    assert qq.wait_state(by_id, FINAL)["state"] == "completed"


def test_needs_and_after_in_a_job_file_name_jobs_as_the_command_line_does(qq):
    prep = qq.submit("--name", "prep", "--", *gated(qq, "a"))
    job = write(qq, "job.toml", 'command = ["true"]\nneeds = ["prep"]\nafter = ["%s"]\n' % prep[:8])
    dep = qq.submit("--job", job)
    assert qq.record(dep)["needs"] == [prep] and qq.record(dep)["after"] == [prep]
    open_gate(qq, "a")
    assert qq.wait_state(dep, FINAL)["state"] == "completed"
    again = qq.submit("--job", job)  # prep has ended: its name still names it
    assert qq.record(again)["needs"] == [prep]
    assert qq.wait_state(again, FINAL)["state"] == "completed"
    bad = write(qq, "bad.toml", 'command = ["true"]\nneeds = ["nothing-of-that-name"]\n')
    refused = qq.run("submit", "--job", bad)
    assert refused.returncode == 121 and "--needs" in refused.stderr and "nothing-of-that-name" in refused.stderr


def test_a_job_waiting_on_a_dependency_holds_no_capacity(qq):
    first = qq.submit("--cpu", "1", "--", *gated(qq, "a"))
    qq.wait_state(first, "running")
    waiting = qq.submit("--cpu", "1", "--needs", first, "--", "true")
    free = qq.submit("--cpu", "1", "--", "true")  # the second core is free: it starts at once
    assert qq.wait_state(free, FINAL)["state"] == "completed"
    rec = qq.record(waiting)
    assert rec["state"] == "queued" and first[:8] in rec["blocked_reason"]
    open_gate(qq, "a")
    assert qq.wait_state(waiting, FINAL)["state"] == "completed"


def test_a_failed_dependency_is_seen_while_the_queue_is_blocked(q):
    q.write_config('[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "100MB"\n[queue]\nmax_bypass = 0\n')
    holder = q.submit("--cpu", "1", "--", *gated(q, "hold"))
    doomed = q.submit("--cpu", "1", "--", *gated(q, "doom", "exit 9"))
    q.wait_state(holder, "running")
    q.wait_state(doomed, "running")
    front = q.submit("--cpu", "2", "--", "true")  # cannot fit while the holder runs: the queue is blocked
    dependent = q.submit("--cpu", "1", "--needs", doomed, "--", "true")
    assert q.record(dependent)["state"] == "queued"
    open_gate(q, "doom")
    assert q.run("wait", dependent).returncode == 126  # skipped at once, the front still blocked
    assert q.record(front)["state"] == "queued"
    assert q.record(dependent)["skipped_root"] == doomed
    open_gate(q, "hold")
    assert q.wait_state(front, FINAL)["state"] == "completed"


def test_a_failed_dependency_is_seen_while_the_queue_is_paused(qq):
    if "pause" not in qq.run("help").stdout:
        pytest.skip("qex pause is not there yet (issue of its own); the pure admit test covers the rule")
    doomed = qq.submit("--", *gated(qq, "doom", "exit 9"))
    qq.wait_state(doomed, "running")
    dependent = qq.submit("--needs", doomed, "--", "true")
    assert qq.run("pause", "queue").returncode == 0
    try:
        open_gate(qq, "doom")
        assert qq.run("wait", dependent, "--timeout", "20").returncode == 126
    finally:
        qq.run("resume", "queue")


# -- 127 means no such job, and nothing else --------------------------------------------------------


def test_only_an_unknown_job_gives_127_and_a_bad_command_line_121_or_2_for_status(qq):
    for verb in ("wait", "status", "kill", "cancel", "clean", "logs", "rerun"):
        proc = qq.run(verb, "feedface-0000-4000-8000-000000000000")
        assert proc.returncode == 127, (verb, proc.stderr)
    for argv in (["wait"], ["pipeline"], ["rerun"], ["wait", "--bogus", "x"]):
        assert qq.run(*argv).returncode == 121, argv  # a bad command line where the code is a job's
    assert qq.run("status").returncode == 2  # status without --wait/--follow/--quiet: not the table's
    assert qq.run("pipeline", os.path.join(qq.root, "missing.toml")).returncode == 121


# -- rerun --------------------------------------------------------------------------------------------


def test_rerun_submits_the_same_spec_under_a_new_id_without_the_dedupe_key(qq):
    workdir = os.path.join(qq.root, "work")
    os.mkdir(workdir)
    job = write(qq, "job.toml", 'command = ["sh", "-c", "echo $SEED $(pwd)"]\ndedupe_key = "k1"\n')
    old = json.loads(
        qq.run("submit", "--wait", "--job", job, "--cwd", workdir, "--env", "SEED=7", "--tag", "t", check=0).stdout
    )["id"]
    assert qq.record(old)["dedupe_key"] == "k1"
    proc = qq.run("rerun", old[:8], env={"SEED": "changed"})
    assert proc.returncode == 0, proc.stderr
    new = proc.stdout.strip()
    assert len(new) == 36 and new != old
    rec = qq.wait_state(new, FINAL)
    assert rec["state"] == "completed" and rec["rerun_of"] == old
    assert rec["command"] == qq.record(old)["command"] and rec["cwd"] == workdir and rec["tags"] == ["t"]
    assert rec["dedupe_key"] is None
    assert qq.run("logs", new).stdout == f"7 {workdir}\n"


def test_rerun_of_a_group_refuses_and_names_its_jobs(qq):
    group, _ = pipeline(qq, three_stages(qq))
    qq.run("wait", group)
    before = job_dirs(qq)
    proc = qq.run("rerun", group)
    assert proc.returncode == 121 and "second" in proc.stderr
    assert job_dirs(qq) == before
