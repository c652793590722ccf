"""A hostile filesystem: a tiny disk, planted symlinks and FIFOs, wrong permissions.

The tiny disk is a size-limited tmpfs mounted by the test (root only; skipped
otherwise, and the skip says why)."""

import os
import shutil
import stat
import subprocess

import pytest

from crash import invariants as inv
from crash.invariants import qex_processes

CONFIG = '[budget]\ncpu = 1\nmem = "4GB"\n[defaults]\nmem = "100MB"\n'


def _kill_all(state):
    for pid in qex_processes(state):
        try:
            os.kill(pid, 9)
        except OSError:
            pass


@pytest.fixture
def tiny(q, tmp_path):
    """A Queue whose state directory is on a 4 MiB tmpfs; ``tiny.disk`` is its mount point."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a size-limited tmpfs needs root (a full disk is tested as root only)")
    disk = tmp_path / "disk"
    disk.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(disk)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    q.state = str(disk / "state")
    q.env["QEX_STATE_DIR"] = q.state
    q.disk = str(disk)
    q.write_config(CONFIG)
    try:
        yield q
    finally:
        _kill_all(q.state)
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def _fill(disk: str, leave: int = 0) -> str:
    """Fill the disk, then give back ``leave`` bytes; returns the filler's path."""
    path = os.path.join(disk, "filler")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for chunk in (1 << 16, 4096, 512):
            block = b"\0" * chunk
            try:
                while True:
                    os.write(fd, block)
            except OSError:
                pass
        size = os.fstat(fd).st_size
        os.ftruncate(fd, max(0, size - leave))
    finally:
        os.close(fd)
    return path


def _files(state: str) -> dict:
    out = {}
    for name in ("index.json", "journal.jsonl"):
        try:
            with open(os.path.join(state, name), "rb") as fh:
                out[name] = fh.read()
        except FileNotFoundError:
            out[name] = None
    out["jobs"] = sorted(os.listdir(os.path.join(state, "jobs")))
    return out


def test_a_full_disk_refuses_a_submission_whole_and_every_accepted_job_still_ends(tiny):
    q = tiny
    gate = q.gate("hold")
    holder = q.submit("--cpu", "1", "--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done")
    q.wait_state(holder, "running")
    accepted, refused = [], 0
    for leave_kib in (0, 16, 48, 96, 256, 600, 1000, 1100, 1400, 2000):
        filler = _fill(q.disk, leave_kib << 10)
        before = _files(q.state)
        proc = q.run("submit", "--cpu", "1", "--", "true", timeout=30)
        assert "Traceback" not in proc.stderr, proc.stderr
        assert proc.returncode in (0, 121), (leave_kib, proc.returncode, proc.stderr)
        if proc.returncode == 121:
            refused += 1
            assert "disk is full" in proc.stderr, proc.stderr
            assert _files(q.state) == before, f"a refused submission changed the state ({leave_kib} KiB free)"
        else:
            accepted.append(proc.stdout.strip())
        os.unlink(filler)
    assert refused and accepted, (refused, accepted)  # both sides of the line were crossed
    open(gate, "w").close()
    for job in accepted + [holder]:
        assert q.wait_state(job, "completed", timeout=30)["exit_code"] == 0
    q.wait_for(lambda: not q.processes(), what="no qex process")
    assert not inv.check(inv.read_view(q.state), known=accepted + [holder], quiescent=True)


def test_a_job_whose_output_fills_the_disk_still_gets_its_record_and_logs_stop_first(tiny):
    q = tiny
    job = q.submit("--", "sh", "-c", "head -c 20000000 /dev/zero; echo done >&2; exit 4")
    rec = q.wait_state(job, ("failed", "completed"), timeout=60)
    assert rec["exit_code"] == 4, rec
    assert "nearly full" in rec["error"] and "stdout log stopped" in rec["error"], rec["error"]
    size = os.path.getsize(os.path.join(q.state, "jobs", job, "stdout.log"))
    assert 0 < size < 4 << 20, size
    st = os.statvfs(q.disk)
    assert st.f_bavail * st.f_frsize >= 512 << 10, "the log left no room for the records"
    wait = q.run("wait", job, timeout=20)
    assert wait.returncode == 4, wait.stderr
    assert not inv.check(inv.read_view(q.state), known=[job])


def test_a_job_that_ends_on_a_full_disk_is_recorded_once_there_is_room(tiny):
    q = tiny
    gate = q.gate("end")
    job = q.submit("--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done; exit 3")
    q.wait_state(job, "running")
    filler = _fill(q.disk, 0)
    open(gate, "w").close()
    # the job has ended; its supervisor cannot write and holds on (the job still counts as running)
    q.wait_for(lambda: not inv.job_processes([job]), what="the job's processes to end")
    assert q.record(job)["state"] == "running"
    assert q.processes(), "the supervisor gave up on a full disk"
    os.unlink(filler)
    rec = q.wait_state(job, "failed", timeout=20)
    assert rec["exit_code"] == 3 and len(rec["attempts"]) == 1, rec
    log = open(os.path.join(q.state, "jobs", job, "supervisor.log")).read()
    assert "cannot write the job's final record yet" in log or log == "", log
    assert not inv.check(inv.read_view(q.state), known=[job])


