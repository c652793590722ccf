"""Issue 29, point 3: what qex leaves running (the supervisor, the minimal watcher, the
waker, the hook runner) keeps no descriptor of the command that started it nor of its
caller: a `flock -n` lock around `qex submit` is free once submit returns, a pipe the
caller waits on ends with it. The job gets exactly 0, 1, 2 and its peer lock (the
contract names it). ps says what each process is."""

import os
import subprocess
import sys
import time

from e2e_helpers import alive, gated, open_gate

QEX = [sys.executable, "-m", "qex"]  # (as tests/conftest.py: the qex of PYTHONPATH)

HOOKED = '[budget]\ncpu = 4\n[defaults]\nmem = "64MB"\n[hooks]\non_stop = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.02; done"]\n'
LOCK_FD = 1023  # the job's copy of its peer lock (qex.supervisor.spawn.LOCK_FD; docs/multiuser.md)


def fds(pid: int) -> dict[int, str]:
    out = {}
    base = f"/proc/{pid}/fd"
    for name in os.listdir(base):
        try:
            out[int(name)] = os.readlink(os.path.join(base, name))
        except OSError:
            pass
    return out


def cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().split(b"\0")[0].decode(errors="replace")


def comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as fh:
        return fh.read().strip()


def test_a_flock_around_submit_is_free_once_submit_returns(q):
    lock = os.path.join(q.root, "cron.lock")
    proc = subprocess.run(
        ["flock", "-n", lock, *QEX, "submit", "--", *gated(q, "f")],
        capture_output=True,
        text=True,
        env=q.env,
        cwd=q.root,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip()
    q.wait_state(job, "running")
    again = subprocess.run(["flock", "-n", lock, "true"], timeout=10)
    open_gate(q, "f")
    assert again.returncode == 0, "a process qex left running still holds the caller's flock"


def test_a_pipe_the_caller_waits_on_ends_when_submit_returns(q):
    """`( qex submit ... ) 3>&1 | cat`: the caller's pipe, also at fd 3, is closed by everything
    qex leaves behind, so its reader sees the end while the job still runs."""
    script = f"exec 3>&1; {' '.join(QEX)} submit -- {' '.join(_quoted(gated(q, 'p')))}"
    proc = subprocess.Popen(
        ["sh", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=q.env,
        cwd=q.root,
        stdin=subprocess.DEVNULL,
    )
    try:
        out, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        open_gate(q, "p")
        proc.kill()
        raise AssertionError("the caller's pipe stayed open after qex submit returned") from None
    job = out.decode().strip()
    assert q.record(job)["state"] in ("starting", "running"), "the job should still run"
    open_gate(q, "p")


def _quoted(argv: list[str]) -> list[str]:
    return ["'" + a.replace("'", "'\\''") + "'" for a in argv]


def test_every_process_qex_leaves_running_holds_only_its_own_descriptors(q):
    """With a caller that holds a file, a pipe and a lock at fds 5-7: the supervisor (forked,
    then the minimal watcher), the waker and the hook runner hold none of them, nor another
    job's files; the job holds 0, 1, 2 and its peer lock; ps names each."""
    q.write_config(HOOKED.format(gate=q.gate("hook")))
    mine = os.path.join(q.root, "callers-file")
    with open(mine, "w"):
        pass
    r, w = os.pipe()
    lock_file = os.path.join(q.root, "callers-lock")
    script = (
        f"exec 5>>{mine} 6>&{w} 7>{lock_file}; flock 7; "
        f"{' '.join(QEX)} submit -- {' '.join(_quoted(gated(q, 'a')))}; "
        f"{' '.join(QEX)} submit -- {' '.join(_quoted(gated(q, 'b')))}"
    )
    proc = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        env=q.env,
        cwd=q.root,
        pass_fds=(w,),
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    os.close(w)
    assert proc.returncode == 0, proc.stderr
    a, b = proc.stdout.split()
    recs = {j: q.wait_state(j, "running") for j in (a, b)}
    pipe_inode = f"pipe:[{os.fstat(r).st_ino}]"
    callers = {mine, lock_file, pipe_inode}

    def check(pid: int, own_job: str | None) -> dict[int, str]:
        """The caller's descriptors are not there, nor another job's files (the waker: none)."""
        held = fds(pid)
        assert not callers & set(held.values()), (pid, cmdline(pid), held)
        others = [j for j in (a, b) if j != own_job]
        assert not [t for t in held.values() for j in others if f"/jobs/{j}/" in t], (pid, held)
        return held

    # the supervisors, once they are the minimal watcher (and before: both are checked by the poll below)
    for job in (a, b):
        sup = recs[job]["supervisor_pid"]
        q.wait_for(lambda: cmdline(sup).endswith("(watching)"), timeout=10, what="the watcher")
        assert cmdline(sup) == f"qex: supervisor of {job} (watching)" and comm(sup) == "qex: supervisor"
        check(sup, job)
        held = fds(recs[job]["pid"])  # the job: 0, 1, 2 and its peer lock, nothing else
        assert set(held) <= {0, 1, 2, LOCK_FD}, held
        assert held[0] == "/dev/null" and not callers & set(held.values())
    wakers = [p for p in q.processes() if cmdline(p).startswith("qex: waker for uid ")]
    assert len(wakers) == 1 and comm(wakers[0]) == "qex: waker"
    assert set(check(wakers[0], None).values()) <= {
        "/dev/null",
        os.path.join(q.state, "waker.log"),
        os.path.join(q.state, f"waker-{os.getuid()}.lock"),
    }
    open_gate(q, "a")
    q.wait_state(a, "completed")
    runner = q.wait_for(
        lambda: next((p for p in q.processes() if comm(p) == "qex: hooks"), None), timeout=10, what="the hook runner"
    )
    assert cmdline(runner).startswith("qex: stop hooks of uid ")
    check(runner, a)  # (its hook's log is job a's; nothing of b's)
    open_gate(q, "b")
    open_gate(q, "hook")
    q.wait_state(b, "completed")
    os.close(r)
    deadline = time.monotonic() + 20
    while any(alive(p) for p in q.processes()) and time.monotonic() < deadline:
        time.sleep(0.05)
