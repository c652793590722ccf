"""Issue 23, points 4, 5, 6, 7 and 8, and issue 29, point 5: what a person types
every day never misleads them.

4. A claim no idle machine could hold (memory above its total less the reserve,
   cores above its own) is refused at submission, 121, with "never" and the
   machine's size, whatever [queue] oversized says; above the budget but
   within the machine still runs alone.
5. The default reserve is 10% of the machine's memory, at most 2GB: a 2GB
   machine (a real qex on a /proc/meminfo that says 2GB, in a mount namespace)
   runs jobs, and a job that waits on the reserve names it and the setting.
6. `qex clean` (ids, --state, --older-than, --auto, --all) keeps every record
   that queued or running work still needs, and says which and why (--json too).
7. `logs --follow --grep` filters; one stream asked for is on stdout.
8. QEX_CPU and the thread counts are whole numbers: make -j"$QEX_CPU" works.
29.5. --mem 900GB --dedupe-key is refused; a job queued past [system]
   stuck_after while none of its user's jobs ran makes a dedupe say so.

(Point 11, the OOM sentence under an outer limit, is in test_memory.py, beside
the real cgroup it needs.)
"""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from e2e_helpers import FINAL, gated, open_gate

from qex.base import machine
from qex.base.units import format_size

MiB, GiB = 1 << 20, 1 << 30
CONFIG = '[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "100MB"\n'


@pytest.fixture
def qq(q):
    q.write_config(CONFIG)
    return q


def job_dirs(q) -> list[str]:
    jobs = os.path.join(q.state, "jobs")
    return sorted(n for n in os.listdir(jobs) if not n.startswith(".")) if os.path.isdir(jobs) else []


