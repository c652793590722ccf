"""When the waker runs a pass (qex.queue.waker._needs_pass): only when a pass could do
something that no supervisor's end will do anyway."""

import json
import os
import time
import types

import pytest

from qex.queue import waker
from qex.store.lock import hold
from qex.store.state import Store

UID = os.getuid()


@pytest.fixture
def ctx(tmp_path):
    store = Store(str(tmp_path / "state"))
    os.makedirs(store.jobs)
    return types.SimpleNamespace(store=store, uid=UID)


def _index(ctx, jobs: dict) -> None:
    for job_id in jobs:
        os.makedirs(ctx.store.job_dir(job_id), exist_ok=True)
    with open(ctx.store.index_path, "w") as fh:
        json.dump({"format": 1, "seq": 0, "offset": 0, "jobs": jobs}, fh)


def _entry(**fields) -> dict:
    """A whole index entry (a reader sees only those: ``check.usable_jobs``)."""
    return {
        "seq": 1,
        "owner": "me",
        "name": "j",
        "priority": 0,
        "cpu": 1000,
        "mem": 0,
        "pools": {},
        "assigned": [],
        "needs": [],
        "after": [],
        "passed_by": 0,
        "submitted_at": 1.0,
        **fields,
    }


def _queued(holder, uid=UID, deadline=None):
    return _entry(state="queued", uid=uid, holder=holder, reason="words", deadline=deadline)


def _running(uid=UID):
    return _entry(state="running", uid=uid, holder=None, reason=None, deadline=None)


def _needs_pass_while_r_is_supervised(ctx):
    """``_needs_pass`` while a live supervisor holds running job r's liveness lock."""
    fd = hold(ctx.store.path("r", "alive.lock"))
    try:
        return waker._needs_pass(ctx)
    finally:
        os.close(fd)


def test_jobs_waiting_behind_supervised_jobs_of_the_queue_need_no_pass(ctx):
    _index(ctx, {"r": _running(), "a": _queued("own"), "b": _queued("front"), "c": _queued("dependency")})
    assert _needs_pass_while_r_is_supervised(ctx) is False


def test_a_lost_supervisor_needs_a_pass(ctx):
    _index(ctx, {"r": _running(), "a": _queued("own")})
    assert waker._needs_pass(ctx) is True  # nobody holds r's liveness lock


@pytest.mark.parametrize("holder", ["peer", "outside", "pause", "reserved", "oversized", None])
def test_a_wait_only_the_world_or_time_clears_needs_a_pass(ctx, holder):
    _index(ctx, {"r": _running(), "a": _queued("own"), "b": _queued(holder)})
    assert _needs_pass_while_r_is_supervised(ctx) is True


def test_a_queue_time_reached_needs_a_pass(ctx):
    _index(ctx, {"r": _running(), "a": _queued("own", deadline=time.time() - 1)})
    assert _needs_pass_while_r_is_supervised(ctx) is True


def test_waiting_on_the_queue_with_nothing_running_needs_a_pass(ctx):
    _index(ctx, {"a": _queued("own")})
    assert waker._needs_pass(ctx) is True


def test_nothing_of_this_user_left_ends_the_waker(ctx):
    _index(ctx, {"x": _queued("own", uid=UID + 1)})
    assert waker._needs_pass(ctx) is None


def _paused(ctx, name="queue.json", until=None) -> str:
    """A pause file as ``qex pause`` writes it (``qex.queue.pause``)."""
    d = os.path.join(ctx.store.root, "pause")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, name)
    with open(path, "w") as fh:
        json.dump({"format": 1, "id": f"p-{name}", "since": 1.0, "until": until}, fh)
    return path


def _person(pools, deadline=None):
    return {**_queued("person", deadline=deadline), "pools": {p: [1, None] for p in pools}}


def test_jobs_held_by_the_queue_pause_in_force_need_no_pass_and_no_running_job(ctx):
    _paused(ctx)
    _index(ctx, {"a": _queued("pause"), "b": _queued("pause", deadline=time.time() - 1)})
    assert waker._needs_pass(ctx) is False, "a paused queue's clock stops: a deadline reached expires nothing"


def test_jobs_held_by_the_queue_pause_need_a_pass_once_it_is_gone(ctx):
    path = _paused(ctx)
    _index(ctx, {"a": _queued("pause")})
    look = waker._Look()
    assert waker._needs_pass(ctx, look) is False
    os.unlink(path)  # a resume whose pass did not start it, or the file removed by hand
    assert waker._needs_pass(ctx, look) is True


