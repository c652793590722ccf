"""The stop hook end to end: real jobs, real hook processes, real kills."""

import json
import os
import signal
import sys

from e2e_helpers import gated

ONE_AT_A_TIME = '[budget]\ncpu = 1\nmem = "8GB"\n[defaults]\nmem = "10MB"\n'


def hook_config(q, argv, extra="", base=ONE_AT_A_TIME):
    q.write_config(base + f"[hooks]\non_stop = {json.dumps(argv)}\n{extra}")


def recorder(q):
    """A hook that appends one line per run (job id, state, exit code) to a file; returns (argv, path)."""
    path = os.path.join(q.root, "hook-runs.txt")
    script = (
        f"import os, json\nwith open({path!r}, 'a') as fh:\n"
        "    fh.write(json.dumps([os.environ[k] for k in ('QEX_JOB_ID', 'QEX_STATE', 'QEX_EXIT_CODE',"
        " 'QEX_ATTEMPTS')]) + chr(10))\n"
    )
    return [sys.executable, "-c", script], path


def runs(path):
    try:
        with open(path) as fh:
            return [json.loads(line) for line in fh]
    except FileNotFoundError:
        return []


def ran(q, job):
    """The hook's verdict record, once it has one."""
    try:
        with open(os.path.join(q.state, "jobs", job, "hook.ran")) as fh:
            data = json.load(fh)
    except (FileNotFoundError, ValueError):
        return None
    return data if "verdict" in data else None


def test_the_hook_gets_the_job_in_its_environment_and_qex_logs_hook_shows_it(q):
    out = os.path.join(q.root, "env.txt")
    script = (
        "import os, json\n"
        f"json.dump({{k: v for k, v in os.environ.items() if k.startswith('QEX_')}} | {{'cwd': os.getcwd()}},"
        f" open({out!r}, 'w'))\n"
        "print('hello from the hook')\n"
    )
    hook_config(q, [sys.executable, "-c", script])
    job = q.submit("--name", "train", "--tag", "exp1", "--tag", "night", "--", "sh", "-c", "exit 3")
    q.wait_state(job, "failed")
    q.wait_for(lambda: ran(q, job), what="the hook's verdict")
    env = json.load(open(out))
    rec = q.record(job)
    assert env["QEX_JOB_ID"] == job and env["QEX_JOB_NAME"] == "train" and env["QEX_STATE"] == "failed"
    assert env["QEX_EXIT_CODE"] == "3" and env["QEX_SIGNAL"] == "" and env["QEX_ATTEMPTS"] == "1"
    assert env["QEX_CWD"] == q.root and env["QEX_TAGS"] == "exp1 night"
    assert env["QEX_JOB_DIR"] == env["cwd"] == os.path.join(q.state, "jobs", job)
    assert env["QEX_MAX_RSS"] == str(rec["usage"]["max_rss"]) and env["QEX_ELAPSED_SECS"].isdigit()
    shown = q.run("logs", job, "--hook")
    assert shown.returncode == 0 and shown.stdout == "hello from the hook\n"
    assert "exited 0 after" in shown.stderr
    assert rec["state"] == "failed" and not rec.get("error")  # the hook changes nothing in the job


def test_a_slow_hook_does_not_delay_the_next_job(q):
    hook_config(q, ["sleep", "60"], 'timeout = "120s"\n')
    first = q.submit("--cpu", "1", "--", "true")
    second = q.submit("--cpu", "1", "--", "true")  # waits for the first: the budget is one core
    q.wait_state(second, "completed", timeout=20)
    # The hook is started after the pass that starts the second job (a supervisor runs its
    # next job itself): the second, a `true`, may end before the hook has written its file.
    marker = os.path.join(q.state, "jobs", first, "hook.ran")
    q.wait_for(lambda: os.path.exists(marker), what="the first job's hook to start")
    started = json.load(open(marker))
    try:
        assert "verdict" not in started  # the first job's hook still sleeps ...
        os.kill(started["pid"], 0)  # ... its process is alive ...
        rec1, rec2 = q.record(first), q.record(second)
        assert rec2["started_at"] >= rec1["ended_at"]  # ... and the second job ran meanwhile
    finally:
        for job in (first, second):
            try:
                data = json.load(open(os.path.join(q.state, "jobs", job, "hook.ran")))
                os.killpg(data["pid"], signal.SIGKILL)
            except (OSError, ValueError, KeyError, TypeError):
                pass


def test_a_hook_never_runs_twice(q):
    argv, path = recorder(q)
    hook_config(q, argv)
    job = q.submit("--", "true")
    q.wait_state(job, "completed")
    q.wait_for(lambda: ran(q, job), what="the hook")
    # A marker put back by hand (as a crashed pass could leave one) and several passes later: still once.
    os.makedirs(os.path.join(q.state, "hooks-pending"), exist_ok=True)
    open(os.path.join(q.state, "hooks-pending", f"{os.getuid()}.{job}"), "w").close()
    for _ in range(3):
        q.wait_state(q.submit("--", "true"), "completed")
    q.wait_for(lambda: len(runs(path)) == 4, what="the hooks of the later jobs")
    assert [r[0] for r in runs(path)].count(job) == 1
    assert os.listdir(os.path.join(q.state, "hooks-pending")) == []