# ---- planted symlinks and FIFOs ----------------------------------------------------------


def _plant(path: str, kind: str, victim: str) -> None:
    if os.path.lexists(path):
        os.unlink(path)
    if kind == "symlink":
        os.symlink(victim, path)
    else:
        os.mkfifo(path, 0o600)


@pytest.mark.parametrize("kind", ("symlink", "fifo"))
@pytest.mark.parametrize(
    "where", ("status.json", "index.json", "journal.jsonl", "lock", "stdout.log", "peer", "history.jsonl")
)
def test_a_planted_symlink_or_fifo_is_never_followed_nor_blocked_on(q, tmp_path, where, kind):
    q.write_config(CONFIG)
    victim = str(tmp_path / "victim")
    with open(victim, "w") as fh:
        fh.write("precious\n")
    done = q.submit("--", "true")
    q.wait_state(done, "completed")
    q.wait_for(lambda: not q.processes(), what="no qex process")  # no late index save over the plant
    if where == "status.json":
        _plant(os.path.join(q.state, "jobs", done, "status.json"), kind, victim)
    elif where == "peer":
        os.makedirs(q.peers, exist_ok=True)
        for name in ("a.json", "b.peer", "c"):
            _plant(os.path.join(q.peers, name), kind, victim)
    elif where != "stdout.log":
        _plant(os.path.join(q.state, where), kind, victim)
    gate = q.gate("g")
    planted_job = None
    if where == "stdout.log":  # a job that waits for capacity, with its log replaced before it starts
        holder = q.submit("--cpu", "1", "--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done")
        planted_job = q.submit("--cpu", "1", "--", "sh", "-c", "echo to-the-log")
        _plant(os.path.join(q.state, "jobs", planted_job, "stdout.log"), kind, victim)
        open(gate, "w").close()
        q.wait_state(holder, "completed")
    runs = {}
    for argv in (("submit", "--wait", "--", "true"), ("status", done), ("list",), ("info",)):
        try:
            runs[argv[0]] = proc = q.run(*argv, timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"qex {' '.join(argv)} hung on a {kind} planted as {where}")
        assert "Traceback" not in proc.stderr, (argv, proc.stderr)
        if proc.returncode != 0:
            assert proc.stderr.startswith("qex: ") and proc.returncode in (1, 121), (argv, proc.returncode, proc.stderr)
    with open(victim) as fh:
        assert fh.read() == "precious\n", "a planted symlink was followed"
    if where in ("index.json", "status.json", "peer", "stdout.log", "history.jsonl"):
        assert runs["submit"].returncode == 0, runs["submit"].stderr  # the queue goes on
    if where == "history.jsonl":  # qex list reads the records instead
        assert runs["list"].returncode == 0 and done[:8] in runs["list"].stdout, runs["list"].stderr
    if where in ("journal.jsonl", "lock"):
        said = runs["submit"].stderr
        assert runs["submit"].returncode == 121 and ("remove it" in said or "move it away" in said), said
    if where == "status.json":
        path = os.path.join(q.state, "jobs", done, "status.json")
        if runs["status"].returncode == 0:
            # The job's last event was still after the index's offset (a supervisor saves the
            # index lazily): the next pass replayed it, writing a regular file in the link's place.
            assert not os.path.islink(path) and q.record(done)["state"] == "completed"
        else:
            assert runs["status"].returncode == 1 and f"qex clean {done}" in runs["status"].stderr
    if planted_job:
        rec = q.wait_state(planted_job, "completed")
        assert "stdout log stopped" in rec["error"], rec
    _kill_all(q.state)


# ---- permissions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, remedy",
    [("world-writable", "chmod 700"), ("group-writable", "chmod 700"), ("another owner", "QEX_STATE_DIR")],
)
def test_a_state_directory_with_wrong_permissions_is_refused_with_the_remedy(q, change, remedy):
    q.write_config(CONFIG)
    os.makedirs(q.state, mode=0o700)
    if change == "world-writable":
        os.chmod(q.state, 0o777)
    elif change == "group-writable":
        os.chmod(q.state, 0o770)
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a directory to another user needs root")
        os.chown(q.state, 4242, -1)
    listed = q.run("list", timeout=20)
    assert listed.returncode == 1 and remedy in listed.stderr and "Traceback" not in listed.stderr, listed.stderr
    submitted = q.run("submit", "--", "true", timeout=20)
    assert submitted.returncode == 121 and remedy in submitted.stderr, submitted.stderr
    assert not os.path.exists(os.path.join(q.state, "jobs")) or not os.listdir(os.path.join(q.state, "jobs"))


def test_a_state_directory_made_setgid_and_group_writable_by_hand_is_refused_until_init_shares_it(q):
    q.write_config(CONFIG)
    os.makedirs(q.state, mode=0o700)
    os.chmod(q.state, 0o2770)
    assert stat.S_IMODE(os.stat(q.state).st_mode) & stat.S_ISGID
    r = q.run("submit", "--", "true")
    assert r.returncode == 121 and "qex init --shared" in r.stderr, r.stderr
    assert os.listdir(q.state) == []  # nothing made in it: never half-shared
    assert q.run("init", "--shared", q.state).returncode == 0
    job = q.submit("--", "true")
    assert q.run("wait", job).returncode == 0  # (its record is in this user's member directory)
