"""The pieces of issue 24 that need no queue: list's fields, the live line's words
and estimate, qex top's frame, and where colour and a live line are allowed."""

import io
import time

import pytest

from qex.base.errors import UsageError
from qex.cli import listing, progress, topframe, tty
from qex.store.records import Row, Status, load

NOW = 1_800_000_000.0


def rec(state, cls=Row, **kw):
    """A row (a history line's or an index entry's fields); ``cls=Status``: a record."""
    base = {
        "id": "0123456789abcdef",
        "name": "job",
        "state": state,
        "submitted_at": NOW - 100,
        "claims": {"cpu": 1, "mem": 1 << 30},
    }
    if cls is Status:
        base.update(seq=1, command=["job"], cwd="/", owner="me", uid=0)
    return load(cls, {**base, **kw})


def test_elapsed_counts_what_the_state_says():
    assert listing.elapsed(rec("queued"), NOW) == 100
    assert listing.elapsed(rec("running", started_at=NOW - 30), NOW) == 30
    assert listing.elapsed(rec("completed", started_at=NOW - 30, ended_at=NOW - 10), NOW) == 20
    assert listing.elapsed(rec("cancelled", ended_at=NOW - 40), NOW) == 60  # never started: its time in the queue
    assert listing.elapsed(rec("running"), NOW) is None


def test_a_time_shows_as_a_clock_or_a_date_when_long_ago_and_iso_with_its_offset():
    assert listing.clock_text(None, NOW) == "-"
    assert listing.clock_text(NOW - 5, NOW) == time.strftime("%H:%M:%S", time.localtime(NOW - 5))
    assert listing.clock_text(NOW - 400 * 86400, NOW).count("-") == 2  # another year: the date
    iso = listing.iso_text(NOW)
    assert iso[10] == "T" and iso[-3] == ":" and len(iso) == 25, iso
    assert listing.iso_text(None) is None


def test_format_fields_are_checked_and_rows_line_up_under_their_header():
    assert listing.parse_format("id, state,elapsed") == ("id", "state", "elapsed")
    with pytest.raises(UsageError, match="'size' is no field"):
        listing.parse_format("id,size")
    fields = ("id", "state", "elapsed", "peak", "reason")
    head = listing.header(fields)
    row = listing.row(
        rec("failed", started_at=NOW - 30, ended_at=NOW, exit_code=3, usage={"max_rss": 3 << 20}), NOW, fields
    )
    assert row.index("failed") == head.index("STATE") and row.index("exit 3") == head.index("REASON")
    assert row[: head.index("PEAK") + 4].endswith("3MB") and "30s" in row


def test_json_rows_carry_iso_times_beside_the_epoch():
    r = rec("completed", Status, started_at=NOW - 30, ended_at=NOW, usage={"max_rss": 5, "cpu_secs": 1.5})
    full = listing.json_row(r, NOW, None)
    assert full["ended_at"] == NOW and full["ended"] == listing.iso_text(NOW) and full["elapsed"] == 30
    picked = listing.json_row(r, NOW, ("id", "exit", "cpu", "peak", "started"))
    assert picked == {
        "id": r.id,
        "exit": 0,
        "cpu": 1.5,
        "peak": 5,
        "started": listing.iso_text(NOW - 30),
        "started_at": NOW - 30,
    }


class FakeTTY(io.StringIO):
    def isatty(self):
        return True

    def fileno(self):
        raise OSError("no size")


@pytest.mark.parametrize(
    "env,colour,live",
    [
        ({"TERM": "xterm"}, True, True),
        ({"TERM": "xterm", "NO_COLOR": "1"}, False, True),
        ({"TERM": "xterm", "NO_COLOR": ""}, True, True),
        ({"TERM": "dumb"}, False, False),
        ({}, False, False),
    ],
)
def test_colour_and_a_live_line_need_a_capable_terminal_and_no_color_turns_colour_off(monkeypatch, env, colour, live):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert tty.colour_on(FakeTTY()) is colour and tty.can_move(FakeTTY()) is live
    assert not tty.colour_on(io.StringIO()) and not tty.can_move(io.StringIO())  # a pipe, a file
    assert tty.paint("x", "bad", False) == "x" and tty.paint("x", "bad", True) == "\x1b[31mx\x1b[0m"


def _record(fields: dict):
    """A job's record as ``await_final`` hands it to the live line."""
    from qex.store.records import Status, load

    base = {"seq": 1, "command": ["true"], "cwd": "/", "owner": "me", "uid": 0}
    return load(Status, {**base, **fields})


