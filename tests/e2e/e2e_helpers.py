"""Small helpers shared by the end-to-end tests: gated jobs, /proc scans, snapshots.

Everything here observes qex from outside: files in the state directory, /proc.
"""

import fcntl
import json
import os
import select
import signal
import time

FINAL = {"completed", "failed", "killed", "timeout", "oom", "expired", "cancelled", "skipped"}


def gate_command(gate: str, then: str = "exit 0", before: str = "") -> list[str]:
    """A job command that runs ``before``, waits until the file ``gate`` exists (the
    test creates it), then runs ``then``. The one gate of the e2e tests: a job waits
    on a file the test makes, never on a sleep."""
    return ["sh", "-c", f"{before}while [ ! -e '{gate}' ]; do sleep 0.02; done; {then}"]


def release(gate: str) -> None:
    """Let the jobs waiting on the file ``gate`` go on."""
    with open(gate, "w"):
        pass


def gated(q, name: str, then: str = "exit 0", before: str = "") -> list[str]:
    """``gate_command`` on the queue's gate ``name`` (``Queue.gate``)."""
    return gate_command(q.gate(name), then, before)


def open_gate(q, name: str) -> None:
    release(q.gate(name))


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgrp) of a process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[1]), int(fields[2])


def alive(pid: int | None) -> bool:
    """True while ``pid`` is a live process (a zombie is dead: it runs nothing)."""
    if not pid:
        return False
    st = proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def fd_targets(pid: int) -> list[str]:
    """What the open descriptors of process ``pid`` point at (``/proc/PID/fd``)."""
    out = []
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for name in names:
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{name}"))
        except OSError:
            pass
    return out


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid`` (field 5 of /proc/PID/stat)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_stat(int(name))
            if st is not None and st[2] == pgid and st[0] not in ("Z", "X"):
                out.append(int(name))
    return out


def handles_signal(pid: int, sig: int) -> bool:
    """True once process ``pid`` has installed a handler for ``sig`` (SigCgt in /proc)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (sig - 1)))
    except OSError:
        return False
    return False


def wait_until_waiting(q, proc) -> None:
    """Wait until a `qex wait`/`run` Popen has installed its SIGTERM handler (its wait began)."""
    q.wait_for(
        lambda: proc.poll() is not None or handles_signal(proc.pid, signal.SIGTERM),
        timeout=10,
        what="the qex process to install its signal handler",
    )
    assert proc.poll() is None, proc.communicate()


def read_records(q) -> list[dict]:
    """Every readable record on disk (a record being replaced is read whole: writes are atomic)."""
    out = []
    jobs = os.path.join(q.state, "jobs")
    for name in os.listdir(jobs) if os.path.isdir(jobs) else []:
        try:
            with open(os.path.join(jobs, name, "status.json")) as fh:
                out.append(json.load(fh))
        except (OSError, ValueError):
            continue
    return out


def locked_snapshot(q) -> list[dict]:
    """All records read while holding the state lock shared.

    DESIGN.md: every change of state is written by a pass under the exclusive
    lock on ``<state>/lock``; holding it shared gives one consistent instant
    across all the records (reading file by file without it could see job A
    still running and job C, started after A ended, running too).
    """
    path = os.path.join(q.state, "lock")
    if not os.path.exists(path):
        return []
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        return read_records(q)
    finally:
        os.close(fd)


def read_line(source, timeout: float) -> str | None:
    """One line of a Popen's stdout (or of a pipe: ``proc.stderr``) within ``timeout``
    seconds, read byte by byte, unbuffered; or None."""
    fd = (source.stdout if hasattr(source, "stdout") else source).fileno()
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 1)
        if not chunk:
            break
        buf += chunk
        if chunk == b"\n":
            return buf.decode()
    return None


def submit_wait_with_refused_move(q, method: str, why: str) -> dict:
    """``qex submit --wait -- sh -c 'echo ran'`` in a real qex process whose
    ``cgroup.JobCgroup.<method>`` (join or leave) the kernel refuses with ``why``
    (simulated there); returns the final record it printed."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from qex.linux import cgroup\n"
        "def refuse(self):\n"
        f"    raise PermissionError(13, {why!r})\n"
        f"cgroup.JobCgroup.{method} = refuse\n"
        "from qex.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "submit", "--wait", "--", "sh", "-c", "echo ran"],
        capture_output=True,
        text=True,
        timeout=60,
        env=q.env,
        cwd=q.root,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
