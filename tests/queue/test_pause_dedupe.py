"""In-process tests of the pause and dedupe stores and of the waker's clock,
on a real state directory (no stubs): the crash windows a process test
cannot aim at."""

import json
import os
import time

import pytest

from qex.base.errors import PermissionRefused
from qex.config.context import Context
from qex.config.model import Config
from qex.jobs import dedupe
from qex.jobs.request import Request
from qex.jobs.submit import build, submit_many
from qex.queue import engine, pause, waker
from qex.queue.txn import Txn
from qex.store.records import Status, load
from qex.store.state import Store

GB = 1 << 30


def make_ctx(root, uid=None) -> Context:
    store = Store(str(root))
    store.ensure()
    config = Config.default(os.path.join(str(root), "none.toml"))
    return Context(
        store=store, config=config, uid=os.getuid() if uid is None else uid, user="tester", cores=8, mem_total=16 * GB
    )


def queued_job(ctx, submitted_at: float, **kw) -> str:
    built = build(ctx, Request(command=["true"], mem="10MB", **kw), now=submitted_at)
    ids, result = submit_many(ctx, [built])
    for launch in result.launches:
        os.close(launch.alive_fd)
    return ids[0]


def pause_queue(ctx, since: float, until=None):
    return engine.run_pass(ctx, lambda txn: pause.pause_locked(ctx, txn, "queue", None, "", until, since)).value[0]


def test_a_queue_pause_that_ends_in_a_pass_that_dies_is_counted_by_the_next_pass_once(tmp_path):
    ctx = make_ctx(tmp_path)
    now = time.time()
    pause_queue(ctx, since=now - 10)
    job = queued_job(ctx, submitted_at=now - 20, max_queue_time="1h")
    assert ctx.store.read_status_dict(job)["state"] == "queued"
    with ctx.store.lock():  # resume, then die before the commit
        txn = Txn(ctx.store, ctx.store.load_index_locked())
        assert pause.resume_locked(ctx, txn, "queue", None, now) is not None
    assert not os.path.exists(pause.path_for(ctx.store, "queue"))
    assert ctx.store.read_status_dict(job).get("queue_pause_secs", 0.0) == 0.0, "nothing was committed"
    engine.run_pass(ctx)
    rec = ctx.store.read_status_dict(job)
    assert rec["queue_pause_secs"] == pytest.approx(10.0, abs=0.01)
    engine.run_pass(ctx)
    assert ctx.store.read_status_dict(job)["queue_pause_secs"] == rec["queue_pause_secs"], "never twice"
    assert not [n for n in os.listdir(pause.directory(ctx.store)) if n.startswith(".ended-")]


def test_a_resumed_queue_pause_is_counted_once_and_only_for_the_time_each_job_waited_in_it(tmp_path):
    ctx = make_ctx(tmp_path)
    now = time.time()
    pause_queue(ctx, since=now - 10)
    before = queued_job(ctx, submitted_at=now - 20, max_queue_time="1h", locks=["L"])
    during = queued_job(ctx, submitted_at=now - 4, max_queue_time="1h", locks=["L"])
    engine.run_pass(ctx, lambda txn: pause.resume_locked(ctx, txn, "queue", None, now))
    for _ in range(2):  # the next passes replay the end: a no-op
        engine.run_pass(ctx)
    assert ctx.store.read_status_dict(before)["queue_pause_secs"] == pytest.approx(10.0, abs=0.01)
    assert ctx.store.read_status_dict(during)["queue_pause_secs"] == pytest.approx(4.0, abs=0.01)
    entry = json.load(open(ctx.store.index_path))["jobs"][during]  # queued behind `before`'s lock L
    assert entry["state"] == "queued" and entry["deadline"] == pytest.approx(now - 4 + 3600 + 4.0, abs=0.01)


def test_a_timed_pause_ends_at_its_time_not_at_the_pass_that_notices(tmp_path):
    ctx = make_ctx(tmp_path)
    now = time.time()
    pause_queue(ctx, since=now - 10, until=now - 6)  # ended 6 s ago, no pass since
    job = queued_job(ctx, submitted_at=now - 20, max_queue_time="1h")
    assert ctx.store.read_status_dict(job)["queue_pause_secs"] == pytest.approx(4.0, abs=0.01)
    assert not os.path.exists(pause.path_for(ctx.store, "queue"))


