"""The hot path of a drain of short jobs (issue 10): what it may skip, and what it
must still write.

- the journal's effects are marked applied in the lock file; a pass replays the
  events after the index into the index only when the mark covers them, and
  rewrites records only for events no completed commit wrote (a pass died, or
  the machine rebooted), each job once, in its last form;
- a job that ends while the state lock is busy gets 'running' and its end in
  one commit; every job still has its 'running' event, pid and start time.
"""

import json
import os

from e2e_helpers import gated, open_gate

CONFIG = '[budget]\ncpu = 2\n[defaults]\nmem = "64MB"\n'


def _journal(q) -> list[dict]:
    with open(os.path.join(q.state, "journal.jsonl")) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _quiet(q, ids):
    q.wait_for(
        lambda: all(q.record(j)["state"] == "completed" for j in ids) and not q.processes(),
        what="all jobs completed and no qex process left",
    )


def _lock_line(q) -> bytes:
    with open(os.path.join(q.state, "lock"), "rb") as fh:
        return fh.read()


def _rewind_index(q) -> None:
    """Make index.json say it applied nothing of the journal: every event is replayed again."""
    path = os.path.join(q.state, "index.json")
    with open(path) as fh:
        data = json.load(fh)
    data.update(seq=0, offset=0)
    with open(path, "w") as fh:
        json.dump(data, fh)


def test_a_commit_marks_the_journal_applied_up_to_its_end(q):
    q.write_config(CONFIG)
    job = q.submit("--", "true")
    _quiet(q, [job])
    word, boot, ino, end = _lock_line(q).split()[:4]
    with open("/proc/sys/kernel/random/boot_id", "rb") as fh:
        assert boot == fh.read().strip()
    st = os.stat(os.path.join(q.state, "journal.jsonl"))
    assert (word, int(ino), int(end)) == (b"applied", st.st_ino, st.st_size)


def test_events_a_completed_commit_wrote_are_not_written_again(q):
    """The mark covers the journal: a replay changes the index only. A record made
    stale behind qex's back stays as it is (nothing re-reads or rewrites records)."""
    q.write_config(CONFIG)
    job = q.submit("--", "true")
    _quiet(q, [job])
    path = os.path.join(q.state, "jobs", job, "status.json")
    stale = {**q.record(job), "state": "running", "exit_code": None}
    with open(path, "w") as fh:
        json.dump(stale, fh)
    _rewind_index(q)
    q.run("info", check=0)
    assert q.record(job)["state"] == "running"  # the mark said: written; so it was not touched


def test_after_a_reboot_every_unapplied_event_is_written_again_in_its_last_form(q):
    """Another boot id in the mark: nothing of it is trusted (a status.json written
    without its own flush may be lost with the page cache). The replay writes each
    job's last record once, never an older form over a newer one."""
    q.write_config(CONFIG)
    first, second = q.submit("--", "true"), q.submit("--", "sh", "-c", "exit 3")
    q.wait_for(
        lambda: q.record(second)["state"] == "failed" and q.record(first)["state"] == "completed" and not q.processes(),
        what="both ended",
    )
    stale = {**q.record(first), "state": "running", "exit_code": None}
    with open(os.path.join(q.state, "jobs", first, "status.json"), "w") as fh:
        json.dump(stale, fh)
    kept = os.stat(os.path.join(q.state, "jobs", second, "status.json"))
    line = _lock_line(q).split()
    with open(os.path.join(q.state, "lock"), "r+b") as fh:
        fh.write(b" ".join([line[0], b"0" * len(line[1]), *line[2:]]).ljust(127) + b"\n")
    _rewind_index(q)
    q.run("info", check=0)
    rec = q.record(first)
    assert (rec["state"], rec["exit_code"]) == ("completed", 0)
    # The other job's record was right: compared, not rewritten (same file).
    assert os.stat(os.path.join(q.state, "jobs", second, "status.json")).st_ino == kept.st_ino
    assert q.record(second)["state"] == "failed"
    assert _lock_line(q).split()[1] != b"0" * len(line[1])  # the full replay marked its end


