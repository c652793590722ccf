"""A supervisor's pass decides by the head of a long queue (engine._admit_head,
qex.admit.window): it starts what the whole queue's admission would start,
leaves the jobs past the head as they are, never saves the index file with
their old words, and falls back to the whole queue when the head cannot tell."""

import os

import pytest
from test_index_cache import view

from qex import admit as A
from qex.jobs.request import Request
from qex.jobs.submit import build
from qex.queue import engine
from qex.queue.txn import Txn
from qex.store.state import LAZY

HEAD = 4


HELD: list[int] = []  # the liveness locks of the jobs the passes started: their supervisors live on


@pytest.fixture(autouse=True)
def small_head(monkeypatch):
    monkeypatch.setattr(engine, "HEAD", HEAD)
    yield
    while HELD:
        os.close(HELD.pop())


def queue(ctx, n: int, **request) -> list[str]:
    """Queue n jobs of one cpu each in one commit, without a pass."""
    built = [build(ctx, Request(command=["true"], cpu="1", mem="10MB", **request)) for _ in range(n)]
    ids = []
    with ctx.store.lock():
        txn = Txn(ctx.store, ctx.store.load_index_locked(save_replayed=False))
        for b in built:
            ctx.store.create_job_dir(b.spec)
            rec = b.record.evolve(seq=txn.idx.next_job)
            txn.idx.next_job += 1
            txn.put(rec, None)
            ids.append(rec.id)
        txn.commit()
    return ids


def two_cores(tmp_path, monkeypatch):
    """One process's view of a queue whose budget runs one job of one core at a time
    (2 cores minus the reserve)."""
    monkeypatch.setenv("QEX_PEER_DIR", str(tmp_path / "peers"))
    ctx = view(tmp_path)
    ctx.cores = 2
    return ctx


def run(ctx, end=None, save_index=LAZY) -> list[str]:
    """One pass (ending job ``end`` in it, as a supervisor's does); the ids it starts."""

    def mutate(txn):
        if end is not None:
            txn.update(end, state="completed", ended_at=1.0, exit_code=0)

    result = engine.run_pass(ctx, mutate, save_index=save_index)
    for launch in result.launches:  # (nothing is forked here: the test stands in for the supervisors)
        HELD.append(launch.alive_fd)
        if launch.peer_fd >= 0:
            HELD.append(launch.peer_fd)
    return [launch.job_id for launch in result.launches]


def whole_admissions(monkeypatch) -> list:
    calls = []
    real = A.admit
    monkeypatch.setattr(A, "admit", lambda snap: (calls.append(len(snap.queued)), real(snap))[1])
    return calls


def test_a_supervisor_pass_behind_a_long_queue_decides_by_its_head(tmp_path, monkeypatch):
    ctx = two_cores(tmp_path, monkeypatch)
    ids = queue(ctx, 30)
    first = run(ctx, save_index=True)  # a command's pass: the whole queue, the file saved
    assert first == ids[:1]
    saved = os.stat(ctx.store.index_path).st_mtime_ns
    words = ctx.store.read_index_jobs()[ids[5]]["reason"]
    assert first[0][:8] in words  # it names the job that holds the core
    calls = whole_admissions(monkeypatch)
    assert run(ctx, end=ids[0]) == ids[1:2]  # the next in order, as the whole queue's admission starts
    assert calls == []  # decided by the head
    assert os.stat(ctx.store.index_path).st_mtime_ns == saved  # the file keeps its words, not saved
    jobs = ctx.store.read_index_jobs()
    assert jobs[ids[1]]["state"] == "starting" and ids[0] not in jobs
    # a process that reads the file and the journal sees the same jobs and states
    other = view(tmp_path)
    other.cores = 2
    with other.store.lock():
        truth = other.store.load_index_locked()
    assert {j: e["state"] for j, e in truth.jobs.items()} == {j: e["state"] for j, e in jobs.items()}
    # A command's pass (the whole queue) gives every job past the head the words of now.
    assert run(other, save_index=True) == []
    now = other.store.read_index_jobs()
    assert ids[1][:8] in now[ids[20]]["reason"] and ids[0][:8] not in now[ids[20]]["reason"]


