"""One crash point at a time: the faults the random harness found, pinned down so
that each stays fixed (QEX_CRASH_AT, see qex/base/faults.py)."""

import json
import os
import signal

import pytest
from driver import job_dir

from crash import invariants as inv


def _cmdline(pid: int) -> bytes | None:
    """A process's command line as ps shows it (a waker's is its title), or None if gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _runs(path):
    return inv.read_runs(path)


def test_a_first_pass_that_dies_after_its_journal_append_loses_no_job(q):
    # A fresh state directory has no index yet: the next pass must apply the journal, not skip it.
    died = q.run("submit", "--", "true", env={"QEX_CRASH_AT": "commit.after_journal:1"})
    assert died.returncode == -signal.SIGKILL and not died.stdout
    made = [e["id"] for e in map(json.loads, open(os.path.join(q.state, "journal.jsonl"))) if e["previous"] is None]
    assert len(made) == 1
    later = q.submit("--", "true")
    for job in made + [later]:
        q.wait_state(job, "completed")
    q.wait_for(lambda: not q.processes(), what="no qex process")
    assert not inv.check(inv.read_view(q.state), known=[later], quiescent=True)


def _submission_dying_at(q, point: str):
    """A `qex submit` SIGKILLed at crash point ``point``: (its runs log, its command, its job)."""
    runs = os.path.join(q.root, "runs.log")
    mark = ("sh", "-c", f'echo "$QEX_JOB_ID $QEX_ATTEMPT" >> {runs}')
    died = q.run("submit", "--", *mark, env={"QEX_CRASH_AT": f"{point}:1"})
    assert died.returncode == -signal.SIGKILL and not died.stdout
    journal = [json.loads(line) for line in open(os.path.join(q.state, "journal.jsonl"))]
    (job,) = {e["id"] for e in journal if e["state"] == "starting"}
    return runs, mark, job


def _requeued(q, job: str) -> bool:
    return any(
        "requeued" in (e["job"].get("blocked_reason") or "")
        for e in map(json.loads, open(os.path.join(q.state, "journal.jsonl")))
        if e["id"] == job
    )


def test_a_submission_whose_commit_dies_never_lets_its_early_supervisor_start_the_job(q):
    # `qex submit` forks the job's supervisor before its commit (engine._fork_early): the
    # supervisor starts the job only on the commit's byte. Here the pass dies after the
    # journal has the job 'starting', before its record: that supervisor must leave
    # without running it, and the next pass requeues the job and runs it once.
    runs, mark, job = _submission_dying_at(q, "commit.after_journal")
    q.wait_for(lambda: not q.processes(), what="the early supervisor to leave")
    assert _runs(runs) == {}
    from qex.linux import cgroup

    where = cgroup.here()  # (the supervisor made the job's cgroup before the byte: it removed it)
    assert where is None or not [n for n in os.listdir(where[1]) if cgroup.job_of(n) == job]
    later = q.submit("--", *mark)
    rec = q.wait_state(job, "completed")
    q.wait_state(later, "completed")
    assert _runs(runs) == {(job, 1): 1, (later, 1): 1} and len(rec["attempts"]) == 1
    assert _requeued(q, job)
    q.wait_for(lambda: not q.processes(), what="no qex process")
    assert not inv.check(inv.read_view(q.state), known=[later], quiescent=True, runs=_runs(runs))


def test_a_submission_that_dies_after_its_commit_is_applied_has_its_job_run_once_by_its_supervisor(q):
    # The commit's byte comes once the journal is fsynced and the record written (the
    # index file is only a checkpoint): a submission killed before it saves the index
    # file has queued its job, which its early supervisor runs, once. (That supervisor
    # inherits the crash point and dies at its own first commit: the next pass records
    # it lost; the job is never run again.)
    runs, mark, job = _submission_dying_at(q, "commit.before_index")
    q.wait_for(lambda: _runs(runs) == {(job, 1): 1}, what="its early supervisor to run the job")
    q.wait_for(lambda: not q.processes(), what="that supervisor to be gone")
    later = q.submit("--", *mark)
    rec = q.wait_state(job, ("completed", "failed"))
    q.wait_state(later, "completed")
    assert _runs(runs) == {(job, 1): 1, (later, 1): 1} and len(rec["attempts"]) == 1
    assert not _requeued(q, job)
    q.wait_for(lambda: not q.processes(), what="no qex process")
    assert not inv.check(inv.read_view(q.state), known=[later], quiescent=True, runs=_runs(runs))


def test_a_submission_whose_early_supervisor_died_still_answers_and_its_job_runs_once(q):
    # The supervisor forked before the commit dies before the commit's byte: the byte
    # meets a pipe nobody reads (EPIPE). The command committed the job: it must print
    # its id and exit 0 (it printed nothing), and the job must run once, later.
    runs = os.path.join(q.root, "runs.log")
    done = q.run(
        "submit",
        "--",
        "sh",
        "-c",
        f'echo "$QEX_JOB_ID $QEX_ATTEMPT" >> {runs}',
        env={"QEX_CRASH_AT": "engine.early_gate:1"},
    )
    assert done.returncode == 0 and done.stdout.strip(), (done.returncode, done.stdout, done.stderr)
    job = done.stdout.strip()
    rec = q.wait_state(job, "completed", timeout=20)  # requeued by the waker's pass
    assert _runs(runs) == {(job, 1): 1} and len(rec["attempts"]) == 1
    q.wait_for(lambda: not q.processes(), what="no qex process")
    assert not inv.check(inv.read_view(q.state), known=[job], quiescent=True, runs=_runs(runs))


def test_a_torn_journal_append_is_cut_and_the_queue_goes_on(q):
    first = q.submit("--", "true")
    q.wait_state(first, "completed")
    died = q.run("submit", "--", "true", env={"QEX_CRASH_AT": "journal.torn:1"})
    assert died.returncode == -signal.SIGKILL
    assert not open(os.path.join(q.state, "journal.jsonl"), "rb").read().endswith(b"\n")
    later = q.submit("--", "true")
    q.wait_state(later, "completed")
    q.wait_for(lambda: not q.processes(), what="no qex process")
    view = inv.read_view(q.state)
    assert not view.torn_tail
    assert not inv.check(view, known=[first, later], quiescent=True)


def test_a_supervisor_that_dies_right_after_the_spawn_never_runs_its_job_twice(q):
    runs = os.path.join(q.root, "runs.log")
    job = q.submit(
        "--",
        "sh",
        "-c",
        f'echo "$QEX_JOB_ID $QEX_ATTEMPT" >> {runs}; sleep 0.3',
        env={"QEX_CRASH_AT": "supervisor.after_spawn:1"},
    )
    rec = q.wait_state(job, "failed", timeout=20)  # noticed by the waker: no command typed
    assert "supervisor" in rec["error"] and "lost" in rec["error"], rec
    q.wait_for(lambda: not q.processes(), what="no qex process")
    assert _runs(runs).get((job, 1), 0) <= 1
    assert not inv.job_processes([job])
    assert not inv.check(inv.read_view(q.state), known=[job], quiescent=True, runs=_runs(runs))


def test_a_supervisor_that_dies_just_before_the_spawn_leaves_a_job_that_is_never_started(q):
    # Its pid file says a spawn may have happened (the intent line): the next pass cannot
    # know that it did not, so the job is recorded lost, never started (at most once).
    runs = os.path.join(q.root, "runs.log")
    job = q.submit(
        "--",
        "sh",
        "-c",
        f'echo "$QEX_JOB_ID $QEX_ATTEMPT" >> {runs}',
        env={"QEX_CRASH_AT": "supervisor.before_spawn:1"},
    )
    rec = q.wait_state(job, "failed", timeout=20)
    assert rec["supervisor_lost"] and "supervisor" in rec["error"] and "lost" in rec["error"], rec
    assert len(rec["attempts"]) == 1
    q.wait_for(lambda: not q.processes(), what="no qex process")
    assert _runs(runs) == {}
    assert not inv.check(inv.read_view(q.state), known=[job], quiescent=True, runs=_runs(runs))


def test_a_job_spawned_by_a_supervisor_that_died_before_its_pid_line_is_stopped_by_its_cgroup(q):
    from qex.linux import cgroup

    probe, why = cgroup.create("0193f7a2-0000-7000-8000-00000000dead", 1)
    if probe is None:
        pytest.skip(f"skipped: no memory cgroup can be made here ({why}): only the cgroup holds such a job")
    probe.remove()
    runs = os.path.join(q.root, "runs.log")
    job = q.submit(
        "--",
        "sh",
        "-c",
        f'echo "$QEX_JOB_ID $QEX_ATTEMPT" >> {runs}; exec sleep 60',
        env={"QEX_CRASH_AT": "supervisor.after_spawn:1"},
    )
    rec = q.wait_state(job, "failed", timeout=20)
    assert rec["supervisor_lost"] and "processes were stopped" in rec["error"], rec
    q.wait_for(lambda: not inv.job_processes([job]), timeout=5, what="the job to be stopped")
    q.wait_for(lambda: not q.processes(), what="no qex process")
    assert _runs(runs).get((job, 1), 0) <= 1
    assert not inv.check(inv.read_view(q.state), known=[job], quiescent=True, runs=_runs(runs))


def test_a_job_spawned_by_a_supervisor_that_died_before_its_pid_line_is_stopped_without_a_cgroup(q):
    # No pid line and no cgroup (an unprivileged user's, here QEX_CGROUP=off): the job is found
    # by the copy of its peer lock it holds, and stopped before its claim is let go. It was
    # recorded lost while it ran on, its claim freed: another job could overrun the budget.
    runs = os.path.join(q.root, "runs.log")
    env = {"QEX_CGROUP": "off"}
    job = q.submit(
        "--",
        "sh",
        "-c",
        f'echo "$QEX_JOB_ID $QEX_ATTEMPT" >> {runs}; exec sleep 60',
        env={**env, "QEX_CRASH_AT": "supervisor.after_spawn:1"},
    )
    rec = q.wait_state(job, "failed", timeout=20)
    assert rec["supervisor_lost"] and "processes were stopped" in rec["error"], rec
    assert not inv.job_processes([job])  # (stopped before the record said so)
    q.wait_for(lambda: not q.processes(), what="no qex process")
    assert _runs(runs) == {(job, 1): 1}
    assert not inv.check(inv.read_view(q.state), known=[job], quiescent=True, runs=_runs(runs))


def test_a_lost_supervisor_is_noticed_with_no_command_typed_and_its_job_stopped(q):
    job = q.submit("--", "sleep", "30")
    rec = q.wait_state(job, "running")
    os.kill(rec["supervisor_pid"], signal.SIGKILL)
    rec = q.wait_state(job, "failed", timeout=10)  # only the waker is there to notice
    assert f"pid {rec['supervisor_pid']}" in rec["error"] and len(rec["attempts"]) == 1
    q.wait_for(lambda: not inv.job_processes([job]), timeout=5, what="the orphaned job to be stopped")
    q.wait_for(lambda: not q.processes(), what="the waker to leave")


def test_a_lost_supervisors_job_is_stopped_whole_with_what_left_its_process_group(q):
    # Without a cgroup the pass stopped the job's process group only: a child that left it
    # (setsid, a daemon) ran on, its claim freed. It holds the job's peer lock: found by it.
    env = {"QEX_CGROUP": "off"}
    child = os.path.join(q.root, "child")
    job = q.submit("--", "sh", "-c", f"setsid sleep 60 & echo $! > {child}; wait", env=env)
    rec = q.wait_state(job, "running")
    q.wait_for(lambda: os.path.exists(child) and open(child).read().strip(), what="the escaped child")
    os.kill(rec["supervisor_pid"], signal.SIGKILL)
    rec = q.wait_state(job, "failed", timeout=10)
    assert "processes were stopped" in rec["error"], rec
    assert not inv.job_processes([job])  # (all of it, before the record said so)
    q.wait_for(lambda: not q.processes(), what="the waker to leave")


def test_a_supervisor_that_dies_between_two_forks_strands_no_job(q):
    q.write_config('[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "100MB"\n')  # (claims within 2 cores)
    gate = q.gate("g")
    # fork 1: the submission forks the holder's supervisor, which keeps the count; its final
    # pass admits the three waiting jobs, starts the first itself (its next job, no fork),
    # forks the second (hit 2) and dies before its next fork (hit 3)
    # (QEX_WATCH_GRACE: its supervisor never execs into the watcher, whose exec would reset
    # the count: on a loaded host the holder ran past the 0.5 s grace, and the point never fired)
    holder = q.submit(
        "--cpu",
        "2",
        "--",
        "sh",
        "-c",
        f"while [ ! -e {gate} ]; do sleep 0.02; done",
        env={"QEX_CRASH_AT": "engine.before_fork:3", "QEX_WATCH_GRACE": "60"},
    )
    waiting = [q.submit("--cpu", "0.5", "--", "sleep", "0.2") for _ in range(3)]
    q.wait_state(holder, "running")
    open(gate, "w").close()
    # The waker forked by that submission keeps the same count and may die the same way:
    # when every qex process of the queue is gone, the work waits, whole, for any command.
    q.wait_for(lambda: not q.processes(), what="every armed process to die or leave")
    q.run("wait", *waiting, "--timeout", "20")
    assert q.record(holder)["state"] == "completed"
    ends = [q.record(j) for j in waiting]
    # The job the dead process supervised itself is lost (its result unknown), never run
    # twice; a job it had admitted but not forked yet is not stranded: it runs.
    lost = [r for r in ends if r["state"] != "completed"]
    assert all(r["state"] == "failed" and r["supervisor_lost"] for r in lost), ends
    assert len(lost) <= 1, ends
    assert all(len(r["attempts"]) == 1 for r in ends), ends
    q.wait_for(lambda: not q.processes(), what="no qex process")
    assert not inv.check(inv.read_view(q.state), known=waiting + [holder], quiescent=True)
    requeued = [
        j
        for j in waiting
        if "requeued"
        in json.dumps([e for e in map(json.loads, open(os.path.join(q.state, "journal.jsonl"))) if e["id"] == j])
    ]
    assert requeued, "no job was left starting by the dead supervisor: the crash point did not fire"


def test_a_broken_config_gives_1_to_reading_commands_and_121_to_job_commands(q):
    job = q.submit("--", "true")
    q.wait_state(job, "completed")
    q.write_config("bogus = 1\n")
    for argv, code in (
        (("list",), 1),
        (("info",), 1),
        (("status", job), 1),
        (("kill", job), 1),
        (("submit", "--", "true"), 121),
        (("wait", job), 121),
        (("status", job, "--quiet"), 121),
    ):
        proc = q.run(*argv)
        assert proc.returncode == code and "unknown key bogus" in proc.stderr, (argv, proc.returncode, proc.stderr)


def test_a_waker_that_dies_at_its_commit_of_a_start_leaves_the_job_to_the_next_command(q):
    # Found by the multi-user rounds (QEX_CRASH_SEED=2511588720): the waker forked by a
    # submission armed with a crash point keeps its count and dies at its own commit of
    # the start, after the journal and the record say 'starting', before index.json
    # (which still says 'queued') and before it forks the supervisor. No qex process is
    # left, no pid file, a free alive.lock: the user's next command (a `qex list`, which
    # revives the waker with a pass) requeues the job and runs it, once.
    from qex.store import layout

    q.write_config('[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "100MB"\n')
    runs = os.path.join(q.root, "runs.log")
    fast = {"QEX_WAKER_INTERVAL": "0.2"}  # (the waker's pass comes within 0.2 s of the pause's end)
    q.run("pause", "queue", check=0)  # (the waker, not the submission, is to start the job)
    job = q.submit(
        "--",
        "sh",
        "-c",
        f'echo "$QEX_JOB_ID $QEX_ATTEMPT" >> {runs}',
        env={"QEX_CRASH_AT": "commit.before_index:2", **fast},
    )  # (hit 1: the submission's commit; hit 2: its waker's, of the start)
    os.unlink(os.path.join(q.state, layout.PAUSE, layout.PAUSE_QUEUE))  # a pause file removed by hand: the waker passes
    q.wait_for(lambda: not q.processes(), what="the armed waker to die at its commit of the start")
    events = [e for e in map(json.loads, open(os.path.join(q.state, layout.JOURNAL))) if e["id"] == job]
    assert events[-1]["state"] == "starting", events  # (else the crash point hit another commit)
    with open(os.path.join(q.state, layout.INDEX)) as fh:
        assert json.load(fh)["jobs"][job]["state"] == "queued"  # the journal ahead of the index file
    rec = q.record(job)
    assert rec["state"] == "starting" and rec["supervisor_pid"] is None, rec
    assert not os.path.lexists(os.path.join(job_dir(q.state, job), layout.PID)) and _runs(runs) == {}
    q.run("list", check=0, env=fast)
    rec = q.wait_state(job, "completed", timeout=20)
    assert _runs(runs) == {(job, 1): 1} and len(rec["attempts"]) == 1, (_runs(runs), rec)
    assert _requeued(q, job)
    q.wait_for(lambda: not q.processes(), what="no qex process")
    assert not inv.check(inv.read_view(q.state), known=[job], quiescent=True, runs=_runs(runs))


def test_a_first_submission_killed_after_its_record_has_its_job_run_by_the_next_reading_command(q):
    # Found by the multi-user rounds once they saw the wakers: the first pass of a fresh
    # state directory dies after its record, before any index.json: its job is 'starting'
    # in the journal, its early supervisor left without the commit's byte, no waker was
    # forked. A reader (`qex list`) passes only for work it sees: it read no index file as
    # no work, and the job stayed 'starting' until some other command's pass.
    from qex.store import layout

    runs = os.path.join(q.root, "runs.log")
    died = q.run(
        "submit",
        "--",
        "sh",
        "-c",
        f'echo "$QEX_JOB_ID $QEX_ATTEMPT" >> {runs}',
        env={"QEX_CRASH_AT": "commit.after_status:1"},
    )
    assert died.returncode == -signal.SIGKILL and not died.stdout
    (job,) = {e["id"] for e in map(json.loads, open(os.path.join(q.state, layout.JOURNAL))) if e["state"] == "starting"}
    q.wait_for(lambda: not q.processes(), what="its early supervisor to leave")
    assert not os.path.exists(os.path.join(q.state, layout.INDEX)) and q.record(job)["state"] == "starting"
    q.run("list", check=0)
    rec = q.wait_state(job, "completed", timeout=20)
    assert _runs(runs) == {(job, 1): 1} and len(rec["attempts"]) == 1 and _requeued(q, job)
    q.wait_for(lambda: not q.processes(), what="no qex process")
    assert not inv.check(inv.read_view(q.state), known=[job], quiescent=True, runs=_runs(runs))


def test_a_pass_that_dies_after_its_append_leaves_no_stale_record_to_the_next_reader(q):
    # Found by the multi-user rounds: a pass recorded a lost supervisor's job 'failed' in the
    # journal and died before its status.json. That user had nothing else queued or
    # running, so no later command passed (a reader passes only for work it sees, and the
    # journal says the job ended): status.json said 'running' for good, and so did
    # `qex status` and `qex list`. A command now has a dead pass's append replayed first.
    from qex.store import layout

    job = q.submit("--", "sleep", "60")
    sup = q.wait_state(job, "running")["supervisor_pid"]
    for pid in q.processes():  # the waker first: it would notice the lost supervisor itself
        if (_cmdline(pid) or b"").startswith(b"qex: waker"):
            os.kill(pid, signal.SIGKILL)
    q.wait_for(lambda: not any((_cmdline(p) or b"").startswith(b"qex: waker") for p in q.processes()))
    os.kill(sup, signal.SIGKILL)
    q.wait_for(lambda: sup not in q.processes(), what="the supervisor to be gone")
    died = q.run("list", env={"QEX_CRASH_AT": "commit.after_journal:1"})  # (its pass records the loss, dies)
    assert died.returncode == -signal.SIGKILL, (died.returncode, died.stderr)
    events = [e for e in map(json.loads, open(os.path.join(q.state, layout.JOURNAL))) if e["id"] == job]
    assert events[-1]["state"] == "failed" and q.record(job)["state"] == "running", events[-1]
    shown = json.loads(q.run("status", "--json", job, check=0).stdout)[0]
    assert shown["state"] == "failed" and shown["supervisor_lost"], shown
    assert q.record(job)["state"] == "failed"
    q.wait_for(lambda: not inv.job_processes([job]), what="the job to be stopped")
