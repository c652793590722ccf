"""When the waker runs a pass (qex.waker._needs_pass): only when a pass could do
something that no supervisor's end will do anyway."""

import json
import os
import time
import types

import pytest

from qex import waker
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


def _queued(holder, uid=UID, deadline=None):
    return {"state": "queued", "uid": uid, "holder": holder, "reason": "words", "deadline": deadline}


def _running(uid=UID):
    return {"state": "running", "uid": uid, "holder": None, "reason": None, "deadline": None}


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
