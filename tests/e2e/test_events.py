"""qex events end to end: the journal as a stream, resumed, rotated, followed."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

MANY = '[budget]\ncpu = 16\nmem = "16GB"\n[defaults]\nmem = "10MB"\n'
FINAL = {"completed", "failed", "killed", "timeout", "oom", "expired", "cancelled", "skipped"}

# `qex submit --each-line` is not on main yet: this helper submits N jobs in
# batches through the same build/submit_many/after_pass path `qex submit` uses.
SUBMIT_MANY = """
import sys
from qex.cli.common import context
from qex.queue import engine
from qex.jobs.request import Request
from qex.jobs.submit import build, submit_many
ctx = context()
n, batch = int(sys.argv[1]), int(sys.argv[2])
for start in range(0, n, batch):
    built = [build(ctx, Request(command=["true"], name=f"job-{i}")) for i in range(start, min(n, start + batch))]
    ids, result = submit_many(ctx, built)
    from qex.supervisor import become

    become.finish_pass(ctx, result)
"""


def events(q, *args, timeout=30, env=None):
    proc = q.run("events", "--json", *args, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def jobs_of(lines):
    return [e for e in lines if e["event"] == "job"]


def test_a_job_running_true_shows_every_transition_in_order(q):
    job = q.submit("--", "true")
    q.wait_state(job, "completed")
    lines = events(q, "--since", "start", "--count", "4")
    assert lines[0]["event"] == "stream" and lines[0]["seq"] == 0
    got = [(e["previous"], e["state"], e["change"]) for e in jobs_of(lines)]
    assert got == [
        (None, "queued", "state"),
        ("queued", "starting", "state"),
        ("starting", "running", "state"),
        ("running", "completed", "state"),
    ]
    seqs = [e["seq"] for e in jobs_of(lines)]
    assert seqs == [1, 2, 3, 4] and {e["stream"] for e in lines} == {lines[0]["stream"]}
    assert jobs_of(lines)[-1]["job"]["id"] == job and jobs_of(lines)[-1]["job"]["exit_code"] == 0
    assert all(e["id"] == job and e["name"] == "true" for e in jobs_of(lines))


def test_since_now_gives_only_new_events_and_a_position_to_resume_from(q):
    old = q.submit("--", "true")
    q.wait_state(old, "completed")
    reader = q.popen("events", "--json", "--since", "now", "--count", "1")
    first = json.loads(reader.stdout.readline())
    assert first["event"] == "stream" and first["seq"] == 4  # after the four events of the old job
    new = q.submit("--", "true")
    out, _ = reader.communicate(timeout=30)
    (line,) = [json.loads(x) for x in out.splitlines()]
    assert line["id"] == new and line["state"] == "queued" and line["seq"] == 5
    assert reader.returncode == 0


def _reader_thread(q, name, results, stop, kill_after=None):
    """Read with restarts: each run resumes --since the last line it got."""
    position, lines, runs = None, [], 0

    def run_once(extra):
        nonlocal position, runs
        runs += 1
        args = ["events", "--json", "--since", position or "start", *extra]
        proc = q.popen(*args)
        got = 0
        for raw in proc.stdout:
            if not raw.endswith("\n"):
                break  # a line cut by a kill is not a line
            e = json.loads(raw)
            if e["event"] == "stream":
                assert position is None or f"{e['stream']}:{e['seq']}" == position
            lines.append(e)
            if e["stream"] is not None:  # null: nothing has happened yet; "start" stays right
                position = f"{e['stream']}:{e['seq']}"
            got += 1
            if kill_after is not None and runs == 2 and got == kill_after:
                proc.send_signal(signal.SIGKILL)  # a reader that dies mid-stream
                break
        proc.stdout.close()
        proc.wait(timeout=30)

    while not stop.is_set():
        run_once(["--count", "37" if name == "a" else "53", "--timeout", "3"])
    run_once(["--timeout", "1.5"])  # drain what is left
    results[name] = (lines, runs)


def test_two_readers_restarting_with_since_lose_and_repeat_nothing_over_200_jobs(q):
    q.write_config(MANY)
    # The 200 jobs write about 1.3 MB of events: the journal rotates once during the test, and
    # the one old file it keeps still holds the first event. With 600 kB it rotated twice under
    # CPU load (more events), and a reader down meanwhile rightly got a gap.
    env = {"QEX_JOURNAL_MAX_BYTES": "1000000"}
    q.env.update(env)
    results, stop = {}, threading.Event()
    threads = [
        threading.Thread(target=_reader_thread, args=(q, "a", results, stop)),
        threading.Thread(target=_reader_thread, args=(q, "b", results, stop, 5)),
    ]
    for t in threads:
        t.start()
    try:
        sub = subprocess.run(
            [sys.executable, "-c", SUBMIT_MANY, "200", "10"],
            env=q.env,
            cwd=q.root,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert sub.returncode == 0, sub.stderr
        q.wait_for(
            lambda: len(q.records()) == 200 and all(r["state"] in FINAL for r in q.records()),
            timeout=120,
            what="200 jobs to end",
        )
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    assert os.path.exists(os.path.join(q.state, "journal.1.jsonl"))  # it did rotate
    with open(os.path.join(q.state, "index.json")) as fh:
        last_seq = json.load(fh)["seq"]
    with open(os.path.join(q.state, "journal.jsonl"), "rb") as fh:  # the index may lag it (a lazy save)
        last_seq = max([last_seq] + [json.loads(line)["seq"] for line in fh.read().splitlines()])
    for name in ("a", "b"):
        lines, runs = results[name]
        assert runs > 5, (name, runs)
        assert not [e for e in lines if e["event"] == "gap"], name
        seqs = [e["seq"] for e in jobs_of(lines)]
        assert seqs == list(range(1, last_seq + 1)), name  # every event once, in order
        per_job = {}
        for e in jobs_of(lines):
            if e["change"] == "state":
                per_job.setdefault(e["id"], []).append((e["previous"], e["state"]))
        assert len(per_job) == 200
        for chain in per_job.values():
            assert chain == [
                (None, "queued"),
                ("queued", "starting"),
                ("starting", "running"),
                ("running", "completed"),
            ]


def test_a_forced_rotation_gives_a_gap_that_counts_what_was_lost(q):
    env = {"QEX_JOURNAL_MAX_BYTES": "4096"}
    first = q.submit("--", "true", env=env)
    q.wait_state(first, "completed")
    stream = events(q, "--since", "start", "--count", "1", env=env)[1]["stream"]
    for _ in range(4):  # enough events to rotate the journal several times
        q.wait_state(q.submit("--", "true", env=env), "completed")
    # A last pass (a waker's, a supervisor's deferred index save) may still rotate: wait for quiet.
    q.wait_for(lambda: not q.processes(), what="no qex process")
    with open(os.path.join(q.state, "journal.1.jsonl")) as fh:
        oldest_held = json.loads(fh.readline())["seq"]
    assert oldest_held > 2
    lines = events(q, "--since", f"{stream}:1", "--count", "1", env=env)
    assert [e["event"] for e in lines] == ["stream", "gap", "job"]
    gap = lines[1]
    assert gap["missed"] == oldest_held - 2 and gap["next_seq"] == oldest_held
    assert gap["seq"] == oldest_held - 1 and lines[2]["seq"] == oldest_held
    assert "no longer holds events 2 to" in gap["reason"]
    # A position from another stream: a gap that says it cannot count.
    lines = events(q, "--since", "0123456789ab:7", "--count", "1", env=env)
    assert lines[1]["event"] == "gap" and lines[1]["missed"] is None and "cannot be counted" in lines[1]["reason"]
    human = q.run("events", "--since", f"{stream}:1", "--count", "1", env=env).stdout
    assert f"# gap: {oldest_held - 2} event(s) missed" in human


def test_a_reader_ends_cleanly_when_its_pipe_closes(q):
    q.wait_state(q.submit("--", "true"), "completed")
    reader = q.popen("events", "--json", "--since", "start")
    assert json.loads(reader.stdout.readline())["event"] == "stream"
    reader.stdout.close()  # like `| head -1`: no more events will come to make a write fail
    assert reader.wait(timeout=10) == 0
    assert reader.stderr.read() == ""


def test_timeout_ends_cleanly_and_bad_options_are_refused(q):
    t0 = time.monotonic()
    proc = q.run("events", "--timeout", "0.5")
    assert proc.returncode == 0 and proc.stdout.startswith("# stream")
    assert time.monotonic() - t0 < 10
    bad = q.run("events", "--since", "yesterday")
    assert bad.returncode == 2 and "--since" in bad.stderr and "STREAM:SEQ" in bad.stderr
    bad = q.run("events", "--timeout", "soon")
    assert bad.returncode in (2, 121) and "--timeout" in bad.stderr


def test_the_human_form_shows_names_and_errors_safely(q):
    weird = os.path.join(q.root, "no\x1b[31mprogram")
    proc = q.run("submit", "--name", "fine", "--", weird)
    assert proc.returncode == 121  # refused at submission: nothing in the journal
    job = q.submit("--", "sh", "-c", "exit 3")
    q.wait_state(job, "failed")
    text = q.run("events", "--since", "start", "--count", "4").stdout
    assert "\x1b" not in text
    assert "running -> failed (code 3)" in text and "  sh  " in text


def test_schema_event_describes_every_line(q):
    schema = json.loads(q.run("schema", "event", check=0).stdout)
    props = schema["properties"]
    assert props["event"]["enum"] == ["stream", "job", "gap"]
    for field in ("seq", "stream", "time", "id", "name", "state", "previous", "change", "job", "missed"):
        assert field in props
    assert "completed" in props["state"]["anyOf"][0]["enum"]
    q.wait_state(q.submit("--", "true"), "completed")
    for e in events(q, "--since", "start", "--count", "4"):
        assert set(e) <= set(props)
