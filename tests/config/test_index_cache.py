"""The index a process keeps between its passes (Store._cache) and the lazy saves of
the index file: a pass behind a long queue neither parses the file another process
saved nor saves a large file for a few events, and always sees every job."""

import json
import os
import signal

import pytest

from qex.config.context import Context
from qex.config.model import Config
from qex.jobs.request import Request
from qex.jobs.submit import build
from qex.queue.txn import Txn
from qex.store import index, replay, state
from qex.store.state import LAZY, Store

GB = 1 << 30


def view(root) -> Context:
    """One process's view of the state directory (its own Store, its own kept index)."""
    store = Store(str(root))
    store.ensure()
    config = Config.default(os.path.join(str(root), "none.toml"))
    return Context(store=store, config=config, uid=os.getuid(), user="tester", cores=8, mem_total=16 * GB)


def add_jobs(ctx, n: int = 1, save_index=True) -> list[str]:
    """Queue n jobs in one commit, without a pass (nothing starts)."""
    built = [build(ctx, Request(command=["true"], mem="10MB")) for _ in range(n)]
    for b in built:
        ctx.store.create_job_dir(b.spec)
    ids = []
    with ctx.store.lock():
        txn = Txn(ctx.store, ctx.store.load_index_locked(save_replayed=False))
        for b in built:
            rec = b.record.evolve(seq=txn.idx.next_job)
            txn.idx.next_job += 1
            txn.put(rec, None)
            ids.append(rec.id)
        txn.commit(save_index)
    return ids


def parses(monkeypatch) -> list:
    """Count the index files parsed (each is checked once: ``check.index``)."""
    calls = []
    real = state.check.index
    monkeypatch.setattr(state.check, "index", lambda data: (calls.append(1), real(data))[1])
    return calls


def load(ctx):
    with ctx.store.lock():
        return ctx.store.load_index_locked()


def truth(root) -> dict:
    """The jobs a process that keeps nothing finds (it parses the file and replays)."""
    return load(view(root)).jobs


def test_a_kept_index_takes_in_another_process_s_commits_without_parsing_its_saved_file(tmp_path, monkeypatch):
    a, b = view(tmp_path), view(tmp_path)
    mine = add_jobs(a)
    theirs = add_jobs(b, 3)  # b saves the index file: it is no longer the one a left
    counted = parses(monkeypatch)
    idx = load(a)
    assert counted == []
    assert sorted(idx.jobs) == sorted(mine + theirs)
    assert idx.jobs == truth(tmp_path)
    assert len(counted) == 1  # (the fresh view did parse it)


def test_a_kept_index_is_dropped_when_the_journal_was_rotated(tmp_path, monkeypatch):
    monkeypatch.setenv("QEX_JOURNAL_MAX_BYTES", "4096")
    a, b = view(tmp_path), view(tmp_path)
    mine = add_jobs(a)
    kept_mark = a.store._cache[0]
    theirs, path = [], a.store.journal_path
    for _ in range(50):  # each commit of a job's record is a few KB: a few rotate the journal
        theirs += add_jobs(b)
        if not os.path.exists(path) or os.stat(path).st_ino != kept_mark[0]:
            break
    else:
        pytest.fail("the journal was never rotated")
    theirs += add_jobs(b, 2)  # the new journal is long enough to have a mark of its own
    counted = parses(monkeypatch)
    idx = load(a)
    assert len(counted) == 1  # the journal it was current against is gone: it reads the file
    assert sorted(idx.jobs) == sorted(mine + theirs) and idx.jobs == truth(tmp_path)


def test_a_kept_index_is_dropped_for_a_journal_with_its_inode_but_other_first_bytes(tmp_path, monkeypatch):
    # Two rotations later the new journal may get the inode of the one the index was kept
    # against: its first bytes (another seq) tell them apart.
    a = view(tmp_path)
    first = add_jobs(a)
    first_append = os.path.getsize(a.store.journal_path)
    (_ino, head), idx_a = a.store._cache
    second = add_jobs(a)
    with open(a.store.journal_path, "rb") as fh:
        rest = fh.read()[first_append:]  # a journal that begins at another event, as after a rotation
    os.rename(a.store.journal_path, a.store.journal_path + ".moved")
    with open(a.store.journal_path, "wb") as fh:
        fh.write(rest)
    idx_a.offset = len(rest)  # the size alone would let the kept index pass
    a.store._cache = ((os.stat(a.store.journal_path).st_ino, head), idx_a)  # the inode given again
    assert a.store._journal_mark()[0] != a.store._cache[0]
    counted = parses(monkeypatch)
    idx = load(a)
    assert len(counted) == 1  # it read the file, not the index kept against the other journal
    assert sorted(idx.jobs) == sorted(first + second)


