"""A supervisor's commits are made durable late (qex.store.syncs.defer_syncs): the lock's
release does not make the journal's fsync, ``settle`` does, in the supervisor's own thread,
before a job is spawned, a fork, an exec or the exit. A failed fsync is raised there. The
files a pass replaced are freed after the spawn."""

import errno
import os
import threading

import pytest
from test_index_cache import add_jobs, lazy_reason, view

from qex.base.errors import StoreError
from qex.queue import engine
from qex.store import fs, syncs
from qex.store.state import LAZY
from qex.supervisor import run
from qex.supervisor import spawn as spawn_mod
from qex.supervisor.memory import Meter


@pytest.fixture
def deferring():
    fs.defer_syncs()
    yield
    try:
        fs.settle()
    finally:
        fs.defer_syncs(False)


def test_the_release_leaves_the_fsync_to_settle_which_makes_it_in_this_thread(tmp_path, monkeypatch, deferring):
    ctx = view(tmp_path)
    (job,) = add_jobs(ctx)
    seen, real = [], os.fsync

    def fsync(fd):
        seen.append((os.readlink(f"/proc/self/fd/{fd}"), threading.get_ident()))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    lazy_reason(ctx, job, "words")  # a lazy commit: its append is fsynced after the release
    assert seen == [], "the release should leave the fsync to settle"
    fs.settle()
    assert seen == [(ctx.store.journal_path, threading.get_ident())]
    fs.settle()
    assert len(seen) == 1, "made once"