def test_jobs_held_by_the_queue_pause_need_a_pass_at_its_end(ctx):
    _paused(ctx, until=time.time() - 0.1)  # a timed pause whose end no pass has settled yet
    _index(ctx, {"a": _queued("pause")})
    assert waker._needs_pass(ctx) is True


def test_a_job_held_by_a_paused_lock_needs_a_pass_when_that_lock_is_resumed_or_its_clock_runs_out(ctx):
    path = _paused(ctx, "lock-L.json")
    _index(ctx, {"a": _person(["L", "cpu"])})
    look = waker._Look()
    assert waker._needs_pass(ctx, look) is False
    _paused(ctx, "lock-M.json")  # another lock paused: a change, but not of what holds a
    assert waker._needs_pass(ctx, look) is False
    os.unlink(path)
    assert waker._needs_pass(ctx, look) is True
    _paused(ctx, "lock-L.json")
    _index(ctx, {"a": _person(["L"], deadline=time.time() - 1)})
    assert waker._needs_pass(ctx) is True, "a lock pause does not stop the --max-queue-time clock"


def test_a_paused_queue_with_a_lost_supervisor_needs_a_pass(ctx):
    _paused(ctx)
    _index(ctx, {"r": _running(), "a": _queued("pause")})
    assert waker._needs_pass(ctx) is True  # nobody holds r's liveness lock
    assert _needs_pass_while_r_is_supervised(ctx) is False


def test_the_index_is_read_again_only_when_its_files_or_the_pauses_change(ctx, monkeypatch):
    _paused(ctx)
    _index(ctx, {"a": _queued("pause")})
    reads, read = [], ctx.store.read_index_jobs
    monkeypatch.setattr(ctx.store, "read_index_jobs", lambda: reads.append(1) or read())
    look = waker._Look()
    for _ in range(5):
        assert waker._needs_pass(ctx, look) is False
    assert len(reads) == 1
    _index(ctx, {"a": _queued("pause"), "b": _queued("peer")})  # a new job, another kind of wait
    assert waker._needs_pass(ctx, look) is True and len(reads) == 2
    _paused(ctx, "lock-M.json")
    assert waker._needs_pass(ctx, look) is True and len(reads) == 3


class _Clock:
    """time.time and time.sleep of the waker, on a clock the test moves."""

    def __init__(self):
        self.now = 1000.0

    def time(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


@pytest.fixture
def sleeping(ctx, monkeypatch):
    """The waker's sleep with a fake clock, a queue whose changes the test decides
    (``changes(now)``: whether its files changed since the last look), and a record
    of when it read the deadlines."""
    from qex.users import peer_dir

    clock, reads, world = _Clock(), [], {"changes": lambda now: False, "stamp": 0}
    monkeypatch.setattr(waker, "time", clock)
    monkeypatch.setattr(peer_dir, "dir_version", lambda ctx, since=None: since)

    def stamp(ctx):
        if world["changes"](clock.now):
            world["stamp"] += 1
        return world["stamp"]

    monkeypatch.setattr(waker, "_stamp", stamp)
    monkeypatch.setattr(
        waker, "_earliest_deadline", lambda ctx, now, look=None: reads.append(now) or world.get("deadline")
    )
    monkeypatch.setattr(
        waker, "wake_time", lambda ctx, deadline, now, look=None: min(now + 30.0, (deadline or 1e18) + 0.005)
    )
    return clock, reads, world


def test_a_queue_changed_once_has_its_deadlines_read_once_it_rests(sleeping):
    clock, reads, world = sleeping
    world["changes"] = lambda now: 1000.0 < now <= 1000.2  # one submission, seen at the first look
    world["deadline"] = 1002.0
    waker._sleep_until(None, 1030.0)
    assert len(reads) == 1 and reads[0] == pytest.approx(1000.4), "read at the first look that saw no new change"
    assert clock.now == pytest.approx(1002.005), "the deadline it found ended the sleep"


def test_a_queue_that_keeps_changing_has_its_deadlines_read_once_per_look_not_per_watch(sleeping):
    clock, reads, world = sleeping
    world["changes"] = lambda now: True  # a drain: its supervisors change the files at every look
    waker._sleep_until(None, 1005.0)
    assert clock.now == pytest.approx(1005.0)
    assert 4 <= len(reads) <= 5, reads  # 25 looks in 5 s; one read per LOOK (1 s) of changes
    assert all(b - a >= waker.LOOK - 1e-9 for a, b in zip(reads, reads[1:])), reads


def test_an_unchanged_queue_has_its_deadlines_never_read(sleeping):
    clock, reads, _ = sleeping
    waker._sleep_until(None, 1003.0)
    assert reads == [] and clock.now == pytest.approx(1003.0)