def test_a_supervisor_s_pass_saves_a_large_index_less_often_but_a_reader_sees_every_event(tmp_path, monkeypatch):
    monkeypatch.setattr(index, "LAZY_SECS", 3600.0)  # only the count of events decides here
    ctx = view(tmp_path)
    ids = add_jobs(ctx, 400)  # saved: 400 jobs in the file
    store = ctx.store
    behind = max(index.LAZY_EVENTS, 400 // index.LAZY_ENTRIES)
    assert behind > index.LAZY_EVENTS  # a large index: more events may wait than for a small one

    def offset_in_file():
        with open(store.index_path) as fh:
            return json.load(fh)["offset"]

    def lazy_reasons(n: int, start: int):
        with store.lock():
            idx = store.load_index_locked(save_replayed=False)
            changes = []
            for k, job_id in enumerate(ids[start : start + n]):
                rec = {**store.read_status_dict(job_id), "blocked_reason": f"words {start + k}"}
                changes.append((rec, "queued", "reason"))
            store.commit_locked(idx, changes, save_index=LAZY)

    saved = offset_in_file()
    lazy_reasons(behind - 1, 0)
    assert offset_in_file() == saved  # not saved yet: fewer events than one per LAZY_ENTRIES jobs
    assert store.read_index_jobs()[ids[0]]["reason"] == "words 0"  # a reader replays what the file lacks
    lazy_reasons(1, behind - 1)
    assert offset_in_file() > saved


def test_a_kept_index_far_behind_the_journal_is_dropped_for_the_file(tmp_path, monkeypatch):
    # A supervisor back from a long job reads the file rather than replay all that happened since.
    monkeypatch.setattr(replay, "KEPT_REPLAY_BYTES", 4096)
    a, b = view(tmp_path), view(tmp_path)
    mine = add_jobs(a)
    theirs = add_jobs(b, 8)  # one append of eight records: more than 4 KB
    counted = parses(monkeypatch)
    idx = load(a)
    assert len(counted) == 1
    assert sorted(idx.jobs) == sorted(mine + theirs)


def fsyncs(monkeypatch) -> list[str]:
    """The paths this process fsyncs, in order."""
    seen = []
    real = os.fsync

    def recording(fd):
        try:
            seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            seen.append("?")
        return real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return seen


def lazy_reason(ctx, job_id: str, words: str) -> None:
    with ctx.store.lock():
        idx = ctx.store.load_index_locked(save_replayed=False)
        rec = {**ctx.store.read_status_dict(job_id), "blocked_reason": words}
        ctx.store.commit_locked(idx, [(rec, "queued", "reason")], save_index=LAZY)


def saved_index(ctx) -> dict:
    with open(ctx.store.index_path) as fh:
        return json.load(fh)


def test_a_lazy_commit_leaves_its_records_unsynced_and_an_index_save_syncs_none(tmp_path, monkeypatch):
    # Its events are in the fsynced journal: a record a power cut loses is written again
    # from it by the first pass after the reboot (the index's synced offset says from where).
    monkeypatch.setattr(index, "LAZY_SECS", 3600.0)
    a, b = view(tmp_path), view(tmp_path)
    synced = fsyncs(monkeypatch)
    job, other = add_jobs(a, 2)
    assert not [p for p in synced if p.endswith("status.json")]  # not even a command's commit syncs one
    before = saved_index(a)["synced"]
    status = a.store.path(job, "status.json")
    del synced[:]
    lazy_reason(a, job, "words of a lazy commit")
    assert synced == [a.store.journal_path]  # the journal only: no status.json, no index
    del synced[:]
    lazy_reason(b, other, "words of another lazy commit")  # b replays a's event, saves no index
    add_jobs(b)  # a commit that saves the index: the journal, its own new record, the index file
    assert status not in synced and b.store.path(other, "status.json") not in synced
    assert b.store.journal_path in synced
    saved = saved_index(b)
    assert saved["synced"] == before < saved["offset"]  # no commit moves it: the events are past it
    assert a.store.read_status_dict(job)["blocked_reason"] == "words of a lazy commit"


def reboot(ctx) -> None:
    """What a reboot leaves of the lock file's applied line: another boot's id in it."""
    with open(os.path.join(ctx.store.root, "lock"), "r+b") as fh:
        line = fh.read().split()
        fh.seek(0)
        fh.write(b" ".join([line[0], b"0" * len(line[1]), *line[2:]]).ljust(127) + b"\n")


def test_after_a_reboot_the_first_pass_writes_again_the_records_past_the_synced_offset(tmp_path, monkeypatch):
    monkeypatch.setattr(index, "LAZY_SECS", 3600.0)
    a = view(tmp_path)
    job, other, kept = add_jobs(a, 3)
    lazy_reason(a, job, "lazy words")
    lazy_reason(a, other, "more lazy words")
    add_jobs(view(tmp_path))  # saves the index past the lazy events, syncing none of their records
    path = a.store.path(job, "status.json")
    with open(path, "w"):
        pass  # a power cut kept the new file's name, not its content
    stale = {**a.store.read_status_dict(other), "blocked_reason": "what the disk had"}
    with open(a.store.path(other, "status.json"), "w") as fh:
        json.dump(stale, fh)
    untouched = os.stat(a.store.path(kept, "status.json")).st_ino
    reboot(a)
    flushed = []
    real = state.fs.syncfs
    monkeypatch.setattr(state.fs, "syncfs", lambda root: (flushed.append(root), real(root)))
    c = view(tmp_path)
    add_jobs(c)  # the first pass after the reboot
    assert a.store.read_status_dict(job)["blocked_reason"] == "lazy words"
    assert a.store.read_status_dict(other)["blocked_reason"] == "more lazy words"
    assert os.stat(a.store.path(kept, "status.json")).st_ino == untouched  # right already: compared, not rewritten
    assert flushed == [c.store.root]
    synced, offset = saved_index(c)["synced"], saved_index(c)["offset"]
    assert 0 < synced < offset  # moved up to where the repair found the index; add_jobs's own commit is past it
    del flushed[:]
    add_jobs(view(tmp_path))  # the same boot from here on: nothing to write again
    assert flushed == []


def test_an_index_rebuilt_from_the_records_and_the_journal_counts_no_record_synced(tmp_path, monkeypatch):
    monkeypatch.setattr(index, "LAZY_SECS", 3600.0)
    a = view(tmp_path)
    (job,) = add_jobs(a)
    lazy_reason(a, job, "unsynced words")
    os.unlink(a.store.index_path)  # damaged or lost: the next pass rebuilds it from records and journal
    b = view(tmp_path)
    with b.store.lock():
        idx = b.store.load_index_locked(save_replayed=False)
    assert idx.synced == 0 and idx.offset > 0  # a repair after a reboot reads the whole journal


def test_a_rotation_makes_every_record_durable_before_it_moves_the_journal(tmp_path, monkeypatch):
    monkeypatch.setattr(index, "LAZY_SECS", 3600.0)
    a = view(tmp_path)
    (job,) = add_jobs(a)
    lazy_reason(a, job, "unsynced words")
    order = []
    real_sync, real_rotate = state.fs.syncfs, state.journal.rotate
    monkeypatch.setattr(state.fs, "syncfs", lambda root: (order.append("syncfs"), real_sync(root)))
    monkeypatch.setattr(state.journal, "rotate", lambda root: (order.append("rotate"), real_rotate(root)))
    monkeypatch.setenv("QEX_JOURNAL_MAX_BYTES", "4096")
    add_jobs(a, 6)  # a commit past the journal's size: it rotates
    assert order[-2:] == ["syncfs", "rotate"]
    saved = saved_index(a)
    assert saved["offset"] == saved["synced"] == 0


def test_a_fifo_planted_at_the_journal_is_never_waited_on_by_a_kept_index(tmp_path):
    # A supervisor keeps its index for days; a FIFO put where the journal was must not
    # hang its next pass (an open for reading would wait for a writer forever).
    a = view(tmp_path)
    add_jobs(a)
    assert a.store._cache is not None
    os.rename(a.store.journal_path, a.store.journal_path + ".moved")
    os.mkfifo(a.store.journal_path)

    class Waited(Exception):  # (not an OSError: the code under test may catch those)
        pass

    def waited(*_):
        raise Waited("the pass waited on a FIFO planted at the journal")

    before = signal.signal(signal.SIGALRM, waited)
    signal.alarm(5)
    try:
        assert a.store._journal_mark() == (None, 0)  # no mark, so no kept index
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


def index_saves(monkeypatch) -> list:
    """Count the index files this process writes."""
    saves = []
    real = state.fs.write_atomic

    def recording(path, *args, **kw):
        if path.endswith("index.json"):
            saves.append(path)
        return real(path, *args, **kw)

    monkeypatch.setattr(state.fs, "write_atomic", recording)
    return saves


def test_an_index_file_another_process_saved_spares_this_one_its_own_save_and_syncs(tmp_path, monkeypatch):
    # Two supervisors of a drain: each counted the events since its own last save, so
    # each saved a large index one pass after the other, and synced the same records.
    monkeypatch.setattr(index, "LAZY_SECS", 3600.0)
    monkeypatch.setattr(index, "LAZY_EVENTS", 4)
    a, b = view(tmp_path), view(tmp_path)
    jobs = add_jobs(a, 4)
    lazy_reason(b, jobs[0], "b keeps its index")  # b: 1 event behind its last save (none: the file's)
    lazy_reason(a, jobs[1], "one")
    lazy_reason(a, jobs[2], "two")
    saves = index_saves(monkeypatch)
    lazy_reason(a, jobs[3], "three")  # 4 events since a's save: it saves, syncing b's record too
    assert len(saves) == 1
    synced = fsyncs(monkeypatch)
    lazy_reason(b, jobs[0], "b again")  # 4 events after b's last save: it would have saved
    assert len(saves) == 1
    assert not any(p.endswith("status.json") for p in synced)
    assert truth(tmp_path)[jobs[0]]["reason"] == "b again"  # replayed by a reader of the file


def save_as_another_process(path: str, data: dict) -> None:
    """Write an index file as a save does: a new file renamed over the old one."""
    with open(path + ".other", "w") as f:
        json.dump(data, f, separators=(",", ":"))
    os.replace(path + ".other", path)


def look(ctx):
    """A pass that changes nothing: it takes the kept index and keeps it again."""
    with ctx.store.lock():
        idx = ctx.store.load_index_locked(save_replayed=False)
        ctx.store.commit_locked(idx, [], save_index=LAZY)
        return idx


def test_an_index_file_of_another_journal_teaches_a_kept_index_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(index, "LAZY_SECS", 3600.0)
    a = view(tmp_path)
    (job,) = add_jobs(a)
    lazy_reason(a, job, "unsynced words")
    kept = a.store._cache[1]
    behind = kept.synced
    assert behind < kept.offset
    with open(a.store.index_path) as f:
        data = json.load(f)
    data.update(stream="another-stream", seq=kept.seq, synced=kept.offset)  # another journal's file
    save_as_another_process(a.store.index_path, data)
    assert look(a) is kept
    assert kept.synced == behind and kept.saved_seq < kept.seq
    data.update(stream=kept.stream, seq=kept.seq + 5)  # a seq beyond what this journal has: not believed
    save_as_another_process(a.store.index_path, data)
    assert look(a) is kept
    assert kept.synced == behind
    data.update(seq=kept.seq)  # this journal's file, at this seq: its saver's synced offset is taken
    save_as_another_process(a.store.index_path, data)
    assert look(a) is kept
    assert kept.synced == kept.offset and kept.saved_seq == kept.seq


def fsyncs_with_lock(monkeypatch, lock_path: str) -> list[tuple[str, bool]]:
    """The paths this process fsyncs, in order, each with whether the state lock was held then."""
    import fcntl

    seen = []
    real = os.fsync

    def recording(fd):
        probe = os.open(lock_path, os.O_RDWR)
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held = False
        except BlockingIOError:
            held = True
        finally:
            os.close(probe)  # (its flock, if it got one, goes with it)
        seen.append((os.readlink(f"/proc/self/fd/{fd}"), held))
        return real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return seen


def test_a_lazy_commit_fsyncs_its_journal_append_once_the_lock_is_let_go(tmp_path, monkeypatch):
    # The fsync is the pass's, made before it returns; the other supervisor's pass
    # need not wait for it under the lock.
    monkeypatch.setattr(index, "LAZY_SECS", 3600.0)
    a = view(tmp_path)
    (job,) = add_jobs(a)
    synced = fsyncs_with_lock(monkeypatch, os.path.join(a.store.root, "lock"))
    lazy_reason(a, job, "words")
    assert synced == [(a.store.journal_path, False)]
    del synced[:]
    add_jobs(a)  # a commit that saves the index: its append is fsynced at once, under the lock
    assert [held for path, held in synced if path == a.store.journal_path] == [True]


def test_an_index_save_fsyncs_the_journal_it_counts_first(tmp_path, monkeypatch):
    # Another process's lazy append may not be fsynced yet (it is, once that process
    # lets the lock go): an index file must never count events a power cut could lose.
    monkeypatch.setattr(index, "LAZY_SECS", 3600.0)
    a, b = view(tmp_path), view(tmp_path)
    (job,) = add_jobs(a)
    real = os.fsync
    monkeypatch.setattr(state.fs, "sync_at_release", lambda fd, path: os.close(fd))  # a's fsync never comes
    lazy_reason(a, job, "words of a lazy commit")
    monkeypatch.setattr(state.fs, "sync_at_release", lambda fd, path: (real(fd), os.close(fd)))
    synced = fsyncs(monkeypatch)
    with b.store.lock():
        idx = b.store.load_index_locked(save_replayed=False)
        b.store.save_index_locked(idx)
    index_tmp = [i for i, p in enumerate(synced) if os.path.basename(p).startswith(".index.json")]
    assert index_tmp and b.store.journal_path in synced[: index_tmp[0]]


def test_a_pass_takes_the_records_its_own_commit_wrote_and_reads_those_another_changed(tmp_path, monkeypatch):
    """A process that keeps its index keeps the records it wrote (Index.records): its
    next pass reads no status.json of theirs, unless another process's commit for that
    job was replayed since; a read without the lock takes one only while nothing was
    appended to the journal since (Store.cached_status)."""
    monkeypatch.setattr(index, "LAZY_SECS", 3600.0)
    a, b = view(tmp_path), view(tmp_path)
    one, two = add_jobs(a, 2)
    lazy_reason(a, one, "a's words")
    lazy_reason(a, two, "a's words too")
    reads = []
    real = state.Store.read_status_data  # (every read of a status.json: records and dicts alike)
    monkeypatch.setattr(
        state.Store, "read_status_data", lambda self, job_id: (reads.append(job_id), real(self, job_id))[1]
    )
    assert a.store.cached_status(one).blocked_reason == "a's words"
    with a.store.lock():
        txn = Txn(a.store, a.store.load_index_locked(save_replayed=False))
        assert txn.record(one).blocked_reason == "a's words" and txn.record(two).blocked_reason == "a's words too"
        txn.commit(LAZY)  # (a pass always commits: the process keeps its index)
    assert reads == []

    lazy_reason(b, one, "b's words")  # another process changes one of them
    assert a.store.cached_status(one) is None and a.store.cached_status(two) is None  # the journal grew
    with a.store.lock():
        txn = Txn(a.store, a.store.load_index_locked(save_replayed=False))
        assert txn.record(one).blocked_reason == "b's words"
        assert txn.record(two).blocked_reason == "a's words too"
        txn.commit(LAZY)
    assert reads.count(one) == 2 and two not in reads  # b's read for its change, and a's after it


def test_an_index_whose_journal_was_replaced_counts_nothing_of_the_new_one_synced(tmp_path, monkeypatch):
    """A rotation killed between the move of the journal and the second index save
    leaves an index that points past the end of the new journal: its synced offset
    must not carry over into the new file."""
    monkeypatch.setattr(index, "LAZY_SECS", 3600.0)
    a = view(tmp_path)
    add_jobs(a, 3)
    data = saved_index(a)
    data.update(synced=data["offset"])  # everything of the old file was durable
    save_as_another_process(a.store.index_path, data)
    os.rename(a.store.journal_path, a.store.journal_path + ".1")  # the move, and nothing after
    b = view(tmp_path)
    add_jobs(b)
    saved = saved_index(b)
    assert saved["synced"] == 0 < saved["offset"]


def journal_seqs(ctx) -> list[int]:
    with open(ctx.store.journal_path) as fh:
        return [json.loads(line)["seq"] for line in fh]


def rotation_killed_before_its_second_save(ctx, keep_ino: bool = True) -> int:
    """The journal moved aside and the index file left pointing into it, as a pass
    leaves them when it dies between the move and its second save; returns that offset."""
    data = saved_index(ctx)
    if not keep_ino:
        data.pop("journal_ino", None)  # an index file of an earlier qex
    save_as_another_process(ctx.store.index_path, data)
    os.rename(ctx.store.journal_path, os.path.join(ctx.store.root, state.journal.ROTATED))
    return data["offset"]


@pytest.mark.parametrize("keep_ino", [True, False], ids=["index-names-its-journal", "index-of-an-earlier-qex"])
def test_lazy_commits_into_the_journal_after_a_killed_rotation_are_replayed_by_the_next_process(
    tmp_path, monkeypatch, keep_ino
):
    """The CI crash rounds found it: a supervisor's lazy commit went into the new journal
    while the index file still counted in the moved one; the next process, whose offset
    lay past the new file's end, took the new file as applied, lost that event (a job
    'starting' in the index, 'failed' on disk) and gave its seq again."""
    monkeypatch.setattr(index, "LAZY_SECS", 3600.0)
    a = view(tmp_path)
    ids = add_jobs(a, 3)
    rotation_killed_before_its_second_save(a, keep_ino)
    b = view(tmp_path)
    lazy_reason(b, ids[0], "words one")  # not saved: the index file still counts in the moved journal
    assert saved_index(b)["offset"] > os.path.getsize(b.store.journal_path)
    c = view(tmp_path)
    assert load(c).jobs[ids[0]]["reason"] == "words one"
    lazy_reason(c, ids[1], "words two")
    seqs = journal_seqs(c)
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs


def test_a_new_journal_longer_than_the_moved_one_is_read_from_its_start(tmp_path, monkeypatch):
    """Past the old offset, the new file would be read from the middle of a line: the
    index names the inode of the journal it counts in."""
    monkeypatch.setattr(index, "LAZY_SECS", 3600.0)
    monkeypatch.setattr(index, "LAZY_EVENTS", 10_000)
    a = view(tmp_path)
    ids = add_jobs(a, 3)
    old = rotation_killed_before_its_second_save(a)
    b = view(tmp_path)
    lazy_reason(b, ids[2], "first words")  # at the new file's start, before the old offset
    n = 0
    while not os.path.exists(b.store.journal_path) or os.path.getsize(b.store.journal_path) <= old + 4096:
        n += 1
        lazy_reason(b, ids[n % 2], f"words {n}")
    assert saved_index(b)["offset"] == old  # no save since the move
    c = view(tmp_path)
    jobs = load(c).jobs
    assert jobs[ids[2]]["reason"] == "first words"
    assert {jobs[ids[n % 2]]["reason"], jobs[ids[(n - 1) % 2]]["reason"]} == {f"words {n}", f"words {n - 1}"}
    lazy_reason(c, ids[0], "last words")
    seqs = journal_seqs(c)
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs


def test_the_first_command_after_a_reboot_repairs_even_when_it_only_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(index, "LAZY_SECS", 3600.0)
    a = view(tmp_path)
    (job,) = add_jobs(a)
    lazy_reason(a, job, "the journal's words")
    add_jobs(a)  # saves the index past the lazy event
    with open(a.store.path(job, "status.json"), "w"):
        pass  # a power cut kept the name, not the content
    reboot(a)
    assert a.store.rebooted_since_applied()
    monkeypatch.setenv("QEX_STATE_DIR", a.store.root)
    ctx = Context.load(config=a.config)  # what every command does first
    assert ctx.store.read_status_dict(job)["blocked_reason"] == "the journal's words"
    assert not ctx.store.rebooted_since_applied()
