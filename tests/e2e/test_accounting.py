"""qex list as accounting (--last, --since, --state a comma list, --name, --format,
clock times, elapsed and peak of the ended jobs, the same in JSON with ISO 8601
times) and a group's status as a summary (issues 24 and 29)."""

import json
import os
import re
import time

from e2e_helpers import gated, open_gate

CONFIG = '[budget]\ncpu = 1\nmem = "4GB"\n[defaults]\nmem = "64MB"\n'
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d$")


def four_jobs(q):
    """One completed, one failed (exit 3), one running (gated), one queued behind it."""
    q.write_config(CONFIG)
    ok = q.submit("--name", "fine", "--tag", "t", "--", "true")
    q.wait_state(ok, "completed")
    bad = q.submit("--name", "broken", "--", "sh", "-c", "exit 3")
    q.wait_state(bad, "failed")
    run = q.submit("--name", "train-1", "--", *gated(q, "run"))
    q.wait_state(run, "running")
    wait = q.submit("--name", "train-2", "--", "true")
    q.wait_state(wait, "queued")
    return ok, bad, run, wait


def rows(q, *args) -> list[list[str]]:
    text = q.run("list", *args, check=0).stdout
    assert "\x1b" not in text  # a pipe: no colour
    return [line.split() for line in text.splitlines()]


def test_list_shows_clock_times_elapsed_and_peak_and_filters_the_history(q):
    ok, bad, run, wait = four_jobs(q)
    table = rows(q)
    assert table[0][:8] == ["ID", "STATE", "NAME", "STARTED", "ENDED", "ELAPSED", "PEAK", "CLAIMS"], table[0]
    by_id = {r[0]: r for r in table[1:]}
    clock = re.compile(r"^\d\d:\d\d:\d\d$|^\d\d-\d\d$")
    for job in (ok, bad):  # ended: a start and an end, elapsed and peak measured
        row = by_id[job[:8]]
        assert clock.match(row[3]) and clock.match(row[4]) and row[5] != "-" and row[6] != "-", row
    assert clock.match(by_id[run[:8]][3]) and by_id[run[:8]][4] == "-", by_id[run[:8]]
    assert by_id[wait[:8]][3:5] == ["-", "-"], by_id[wait[:8]]
    assert [r[0] for r in rows(q, "--last", "2")[1:]] == [run[:8], wait[:8]]
    assert [r[0] for r in rows(q, "--state", "completed,failed")[1:]] == [ok[:8], bad[:8]]
    assert [r[0] for r in rows(q, "--state", "failed", "--state", "queued,running")[1:]] == [bad[:8], run[:8], wait[:8]]
    assert [r[0] for r in rows(q, "--name", "broken")[1:]] == [bad[:8]]
    assert [r[0] for r in rows(q, "--name", "train-*")[1:]] == [run[:8], wait[:8]]
    assert [r[0] for r in rows(q, "--name", "train-*", "--last", "1")[1:]] == [wait[:8]]
    assert len(rows(q, "--since", "1h")) == 5
    later = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 3600))
    assert [r[0] for r in rows(q, "--since", later)[1:]] == [run[:8], wait[:8]]  # only what is still active
    assert rows(q, "--format", "id,exit,elapsed,tags")[0] == ["ID", "EXIT", "ELAPSED", "TAGS"]
    assert rows(q, "--format", "id,exit,tags", "--state", "final")[1:] == [[ok[:8], "0", "t"], [bad[:8], "3", "-"]]
    for argv, words in (
        (("--state", "done,queued"), "'done' is no state"),
        (("--format", "id,size"), "'size' is no field"),
        (("--since", "yesterday"), "neither a duration"),
    ):
        proc = q.run("list", *argv)
        assert proc.returncode == 2 and words in proc.stderr, (argv, proc.returncode, proc.stderr)
    open_gate(q, "run")


