"""qex list over the history index (history.jsonl): every job once, in submission order,
after crashes at its write point, after qex clean, with the file damaged or missing."""

import json
import os
import signal

import pytest
from crash import invariants as inv

CONFIG = '[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "64MB"\n'


def history_path(q) -> str:
    return os.path.join(q.state, "history.jsonl")


def history_ids(q) -> list[str]:
    with open(history_path(q), "rb") as fh:
        data = fh.read()
    assert not data or data.endswith(b"\n"), data[-80:]
    return [json.loads(line)["id"] for line in data.splitlines()]


def listed(q, *args) -> list[str]:
    """The ids `qex list` prints (text), in order; and --json agrees, in the same order."""
    text = q.run("list", *args, check=0)
    assert "Traceback" not in text.stderr, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith("ID ")
    shown = [line.split()[0] for line in lines[1:]]
    as_json = q.run("list", "--json", *args, check=0)
    records = json.loads(as_json.stdout)
    assert [r["id"][:8] for r in records] == shown
    return [r["id"] for r in records]


def settle(q) -> None:
    q.wait_for(lambda: not q.processes(), what="no qex process")


def test_list_prints_in_submission_order_when_jobs_end_in_another(q):
    q.write_config(CONFIG)
    gate = q.gate("slow")
    slow = q.submit("--name", "slow", "--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done")
    fast = q.submit("--name", "fast", "--tag", "t", "--", "true")
    failed = q.submit("--name", "bad", "--", "sh", "-c", "exit 3")
    q.wait_state(fast, "completed")
    q.wait_state(failed, "failed")
    q.wait_state(slow, "running")
    assert listed(q) == [slow, fast, failed]  # the running one from its record, the rest from the history
    open(gate, "w").close()
    q.wait_state(slow, "completed")
    settle(q)
    assert history_ids(q) == [fast, failed, slow]  # appended in the order they ended
    assert listed(q) == [slow, fast, failed]
    text = q.run("list", check=0).stdout
    assert "exit 3" in text and "completed" in text
    assert listed(q, "--state", "completed") == [slow, fast]
    assert listed(q, "--state", "failed") == [failed]
    assert listed(q, "--state", "final") == [slow, fast, failed]
    assert listed(q, "--tag", "t") == [fast]
    assert listed(q, "--cwd", q.root) == [slow, fast, failed]
    assert listed(q, "--cwd", "/nowhere") == []
    assert not inv.check(inv.read_view(q.state), known=[slow, fast, failed], quiescent=True)


def test_a_supervisor_killed_in_its_history_append_leaves_its_job_listed_once(q):
    q.write_config(CONFIG)
    before = q.submit("--", "true")
    q.wait_state(before, "completed")
    # the job's supervisor dies half-way through the history line of its final commit (the
    # waker or the next command replays it; the cancel test below proves the point fires)
    job = q.submit("--", "true", env={"QEX_CRASH_AT": "history.torn:1"})
    q.wait_state(job, "completed")
    settle(q)
    assert listed(q) == [before, job]  # from its record until a pass replays: never twice
    after = json.loads(q.run("submit", "--wait", "--", "true", check=0).stdout)["id"]
    settle(q)
    assert history_ids(q) == [before, job, after]  # the torn line cut, the job added once
    assert listed(q) == [before, job, after]
    assert not inv.check(inv.read_view(q.state), known=[before, job, after], quiescent=True)


@pytest.mark.parametrize("point", ["commit.after_status:1", "history.torn:1", "history.after_append:1"])
def test_a_cancel_killed_around_the_history_write_leaves_every_job_listed_once(q, point):
    q.write_config(CONFIG)
    before = q.submit("--", "true")
    q.wait_state(before, "completed")
    gate = q.gate("blocker")
    blocker = q.submit("--cpu", "2", "--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done")
    q.wait_state(blocker, "running")
    victim = q.submit("--", "true")
    died = q.run("cancel", victim, env={"QEX_CRASH_AT": point})
    assert died.returncode == -signal.SIGKILL, (died.returncode, died.stderr)  # it fired
    assert q.record(victim)["state"] == "cancelled" or point.startswith("commit")
    assert listed(q) == [before, blocker, victim]  # never twice, whoever replays first
    open(gate, "w").close()
    q.wait_state(blocker, "completed")
    q.wait_state(victim, "cancelled")
    settle(q)
    assert history_ids(q) == [before, victim, blocker]
    assert listed(q) == [before, blocker, victim]
    assert not inv.check(inv.read_view(q.state), known=[before, blocker, victim], quiescent=True)


def test_a_cleaned_job_is_not_listed(q):
    q.write_config(CONFIG)
    jobs = [q.submit("--", "true") for _ in range(3)]
    for job in jobs:
        q.wait_state(job, "completed")
    settle(q)
    assert q.run("clean", jobs[1]).returncode == 0
    assert listed(q) == [jobs[0], jobs[2]]
    assert history_ids(q) == [jobs[0], jobs[2]]
    # a clean that died between moving the directory and rewriting the history: the line stays
    with open(history_path(q), "ab") as fh:
        fh.write(
            json.dumps({"seq": 2, "id": jobs[1], "state": "completed", "name": "x"}, separators=(",", ":")).encode()
            + b"\n"
        )
    assert listed(q) == [jobs[0], jobs[2]]
    assert q.run("clean", "--all").returncode == 0
    assert listed(q) == []
    assert history_ids(q) == []
    assert not inv.check(inv.read_view(q.state), cleaned=jobs, quiescent=True)


