"""qex submit --each-line, seen from outside: one job per line, verbatim, all or nothing."""

import json
import os

import pytest

CONFIG = '[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "100MB"\n'
FINAL = {"completed", "failed", "killed", "timeout", "oom", "expired", "cancelled", "skipped"}
ARGV = ["python3", "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]


@pytest.fixture
def qq(q):
    q.write_config(CONFIG)
    return q


def write(q, name: str, data) -> str:
    path = os.path.join(q.root, name)
    with open(path, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
    return path


def job_dirs(q) -> list[str]:
    jobs = os.path.join(q.state, "jobs")
    return sorted(os.listdir(jobs)) if os.path.isdir(jobs) else []


def group_members(q, group: str) -> list[dict]:
    with open(os.path.join(q.state, "groups", f"{group}.json")) as fh:
        data = json.load(fh)
    return [q.record(j) for j in data["members"]]


def fan_out(q, path: str, *argv, input=None) -> tuple[str, object]:
    proc = q.run("submit", "--each-line", path, *argv, input=input)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    group = proc.stdout.strip()
    assert len(group) == 36 and "\n" not in group, proc.stdout  # stdout: the group id and nothing else
    return group, proc


def logged(q, job_id: str) -> str:
    with open(os.path.join(q.state, "jobs", job_id, "stdout.log")) as fh:
        return fh.read()


def test_a_hostile_line_reaches_the_job_as_one_verbatim_argument(qq):
    hostile = 'a b"; rm -rf ~; echo $HOME'
    path = write(qq, "inputs.txt", f"{hostile}\n  spaced out  \r\n`id` $(id) 'q' \\n *\n")
    group, _ = fan_out(qq, path, "--", *ARGV, "{}", "--in={}.txt", "{{}}")
    assert qq.run("wait", group).returncode == 0
    jobs = group_members(qq, group)
    got = [json.loads(logged(qq, r["id"])) for r in jobs]
    assert got == [[line, f"--in={line}.txt", "{}"] for line in (hostile, "spaced out", "`id` $(id) 'q' \\n *")]
    assert [r["command"][3:] for r in jobs] == got
    assert all(r["template"] == ARGV + ["{}", "--in={}.txt", "{{}}"] for r in jobs)


def test_the_line_may_be_the_program(qq):
    path = write(qq, "programs.txt", "true\nfalse\n")
    group, _ = fan_out(qq, path, "--", "{}")
    assert qq.run("wait", group).returncode == 1  # the first that did not succeed: false
    assert [r["state"] for r in group_members(qq, group)] == ["completed", "failed"]
    assert [r["name"] for r in group_members(qq, group)] == ["true-001-true", "false-002-false"]


def test_a_non_utf8_line_submits_nothing_and_names_the_line(qq):
    path = write(qq, "bad.txt", b"one\ntwo\n\xff\xfebroken\nfour\n")
    proc = qq.run("submit", "--each-line", path, "--", "echo", "{}")
    assert proc.returncode == 121, proc.stderr
    assert "line 3" in proc.stderr and "UTF-8" in proc.stderr
    assert proc.stdout == "" and job_dirs(qq) == []
    assert not os.path.isdir(os.path.join(qq.state, "groups")) or os.listdir(os.path.join(qq.state, "groups")) == []


def test_each_usable_line_becomes_a_named_job_of_the_group_and_skipped_lines_are_counted(qq):
    text = "# a header\n\nalpha\n   \nbeta/gamma delta\n#skip\n" + "".join(f"x{i}\n" for i in range(8)) + "last"
    path = write(qq, "my.inputs.txt", text)
    ids = os.path.join(qq.root, "ids")
    group, proc = fan_out(qq, path, "--tag", "fan", "--cpu", "1", "--id-file", ids, "--", "echo", "{}")
    jobs = group_members(qq, group)
    assert [r["name"] for r in jobs][:2] == ["echo-001-alpha", "echo-002-beta-gamma-delta"]
    assert jobs[-1]["name"] == "echo-011-last" and len(jobs) == 11  # the last line counts without its newline
    assert all(r["group"] == group and r["group_name"] == "my.inputs" for r in jobs)
    assert all(r["tags"] == ["fan"] and r["claim_source"]["cpu"] == "user" for r in jobs)
    assert "2 empty lines" in proc.stderr and "2 comment lines" in proc.stderr
    for r in jobs:
        assert f"{r['id']}  {r['name']}" in proc.stderr
    with open(ids) as fh:
        lines = fh.read().splitlines()
    assert lines[0] == f"{group} my.inputs" and lines[1:] == [f"{r['id']} {r['name']}" for r in jobs]
    assert qq.run("wait", "my.inputs").returncode == 0
    assert [logged(qq, r["id"]) for r in jobs[:2]] == ["alpha\n", "beta/gamma delta\n"]


def test_a_fan_out_reads_lines_from_stdin_and_name_names_the_group(qq):
    group, _ = fan_out(qq, "-", "--name", "batch", "--", "echo", "{}", input="a\nb\n")
    assert [r["group_name"] for r in group_members(qq, group)] == ["batch", "batch"]
    assert qq.run("wait", "batch").returncode == 0
    listing = json.loads(qq.run("list", "--group", "batch", "--json").stdout)
    assert [r["name"] for r in listing] == ["echo-001-a", "echo-002-b"]


@pytest.mark.parametrize(
    "case, words",
    [
        ("no-hole", "no {}"),
        ("only-literal", "no {}"),
        ("directory", "is a directory"),
        ("missing", "cannot read"),
        ("empty", "no usable line"),
        ("comments-only", "no usable line"),
        ("too-many", "--max-jobs 3"),
        ("max-jobs-zero", "--max-jobs"),
        ("wait", "--wait"),
        ("follow", "--follow"),
        ("job", "--job"),
        ("bad-program", "line 2"),
        ("nul", "NUL"),
    ],
)
def test_a_bad_fan_out_is_refused_with_121_naming_the_cause_and_submits_no_job(qq, case, words):
    good = write(qq, "good.txt", "a\nb\nc\nd\n")
    argv = {
        "no-hole": [good, "--", "echo", "x"],
        "only-literal": [good, "--", "echo", "{{}}"],
        "directory": [qq.root, "--", "echo", "{}"],
        "missing": [os.path.join(qq.root, "nope.txt"), "--", "echo", "{}"],
        "empty": [write(qq, "e.txt", ""), "--", "echo", "{}"],
        "comments-only": [write(qq, "c.txt", "# x\n\n  \n"), "--", "echo", "{}"],
        "too-many": [good, "--max-jobs", "3", "--", "echo", "{}"],
        "max-jobs-zero": [good, "--max-jobs", "0", "--", "echo", "{}"],
        "wait": [good, "--wait", "--", "echo", "{}"],
        "follow": [good, "--follow", "--", "echo", "{}"],
        "job": [good, "--job", write(qq, "j.toml", 'command = ["true"]\n'), "--", "echo", "{}"],
        "bad-program": [write(qq, "p.txt", "true\n./no-such-thing\n"), "--", "{}"],
        "nul": [write(qq, "n.txt", b"ok\nbad\x00line\n"), "--", "echo", "{}"],
    }[case]
    proc = qq.run("submit", "--each-line", *argv)
    assert proc.returncode == 121, (proc.returncode, proc.stderr)
    assert words in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == "" and job_dirs(qq) == []


def test_options_that_mean_one_job_or_a_fan_out_are_refused_where_they_do_not_fit(qq):
    good = write(qq, "good.txt", "a\n")
    for option in ("--dedupe-key", "--dedupe-window"):
        dedupe = qq.run(
            "submit", "--each-line", good, option, "k" if option == "--dedupe-key" else "1h", "--", "echo", "{}"
        )
        assert dedupe.returncode == 121 and option in dedupe.stderr, dedupe.stderr
    run = qq.run("run", "--each-line", good, "--", "echo", "{}")
    assert run.returncode == 121 and "--each-line" in run.stderr
    alone = qq.run("submit", "--max-jobs", "5", "--", "echo", "x")
    assert alone.returncode == 121 and "--each-line" in alone.stderr
    assert job_dirs(qq) == []


def test_input_over_64_mib_is_refused(qq):
    path = os.path.join(qq.root, "huge.txt")
    with open(path, "wb") as fh:
        fh.write(b"x\n")
        fh.truncate((64 << 20) + 1)  # sparse: cheap to make
    proc = qq.run("submit", "--each-line", path, "--", "echo", "{}")
    assert proc.returncode == 121 and "64MiB" in proc.stderr
    assert job_dirs(qq) == []


def test_a_thousand_lines_are_one_commit_and_list_group_answers(qq):
    gate = qq.submit("--", "sh", "-c", f"while [ ! -e '{qq.gate('g')}' ]; do sleep 0.05; done")
    path = write(qq, "thousand.txt", "".join(f"item {i}\n" for i in range(1000)))
    group, proc = fan_out(qq, path, "--needs", gate, "--", "echo", "{}")
    jobs = group_members(qq, group)
    assert len(jobs) == 1000 and len({r["id"] for r in jobs}) == 1000
    assert jobs[0]["name"] == "echo-0001-item-0" and jobs[-1]["name"] == "echo-1000-item-999"
    assert [r["seq"] for r in jobs] == list(range(jobs[0]["seq"], jobs[0]["seq"] + 1000))
    assert all(r["needs"] == [gate] and r["state"] == "queued" for r in jobs)
    # one lock hold: every job entered the journal in one commit (one time stamp, consecutive events)
    with open(os.path.join(qq.state, "journal.jsonl")) as fh:
        queued = [e for e in map(json.loads, fh) if e["id"] in {r["id"] for r in jobs} and e["previous"] is None]
    assert len(queued) == 1000 and len({e["time"] for e in queued}) == 1
    assert [e["seq"] for e in queued] == list(range(queued[0]["seq"], queued[0]["seq"] + 1000))
    listing = qq.run("list", "--group", group, "--json")
    assert listing.returncode == 0 and len(json.loads(listing.stdout)) == 1000
    assert len(qq.run("list", "--group", group).stdout.splitlines()) == 1001
    cancel = qq.run("cancel", group)
    assert cancel.returncode == 0, cancel.stderr
    assert qq.run("wait", group).returncode == 125
    qq.run("kill", gate)


def test_the_second_run_of_a_fan_out_gets_a_claim_learned_under_its_template(q):
    template = ["python3", "-c", "import sys; data = b'x' * (int(sys.argv[1]) << 20)", "{}"]
    first, _ = fan_out(q, write(q, "sizes.txt", "60\n70\n"), "--", *template)
    assert q.run("wait", first).returncode == 0
    runs = group_members(q, first)
    assert all(r["claim_source"]["mem"] == "default" for r in runs)
    assert all(r["template"] == template for r in runs)
    second, _ = fan_out(q, write(q, "other.txt", "65\n"), "--", *template)  # other lines, same template
    rec = group_members(q, second)[0]
    assert rec["claim_source"]["mem"].startswith("learned from 2 runs"), rec["claim_source"]
    assert rec["claims"]["mem"] >= max(r["usage"]["max_rss"] for r in runs)
    plain, _ = fan_out(q, write(q, "plain.txt", "65\n"), "--", *template[:3], "{}", "extra")
    assert group_members(q, plain)[0]["claim_source"]["mem"] == "default"  # another template is another task
    assert q.run("wait", second, plain).returncode == 0


@pytest.mark.parametrize("when", ["making-directories", "group-written", "journal-written"])
def test_a_fan_out_killed_at_any_instant_is_wholly_queued_or_absent(qq, when):
    import signal
    import time

    gate = qq.submit("--", "sh", "-c", f"while [ ! -e '{qq.gate('g')}' ]; do sleep 0.05; done")
    path = write(qq, "lines.txt", "".join(f"{i}\n" for i in range(1000)))
    journal = os.path.join(qq.state, "journal.jsonl")
    size = os.path.getsize(journal)
    groups = os.path.join(qq.state, "groups")
    reached = {
        "making-directories": lambda: len(job_dirs(qq)) >= 300,
        "group-written": lambda: os.path.isdir(groups) and os.listdir(groups),
        "journal-written": lambda: os.path.getsize(journal) > size,
    }[when]
    proc = qq.popen("submit", "--each-line", path, "--needs", gate, "--", "echo", "{}")
    deadline = time.monotonic() + 60
    while not reached() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    qq.submit("--", "true")  # a pass: it replays whatever the killed commit journaled
    by_group = {}
    for rec in qq.records():
        if rec.get("group"):
            by_group.setdefault(rec["group"], []).append(rec)
    for group, recs in by_group.items():
        assert len(recs) == 1000, f"group {group[:8]} has {len(recs)} of 1000 jobs"
        listing = json.loads(qq.run("list", "--group", group, "--json").stdout)
        assert len(listing) == 1000 and all(r["state"] == "queued" for r in listing)
    for name in os.listdir(groups) if os.path.isdir(groups) else []:
        status = qq.run("status", name[:-5], "--quiet")
        assert status.returncode in (100, 127), (name, status.stdout, status.stderr)  # whole, or names no job
    qq.run("kill", gate)


def test_a_drain_s_supervisor_teaches_the_learner_every_run_it_saw(q):
    # One core: one supervisor runs the jobs one after the other, and writes what they
    # taught now and then (not once per job); none is lost when it runs out of jobs.
    q.write_config('[budget]\ncpu = 1\n[defaults]\nmem = "64MB"\n')
    template = ["python3", "-c", "import sys; data = b'x' * (int(sys.argv[1]) << 20)", "{}"]
    group, _ = fan_out(q, write(q, "sizes.txt", "20\n30\n40\n"), "--", *template)
    assert q.run("wait", group).returncode == 0
    from qex.jobs import learn

    def samples():
        try:
            entry = learn.load(q.state).get("commands", {}).get(learn.key_of(None, template))
        except learn.Unreadable:
            return []
        return entry["s"] if entry else []

    q.wait_for(lambda: len(samples()) == 3, 10, "the three runs in the learner")
    assert [kind for kind, _ in samples()] == ["peak"] * 3


def test_a_fan_out_imports_no_attrs_or_cattrs(qq):
    """A fan-out pays for its lines, not for attrs (~15-35 ms to import): its path declares records with Plain."""
    import subprocess
    import sys

    path = write(qq, "inputs.txt", "a\nb\n")
    code = (
        "import sys; from qex.cli import run; code = run(['submit', '--each-line', %r, '--', 'echo', '{}']); "
        "sys.stderr.write(repr(sorted(m for m in ('attr', 'attrs', 'cattrs') if m in sys.modules)) + '\\n')" % path
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=qq.env, cwd=qq.root, timeout=60
    )
    assert proc.stderr.strip().splitlines()[-1] == "[]", proc.stderr
    group = proc.stdout.strip()
    assert qq.run("wait", group).returncode == 0
    assert sorted(logged(qq, r["id"]) for r in group_members(qq, group)) == ["a\n", "b\n"]


def test_a_fanout_with_json_prints_its_group(qq):
    """--json on --each-line (issue 25: it was refused): the group, its jobs' ids and names."""
    good = write(qq, "good.txt", "a\nb\n")
    proc = qq.run("submit", "--each-line", good, "--json", "--", "echo", "{}")
    assert proc.returncode == 0, proc.stderr
    group = json.loads(proc.stdout)
    assert len(group["jobs"]) == 2 and {j["name"] for j in group["jobs"]} == {"echo-001-a", "echo-002-b"}
