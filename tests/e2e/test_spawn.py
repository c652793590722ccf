"""How a job is spawned (qex.supervisor.spawn.spawn, posix_spawn): what the job gets
(fds, signals, process group, niceness, cwd, its cgroup) and what a start that fails
says. Real processes; a job that waits is gated by a file."""

import json
import os
import signal
import subprocess
import sys

import pytest
from e2e_helpers import fd_targets, gated, open_gate, proc_stat, submit_wait_with_refused_move

from qex.linux import cgroup
from qex.supervisor.spawn import LOCK_FD

PY = sys.executable


def _blocked(q):
    """A one-core budget held by a job gated on 'blocker': what is submitted next waits."""
    q.write_config('[budget]\ncpu = 1\n[defaults]\nmem = "10MB"\n')
    blocker = q.submit("--", *gated(q, "blocker"))
    q.wait_state(blocker, "running")


def _peer_lock_of(q, out: str, rec: dict) -> None:
    """The job's fd LOCK_FD is its own lock file in the peer directory (docs/multiuser.md)."""
    assert f"lock {os.path.join(q.peers, rec['peer_lock'])}" in out.splitlines(), (out, rec["peer_lock"])


def test_an_inheritable_fd_of_the_submitter_never_reaches_the_job(q):
    fd = os.open(os.path.join(q.root, "leak"), os.O_WRONLY | os.O_CREAT, 0o600)
    os.set_inheritable(fd, True)  # the submitting script passes it on to qex
    try:
        probe = [
            "sh",
            "-c",
            f"ls /proc/$$/fd; [ -e /proc/$$/fd/{fd} ] && echo LEAKED; "
            f'echo "lock $(readlink /proc/$$/fd/{LOCK_FD})"; exit 0',
        ]
        first = subprocess.run(
            [PY, "-m", "qex", "submit", "--wait", "--", *probe],
            pass_fds=(fd,),
            capture_output=True,
            text=True,
            timeout=60,
            env=q.env,
            cwd=q.root,
        )
    finally:
        os.close(fd)
    assert first.returncode == 0, first.stderr
    rec = json.loads(first.stdout)
    out = q.run("logs", rec["id"], "--stdout").stdout
    assert "LEAKED" not in out
    assert sorted(int(n) for n in out.split() if n.isdigit()) == [0, 1, 2, LOCK_FD], out
    _peer_lock_of(q, out, rec)


def test_a_nice_job_gets_its_peer_lock_too_and_nothing_else(q):
    probe = f'ls /proc/$$/fd; echo "lock $(readlink /proc/$$/fd/{LOCK_FD})"; exit 0'
    rec = q.wait_state(q.submit("--nice", "3", "--", "sh", "-c", probe), "completed")
    out = q.run("logs", rec["id"], "--stdout").stdout
    assert sorted(int(n) for n in out.split() if n.isdigit()) == [0, 1, 2, LOCK_FD], out
    _peer_lock_of(q, out, rec)


def test_the_peer_lock_is_held_by_the_supervisor_and_the_job_alone(q):
    # Not by the command that ran the pass and waits (submit --wait), nor by the waker.
    waiting = q.popen("submit", "--wait", "--", *gated(q, "a"))
    rec = q.wait_for(lambda: next((r for r in q.records() if r["state"] == "running"), None), what="a running job")
    lock = os.path.join(q.peers, rec["peer_lock"])
    assert lock in fd_targets(rec["supervisor_pid"]) and lock in fd_targets(rec["pid"])
    others = [p for p in q.processes() if p != rec["supervisor_pid"] and (proc_stat(p) or (0, 0, 0))[2] != rec["pid"]]
    assert waiting.pid in others, others
    for pid in others:
        assert lock not in fd_targets(pid), (pid, fd_targets(pid))
    open_gate(q, "a")
    waiting.communicate(timeout=60)
    assert waiting.returncode == 0


