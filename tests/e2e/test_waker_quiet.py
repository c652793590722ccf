"""The waker of a paused queue sleeps: it neither reads the index nor runs a pass
while nothing that could start a job changes, and still wakes for what can (a
pause removed, a timed pause's end, a supervisor lost).

What the waker reads is seen from outside through inotify on the state directory
(``IN_OPEN`` of ``index.json``: the file itself is replaced by each save). With
nothing running and no command typed, the waker is the only process that could
open it."""

import ctypes
import json
import os
import select
import signal
import struct
import time

import pytest
from e2e_helpers import FINAL, alive, fd_targets, gated, open_gate

CONFIG = '[budget]\ncpu = 8\nmem = "8GB"\n[defaults]\nmem = "10MB"\n'
FAST = {"QEX_WAKER_INTERVAL": "0.2"}  # a waker that polled the index would read it 5 times a second
IN_OPEN = 0x20
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)


class Opens:
    """Counts the opens of the file ``name`` in the directory ``path`` (inotify)."""

    def __init__(self, path: str, name: str):
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        if libc.inotify_add_watch(self.fd, os.fsencode(path), IN_OPEN) < 0:
            err = ctypes.get_errno()
            os.close(self.fd)
            raise OSError(err, f"inotify_add_watch {path}")
        self.name = os.fsencode(name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        os.close(self.fd)

    def during(self, seconds: float) -> int:
        """How many times the file was opened in the next ``seconds``."""
        self._drain()  # (what was opened before)
        n, end = 0, time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if select.select([self.fd], [], [], left)[0]:
                n += self._drain()
        return n + self._drain()

    def _drain(self) -> int:
        n = 0
        while True:
            try:
                buf = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return n
            off = 0
            while off < len(buf):
                _wd, _mask, _cookie, length = _EVENT.unpack_from(buf, off)
                start = off + _EVENT.size
                n += buf[start : start + length].rstrip(b"\0") == self.name
                off = start + length


def quiet(q, window: float = 1.0, bound: float = 20.0, state: str | None = None) -> list[int]:
    """Wait until the index of ``q`` (or of the state directory ``state``) goes
    unopened for ``window`` seconds (the waker has settled); returns the opens
    counted in each window before that. Fails if it never does within ``bound``
    seconds."""
    seen, end = [], time.monotonic() + bound
    with Opens(state or q.state, "index.json") as opens:
        while time.monotonic() < end:
            n = opens.during(window)
            if n == 0:
                return seen
            seen.append(n)
    raise AssertionError(f"the index was opened in every {window}s for {bound}s: {seen} times")


def proc_comm(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return None


def waker_pid(q) -> int:
    """The process that holds this user's waker lock (named ``qex: waker``: the first
    child of its double fork holds the lock too, for a moment)."""
    lock = os.path.join(q.state, f"waker-{os.getuid()}.lock")

    def holder():
        for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
            if lock in fd_targets(pid) and proc_comm(pid) == "qex: waker":
                return pid
        return None

    return q.wait_for(holder, timeout=10, what="a waker")


def test_the_waker_of_a_paused_queue_of_200_jobs_stops_reading_the_index(q):
    q.write_config(CONFIG)
    q.env.update(FAST)
    q.run("pause", "queue", check=0)
    lines = os.path.join(q.root, "lines")
    with open(lines, "w") as fh:
        fh.write("".join(f"{i}\n" for i in range(200)))
    q.run("submit", "--each-line", lines, "--", "echo", "{}", check=0)
    waker = waker_pid(q)
    quiet(q)  # raises where the waker reads the index while nothing changes
    assert alive(waker) and waker_pid(q) == waker, "the same waker sleeps on: it did not exit"
    listed = json.loads(q.run("list", "--state", "queued", "--json", check=0).stdout)
    assert len(listed) == 200, "nothing started or left: the queue is still paused"


def test_a_sleeping_waker_still_wakes_for_a_lost_supervisor_and_a_removed_pause(q):
    q.write_config(CONFIG)
    q.env.update(FAST)
    runner = q.submit("--", *gated(q, "r"))
    rec = q.wait_state(runner, "running")
    q.run("pause", "queue", check=0)
    plain = q.submit("--", "true")
    locked = q.submit("--lock", "L", "--", "true")
    q.run("pause", "lock", "L", check=0)  # a second, newer pause
    quiet(q, window=0.6)
    # From here on no qex command is typed.
    os.kill(rec["supervisor_pid"], signal.SIGKILL)
    final = q.wait_state(runner, FINAL, timeout=10)
    assert final["state"] == "failed" and final["supervisor_lost"], final
    assert q.record(plain)["state"] == "queued", "the queue is still paused"
    # A pause file removed by hand is a resume whose own pass never ran.
    os.unlink(os.path.join(q.state, "pause", "queue.json"))
    assert q.wait_state(plain, FINAL, timeout=10)["state"] == "completed"
    assert q.record(locked)["state"] == "queued" and q.record(locked)["blocked_holder"] == "person"
    os.unlink(os.path.join(q.state, "pause", "lock-L.json"))
    assert q.wait_state(locked, FINAL, timeout=10)["state"] == "completed"
    open_gate(q, "r")


def test_a_timed_lock_pause_ends_and_its_job_starts_with_no_command(q):
    q.write_config(CONFIG)
    q.run("pause", "lock", "L", "--for", "1s", check=0)
    job = q.submit("--lock", "L", "--", "true")
    with open(os.path.join(q.state, "pause", "lock-L.json")) as fh:
        until = json.load(fh)["until"]
    assert q.record(job)["blocked_holder"] == "person"
    rec = q.wait_state(job, FINAL, timeout=10)
    assert rec["state"] == "completed" and rec["started_at"] >= until


@pytest.fixture
def lab(users):
    from multiuser_helpers import shared_lab

    yield from shared_lab(users, CONFIG)


def test_a_members_waker_sleeps_under_the_owners_pause_and_starts_the_job_at_its_resume(lab, users):
    """A shared directory (root only: two real users). The owner's resume runs a pass
    in the owner's directory, which starts no other member's job: the member's
    waker, asleep under the pause, must see the pause end and start it."""
    w, one, two = lab
    for actor in (one, two):
        actor.env.update(FAST)
    one.run("pause", "queue", check=0)
    job = two.submit("--", "true")
    assert two.record(job)["blocked_holder"] == "pause"
    quiet(two, state=os.path.join(one.state, f"member-{users.uid(two.name)}"))
    one.run("resume", "queue", check=0)
    assert two.wait_state(job, FINAL, timeout=10)["state"] == "completed"
