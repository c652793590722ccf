"""Issue 23, points 2, 3 and 13: what a person types every day never misleads them.

2. A name keeps naming its job after the job ends, through the one resolver that
   every command calls (wait, status, logs, kill, rerun, clean, --needs).
3. On the commands of the exit-code table a bad command line is 121, never 2
   (a job's own code there); every other command keeps 2.
13. --mem 100 warns; `qex` alone is a banner; status says "waits for" once; list
    keeps CLAIMS apart from REASON; --help lists the topics once, whole words.
"""

import json
import os
import re

import pytest
from e2e_helpers import FINAL, gated, open_gate

CONFIG = '[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "100MB"\n'
POOLS = CONFIG + '[[pool]]\nname = "gpu"\ndevices = ["24GB", "24GB"]\n'


@pytest.fixture
def qq(q):
    q.write_config(CONFIG)
    return q


def job_dirs(q) -> list[str]:
    jobs = os.path.join(q.state, "jobs")
    return sorted(os.listdir(jobs)) if os.path.isdir(jobs) else []


# -- 2. a name names its job after it ends -------------------------------------------------------


def test_a_name_names_its_job_however_fast_it_ended(qq):
    job = qq.submit("--name", "quick", "--", "sh", "-c", "echo said-so; exit 3")
    qq.wait_state(job, FINAL)  # ended before anything below asks for it by name
    assert qq.run("wait", "quick").returncode == 3
    assert qq.run("status", "quick", "--quiet").returncode == 3
    status = qq.run("status", "quick", "--json")
    assert status.returncode == 0 and json.loads(status.stdout)[0]["id"] == job
    logs = qq.run("logs", "quick")
    assert logs.returncode == 0 and "said-so" in logs.stdout
    killed = qq.run("kill", "quick")  # ended: nothing to kill, said so; never "no such job"
    assert killed.returncode == 1 and job[:8] in killed.stderr and "ended" in killed.stderr
    again = qq.run("rerun", "quick")
    assert again.returncode == 0, again.stderr
    assert qq.wait_state(again.stdout.strip(), FINAL)["exit_code"] == 3
    # right after submission, as a script writes it: the same answer whatever the timing
    qq.run("submit", "--name", "snap", "--", "sh", "-c", "exit 5", check=0)
    assert qq.run("wait", "snap").returncode == 5


def test_the_newest_ended_job_of_a_name_else_the_active_one_two_active_are_ambiguous(qq):
    first = json.loads(qq.run("submit", "--wait", "--name", "n", "--", "sh", "-c", "exit 4").stdout)["id"]
    second = json.loads(qq.run("submit", "--wait", "--name", "n", "--", "sh", "-c", "exit 6").stdout)["id"]
    assert first != second
    assert qq.run("wait", "n").returncode == 6  # the newest of the ended ones
    assert json.loads(qq.run("status", "n", "--json").stdout)[0]["id"] == second
    live = qq.submit("--name", "n", "--", *gated(qq, "a"))
    assert json.loads(qq.run("status", "n", "--json").stdout)[0]["id"] == live  # an active one wins
    assert qq.run("status", "n", "--quiet").returncode == 100
    other = qq.submit("--name", "n", "--", *gated(qq, "a"))
    for verb in ("wait", "status", "logs", "kill"):
        proc = qq.run(verb, "n")
        assert live in proc.stderr and other in proc.stderr and "matches 2 things" in proc.stderr, (verb, proc.stderr)
        assert proc.returncode == (121 if verb == "wait" else 2), (verb, proc.returncode)
    assert qq.record(live)["state"] in ("queued", "starting", "running")  # the kill did nothing
    open_gate(qq, "a")
    assert qq.wait_state(other, FINAL)["state"] == "completed"
    qq.wait_state(live, FINAL)
    assert qq.run("wait", "n").returncode == 0  # the newest ended: other


def test_clean_by_the_name_of_an_ended_job_removes_that_one(qq):
    old = json.loads(qq.run("submit", "--wait", "--name", "tidy", "--", "true").stdout)["id"]
    new = json.loads(qq.run("submit", "--wait", "--name", "tidy", "--", "true").stdout)["id"]
    assert qq.run("clean", "tidy").returncode == 0
    assert new not in job_dirs(qq) and old in job_dirs(qq)
    assert qq.run("clean", "tidy").returncode == 0  # now the name names the older one
    assert old not in job_dirs(qq)
    assert qq.run("wait", "tidy").returncode == 127  # nothing of that name is left


def test_the_hint_of_logs_on_a_group_gives_names_that_work(qq):
    lines = os.path.join(qq.root, "lines.txt")
    with open(lines, "w") as fh:
        fh.write("alpha\nbeta\n")
    group = qq.run("submit", "--each-line", lines, "--", "echo", "{}", check=0).stdout.strip()
    assert qq.run("wait", group).returncode == 0
    hint = qq.run("logs", group)
    assert hint.returncode == 2 and "give one of its jobs" in hint.stderr, hint.stderr
    names = re.findall(r"(echo-\d+-\w+) \(", hint.stderr)
    assert len(names) == 2, hint.stderr
    for name, line in zip(names, ("alpha", "beta")):
        logs = qq.run("logs", name)
        assert logs.returncode == 0 and logs.stdout == line + "\n", (name, logs.stderr)