def test_a_second_job_of_the_same_supervisor_gets_no_inherited_fd_either(q):
    # The first job's supervisor starts the second itself (its next job, no fork).
    q.write_config('[budget]\ncpu = 1\n[defaults]\nmem = "10MB"\n')
    probe = (
        'for f in /proc/$$/fd/*; do n=${f##*/}; [ "$n" -gt 3 ] && [ "$n" != %d ] && echo "extra $n"; '
        "done; exit 0" % LOCK_FD
    )  # (its peer lock, handed on with the job: the same file)
    code = (
        "import os, subprocess, sys\n"
        "fd = os.open(os.devnull, os.O_RDONLY); os.dup2(fd, 9)\n"
        "p = [sys.executable, '-m', 'qex', 'submit', '--', 'sh', '-c', sys.argv[1]]\n"
        "ids = [subprocess.run(p, pass_fds=(9,), capture_output=True, text=True).stdout.strip() "
        "for _ in range(2)]\n"
        "print(' '.join(ids))\n"
    )
    ids = subprocess.run(
        [PY, "-c", code, probe], capture_output=True, text=True, timeout=60, env=q.env, cwd=q.root, check=True
    ).stdout.split()
    for job in ids:
        assert q.wait_state(job, "completed")["exit_code"] == 0
        assert q.run("logs", job, "--stdout").stdout == ""


def test_the_job_has_its_own_group_an_empty_mask_and_the_signals_it_had_before(q):
    # As with subprocess before: SIGPIPE and SIGXFSZ at their defaults (Python ignores both),
    # SIGHUP ignored (the supervisor left the terminal), nothing blocked, nothing else ignored.
    rec = q.wait_state(q.submit("--", "cat", "/proc/self/status"), "completed")
    out = q.run("logs", rec["id"], "--stdout").stdout
    fields = dict(line.split(":\t", 1) for line in out.splitlines() if ":\t" in line)
    ignored = int(fields["SigIgn"], 16) & 0x7FFFFFFF  # 1..31 (32 and 33 belong to the C library)
    # What the environment itself ignores passes on, as it did before (a test run started in the
    # background of a shell ignores SIGINT and SIGQUIT), but for what the supervisor sets itself:
    # SIGINT, SIGTERM, SIGPIPE and SIGUSR1 at their defaults when it detaches (engine.detach_stdio),
    # SIGXFSZ at its default for the spawn.
    with open("/proc/self/status") as fh:
        mine = int(next(line for line in fh if line.startswith("SigIgn:")).split()[1], 16) & 0x7FFFFFFF
    reset = sum(1 << (s - 1) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGUSR1, signal.SIGXFSZ))
    assert ignored == (mine & ~reset) | (1 << (signal.SIGHUP - 1)), fields["SigIgn"]
    assert int(fields["SigBlk"], 16) == 0
    rec = q.wait_state(q.submit("--", "cat", "/proc/self/stat"), "completed")
    stat = q.run("logs", rec["id"], "--stdout").stdout
    pid, pgrp = int(stat.split()[0]), int(stat[stat.rindex(")") + 2 :].split()[2])
    assert pid == pgrp == rec["pid"]


def test_sigpipe_ends_a_job_as_it_would_in_a_shell(q):
    rec = q.wait_state(q.submit("--", "sh", "-c", "yes | head -c 5 >/dev/null; echo done"), "completed")
    assert q.run("logs", rec["id"], "--stdout").stdout == "done\n"


def test_a_nice_job_runs_at_its_niceness_from_its_first_instruction(q):
    rec = q.wait_state(q.submit("--nice", "7", "--", "cat", "/proc/self/stat"), "completed")
    stat = q.run("logs", rec["id"], "--stdout").stdout
    assert int(stat[stat.rindex(")") + 2 :].split()[16]) == 7  # field 19: nice
    probe, _ = cgroup.create("0193f7a2-0000-7000-8000-00000000a1ce", 1)
    if probe is not None:
        probe.remove()
        assert rec["usage"]["peak_from"] == "cgroup"  # born in its cgroup on this path too


