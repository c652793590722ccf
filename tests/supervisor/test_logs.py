"""The output limit on real files: what stays, what the marker says, what a follower reads."""

import os
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from qex.supervisor.logread import Follower
from qex.supervisor.logs import MIN_LIMIT, Sink, read_cut

MARKER = re.compile(
    rb"\n?\[qex\] ---- (\d+) bytes \([^)]*\) and (\d+) line\(s\) of stdout are not in this file: "
    rb"they passed \[logs\] max_bytes = 4KB(; the text below starts in the middle of a line)? ----\n"
)
WENT_BY = re.compile(
    rb"\n?\[qex\] ---- (\d+) bytes went by here while you followed: they passed \[logs\] max_bytes ----\n"
)


def sink(tmp_path, limit, name="stdout.log"):
    return Sink(str(tmp_path / name), limit, label="stdout", setting="[logs] max_bytes = 4KB")


def lines(n, width=37):
    return b"".join(b"line %06d " % i + b"x" * (width - 12) + b"\n" for i in range(n))


def check_cut_file(path, data, limit):
    """The final file is head + one counted marker + tail; the counts are exact."""
    body = open(path, "rb").read()
    m = MARKER.match(body, limit // 4)
    assert m, body[:300]
    head, tail = body[: m.start()], body[m.end() :]
    assert m.group(0).startswith(b"\n") == (not head.endswith(b"\n"))
    dropped, dropped_lines = int(m.group(1)), int(m.group(2))
    assert data.startswith(head) and len(head) == limit // 4
    assert data.endswith(tail) and len(tail) > 0
    assert len(head) + dropped + len(tail) == len(data)
    assert data[len(head) : len(data) - len(tail)].count(b"\n") == dropped_lines
    mid = data[len(data) - len(tail) - 1 : len(data) - len(tail)] != b"\n"
    assert bool(m.group(3)) == mid
    assert len(body) <= limit + len(m.group(0))
    return dropped, dropped_lines


def test_under_the_limit_every_byte_is_kept(tmp_path):
    s = sink(tmp_path, 4096)
    data = lines(100)[:4096]
    for i in range(0, len(data), 333):
        s.write(data[i : i + 333])
    s.close()
    assert open(tmp_path / "stdout.log", "rb").read() == data
    assert s.dropped_bytes == 0 and not os.path.exists(tmp_path / "stdout.log.cut")


def test_over_the_limit_the_head_the_tail_and_exact_counts(tmp_path):
    s = sink(tmp_path, 4096)
    data = lines(3000)
    for i in range(0, len(data), 1000):
        s.write(data[i : i + 1000])
        assert os.path.getsize(tmp_path / "stdout.log") <= 4096  # while the job writes, too
    s.close()
    dropped, dropped_lines = check_cut_file(tmp_path / "stdout.log", data, 4096)
    assert (s.dropped_bytes, s.dropped_lines) == (dropped, dropped_lines)
    body = open(tmp_path / "stdout.log", "rb").read()
    assert body.startswith(b"line 000000 ") and body.endswith(b"line 002999 " + b"x" * 25 + b"\n")


def test_a_single_enormous_line_keeps_its_end_and_says_the_tail_starts_mid_line(tmp_path):
    s = sink(tmp_path, 4096)
    data = b"a" * 100000 + b"THE END\n"
    for i in range(0, len(data), 65536):
        s.write(data[i : i + 65536])
    s.close()
    body = open(tmp_path / "stdout.log", "rb").read()
    assert body.endswith(b"aaaTHE END\n")
    assert b"the text below starts in the middle of a line" in body
    assert body.index(b"\n[qex]") == 1024  # the marker starts on its own line after the head
    check_cut_file(tmp_path / "stdout.log", data, 4096)


def test_no_limit_keeps_everything(tmp_path):
    s = sink(tmp_path, None)
    data = lines(5000)
    s.write(data)
    s.close()
    assert open(tmp_path / "stdout.log", "rb").read() == data


def test_a_tiny_limit_is_raised_to_the_smallest_that_fits(tmp_path):
    s = sink(tmp_path, 10)
    assert s.limit == MIN_LIMIT
    s.write(lines(500))
    s.close()
    assert os.path.getsize(tmp_path / "stdout.log") < MIN_LIMIT + 200


def test_a_retry_goes_on_from_the_cut_of_the_earlier_attempt(tmp_path):
    first, second = lines(400), lines(300, width=41)
    s = sink(tmp_path, 4096)
    s.write(first)
    s.close()
    s = sink(tmp_path, 4096)
    s.write(second)
    s.close()
    dropped, _ = check_cut_file(tmp_path / "stdout.log", first + second, 4096)
    assert s.dropped_bytes == dropped


@settings(max_examples=60, deadline=None)
@given(
    limit=st.integers(MIN_LIMIT, 20000),
    sizes=st.lists(st.integers(1, 9000), min_size=1, max_size=40),
    newline_every=st.integers(1, 300),
)
def test_any_write_pattern_keeps_head_tail_and_exact_counts(tmp_path_factory, limit, sizes, newline_every):
    tmp = tmp_path_factory.mktemp("sink")
    data = bytes((10 if i % newline_every == newline_every - 1 else 97 + i % 26) for i in range(sum(sizes)))
    s = Sink(str(tmp / "stdout.log"), limit, label="stdout", setting="[logs] max_bytes = 4KB")
    at = 0
    for n in sizes:
        s.write(data[at : at + n])
        at += n
    s.close()
    body = open(tmp / "stdout.log", "rb").read()
    if len(data) <= limit:
        assert body == data and s.dropped_bytes == 0
    else:
        limit_seen = max(limit, MIN_LIMIT)
        m = MARKER.match(body, limit_seen // 4)
        assert m
        head, tail = body[: m.start()], body[m.end() :]
        assert len(head) == limit_seen // 4 and data.startswith(head) and data.endswith(tail)
        assert len(head) + s.dropped_bytes + len(tail) == len(data)
        assert data[len(head) : len(data) - len(tail)].count(b"\n") == s.dropped_lines


def test_a_follower_that_keeps_up_reads_every_byte_across_the_cuts(tmp_path):
    s = sink(tmp_path, 4096)
    f = Follower(str(tmp_path / "stdout.log"))
    data, got = lines(2000), []
    for i in range(0, len(data), 200):
        s.write(data[i : i + 200])
        got.append(f.read())
    s.close()
    got.append(f.read())
    assert b"".join(got) == data


def test_a_slow_follower_says_how_much_went_by_and_stays_in_order(tmp_path):
    s = sink(tmp_path, 4096)
    f = Follower(str(tmp_path / "stdout.log"))
    data, got = lines(3000), []
    for i in range(0, len(data), 1500):
        s.write(data[i : i + 1500])
        if i % 15000 == 0:
            got.append(f.read())
    s.close()
    got.append(f.read())
    out = b"".join(got)
    # Rebuild the output: each "went by" note stands for exactly that many bytes.
    pos = 0
    pieces = re.split(rb"(\n?\[qex\] ---- [^\n]*----\n)", out)
    for piece in pieces:
        n = WENT_BY.fullmatch(piece) or MARKER.fullmatch(piece)
        if n:
            pos += int(n.group(1))
            continue
        assert data[pos : pos + len(piece)] == piece
        pos += len(piece)
    assert pos == len(data)
    assert WENT_BY.search(out) or MARKER.search(out)


def test_a_follower_that_starts_after_the_end_reads_head_marker_tail(tmp_path):
    s = sink(tmp_path, 4096)
    data = lines(3000)
    s.write(data)
    s.close()
    assert Follower(str(tmp_path / "stdout.log")).read() == open(tmp_path / "stdout.log", "rb").read()
    assert read_cut(str(tmp_path / "stdout.log")).final