def test_pause_words_hold_no_changing_number_and_survive_safe_text(tmp_path):
    from qex.base.units import safe_text

    ctx = make_ctx(tmp_path)
    now = time.time()
    engine.run_pass(ctx, lambda txn: pause.pause_locked(ctx, txn, "queue", None, "swap; disks (2)", now + 600, now))
    first, later = pause.current(ctx, now), pause.current(ctx, now + 300)
    assert first == later and first.queue
    assert "swap? disks ?2?" in first.queue_reason
    head = first.queue_reason.split(": swap")[0]
    assert safe_text(head) == head, "qex list shows the reason as it is"
    assert not pause.current(ctx, now + 601).queue, "a timed pause is over at its end"


def test_a_queue_pause_is_refused_in_a_state_directory_of_another_user(tmp_path):
    owner = os.stat(tmp_path).st_uid
    stranger = make_ctx(tmp_path, uid=owner + 4242)
    with pytest.raises(PermissionRefused, match="only its owner .or root. can pause the whole queue"):
        pause.check_may_pause_queue(stranger)
    pause.check_may_pause_queue(make_ctx(tmp_path, uid=owner))
    pause.check_may_pause_queue(make_ctx(tmp_path, uid=0))


def test_whose_a_pause_is_comes_from_its_files_owner_never_from_its_fields(tmp_path):
    ctx = make_ctx(tmp_path)
    now = time.time()
    engine.run_pass(ctx, lambda txn: pause.pause_locked(ctx, txn, "lock", "db", "", None, now))
    path = pause.path_for(ctx.store, "lock", "db")
    data = json.load(open(path))
    data.update(user="alice", uid=os.getuid() + 4242)  # a field written by hand
    with open(path, "w") as fh:
        json.dump(data, fh)
    p = pause.read_file(path, "lock", "db")
    assert p.uid == os.stat(path).st_uid and p.user != "alice"
    other = make_ctx(tmp_path, uid=os.getuid() + 4242)  # the uid the field names: not the pauser
    with pytest.raises(PermissionRefused, match="was paused by"):
        engine.run_pass(other, lambda txn: pause.resume_locked(other, txn, "lock", "db", now))


def test_the_recent_keys_file_is_bounded_and_keeps_the_newest(tmp_path, monkeypatch):
    monkeypatch.setattr(dedupe, "MAX_RECENT", 3)
    store = make_ctx(tmp_path).store

    def ended(job_id, state, key, at):
        base = {"seq": 1, "command": ["true"], "cwd": "/", "owner": "u7", "uid": 7}
        return load(Status, {**base, "id": job_id, "state": state, "dedupe_key": key, "ended_at": at})

    for i in range(5):
        dedupe.remember_locked(store, ended(f"j{i}", "completed", f"k{i}", 1000.0 + i))
    dedupe.remember_locked(store, ended("x", "failed", "k9", 2000.0))
    keys = json.load(open(os.path.join(store.root, dedupe.RECENT)))["keys"]
    assert keys == {"7:k2": ["j2", 1002.0], "7:k3": ["j3", 1003.0], "7:k4": ["j4", 1004.0]}


def test_a_key_belongs_to_its_user(tmp_path):
    ctx = make_ctx(tmp_path)
    job = queued_job(ctx, submitted_at=time.time(), dedupe_key="k", locks=["L"])
    other = make_ctx(tmp_path, uid=ctx.uid + 1)
    with ctx.store.lock():
        txn = Txn(ctx.store, ctx.store.load_index_locked())
        assert dedupe.find_locked(ctx, txn, "k", None, time.time()).id == job
        assert dedupe.find_locked(other, txn, "k", None, time.time()) is None


def test_refuse_key_for_names_the_kind():
    dedupe.refuse_key_for("a pipeline stage", None)
    with pytest.raises(Exception, match="a fan-out .--each-line. cannot take a --dedupe-key"):
        dedupe.refuse_key_for("a fan-out (--each-line)", "k")
    assert dedupe.without_key({"dedupe_key": "k", "dedupe_window": "1h", "cpu": "2"}) == {"cpu": "2"}


def test_the_waker_sleeps_to_the_next_deadline_or_pause_end_and_never_past_its_interval(tmp_path, monkeypatch):
    monkeypatch.setattr(waker, "INTERVAL", 30.0)
    ctx = make_ctx(tmp_path)
    now = time.time()
    assert waker.wake_time(ctx, None, now) == now + 30.0
    assert waker.wake_time(ctx, now - 5, now) == now + 30.0, "a passed deadline (paused queue) is no reason to spin"
    assert waker.wake_time(ctx, now + 2, now) == pytest.approx(now + 2.005)
    pause_queue(ctx, since=now, until=now + 1)
    assert waker.wake_time(ctx, now + 2, now) == pytest.approx(now + 1.005)