def test_a_supervisor_killed_after_the_final_record_still_gets_its_hook_from_a_later_pass(q):
    argv, path = recorder(q)
    hook_config(q, argv)
    cmd, gate = gated(q, "a"), q.gate("a")
    job = q.submit("--", *cmd, env={"QEX_TEST_FAULT": "before-hook"})
    rec = q.wait_state(job, "running")
    open(gate, "w").close()
    q.wait_state(job, "completed")
    q.wait_for(lambda: not os.path.exists(f"/proc/{rec['supervisor_pid']}"), what="the supervisor to die")
    marker = os.path.join(q.state, "hooks-pending", f"{os.getuid()}.{job}")
    assert os.path.exists(marker) and ran(q, job) is None and runs(path) == []  # final, hook not run
    later = q.submit("--", "true")  # any later pass picks the marker up
    q.wait_state(later, "completed")
    q.wait_for(lambda: len(runs(path)) == 2, what="both hooks")
    assert sorted(r[0] for r in runs(path)) == sorted([job, later])
    # (the runner writes the verdict once the hook has exited, a moment after the hook's own line)
    q.wait_for(lambda: ran(q, job), what="the verdict of the job's hook")
    assert ran(q, job)["verdict"].startswith("exited 0")
    assert not os.path.exists(marker)


def test_jobs_that_end_without_a_supervisor_get_their_hook(q):
    argv, path = recorder(q)
    hook_config(q, argv, 'on_stop_states = ["expired", "cancelled", "failed"]\n')
    cmd, gate = gated(q, "block"), q.gate("block")
    blocker = q.submit("--cpu", "1", "--", *cmd)
    q.wait_state(blocker, "running")
    expires = q.submit("--cpu", "1", "--max-queue-time", "1s", "--", "true")
    cancelled = q.submit("--cpu", "1", "--", "true")
    q.run("cancel", cancelled, check=0)
    q.wait_state(expires, "expired", timeout=20)  # made final by the waker, with no supervisor
    q.wait_for(lambda: len(runs(path)) == 2, what="the hooks of the expired and the cancelled job")
    by_job = {r[0]: r[1:] for r in runs(path)}
    assert by_job[expires] == ["expired", "", "0"]  # no exit code, never started
    assert by_job[cancelled][0] == "cancelled"
    # A lost supervisor: the job ends failed by a later pass, and gets its hook.
    rec = q.record(blocker)
    os.kill(rec["supervisor_pid"], signal.SIGKILL)
    assert q.run("wait", blocker).returncode != 0
    q.wait_for(lambda: len(runs(path)) == 3, what="the hook of the job whose supervisor was lost")
    assert {r[0]: r[1] for r in runs(path)}[blocker] == "failed"
    open(gate, "w").close()


def test_a_state_not_listed_runs_no_hook_and_logs_hook_says_why(q):
    argv, path = recorder(q)
    hook_config(q, argv, 'on_stop_states = ["failed"]\n')
    job = q.submit("--", "true")
    q.wait_state(job, "completed")
    failing = q.submit("--", "false")
    q.wait_state(failing, "failed")
    q.wait_for(lambda: runs(path), what="the hook of the failed job")
    assert [r[0] for r in runs(path)] == [failing]
    shown = q.run("logs", job, "--hook")
    assert shown.returncode == 1 and "on_stop_states" in shown.stderr


def test_a_change_to_hooks_applies_to_the_next_job_that_ends(q):
    argv, path = recorder(q)
    q.write_config(ONE_AT_A_TIME)
    cmd, gate = gated(q, "x"), q.gate("x")
    job = q.submit("--", *cmd)
    q.wait_state(job, "running")
    hook_config(q, argv)  # added while the job runs
    open(gate, "w").close()
    q.wait_state(job, "completed")
    q.wait_for(lambda: runs(path), what="the hook added after the job started")
    assert runs(path)[0][0] == job


def test_a_hook_is_stopped_at_its_timeout_and_its_output_is_capped(q):
    hook_config(q, ["sh", "-c", "echo started; exec sleep 30"], 'timeout = "1s"\n')
    job = q.submit("--", "true")
    q.wait_for(lambda: ran(q, job), timeout=20, what="the hook to be stopped")
    verdict = ran(q, job)
    assert verdict["timed_out"] and verdict["signal"] == "SIGTERM"
    shown = q.run("logs", job, "--hook")
    assert shown.stdout == "started\n" and "timeout of 1s" in shown.stderr
    hook_config(q, [sys.executable, "-c", "import sys\nfor _ in range(3072): sys.stdout.write('z' * 1023 + chr(10))"])
    loud = q.submit("--", "true")
    q.wait_for(lambda: ran(q, loud), timeout=20, what="the loud hook")
    assert os.path.getsize(os.path.join(q.state, "jobs", loud, "hook.log")) == 1 << 20
    assert ran(q, loud)["output_capped"] and "1MB" in q.run("logs", loud, "--hook").stderr


def test_a_hook_that_cannot_start_says_so(q):
    hook_config(q, [os.path.join(q.root, "no-such-program")])
    job = q.submit("--", "true")
    q.wait_for(lambda: ran(q, job), what="the verdict")
    shown = q.run("logs", job, "--hook")
    assert "could not start" in shown.stderr and "no-such-program" in shown.stderr
    assert q.record(job)["state"] == "completed"