def test_the_command_is_found_on_the_jobs_path_like_subprocess_finds_it(q):
    first, second = os.path.join(q.root, "a"), os.path.join(q.root, "b")
    os.mkdir(first)
    os.mkdir(second)
    for folder, mode, says in ((first, 0o644, "not executable"), (second, 0o755, "the executable one")):
        with open(os.path.join(folder, "tool"), "w") as fh:
            fh.write(f"#!/bin/sh\necho '{says}' \"$0\"\n")
        os.chmod(os.path.join(folder, "tool"), mode)
    os.mkdir(os.path.join(first, "sub"))
    path = f"{first}:{second}:/usr/bin:/bin"
    rec = q.wait_state(q.submit("--", "tool", env={"PATH": path}), "completed")
    assert q.run("logs", rec["id"], "--stdout").stdout == f"the executable one {second}/tool\n"
    assert q.record(rec["id"])["command"] == ["tool"]


def _tool(q) -> tuple[str, str]:
    """(its directory, its path): an executable script ``mytool`` in a directory of its own."""
    bin_dir = os.path.join(q.root, "bin")
    os.mkdir(bin_dir)
    tool = os.path.join(bin_dir, "mytool")
    with open(tool, "w") as fh:
        fh.write("#!/bin/sh\necho ran\n")
    os.chmod(tool, 0o755)
    return bin_dir, tool