def test_a_missing_history_is_rebuilt_from_the_records_once(q):
    q.write_config(CONFIG)
    jobs = [q.submit("--", "true") for _ in range(3)]
    for job in jobs:
        q.wait_state(job, "completed")
    settle(q)
    os.unlink(history_path(q))  # as a store from an older qex has none
    assert listed(q) == jobs
    assert history_ids(q) == jobs  # the reader wrote what it had to read
    assert listed(q) == jobs
    assert history_ids(q) == jobs  # once
    assert not inv.check(inv.read_view(q.state), known=jobs, quiescent=True)


def test_a_damaged_history_loses_no_job_and_shows_none_twice(q):
    q.write_config(CONFIG)
    jobs = [q.submit("--name", f"j{i}", "--", "true") for i in range(4)]
    for job in jobs:
        q.wait_state(job, "completed")
    settle(q)
    with open(history_path(q), "rb") as fh:
        lines = fh.read().splitlines(keepends=True)
    lines[1] = lines[1][:60] + b"\x00garbage\n"  # damaged after its id
    lines[2] = b"not json at all\n"
    lines.append(lines[0])  # a repeat
    lines.append(b'{"seq":99,"id":"0000-gone","state":"completed"}\n')  # a job that does not exist
    lines.append(b'{"seq":5,"id":"half-writ')  # a torn last line
    with open(history_path(q), "wb") as fh:
        fh.write(b"".join(lines))
    assert listed(q) == jobs
    text = q.run("list", check=0).stdout
    assert [line.split()[2] for line in text.splitlines()[1:]] == ["j0", "j1", "j2", "j3"]
    more = json.loads(q.run("submit", "--wait", "--", "true", check=0).stdout)["id"]
    settle(q)
    assert listed(q) == jobs + [more]
    assert q.run("clean", jobs[0]).returncode == 0  # the rewrite drops the damage too
    assert history_ids(q) == [jobs[3], jobs[1], jobs[2], more]  # the two the reader added, after
    assert listed(q) == jobs[1:] + [more]
    assert not inv.check(inv.read_view(q.state), known=jobs[1:] + [more], quiescent=True)


def test_a_history_line_of_the_wrong_shape_is_read_from_its_record(q):
    """A line that parses but holds a field of the wrong type (edited by hand, written by
    a damaged disk): its row comes from the record, never a traceback."""
    q.write_config(CONFIG)
    jobs = [q.submit("--name", f"j{i}", "--", "true") for i in range(3)]
    for job in jobs:
        q.wait_state(job, "completed")
    settle(q)
    with open(history_path(q), "rb") as fh:
        lines = [json.loads(line) for line in fh.read().splitlines()]
    by_id = {line["id"]: line for line in lines}
    by_id[jobs[0]]["claims"] = 5
    by_id[jobs[1]]["usage"] = {"max_rss": "big"}
    by_id[jobs[2]]["tags"] = [1]
    with open(history_path(q), "wb") as fh:
        fh.write(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    text = q.run("list", "--state", "completed", "--format", "id,name,peak,claims,tags", check=0)
    assert text.returncode == 0 and "Traceback" not in text.stderr, text.stderr
    rows = [line.split() for line in text.stdout.splitlines()[1:]]
    assert [(r[0], r[1]) for r in rows] == [(j[:8], f"j{i}") for i, j in enumerate(jobs)], text.stdout
    assert all("64MB" in " ".join(r) for r in rows), text.stdout  # the claims, from the records


def test_a_record_changed_after_its_history_line_is_read_again_and_a_broken_one_named(q):
    q.write_config(CONFIG)
    jobs = [q.submit("--name", f"j{i}", "--", "true") for i in range(3)]
    for job in jobs:
        q.wait_state(job, "completed")
    settle(q)
    rec = q.record(jobs[1])
    rec["name"] = "renamed"
    path = os.path.join(q.state, "jobs", jobs[1], "status.json")
    with open(path + ".tmp", "w") as fh:
        json.dump(rec, fh)
    os.replace(path + ".tmp", path)  # rewritten since its history line: the row comes from the record
    broken = os.path.join(q.state, "jobs", jobs[2], "status.json")
    with open(broken, "w") as fh:
        fh.write("{broken")
    text = q.run("list", check=0)
    rows = [line.split() for line in text.stdout.splitlines()[1:]]
    assert [(r[0], r[2]) for r in rows] == [(jobs[0][:8], "j0"), (jobs[1][:8], "renamed")]
    assert broken in text.stderr and "qex clean" in text.stderr and "Traceback" not in text.stderr
    as_json = q.run("list", "--json", check=0)
    assert [r["id"] for r in json.loads(as_json.stdout)] == jobs[:2]
    assert broken in as_json.stderr


def test_a_list_killed_while_it_prints_leaves_the_store_whole(q):
    q.write_config(CONFIG)
    jobs = [q.submit("--", "true") for _ in range(3)]
    for job in jobs:
        q.wait_state(job, "completed")
    settle(q)
    os.unlink(history_path(q))
    proc = q.popen("list")
    proc.stdout.readline()
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert listed(q) == jobs
    assert history_ids(q) == jobs
