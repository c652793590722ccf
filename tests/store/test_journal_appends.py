"""A journal append is replayed whole or not at all (a writer killed in a big append)."""

import json
import os

from qex.store import journal
from qex.store.state import Store


def lines(events) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def batch(first: int, n: int, ids=None) -> list[dict]:
    ids = ids or [f"job-{first + i}" for i in range(n)]
    return [
        {
            "event": "job",
            "seq": first + i,
            "commit": first + n - 1,
            "id": ids[i],
            "job": {"id": ids[i], "seq": first + i, "state": "queued"},
        }
        for i in range(n)
    ]


def test_only_whole_appends_are_read(tmp_path):
    path = str(tmp_path / "journal.jsonl")
    whole = lines(batch(1, 3)) + lines([{"event": "job", "seq": 4, "id": "old"}])  # no commit: an older qex
    partial = lines(batch(5, 4))
    cut = partial[: len(partial) * 2 // 3]
    with open(path, "wb") as fh:
        fh.write(whole + cut)
    events, end, highest = journal.read_committed(path, 0)
    assert [e["seq"] for e in events] == [1, 2, 3, 4]
    assert end == len(whole)
    assert highest == 4 + cut.count(b"\n") > 4  # whole lines of an append that was cut
    assert journal.read_committed(path, end)[:2] == ([], end)


def test_replay_of_a_cut_append_queues_none_of_its_jobs_and_cuts_it(tmp_path):
    store = Store(str(tmp_path / "state"))
    store.ensure()
    ids = [f"job-{i}" for i in range(5)]
    for job_id in ids:
        os.mkdir(store.job_dir(job_id))
    with store.lock():
        store.save_index_locked(store.load_index_locked())
    events = batch(1, 5, ids)
    for e in events:
        e["job"].update(owner="u", uid=0, command=["true"], cwd="/")
    data = lines(events)
    with open(store.journal_path, "wb") as fh:
        fh.write(data[: len(data) - 10])  # the last line is cut, and so the whole append
    with store.lock():
        idx = store.load_index_locked()
    assert idx.jobs == {} and idx.seq == 4  # seqs 1-4 of the cut append are never given again
    assert not any(os.path.exists(store.path(j, "status.json")) for j in ids)
    assert os.path.getsize(store.journal_path) == 0
    again = batch(5, 5, ids)  # the next append, whole, after the cut one: every job is queued
    for e in again:
        e["job"].update(owner="u", uid=0, command=["true"], cwd="/")
    with open(store.journal_path, "wb") as fh:
        fh.write(lines(again))
    with store.lock():
        idx = store.load_index_locked()
    assert sorted(idx.jobs) == ids
    assert all(os.path.exists(store.path(j, "status.json")) for j in ids)


def test_a_commit_encodes_each_record_once_as_the_plain_encoder_would(tmp_path):
    """The journal line and status.json of each job are byte for byte what
    journal.encode and fs.write_json make of them, for a record that has every
    field and for one the defaults complete (its event carries it as it is)."""
    from qex.store import fs
    from qex.store.records import status_defaults

    store = Store(str(tmp_path / "state"))
    store.ensure()
    full = {
        **status_defaults(),
        "id": "job-a",
        "seq": 1,
        "state": "queued",
        "name": "a\u00e9",
        "owner": "me",
        "uid": 0,
        "command": ["echo", "\u2603"],
        "cwd": "/",
        "submitted_at": 1.5,
    }
    bare = {"id": "job-b", "seq": 2, "state": "queued", "command": ["true"], "cwd": "/", "owner": "me", "uid": 0}
    for rec in (full, bare):
        os.mkdir(store.job_dir(rec["id"]))
    with store.lock():
        idx = store.load_index_locked()
        events = store.commit_locked(
            idx, [(full, None, "state"), (bare, None, "state"), ({**full, "state": "starting"}, "queued", "state")]
        )
    with open(store.journal_path, "rb") as fh:
        assert fh.read() == b"".join(journal.encode(e) for e in events)
    other = tmp_path / "plain.json"
    for rec in ({**full, "state": "starting"}, bare):
        fs.write_json(str(other), {**status_defaults(), **rec}, sync_dir=False)
        with open(store.path(rec["id"], "status.json"), "rb") as fh:
            assert fh.read() == other.read_bytes()


def test_an_event_line_with_its_record_encoded_apart_is_the_plain_line():
    from hypothesis import given
    from hypothesis import strategies as st

    values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
        max_leaves=8,
    )
    keys = st.sampled_from(
        [
            "change",
            "commit",
            "event",
            "id",
            "name",
            "previous",
            "seq",
            "state",
            "stream",
            "time",
            "jo",
            "joba",
            "a",
            "z",
        ]
    )

    @given(st.dictionaries(keys, values, max_size=12), st.dictionaries(st.text(), values, max_size=4))
    def check(event, job):
        event = {**event, "job": job}
        encoded = json.dumps(job, separators=(",", ":"), sort_keys=True).encode()
        assert journal.encode_job_event(event, encoded) == journal.encode(event)

    check()


def test_the_journal_has_its_blocks_ahead_of_its_appends_and_the_size_of_its_data(tmp_path, monkeypatch):
    """fallocate(KEEP_SIZE): an append and its fsync write into blocks the file has
    (no extent churn, no discard per fsync on ext4); readers go by the size."""
    monkeypatch.setenv("QEX_JOURNAL_MAX_BYTES", str(1 << 20))
    path = str(tmp_path / "journal.jsonl")
    events = batch(1, 3)
    end = journal.append(path, events)
    probe = os.open(str(tmp_path / "probe"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.posix_fallocate(probe, 0, 1 << 20)
    except OSError:
        import pytest

        pytest.skip("this file system allocates no blocks ahead (no fallocate)")
    finally:
        os.close(probe)
    st = os.stat(path)
    assert st.st_blocks * 512 >= 1 << 20
    assert st.st_size == end == len(b"".join(journal.encode(e) for e in events))
    assert journal.read_committed(path, 0)[0] == events