def test_the_live_line_counts_and_estimates_from_the_jobs_that_ended(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    stream = FakeTTY()
    p = progress.Progress(4, stream=stream)
    try:
        seen = p.watch(None)
        seen(_record({"id": "a", "state": "completed", "started_at": NOW - 100, "ended_at": NOW - 40}))  # ran 60 s
        seen(_record({"id": "b", "state": "running", "started_at": NOW - 20}))
        seen(_record({"id": "c", "state": "failed", "started_at": NOW - 50, "ended_at": NOW - 30}))  # ran 20 s
        seen(_record({"id": "d", "state": "queued"}))
        assert p.estimate(NOW) == 40 + (40 - 20)  # one waiting (the mean, 40 s), one running lacks 20 s
        line = p.line(NOW)
        assert line.startswith("qex: 2/4 ended (\x1b[31m1 did not succeed\x1b[0m), 1 running, 1 waiting; "), line
        p.tick()
        assert (
            stream.getvalue().startswith("\r\x1b[Kqex: 2/4 ended") and ", about " in stream.getvalue()
        )  # (its end may be cut to the width)
        import sys

        sys.stderr.write("a note\n")  # anything else on stderr erases the line first
        assert stream.getvalue().endswith("\r\x1b[K")
    finally:
        p.close()
    assert not isinstance(__import__("sys").stderr, progress._Above)


def test_no_live_line_off_a_terminal():
    stream = io.StringIO()
    p = progress.Progress(3, stream=stream)
    assert p.watch(None) is None
    p.tick()
    p.close()
    assert stream.getvalue() == ""


def frame_data(rows, ended=(), pools=(), peers=()):
    return {
        "now": NOW,
        "load": (0.5, 0.25, 0.0),
        "cores": 8,
        "mem_total": 32 << 30,
        "mem_available": 20 << 30,
        "budget": (6000, 24 << 30),
        "held": (2000, 4 << 30),
        "peers": list(peers),
        "pools": list(pools),
        "health": "running 1",
        "since": NOW - 60,
        "state_dir": "/s",
        "queued": 1,
        "running": 1,
        "rows": list(rows),
        "ended": list(ended),
    }


def test_a_frame_has_the_bars_the_pools_and_the_rows_in_order():
    gpu = {
        "name": "gpu",
        "kind": "indexed",
        "env": "CUDA_VISIBLE_DEVICES",
        "holders": [{"id": "aaaaaaaa1", "name": "train", "count": 1, "size": None, "devices": [1]}],
        "devices": [{"index": i, "capacity": 24 << 30, "free": 0 if i == 1 else 24 << 30} for i in range(4)],
    }
    running = rec(
        "running",
        id="aaaaaaaa1",
        name="train",
        started_at=NOW - 5,
        assigned=[{"pool": "gpu", "devices": [1], "size": None}],
    )
    queued = rec("queued", id="bbbbbbbb2", name="next", blocked_reason="waits for 1 device")
    done = rec("completed", id="cccccccc3", name="old", started_at=NOW - 50, ended_at=NOW - 10)
    text = topframe.once(frame_data([running, queued], [done], [gpu], [("bob", 1000, 1 << 30)]), None)
    lines = text.splitlines()
    assert lines[1].startswith("cores   [##########=====...............]  3 of 6 held: 2 this queue, 1 others"), text
    gpu1 = next(line for line in lines if line.startswith("gpu 1"))
    assert "[##############################]" in gpu1 and "aaaaaaaa train" in gpu1, text
    assert any(line.startswith("others  bob 1 cores") for line in lines), text
    ids = [line[:8] for line in lines if line[:8] in ("aaaaaaaa", "bbbbbbbb", "cccccccc")]
    assert ids == ["aaaaaaaa", "bbbbbbbb", "cccccccc"], text
    assert "gpu 1" in next(line for line in lines if line.startswith("aaaaaaaa")), text
    assert "\x1b" not in text


def test_a_short_screen_keeps_the_selected_row_in_view_and_the_filter_matches():
    rows = [rec("queued", id=f"{i:08d}xx", name=f"job-{i}") for i in range(100)]
    frame = topframe.build(frame_data(rows), 100, 20, selected="00000090xx", status=[("keys", None)])
    assert "00000090xx" in frame.ids and len(frame.lines) == 20 and frame.lines[-1] == [("keys", None)]
    assert frame.ids[-1] == "00000090xx"
    wanted = topframe.matcher("JOB-7")
    assert [r.id for r in topframe.rows_of(frame_data(rows), wanted)] == ["00000007xx"] + [
        f"{i:08d}xx" for i in range(70, 80)
    ]
    assert topframe.matcher("  ") is None


def test_no_command_but_qex_top_loads_curses(q):
    """Each command in its own interpreter: curses is in sys.modules after qex top only
    (its --once frame needs none either)."""
    import subprocess
    import sys

    q.write_config("[budget]\ncpu = 1\n")
    code = (
        "import sys; from qex.cli import run; run(sys.argv[1:]); "
        "sys.stderr.write('\\nCURSES=%s\\n' % ('curses' in sys.modules))"
    )
    for argv in (["list"], ["info"], ["top", "--once"], ["status", "nothing"], ["wait", "nothing"], ["version"]):
        proc = subprocess.run(
            [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=q.env, cwd=q.root, timeout=60
        )
        assert proc.stderr.strip().splitlines()[-1] == "CURSES=False", (argv, proc.stderr)