def test_a_failed_deferred_fsync_is_raised_by_settle(tmp_path, monkeypatch, deferring):
    ctx = view(tmp_path)
    (job,) = add_jobs(ctx)

    def failing(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    lazy_reason(ctx, job, "words")
    with pytest.raises(StoreError, match="journal.jsonl"):
        fs.settle()
    with pytest.raises(StoreError, match="journal.jsonl"):  # and again: nothing after it is durable either
        fs.settle()
    lazy_reason(ctx, job, "more words")  # a commit after the failure: its append is still closed
    held = syncs._DEFERRED_SYNCS[0][0]
    with pytest.raises(StoreError, match="journal.jsonl"):
        fs.settle()
    with pytest.raises(OSError):
        os.fstat(held)
    syncs._SYNC_FAILURE = None  # (for the fixture's settle)


def test_a_forked_child_defers_nothing_and_has_no_syncer(tmp_path, deferring):
    ctx = view(tmp_path)
    (job,) = add_jobs(ctx)
    lazy_reason(ctx, job, "words")  # the syncer exists
    fs.settle()
    pid = os.fork()
    if pid == 0:
        left = (syncs._DEFER, syncs._SYNCER, syncs._DEFERRED_SYNCS, syncs._DEFERRED_FREES)
        os._exit(0 if left == (False, None, [], []) else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def test_a_supervisor_spawns_its_job_only_once_its_start_is_settled(tmp_path, monkeypatch, deferring):
    ctx = view(tmp_path)
    (job,) = add_jobs(ctx)
    result = engine.run_pass(ctx, save_index=LAZY)  # admits it: 'starting'
    (launch,) = result.launches
    order = []
    monkeypatch.setattr(fs, "settle", lambda: order.append("settle"))

    def spawn(*args, **kw):
        order.append("spawn")
        raise OSError(errno.EAGAIN, "not in this test")

    monkeypatch.setattr(spawn_mod.Child, "spawn", staticmethod(spawn))
    monkeypatch.chdir(ctx.store.job_dir(job))
    rec, meter = ctx.store.read_status(job), Meter()
    try:
        proc, failure = spawn_mod.spawn(ctx, launch, ctx.store.read_spec(job), rec, meter)
    finally:
        meter.discard()
        run._close_and_end(launch)
    assert proc is None and "not in this test" in failure
    assert order == ["settle", "spawn"]


def test_settle_makes_the_fsyncs_and_only_a_fork_or_the_spawn_frees_the_replaced_files(
    tmp_path, monkeypatch, deferring
):
    """Freeing a replaced file can wait for a discard of its blocks: a spawn need not."""
    ctx = view(tmp_path)
    (job,) = add_jobs(ctx)
    freed, real = [], syncs._close_all
    monkeypatch.setattr(syncs, "_close_all", lambda fds: (freed.extend(fds), real(fds)))
    lazy_reason(ctx, job, "words")  # its record replaces the old one: a free to make
    fs.settle()
    assert freed == [] and syncs._DEFERRED_FREES and not syncs._DEFERRED_SYNCS
    fs.settle(frees=True)
    assert freed and not syncs._DEFERRED_FREES


def test_a_spawn_frees_its_passs_replaced_files_after_the_job_is_spawned(tmp_path, monkeypatch, deferring):
    ctx = view(tmp_path)
    (job,) = add_jobs(ctx)
    result = engine.run_pass(ctx, save_index=LAZY)  # admits it: 'starting'; its old record replaced
    (launch,) = result.launches
    at_spawn, real = [], spawn_mod.Child.spawn

    def spawn(*args, **kw):
        at_spawn.append((list(syncs._DEFERRED_SYNCS), list(syncs._DEFERRED_FREES)))
        return real(*args, **kw)

    monkeypatch.setattr(spawn_mod.Child, "spawn", staticmethod(spawn))
    monkeypatch.chdir(ctx.store.job_dir(job))
    rec, meter = ctx.store.read_status(job), Meter()
    try:
        proc, failure = spawn_mod.spawn(ctx, launch, ctx.store.read_spec(job), rec, meter)
        assert failure is None
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    finally:
        meter.discard()
        run._close_and_end(launch)
    ((unsynced, frees),) = at_spawn
    assert unsynced == [] and frees, "durable before it runs; the frees wait for the spawn"
    assert syncs._DEFERRED_FREES == [], "freed once it is spawned"


def _record_appends(monkeypatch, order: list) -> threading.Event:
    """Each journal append goes into ``order`` as ("append", path, thread); the event is set at the first."""
    from qex.store import journal

    real, appended = journal.append, threading.Event()

    def append(path, events, *a, **kw):
        order.append(("append", path, threading.get_ident()))
        appended.set()
        return real(path, events, *a, **kw)

    monkeypatch.setattr(journal, "append", append)
    return appended


def test_a_submission_makes_its_spec_durable_beside_its_pass_and_before_its_first_event(tmp_path, monkeypatch):
    """The spec's and the job directory's fsyncs run in the syncer thread while the
    pass admits; the commit settles them before the journal names the job."""
    from qex.jobs.request import Request
    from qex.jobs.submit import build, submit_many

    ctx = view(tmp_path)
    order, real_fsync = [], os.fsync
    appended = _record_appends(monkeypatch, order)

    def fsync(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.endswith("spec.json"):
            appended.wait(0.5)  # a commit that did not wait for it would append meanwhile
        order.append(("fsync", path, threading.get_ident()))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    built = build(ctx, Request(command=["true"], mem="10MB"))
    ids, result = submit_many(ctx, [built])
    for launch in result.launches:
        run._close_and_end(launch)
    spec = ctx.store.path(ids[0], "spec.json")
    first_append = next(i for i, o in enumerate(order) if o[0] == "append")
    synced = {path: who for kind, path, who in order[:first_append] if kind == "fsync"}
    assert spec in synced and ctx.store.jobs in synced, order
    assert synced[spec] != threading.get_ident(), "made by the syncer's thread"


def test_the_syncer_thread_blocks_every_signal_so_a_kill_reaches_the_main_thread(tmp_path, deferring):
    """A qex kill's SIGUSR1, blocked in the main thread across the exec into the watcher,
    must stay pending for it: the worker thread never takes a signal."""
    import _signal

    fd = os.open(str(tmp_path), os.O_RDONLY)
    fs.sync_in_background([(fd, str(tmp_path))])  # the thread exists
    fs.settle()
    with open(f"/proc/self/task/{syncs._SYNCER.tid}/status") as fh:
        blocked = int(next(line for line in fh if line.startswith("SigBlk:")).split()[1], 16)
    for sig in (_signal.SIGUSR1, _signal.SIGTERM, _signal.SIGINT, _signal.SIGCHLD):
        assert blocked & (1 << (sig - 1)), sig


def test_a_deferred_append_has_its_write_started_at_the_release_and_its_fsync_made_by_settle(
    tmp_path, monkeypatch, deferring
):
    ctx = view(tmp_path)
    (job,) = add_jobs(ctx)
    started, synced, real = [], [], os.fsync

    def start(fd, offset, nbytes, flags):
        started.append((os.readlink(f"/proc/self/fd/{fd}"), offset, nbytes, flags))
        return 0

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(syncs, "_SYNC_FILE_RANGE", start)
    monkeypatch.setattr(os, "fsync", fsync)
    lazy_reason(ctx, job, "words")
    assert started == [(ctx.store.journal_path, 0, 0, 2)], "the release should start the journal's write"
    assert synced == [], "and leave its fsync to settle"
    fs.settle()
    assert synced == [ctx.store.journal_path], "the fsync still makes it durable"


def test_the_write_start_is_looked_up_once_at_the_first_release_that_defers_an_append(tmp_path, monkeypatch, deferring):
    ctx = view(tmp_path)
    (job,) = add_jobs(ctx)
    looked, real = [], syncs.libc_call
    monkeypatch.setattr(syncs, "_SYNC_FILE_RANGE", None)
    monkeypatch.setattr(syncs, "libc_call", lambda name, *a: looked.append(name) or real(name, *a))
    with ctx.store.lock():
        pass  # a release with no append of its own (a supervisor before its first commit): no lookup
    assert "sync_file_range" not in looked and syncs._SYNC_FILE_RANGE is None
    lazy_reason(ctx, job, "words")
    lazy_reason(ctx, job, "more words")
    assert looked.count("sync_file_range") == 1 and syncs._SYNC_FILE_RANGE


def test_the_write_start_is_the_c_librarys_and_without_it_the_fsync_does_all(tmp_path, monkeypatch, deferring):
    call = syncs._sync_file_range()
    assert call, "glibc has sync_file_range"
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.write(fd, b"x" * 100)
        assert call(fd, 0, 0, 2) == 0
    finally:
        os.close(fd)
    ctx = view(tmp_path)
    (job,) = add_jobs(ctx)
    synced, real = [], os.fsync
    monkeypatch.setattr(syncs, "_SYNC_FILE_RANGE", False)  # (no ctypes, or a libc without it)
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real(fd))
    lazy_reason(ctx, job, "words")
    fs.settle()
    assert len(synced) == 1


def test_a_bulk_submission_flushes_its_directories_beside_its_pass_and_before_its_first_event(tmp_path, monkeypatch):
    """A fan-out's one syncfs runs in the syncer thread while its pass takes the lock and
    admits; the commit waits for it before the journal names any of its jobs."""
    from qex.jobs.submit import submit_many

    ctx = view(tmp_path)
    order, real_syncfs = [], syncs._syncfs
    appended = _record_appends(monkeypatch, order)

    def syncfs(fd):
        appended.wait(0.5)  # a commit that did not wait for it would append meanwhile
        order.append(("syncfs", os.readlink(f"/proc/self/fd/{fd}"), threading.get_ident()))
        return real_syncfs(fd)

    monkeypatch.setattr(syncs, "_syncfs", syncfs)
    ids, result = submit_many(ctx, _fan_out(ctx, 4))
    for launch in result.launches:
        run._close_and_end(launch)
    assert len(ids) == 4
    kinds = [o[0] for o in order]
    assert kinds.index("syncfs") < kinds.index("append"), order
    ((_, path, who),) = [o for o in order if o[0] == "syncfs"]
    assert path == ctx.store.jobs and who != threading.get_ident(), "the syncer's thread flushed the jobs"


def _fan_out(ctx, n: int) -> list:
    """The built jobs of an n-line fan-out of `true`."""
    from qex.jobs.request import Request
    from qex.jobs.submit import build, build_like

    first = build(ctx, Request(command=["true", "0"], mem="10MB"))
    return [first] + [build_like(first, ["true", str(i)], f"true-{i}") for i in range(1, n)]


def test_a_failed_flush_of_a_bulk_submission_queues_none_of_its_jobs(tmp_path, monkeypatch):
    from qex.jobs.submit import submit_many

    ctx = view(tmp_path)
    monkeypatch.setattr(syncs, "_syncfs", lambda fd: -1)
    with pytest.raises(StoreError, match="jobs"):
        submit_many(ctx, _fan_out(ctx, 3))
    syncs._SYNCER.failure = None  # (sticky for this process, as after any failed fsync)
    assert [n for n in os.listdir(ctx.store.jobs) if not n.startswith(".")] == []
    assert not any(e["state"] == "queued" for e in ctx.store.load_index_locked().jobs.values())
