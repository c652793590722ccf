"""The events reader's fresh looks (``Reader.poll(fresh=True)``), as ``qex events`` makes them
every 0.5 s where inotify said nothing (NFS: another client's writes): the journal is
opened again, each event comes once and in order, across a rotation too."""

import json
import os

from qex.store import layout
from qex.store.events import Reader


def line(seq: int, stream: str = "s1") -> bytes:
    job = {"id": f"j{seq}", "name": "x", "state": "queued"}
    return (
        json.dumps(
            {"event": "job", "id": f"j{seq}", "job": job, "seq": seq, "stream": stream, "time": 1.0},
            sort_keys=True,
            separators=(",", ":"),
        )
        + "\n"
    ).encode()


def append(path: str, *seqs: int) -> None:
    with open(path, "ab") as fh:
        for s in seqs:
            fh.write(line(s))


def seqs(events: list[dict]) -> list[int]:
    return [e["seq"] for e in events if e["event"] == "job"]


def test_fresh_looks_give_every_event_once_across_a_rotation(tmp_path):
    root = str(tmp_path)
    cur, rot = os.path.join(root, layout.JOURNAL), os.path.join(root, layout.JOURNAL_ROTATED)
    append(cur, 1, 2)
    reader = Reader(root, "start")
    assert seqs(reader.poll(fresh=True)) == [1, 2]
    append(cur, 3)
    assert seqs(reader.poll(fresh=True)) == [3]
    assert seqs(reader.poll(fresh=True)) == []
    append(cur, 4)  # the last appends before the rotation, then the new file
    os.replace(cur, rot)
    append(cur, 5, 6)
    assert seqs(reader.poll(fresh=True)) == [4, 5, 6]
    append(cur, 7)
    assert seqs(reader.poll(fresh=True)) + seqs(reader.poll()) == [7]
    reader.close()


def test_a_stale_journal_at_a_fresh_look_is_opened_again_and_leaks_nothing(tmp_path, monkeypatch):
    """NFS: another machine's rotation can leave the reader's fresh open stale (ESTALE at its
    fstat; injected here, as tests/store/test_fs_stale.py does). The look goes on from the
    current file: each event once, no descriptor left open, no error."""
    import errno

    from qex.store import events

    root = str(tmp_path)
    cur = os.path.join(root, layout.JOURNAL)
    append(cur, 1, 2)
    reader = Reader(root, "start")
    assert seqs(reader.poll(fresh=True)) == [1, 2]
    append(cur, 3)
    real_fstat, stale = os.fstat, [2]

    def fstat(fd):
        if stale[0]:
            stale[0] -= 1
            raise OSError(errno.ESTALE, "Stale file handle")
        return real_fstat(fd)

    monkeypatch.setattr(events.os, "fstat", fstat)
    before = len(os.listdir("/proc/self/fd"))
    got = seqs(reader.poll(fresh=True))
    assert stale[0] == 0
    append(cur, 4)
    got += seqs(reader.poll(fresh=True))
    assert got == [3, 4]
    assert len(os.listdir("/proc/self/fd")) <= before
    reader.close()
