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
