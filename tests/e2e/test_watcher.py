"""A long job's supervisor execs into the minimal watcher (qex.supervisor.watch) and
back into qex to record the end: real jobs, real supervisors, what /proc and the
records show."""

import os
import signal
import sys

import pytest
from e2e_helpers import FINAL, alive, gated, group_members, open_gate, proc_stat

USS_TARGET = 3 * 1024**2  # issue 10 (bench/run.py): a running job's supervisor holds <= 3 MiB of its own


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def is_watcher(pid: int) -> bool:
    """The minimal watcher names itself in ps (qex.linux.title): its python -I -S command
    line is gone under the title."""
    argv = cmdline(pid)
    return bool(argv) and argv[0].startswith("qex: supervisor of ") and argv[0].endswith(" (watching)")


def uss(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            return sum(
                int(line.split()[1]) * 1024 for line in fh if line.startswith(("Private_Clean:", "Private_Dirty:"))
            )
    except FileNotFoundError:
        return None


def fd_targets(pid: int) -> dict[int, str]:
    base = f"/proc/{pid}/fd"
    out = {}
    for name in os.listdir(base):
        try:
            out[int(name)] = os.readlink(os.path.join(base, name))
        except OSError:
            pass
    return out


def watched(q, job: str) -> dict:
    """The job's running record once its supervisor is the minimal watcher."""
    rec = q.wait_state(job, "running")
    sup = rec["supervisor_pid"]

    def settled():  # exec'd, read its hand-over (memfd closed), watching the job (its pidfd)
        targets = fd_targets(sup).values() if is_watcher(sup) else ()
        return "anon_inode:[pidfd]" in targets and not any("memfd:" in t for t in targets)

    q.wait_for(settled, timeout=10, what="the supervisor to exec the watcher")
    return rec


def log(q, job, name):
    with open(os.path.join(q.state, "jobs", job, name), "rb") as fh:
        return fh.read()


def test_a_long_job_is_watched_by_a_small_process_and_its_end_recorded_as_before(q):
    short = q.submit("--", "true")
    peak_from = q.wait_state(short, FINAL)["usage"]["peak_from"]  # cgroup or rusage on this machine
    job = q.submit("--", *gated(q, "go", before="echo before; ", then="echo after; echo err >&2; exit 7"))
    rec = watched(q, job)
    sup = rec["supervisor_pid"]
    assert proc_stat(rec["pid"])[1] == sup  # the job is still the supervisor's child (wait4 works)
    job_dir = os.path.join(q.state, "jobs", job)
    targets = fd_targets(sup)
    assert targets[0] == os.devnull and targets[1] == targets[2] == os.path.join(job_dir, "supervisor.log")
    kept = {t for fd, t in targets.items() if fd > 2}
    files = {t for t in kept if t.startswith("/")}
    assert os.path.join(job_dir, "alive.lock") in files, targets
    assert files <= {os.path.join(job_dir, n) for n in ("alive.lock", "stdout.log", "stderr.log")} | {
        t for t in files if t.startswith(q.peers)
    }, f"an fd the watcher should not hold: {targets}"
    assert all(t.startswith(("/", "pipe:", "anon_inode:[pidfd]")) for t in kept), targets
    size = uss(sup)
    if size is None:
        pytest.skip("no /proc/PID/smaps_rollup on this kernel: the USS is not measured")
    assert size <= USS_TARGET, f"the watcher holds {size} bytes of its own"
    open_gate(q, "go")
    final = q.wait_state(job, FINAL)
    assert (final["state"], final["exit_code"], final["supervisor_pid"]) == ("failed", 7, sup)
    assert log(q, job, "stdout.log") == b"before\nafter\n" and log(q, job, "stderr.log") == b"err\n"
    assert final["usage"]["cpu_secs"] is not None and final["usage"]["max_rss"]
    assert final["usage"]["peak_from"] == peak_from  # the memory meter survived both execs
    assert q.run("wait", job).returncode == 7
    assert log(q, job, "supervisor.log") == b""
    q.wait_for(lambda: not q.processes(), what="no qex process left")


def test_the_supervisor_back_from_the_watcher_goes_on_to_the_next_job_and_slims_down_again(q):
    q.write_config('[budget]\ncpu = 1\n[defaults]\nmem = "10MB"\n')
    first = q.submit("--", *gated(q, "one", then="echo one"))
    second = q.submit("--", *gated(q, "two", then="echo two"))
    watched(q, first)
    assert q.record(second)["state"] == "queued"
    open_gate(q, "one")  # the exec back records the end; its pass starts the second job
    rec = watched(q, second)
    open_gate(q, "two")
    assert q.wait_state(second, FINAL)["state"] == "completed" and q.record(first)["state"] == "completed"
    assert log(q, first, "stdout.log") == b"one\n" and log(q, second, "stdout.log") == b"two\n"
    assert not alive(rec["pid"])
    q.wait_for(lambda: not q.processes(), what="no qex process left")


def test_qex_kill_and_sigterm_reach_a_job_through_the_watcher(q):
    q.write_config('[budget]\ncpu = 4\n[defaults]\nmem = "10MB"\n')
    by_kill = q.submit("--", *gated(q, "never"))
    by_term = q.submit("--", *gated(q, "never2"))
    rec_kill, rec_term = watched(q, by_kill), watched(q, by_term)
    assert q.run("kill", by_kill).returncode == 0
    os.kill(rec_term["supervisor_pid"], signal.SIGTERM)
    final = q.wait_state(by_kill, FINAL, timeout=15)
    assert final["state"] == "killed" and final["error"] == "stopped by qex kill", final
    final = q.wait_state(by_term, FINAL, timeout=15)
    assert final["state"] == "killed" and "its supervisor received SIGTERM" in final["error"], final
    for rec in (rec_kill, rec_term):
        assert not group_members(rec["pid"])
    assert q.run("wait", by_kill).returncode == 125


def test_a_timeout_and_the_kill_grace_are_kept_through_the_watcher(q):
    job = q.submit("--timeout", "2s", "--", "sh", "-c", "trap '' TERM; echo up; while :; do sleep 0.05; done")
    rec = watched(q, job)
    final = q.wait_state(job, FINAL, timeout=20)  # SIGTERM ignored: SIGKILL after QEX_KILL_GRACE (2s)
    assert final["state"] == "timeout" and "--timeout of 2s" in final["error"], final
    assert final["signal"] == "SIGKILL" and log(q, job, "stdout.log") == b"up\n"
    assert not alive(rec["pid"]) and not group_members(rec["pid"])


def test_a_timeout_of_weeks_is_kept_and_the_job_ends_normally(q):
    job = q.submit("--timeout", "30d", "--", *gated(q, "go", then="echo done"))
    watched(q, job)  # a poll() of 30 days overflowed its int of milliseconds: the supervisor failed
    open_gate(q, "go")
    final = q.wait_state(job, FINAL)
    assert final["state"] == "completed" and log(q, job, "stdout.log") == b"done\n", final


WRITER = (
    "import os, sys, time\n"
    "out = sys.stdout.buffer\n"
    "def write(first, n):\n"
    "    for i in range(first, first + n):\n"
    "        out.write(b'line %08d of the output of this job\\n' % i)\n"
    "    out.flush()\n"
    "write(0, int(sys.argv[1]))\n"
    "while not os.path.exists(sys.argv[3]):\n"
    "    time.sleep(0.02)\n"
    "write(int(sys.argv[1]), int(sys.argv[2]))\n"
)


@pytest.mark.parametrize("before", [100, 20000])  # cut after the exec only / before it too
def test_the_output_limit_and_its_marker_come_out_right_through_the_exec(q, before):
    q.write_config('[logs]\nmax_bytes = "64KB"\n[defaults]\nmem = "20MB"\n')
    after = 100000
    job = q.submit("--", sys.executable, "-c", WRITER, str(before), str(after), q.gate("more"))
    watched(q, job)
    open_gate(q, "more")
    final = q.wait_state(job, FINAL, timeout=60)
    assert final["state"] == "completed", final
    whole = b"".join(b"line %08d of the output of this job\n" % i for i in range(before + after))
    body = log(q, job, "stdout.log")
    dropped = final["logs_dropped"]
    head = body[:16384]  # the first quarter of the limit
    end = body.index(b"----\n", 16384) + 5
    marker, tail = body[16384:end], body[end:]
    assert head == whole[:16384] and whole.endswith(tail) and len(body) <= 64 * 1024 + len(marker)
    assert marker.lstrip(b"\n").startswith(b"[qex] ---- %d bytes (" % dropped["stdout_bytes"]), marker
    assert f"and {dropped['stdout_lines']} line(s) of stdout are not in this file".encode() in marker
    assert dropped["stdout_bytes"] == len(whole) - len(head) - len(tail)
    assert dropped["stdout_lines"] == whole[len(head) : len(whole) - len(tail)].count(b"\n")
    assert not os.path.exists(os.path.join(q.state, "jobs", job, ".stdout.log.final"))


def test_a_watcher_killed_mid_job_is_a_lost_supervisor(q):
    job = q.submit("--", *gated(q, "never"))
    rec = watched(q, job)
    os.kill(rec["supervisor_pid"], signal.SIGKILL)
    final = q.wait_state(job, FINAL, timeout=15)  # noticed by the waker, no command typed
    assert final["state"] == "failed" and final["supervisor_lost"], final
    assert f"pid {rec['supervisor_pid']}" in final["error"]
    q.wait_for(lambda: not group_members(rec["pid"]), timeout=5, what="the orphaned job to be stopped")
    q.wait_for(lambda: not q.processes(), what="no qex process left")