def reserve_of(total: int) -> int:
    return min(total // 10, 2 * GiB)


# -- 4. a claim no idle machine could hold is refused -------------------------------------------


@pytest.mark.parametrize("oversized", ["run-when-idle", "queue", "reject"])
def test_memory_above_the_machine_less_the_reserve_is_refused_whatever_oversized_says(q, oversized):
    q.write_config(f'[budget]\nmem = "1000GB"\n[queue]\noversized = "{oversized}"\n')  # above any test machine
    total = machine.mem_total()
    above = total - reserve_of(total) + 64 * MiB  # fits the budget, never the machine
    for mem in (str(above), "64TB"):
        proc = q.run("submit", "--mem", mem, "--", "true")
        assert proc.returncode == 121, (mem, proc.returncode, proc.stderr)
        assert "never" in proc.stderr and format_size(total) in proc.stderr, proc.stderr
        assert "[system] reserve_mem" in proc.stderr and "--mem" in proc.stderr, proc.stderr
        assert proc.stdout == ""
    assert job_dirs(q) == []


def test_cores_above_the_machine_are_refused_and_above_the_budget_it_runs_alone(q):
    cores = machine.cores()
    q.write_config('[budget]\ncpu = "0.5"\nmem = "4GB"\n[defaults]\nmem = "100MB"\n')
    proc = q.run("submit", "--cpu", str(cores + 1), "--", "true")
    assert proc.returncode == 121, (proc.returncode, proc.stderr)
    assert "never" in proc.stderr and f"this machine has {cores}" in proc.stderr, proc.stderr
    assert job_dirs(q) == []
    # above the budget, within the machine: as the contract says, it runs alone (forced), with a warning
    proc = q.run("submit", "--cpu", str(cores), "--", "true")
    assert proc.returncode == 0, proc.stderr
    assert "it will run alone" in proc.stderr, proc.stderr
    rec = q.wait_state(proc.stdout.strip(), FINAL)
    assert rec["state"] == "completed" and rec["forced"] is True


def test_a_config_default_above_the_machine_is_refused_naming_the_key(q):
    q.write_config('[budget]\nmem = "1000GB"\n[defaults]\nmem = "900GB"\n')
    proc = q.run("submit", "--", "true")
    assert proc.returncode == 121 and "[defaults] mem" in proc.stderr and "never" in proc.stderr, proc.stderr


def test_a_crontab_typo_with_a_dedupe_key_is_refused_and_queues_nothing(qq):
    for _tick in range(2):
        proc = qq.run("submit", "--quiet", "--dedupe-key", "nightly", "--mem", "900GB", "--", "true")
        assert proc.returncode == 121 and "never" in proc.stderr, proc.stderr
    assert job_dirs(qq) == []


# -- 5. the reserve on a small machine -------------------------------------------------------


def _meminfo(total_kb: int, available_kb: int) -> str:
    return (
        f"MemTotal:       {total_kb} kB\nMemFree:        {available_kb} kB\n"
        f"MemAvailable:   {available_kb} kB\nBuffers:        0 kB\nCached:         0 kB\n"
        "SwapTotal:      0 kB\nSwapFree:       0 kB\n"
    )


@pytest.fixture
def small_machine(q):
    """run(*args) runs `qex ARGS` on a machine whose /proc/meminfo says 2GB (a bind mount
    in a mount namespace of its own; what qex forks stays there). set(available_kb)
    changes what it says is available."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("skipped: a 2GB /proc/meminfo needs a mount namespace (root and unshare)")
    fake = os.path.join(q.root, "meminfo")
    total_kb = 2 * 1024 * 1024

    def set_available(available_kb: int) -> None:
        with open(fake, "r+" if os.path.exists(fake) else "w") as fh:  # in place: the bind mount shows this file
            fh.seek(0)
            fh.write(_meminfo(total_kb, available_kb).ljust(400))
            fh.truncate()

    set_available(1800 * 1024)
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount --bind {fake} /proc/meminfo && head -1 /proc/meminfo"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0 or str(total_kb) not in probe.stdout:
        pytest.skip(f"skipped: cannot bind a file over /proc/meminfo here ({probe.stderr.strip()})")

    def run(*args, check=None):
        script = 'mount --bind "$1" /proc/meminfo && shift && exec "$@"'
        proc = subprocess.run(
            ["unshare", "-m", "sh", "-c", script, "sh", fake, *q_cmd(), *map(str, args)],
            capture_output=True,
            text=True,
            timeout=60,
            env=q.env,
            cwd=q.root,
        )
        if check is not None:
            assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
        return proc

    run.set_available = set_available
    return run


def q_cmd() -> list[str]:
    return [sys.executable, "-m", "qex"]


def test_a_2gb_machine_runs_jobs_and_the_reserve_is_a_tenth_of_it(q, small_machine):
    info = json.loads(small_machine("info", "--json", check=0).stdout)
    assert info["machine"]["mem_total"] == 2 * GiB
    assert info["budget"]["reserve_mem"] == 2 * GiB // 10
    shown = small_machine("config", "show", check=0).stdout
    assert "10% of 2GB, at most 2GB = 204.8MB" in shown, shown
    done = small_machine("submit", "--wait", "--mem", "100MB", "--", "sh", "-c", "echo ran", check=0)
    assert json.loads(done.stdout)["state"] == "completed", done.stderr


def test_a_job_that_waits_on_the_reserve_names_it_and_the_setting(q, small_machine):
    small_machine.set_available(250 * 1024)  # 250MB available: 45MB beside the reserve of 205MB
    job = small_machine("submit", "--mem", "100MB", "--", "sh", "-c", "echo ran", check=0).stdout.strip()
    rec = q.wait_for(lambda: q.record(job).get("blocked_reason") and q.record(job), what="a reason")
    reason = small_machine("status", job, "--json", check=0)
    reason = json.loads(reason.stdout)[0]["blocked_reason"]
    assert rec["state"] == "queued"
    assert "reserve" in reason and "[system] reserve_mem" in reason, reason
    assert "outside qex" not in reason, reason
    assert "204.8MB" in reason, reason
    small_machine.set_available(1800 * 1024)  # memory frees: the job starts by itself
    waited = small_machine("wait", job, "--timeout", "30s")
    assert waited.returncode == 0, (waited.returncode, waited.stderr)
    assert q.record(job)["state"] == "completed"


# -- 6. clean keeps what queued or running work needs ---------------------------------------

CLEANS = [["ID"], ["--state", "completed"], ["--older-than", "0s"], ["--auto"], ["--all"]]


@pytest.mark.parametrize("how", CLEANS, ids=lambda a: " ".join(a))
def test_clean_keeps_a_record_that_a_queued_job_needs_and_says_why(q, how):
    q.write_config(CONFIG + '[store]\nmax_age = "1s"\n')
    gate = q.submit("--cpu", "0.5", "--", *gated(q, "a"))
    needed = json.loads(q.run("submit", "--wait", "--cpu", "0.5", "--", "true", check=0).stdout)["id"]
    waiting = q.submit("--needs", needed, "--after", gate, "--", "sh", "-c", "exit 0")
    if how == ["--auto"]:
        q.wait_for(lambda: time.time() - q.record(needed)["ended_at"] > 1.2, what="the record to pass max_age")
    argv = [needed if a == "ID" else a for a in how]
    proc = q.run("clean", *argv)
    assert needed in job_dirs(q), proc.stderr
    assert proc.returncode == (1 if how == ["ID"] else 0), (proc.returncode, proc.stderr)
    assert f"kept {needed[:8]}" in proc.stderr and waiting[:8] in proc.stderr, proc.stderr
    said = json.loads(q.run("clean", *argv, "--json").stdout)
    assert needed not in said["removed"]
    assert [k["id"] for k in said["kept"]] == [needed], said
    assert said["kept"][0]["needed_by"] == waiting and "--needs" in said["kept"][0]["why"]
    open_gate(q, "a")
    rec = q.wait_state(waiting, FINAL)
    assert rec["state"] == "completed", rec  # never "skipped" because clean took what it needed
    assert q.run("wait", waiting).returncode == 0
    # once nothing needs it, it goes
    assert q.run("clean", needed).returncode == 0
    assert needed not in job_dirs(q)


def test_clean_keeps_an_after_dependency_and_a_group_member_while_its_group_works(qq):
    lines = os.path.join(qq.root, "lines.txt")
    with open(lines, "w") as fh:
        fh.write("fail\nwait\n")
    script = f"if [ \"$1\" = fail ]; then exit 3; fi; while [ ! -e '{qq.gate('g')}' ]; do sleep 0.02; done"
    group = qq.run(
        "submit", "--each-line", lines, "--cpu", "0.5", "--", "sh", "-c", script, "sh", "{}", check=0
    ).stdout.strip()
    members = json.loads(qq.run("status", group, "--json", check=0).stdout)
    failed, working = members[0]["id"], members[1]["id"]
    qq.wait_state(failed, "failed")
    before = qq.submit("--cpu", "0.5", "--", "true")
    qq.wait_state(before, "completed")
    after = qq.submit("--after", before, "--needs", working, "--", "true")
    proc = qq.run("clean", "--all")
    assert proc.returncode == 0 and failed in job_dirs(qq) and before in job_dirs(qq), proc.stderr
    said = json.loads(qq.run("clean", "--all", "--json").stdout)
    kept = {k["id"]: k for k in said["kept"]}
    assert set(kept) == {failed, before}, said
    assert "group" in kept[failed]["why"] and kept[failed]["needed_by"] == working
    assert "--after" in kept[before]["why"] and kept[before]["needed_by"] == after
    open_gate(qq, "g")
    assert qq.run("wait", group).returncode == 3  # the group's handle still reports its failed member
    qq.wait_state(after, FINAL)
    proc = qq.run("clean", "--all", "--json")
    assert json.loads(proc.stdout)["kept"] == []
    assert job_dirs(qq) == []


# -- 7. logs: --grep with --follow, one stream on stdout ---------------------------------------


def test_logs_follow_filters_with_grep(qq):
    job = qq.submit(
        "--",
        *gated(
            qq,
            "a",
            before="echo a-keep; echo b-drop; echo e-keep >&2; ",
            then="echo c-keep; echo d-drop; printf f-keep",
        ),
    )
    log = os.path.join(qq.state, "jobs", job, "stdout.log")  # (made by the supervisor when the job starts)
    qq.wait_for(lambda: os.path.exists(log) and b"b-drop" in open(log, "rb").read(), what="the first lines")
    follower = qq.popen("logs", job, "--follow", "--grep", "keep")
    try:
        open_gate(qq, "a")
        out, err = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, err
    assert out == "a-keep\nc-keep\nf-keep", out  # (the last line, unended, when the job ends)
    assert "drop" not in out and "drop" not in err, (out, err)
    assert "e-keep" in err  # stderr to stderr (both streams, each its own)


def test_logs_of_one_stream_go_to_stdout_and_both_by_default(qq):
    job = qq.submit("--", "sh", "-c", "echo to-out; echo to-err >&2")
    qq.wait_state(job, "completed")
    only_err = qq.run("logs", job, "--stderr")
    assert only_err.returncode == 0 and only_err.stdout == "to-err\n" and "to-err" not in only_err.stderr
    only_out = qq.run("logs", job, "--stdout")
    assert only_out.stdout == "to-out\n" and "to-err" not in only_out.stderr
    both = qq.run("logs", job)
    assert both.stdout == "to-out\n" and "to-err" in both.stderr
    grep = qq.run("logs", job, "--stderr", "--grep", "err")
    assert grep.stdout == "to-err\n"


# -- 8. whole numbers for the thread counts ------------------------------------------------------


@pytest.mark.parametrize(("cpu", "whole"), [("2", "2"), ("1.5", "1"), ("0.5", "1"), ("0.25", "1")])
def test_qex_cpu_and_the_thread_counts_are_whole_numbers(qq, cpu, whole):
    show = "echo $QEX_CPU $OMP_NUM_THREADS $GOMAXPROCS $MKL_NUM_THREADS"
    job = qq.submit("--cpu", cpu, "--mem", "100MB", "--", "sh", "-c", show)
    assert qq.wait_state(job, FINAL)["state"] == "completed"
    assert qq.run("logs", job).stdout.split() == [whole] * 4


def test_make_j_qex_cpu_in_a_job_builds_and_completes(qq):
    if shutil.which("make") is None:
        pytest.skip("skipped: no make on this machine")
    with open(os.path.join(qq.root, "Makefile"), "w") as fh:
        fh.write("all:\n\t@echo built\n")
    job = qq.submit("--cpu", "2", "--mem", "100MB", "--cwd", qq.root, "--", "sh", "-c", 'make -j"$QEX_CPU"')
    rec = qq.wait_state(job, FINAL)
    assert rec["state"] == "completed", qq.run("logs", job).stderr
    assert qq.run("logs", job).stdout == "built\n"


# -- 29.5. a stuck job that a dedupe key keeps handing back says so ------------------------------


def test_a_dedupe_key_held_by_a_stuck_job_says_so_but_not_while_its_user_runs_a_job(q):
    cores = machine.cores()
    q.write_config(
        '[budget]\ncpu = "0.5"\nmem = "4GB"\n[defaults]\nmem = "100MB"\n'
        '[queue]\noversized = "queue"\n[system]\nstuck_after = "1s"\n'
    )
    running = q.submit("--cpu", "0.5", "--", *gated(q, "a"))
    q.wait_state(running, "running")
    stuck = q.submit("--dedupe-key", "nightly", "--cpu", str(cores), "--", "true")  # above the budget: waits
    submitted = time.time()
    q.wait_for(lambda: time.time() - submitted > 1.5, what="the wait to pass stuck_after")
    again = q.run("submit", "--dedupe-key", "nightly", "--cpu", str(cores), "--", "true")
    assert again.returncode == 0 and again.stdout.strip() == stuck
    assert "deduplicated" in again.stderr and "stuck" not in again.stderr, again.stderr  # its user runs a job
    assert "stuck" not in q.run("status", stuck).stdout
    open_gate(q, "a")
    ended = q.wait_state(running, "completed")["ended_at"]

    def tick():
        proc = q.run("submit", "--dedupe-key", "nightly", "--cpu", str(cores), "--", "true")
        assert proc.returncode == 0 and proc.stdout.strip() == stuck, proc.stderr
        return proc if "stuck" in proc.stderr else None

    said = q.wait_for(tick, timeout=20, what="the dedupe to call the job stuck", interval=0.2)
    assert time.time() - ended > 1.0  # counted from the end of its user's last job, not from its submission
    assert "[system] stuck_after" in said.stderr and stuck[:8] in said.stderr, said.stderr
    status = q.run("status", stuck).stdout
    assert "stuck" in status and "[system] stuck_after (1s)" in status, status
    assert q.run("cancel", stuck).returncode == 0