def test_the_pass_that_saves_the_index_decides_on_the_whole_queue(tmp_path, monkeypatch):
    from qex.store import index

    ctx = two_cores(tmp_path, monkeypatch)
    ids = queue(ctx, 30)
    run(ctx, save_index=True)
    calls = whole_admissions(monkeypatch)
    monkeypatch.setattr(index, "LAZY_SECS", 0.0)  # every lazy commit is due to save
    assert run(ctx, end=ids[0]) == ids[1:2]
    assert calls == [29]
    assert ids[1][:8] in ctx.store.read_index_jobs()[ids[20]]["reason"]  # the saved file has the new words


def test_a_job_with_a_dependency_past_the_head_makes_the_pass_decide_on_the_whole_queue(tmp_path, monkeypatch):
    ctx = two_cores(tmp_path, monkeypatch)
    ids = queue(ctx, 12)
    queue(ctx, 1, after=[ids[0]])  # its verdict is its own: the head cannot speak for it
    run(ctx, save_index=True)
    calls = whole_admissions(monkeypatch)
    assert run(ctx, end=ids[0]) == ids[1:2]
    assert calls == [12]


def test_the_head_decides_after_the_queue_changed_under_it(tmp_path, monkeypatch):
    # Jobs queued by another process, at a higher priority, land in the kept view in order.
    ctx = two_cores(tmp_path, monkeypatch)
    ids = queue(ctx, 20)
    run(ctx, save_index=True)
    run(ctx, end=ids[0])
    urgent = queue(view(tmp_path), 2, priority=5)
    calls = whole_admissions(monkeypatch)
    assert run(ctx, end=ids[1]) == urgent[:1]
    assert run(ctx, end=urgent[0]) == urgent[1:]
    assert run(ctx, end=urgent[1]) == ids[2:3]
    assert calls == []  # (the new jobs were in the head, decided one by one)


def test_a_pass_decided_by_the_head_leaves_the_save_to_the_next_pass(tmp_path, monkeypatch):
    # Its own events make a save due: the file would get the old words of the jobs
    # past the head. It is left to the next pass, which decides on the whole queue.
    from qex.store import index

    monkeypatch.setattr(index, "LAZY_EVENTS", 2)
    monkeypatch.setattr(index, "LAZY_ENTRIES", 10**6)
    ctx = two_cores(tmp_path, monkeypatch)
    ids = queue(ctx, 30)
    run(ctx, save_index=True)
    saved = os.stat(ctx.store.index_path).st_mtime_ns
    calls = whole_admissions(monkeypatch)
    assert run(ctx, end=ids[0]) == ids[1:2]
    assert calls == [] and os.stat(ctx.store.index_path).st_mtime_ns == saved
    assert run(ctx, end=ids[1]) == ids[2:3]
    assert calls == [28]
    words = ctx.store.read_index_jobs()[ids[20]]["reason"]
    assert ids[2][:8] in words and ids[0][:8] not in words


def test_jobs_past_the_head_that_do_not_say_their_holder_yet_get_it_from_the_whole_queue(tmp_path, monkeypatch):
    # Queued without a pass (their record says no holder): the head's plan would leave
    # them so, so this pass decides on the whole queue and records each one's wait.
    ctx = two_cores(tmp_path, monkeypatch)
    ids = queue(ctx, 30)
    calls = whole_admissions(monkeypatch)
    assert run(ctx) == ids[:1]
    assert calls == [30]
    jobs = ctx.store.read_index_jobs()
    assert {jobs[j]["holder"] for j in ids[1:]} == {"own"}
    assert ctx.store.read_status_dict(ids[25])["blocked_holder"] == "own"