def test_every_job_of_a_drain_is_recorded_running_with_its_pid_before_its_end(q):
    """Two slots, short jobs: the supervisors' passes keep the lock busy, so most
    jobs end before 'running' could be recorded alone. Each must still have the
    three events in order, 'running' and the end in one append or two, and a
    record with its pid and start time."""
    q.write_config(CONFIG)
    lines = os.path.join(q.root, "lines")
    with open(lines, "w") as fh:
        fh.write("".join(f"{i}\n" for i in range(40)))
    proc = q.run("submit", "--each-line", lines, "--cpu", "1", "--", "true", "{}")
    assert proc.returncode == 0, proc.stderr
    q.wait_for(
        lambda: len(q.records()) == 40 and all(r["state"] == "completed" for r in q.records()) and not q.processes(),
        timeout=60,
        what="the drain",
    )
    by_job: dict[str, list[dict]] = {}
    for event in _journal(q):
        if event.get("event") == "job":
            by_job.setdefault(event["id"], []).append(event)
    assert len(by_job) == 40
    for job_id, events in by_job.items():
        states = [e["state"] for e in events]
        assert states[-3:] == ["starting", "running", "completed"], (job_id, states)
        running = events[-2]["job"]
        assert running["pid"] and running["supervisor_pid"] and running["started_at"], running
        assert events[-2]["commit"] <= events[-1]["commit"]
        rec = q.record(job_id)
        assert rec["pid"] == running["pid"] and rec["started_at"] == running["started_at"]
        assert rec["attempts"][-1]["started_at"] == rec["started_at"] <= rec["ended_at"]


def _peer_files(q) -> tuple[list[str], os.stat_result | None]:
    """(this queue's lock files, the stat of its record) in the peer directory."""
    names = sorted(os.listdir(q.peers)) if os.path.isdir(q.peers) else []
    locks = [n for n in names if n.endswith(".lock") and not n.startswith(".")]
    records = [n for n in names if n.endswith(".json") and not n.startswith(".")]
    return locks, (os.stat(os.path.join(q.peers, records[0])) if records else None)


def test_a_supervisor_going_on_to_its_next_job_keeps_its_peer_lock_and_record(q):
    """One core, three jobs in turn: the second and third are started by the first
    one's supervisor at its end, which keeps its liveness lock in the peer directory for them.
    Its record there holds the same claims throughout: it is written once, not once
    per job (the jobs' ids are not in it), and gone with the last job."""
    q.write_config('[budget]\ncpu = 1\n[defaults]\nmem = "64MB"\n')
    ids = [q.submit("--cpu", "1", "--", *gated(q, str(i))) for i in range(3)]
    seen = []
    for i, job in enumerate(ids):
        rec = q.wait_state(job, "running")
        locks, record = _peer_files(q)
        assert record is not None and len(locks) == 1, (locks, record)
        assert rec["peer_lock"] == locks[0], (rec["peer_lock"], locks)
        seen.append((rec["supervisor_pid"], locks[0], record.st_ino, record.st_mtime_ns))
        with open(os.path.join(q.peers, _record_name(q))) as fh:
            published = json.load(fh)
        assert [j["lock"] for j in published["jobs"]] == locks and "id" not in published["jobs"][0], published
        open_gate(q, str(i))
    assert len(set(seen)) == 1, seen  # one supervisor, one lock, a record never rewritten
    _quiet(q, ids)
    assert _peer_files(q) == ([], None)


def _record_name(q) -> str:
    return next(n for n in os.listdir(q.peers) if n.endswith(".json") and not n.startswith("."))


def test_a_job_a_supervisor_starts_after_its_last_gets_its_pid_line_when_recorded_running(q):
    """The spawn writes the supervisor's intent line, which names the job's cgroup
    (all a pass needs to stop a job whose supervisor is lost); the job's own pid
    line comes with its 'running' record."""
    q.write_config('[budget]\ncpu = 1\n[defaults]\nmem = "64MB"\n')
    first = q.submit("--cpu", "1", "--", *gated(q, "first"))
    second = q.submit("--cpu", "1", "--", *gated(q, "second"))
    q.wait_state(first, "running")
    open_gate(q, "first")
    rec = q.wait_state(second, "running")
    with open(os.path.join(q.state, "jobs", second, "pid")) as fh:
        words = fh.read().split()
    assert words[0] == str(rec["pid"]) and int(words[1]) > 0, words
    with open(f"/proc/{rec['pid']}/stat") as fh:
        assert int(fh.read().rsplit(")", 1)[1].split()[19]) == int(words[1])  # its start time
    open_gate(q, "second")
    _quiet(q, [first, second])