def test_a_command_gone_from_the_path_when_it_starts_says_so(q):
    bin_dir, tool = _tool(q)
    _blocked(q)
    gone = q.submit("--", "mytool", env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    os.unlink(tool)
    open_gate(q, "blocker")
    rec = q.wait_state(gone, "failed")
    assert rec["error"] == "cannot start 'mytool': No such file or directory", rec["error"]
    assert rec["pid"] is None and not os.path.exists(os.path.join(q.state, "jobs", gone, "pid"))
    # an end like any other: when it ended, and its attempt's start and end
    (attempt,) = rec["attempts"]
    assert rec["ended_at"] is not None and rec["ended_at"] == attempt["ended_at"] >= attempt["started_at"], rec


def test_a_command_no_longer_executable_when_it_starts_says_permission_denied(q):
    bin_dir, tool = _tool(q)
    _blocked(q)
    by_name = q.submit("--", "mytool", env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    by_path = q.submit("--", tool)
    os.chmod(tool, 0o644)
    open_gate(q, "blocker")
    if os.geteuid() == 0 and os.access(tool, os.X_OK):
        pytest.skip("skipped: this root can execute a file with no execute bit")
    for job, name in ((by_name, "mytool"), (by_path, tool)):
        rec = q.wait_state(job, "failed")
        assert rec["error"] == f"cannot start {name!r}: Permission denied", rec["error"]


def test_a_cwd_gone_when_the_job_starts_fails_the_start(q):
    where = os.path.join(q.root, "work")
    os.mkdir(where)
    _blocked(q)
    job = q.submit("--cwd", where, "--", "true")
    os.rmdir(where)
    open_gate(q, "blocker")
    rec = q.wait_state(job, "failed")
    assert rec["error"] == "cannot start 'true': No such file or directory", rec["error"]
    # the supervisor went back to the job directory: its next job ran normally
    after = q.submit("--", "sh", "-c", "pwd")
    assert q.wait_state(after, "completed")["exit_code"] == 0
    assert q.run("logs", after, "--stdout").stdout == q.root + "\n"


def _memory_cgroup_of(pid: int) -> str:
    """The v1 memory line's path, else the v2 one (as cgroup.locate picks)."""
    with open(f"/proc/{pid}/cgroup") as fh:
        lines = [line.rstrip("\n").split(":", 2) for line in fh]
    v1 = [path for _, controllers, path in lines if "memory" in controllers.split(",")]
    return v1[0] if v1 else next(path for hier, controllers, path in lines if hier == "0" and not controllers)


def test_the_job_is_born_in_its_cgroup_and_the_supervisor_goes_home(q):
    probe, why = cgroup.create("0193f7a2-0000-7000-8000-00000000b0a7", 1)
    if probe is None:
        pytest.skip(f"skipped: no memory cgroup can be made here ({why})")
    probe.remove()
    job = q.submit("--", *gated(q, "g"))
    rec = q.wait_state(job, "running")
    mine = _memory_cgroup_of(os.getpid())
    assert _memory_cgroup_of(rec["pid"]).endswith("/" + cgroup.name_of(job, 1))
    assert _memory_cgroup_of(rec["supervisor_pid"]) == mine
    open_gate(q, "g")
    done = q.wait_state(job, "completed")
    assert done["usage"]["peak_from"] == "cgroup"


def test_a_supervisor_that_cannot_leave_the_jobs_cgroup_says_so(q):
    """The kernel refuses the move back (simulated in the real qex process that starts
    the job): the job still runs once, and supervisor.log says where the supervisor is."""
    probe, why = cgroup.create("0193f7a2-0000-7000-8000-00000000b0a8", 1)
    if probe is None:
        pytest.skip(f"skipped: no memory cgroup can be made here ({why})")
    probe.remove()
    rec = submit_wait_with_refused_move(q, "leave", "Permission denied")
    assert rec["state"] == "completed" and len(rec["attempts"]) == 1
    assert q.run("logs", rec["id"], "--stdout").stdout == "ran\n"
    with open(os.path.join(q.state, "jobs", rec["id"], "supervisor.log")) as fh:
        log = fh.read()
    assert "cannot leave the job's memory cgroup" in log and "Permission denied" in log, log
    q.wait_for(lambda: not q.processes(), what="the supervisor to leave")
    # The cgroup outlived its supervisor (it was in it); the next sweep or this test removes it.
    path = os.path.join(cgroup.here()[1], cgroup.name_of(rec["id"], 1))
    cgroup.remove_dir(path, wait=2.0)


def test_a_starting_supervisor_leaves_the_signal_module_alone(q):
    """signal.py builds enums at import: ~2-3 ms in a supervisor just forked, before the
    job's first instruction. The submission and the supervisor use the C module
    ``_signal``; only a job that a signal ended has its signal's name looked up."""
    env = {**q.env, "PYTHONPROFILEIMPORTTIME": "1"}
    sub = subprocess.run(
        [PY, "-m", "qex", "submit", "--", "true"], capture_output=True, text=True, timeout=60, env=env, cwd=q.root
    )
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip()
    assert q.wait_state(job, "completed")["exit_code"] == 0

    def imported(text):
        return {line.rsplit("|", 1)[1].strip() for line in text.splitlines() if line.startswith("import time:")}

    with open(os.path.join(q.state, "jobs", job, "supervisor.log")) as fh:
        supervisor = imported(fh.read())
    assert "qex.supervisor.run" in supervisor | imported(sub.stderr)  # the log is the supervisor's
    assert "signal" not in imported(sub.stderr) and "signal" not in supervisor


def _session(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        raw = fh.read()
    return int(raw[raw.rindex(b")") + 2 :].split()[3])


def test_a_submission_that_leaves_at_once_forks_its_supervisor_once(q):
    """`qex submit` without --wait exits as soon as it has printed the id: its
    supervisor, forked once, is orphaned at once (as a double fork's is) and leads
    a session of its own (qex.queue.engine.launch_all, leaving)."""
    job = q.submit("--", *gated(q, "go"))
    rec = q.wait_state(job, "running")
    sup = rec["supervisor_pid"]
    assert _session(sup) == sup  # its own setsid: no intermediate process
    assert proc_stat(sup)[1] != os.getpid()
    open_gate(q, "go")
    assert q.wait_state(job, "completed")["exit_code"] == 0


def test_a_submission_that_waits_is_never_its_supervisors_parent(q):
    """`qex submit --wait` lives as long as its job: a supervisor forked by it directly
    would be its child and leave a zombie there; it is double-forked instead."""
    waiting = q.popen("submit", "--wait", "--", *gated(q, "go"))
    try:
        rec = q.wait_for(lambda: next((r for r in q.records() if r["state"] == "running"), None), what="the job to run")
        sup = rec["supervisor_pid"]
        assert proc_stat(sup)[1] != waiting.pid
        assert _session(sup) != sup  # the first child of the double fork led the session, and is gone
    finally:
        open_gate(q, "go")
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert json.loads(out)["state"] == "completed"