def test_list_json_carries_the_same_fields_with_iso_times(q):
    ok, bad, run, wait = four_jobs(q)
    records = json.loads(q.run("list", "--json", check=0).stdout)
    by_id = {r["id"]: r for r in records}
    for job in (ok, bad):
        rec = by_id[job]
        assert ISO.match(rec["submitted"]) and ISO.match(rec["started"]) and ISO.match(rec["ended"]), rec
        assert rec["elapsed"] >= 0 and rec["usage"]["max_rss"], rec
        assert abs(time.mktime(time.strptime(rec["ended"][:19], "%Y-%m-%dT%H:%M:%S")) - rec["ended_at"]) < 1.5
    assert by_id[wait]["started"] is None and by_id[wait]["ended"] is None and by_id[wait]["elapsed"] >= 0
    picked = json.loads(
        q.run("list", "--json", "--format", "id,state,exit,elapsed,peak,ended", "--last", "3", check=0).stdout
    )
    assert [r["id"] for r in picked] == [bad, run, wait]
    assert set(picked[0]) == {"id", "state", "exit", "elapsed", "peak", "ended", "ended_at"}, picked[0]
    assert picked[0]["exit"] == 3 and picked[1]["exit"] is None and ISO.match(picked[0]["ended"]), picked
    open_gate(q, "run")


def test_a_history_line_of_an_older_qex_still_shows_elapsed_and_peak(q):
    """A history line written before the accounting fields (no started_at, no usage):
    the list reads that job's record for them."""
    q.write_config(CONFIG)
    job = q.submit("--name", "old", "--", "true")
    q.wait_state(job, "completed")
    q.wait_for(lambda: not q.processes(), what="no qex process")
    path = os.path.join(q.state, "history.jsonl")
    lines = []
    with open(path, "rb") as fh:
        for line in fh.read().splitlines():
            row = json.loads(line)
            row.pop("usage", None)
            row.pop("started_at", None)
            lines.append(json.dumps(row, separators=(",", ":")).encode())
    with open(path, "wb") as fh:
        fh.write(b"\n".join(lines) + b"\n")
    table = rows(q)
    assert table[0][5:7] == ["ELAPSED", "PEAK"] and table[1][0] == job[:8], table
    assert table[1][5] != "-" and table[1][6] != "-", table


def test_a_group_status_is_a_summary_and_all_gives_every_record(q):
    q.write_config(CONFIG.replace("cpu = 1", "cpu = 3"))
    lines = os.path.join(q.root, "lines")
    with open(lines, "w") as fh:
        fh.write("ok\nbad\nslow\n")
    script = f"case $1 in bad) exit 3;; slow) while [ ! -e {q.gate('slow')} ]; do sleep 0.02; done;; esac"
    group = q.run(
        "submit", "--each-line", lines, "--name", "batch", "--", "sh", "-c", script, "x", "{}", check=0
    ).stdout.strip()
    q.wait_for(
        lambda: sorted(r["state"] for r in q.records()) == ["completed", "failed", "running"],
        what="one completed, one failed, one running",
    )
    bad = next(r for r in q.records() if r["state"] == "failed")
    text = q.run("status", "batch", check=0).stdout
    lines = text.splitlines()
    assert lines[0].startswith(f"group     {group} (batch): 3 jobs, not all ended"), text
    assert any(re.match(r"^completed +1$", line) for line in lines), text
    failed = next(line for line in lines if line.startswith("failed"))
    assert f"{bad['id'][:8]} sh-002-bad (exit 3)" in failed, text
    assert any(line.startswith("running") and "sh-003-slow (for " in line for line in lines), text
    assert any(line.startswith("cpu ") for line in lines) and any(line.startswith("peak ") for line in lines), text
    assert len(lines) < 10, text
    every = q.run("status", "batch", "--all", check=0).stdout
    assert every.count("\nid ") + every.startswith("id ") == 3, every
    assert len(json.loads(q.run("status", "batch", "--json", check=0).stdout)) == 3
    open_gate(q, "slow")
    q.run("wait", group)
    assert "its code 3" in q.run("status", "batch", check=0).stdout.splitlines()[0]