# -- 3. 121, never 2, where the code is a job's ---------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["wait", "--bogus", "X"],
        ["run", "--bogus"],
        ["submit", "--bogus"],
        ["wait"],
        ["pipeline", "--bogus", "p.toml"],
        ["rerun"],
        ["status", "X", "--quiet", "--bogus"],
        ["status", "X", "--wait", "--bogus"],
        ["submit", "--wait", "--cpu"],
    ],
    ids=lambda a: " ".join(a),
)
def test_a_bad_command_line_of_a_job_command_is_121_with_the_same_sentence(qq, argv):
    proc = qq.run(*argv)
    assert proc.returncode == 121, (proc.returncode, proc.stderr)
    assert re.match(r"qex: (unrecognized arguments|the following arguments are required|argument )", proc.stderr), (
        proc.stderr
    )
    assert "(see qex" in proc.stderr and "Traceback" not in proc.stderr
    assert job_dirs(qq) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "--bogus"],
        ["status"],
        ["logs"],
        ["kill"],
        ["clean", "--bogus"],
        ["info", "--bogus"],
        ["frobnicate"],
        ["status", "X", "--json", "--bogus"],
    ],
    ids=lambda a: " ".join(a),
)
def test_a_bad_command_line_of_any_other_command_is_still_2(qq, argv):
    proc = qq.run(*argv)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    if "--json" in argv:  # under --json the error is data (tests/e2e/test_json.py)
        assert json.loads(proc.stderr)["code"] == 2
    else:
        assert proc.stderr.startswith("qex: ")


def test_an_ambiguous_name_is_121_on_job_commands_and_2_on_the_others(qq):
    a = qq.submit("--name", "twin", "--", *gated(qq, "a"))
    b = qq.submit("--name", "twin", "--", *gated(qq, "a"))
    try:
        for argv, code in (
            (["wait", "twin"], 121),
            (["status", "twin", "--quiet"], 121),
            (["status", "twin", "--follow"], 121),
            (["rerun", "twin"], 121),
            (["submit", "--needs", "twin", "--", "true"], 121),
            (["status", "twin"], 2),
            (["logs", "twin"], 2),
            (["cancel", "twin"], 2),
        ):
            proc = qq.run(*argv)
            assert proc.returncode == code, (argv, proc.returncode, proc.stderr)
            assert a in proc.stderr and b in proc.stderr, (argv, proc.stderr)
        assert sorted(job_dirs(qq)) == sorted([a, b])
    finally:
        open_gate(qq, "a")
    qq.wait_state(a, FINAL)
    qq.wait_state(b, FINAL)


# -- 13. smaller, same spirit -----------------------------------------------------------------------


def test_a_bare_memory_size_under_1mib_is_bytes_with_a_warning(qq):
    proc = qq.run("submit", "--mem", "100", "--", "true")
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip()
    assert proc.stdout == job + "\n"  # stdout is still only the id
    assert "did you mean 100MB?" in proc.stderr and "100 bytes" in proc.stderr, proc.stderr
    assert qq.record(job)["claims"]["mem"] == 100  # bytes, as the contract says
    for quiet in (["--mem", "100MB"], ["--mem", str(2 * 1024**2)]):
        other = qq.run("submit", *quiet, "--", "true")
        assert other.returncode == 0 and "did you mean" not in other.stderr, (quiet, other.stderr)


def test_qex_alone_prints_a_short_banner_and_exits_0(qq):
    proc = qq.run()
    assert proc.returncode == 0, proc.stderr
    assert "qex --help" in proc.stdout and "qex help agents" in proc.stdout
    assert len(proc.stdout.splitlines()) <= 12 and proc.stderr == ""


def test_status_says_what_a_job_waits_for_once(qq):
    first = qq.submit("--", *gated(qq, "a"))
    waiting = qq.submit("--needs", first, "--", "true")
    qq.wait_for(lambda: (qq.record(waiting).get("blocked_reason") or "").startswith("waits for"), what="a reason")
    shown = qq.run("status", waiting).stdout
    line = next(row for row in shown.splitlines() if "waits for" in row)
    assert line.count("waits") == 1, shown
    open_gate(qq, "a")
    qq.wait_state(waiting, FINAL)


def test_list_keeps_claims_apart_from_the_reason(q):
    q.write_config(POOLS)
    first = q.submit("--", *gated(q, "a"))
    waiting = q.submit("--cpu", "0.5", "--mem", "100MB", "--gpu", "2", "--vram", "20GB", "--needs", first, "--", "true")
    q.wait_for(lambda: q.record(waiting).get("blocked_reason"), what="a reason")
    row = next(r for r in q.run("list", check=0).stdout.splitlines() if r.startswith(waiting[:8]))
    claims = "0.5 cores, 100MB, gpu 2 x 20GB"
    assert claims + "  waits for" in row, row
    open_gate(q, "a")
    q.wait_state(waiting, FINAL)


@pytest.mark.parametrize("argv", [["--help"], ["help"]])
def test_help_lists_the_topics_once_and_never_cuts_a_word(qq, argv):
    topics = (
        "agents",
        "resources",
        "states",
        "exit-codes",
        "events",
        "config",
        "job-file",
        "each-line",
        "pause",
        "dedupe",
    )
    for columns in ("60", "80", "200"):
        proc = qq.run(*argv, env={"COLUMNS": columns})
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.count("Topics") == 1, proc.stdout
        tail = proc.stdout[proc.stdout.index("Topics") :]
        words = set(re.split(r"[\s,:()|]+", tail))
        assert all(t in words for t in topics), (columns, tail)
        assert not any(line.endswith("-") for line in proc.stdout.splitlines()), proc.stdout
