"""The window of a cut log kept as a ring (qex.supervisor.logcut): overwritten in place
while the job writes, read in order by every reader meanwhile, unrolled once at the end;
the counts exact against a model of the whole output; earlier formats still read."""

import binascii
import os

from test_logs import MARKER, check_cut_file, lines, sink

from qex.supervisor import logread
from qex.supervisor.logcut import CutState, read_cut
from qex.supervisor.logread import Follower
from qex.supervisor.logs import Sink, lease

LIVE = b"[qex] ---- more of stdout is being left out here"


def model(data: bytes, s: Sink) -> bytes:
    """What a reader of the running job must get: the head, the live marker, then the newest
    bytes, the last of the whole output, in order."""
    body = Follower(s.path).read()
    i = body.index(LIVE)
    head, rest = body[: s.state.head], body[body.index(b"----\n", i) + 5 :]
    assert body[len(head) : i] in (b"", b"\n") and data.startswith(head)
    # The window is full: all of the ring but one byte, less what the writer may be overwriting.
    assert data.endswith(rest) and s.state.cap - 1 - lease(s.state.cap) <= len(rest) <= s.state.cap - 1
    return rest


def test_a_ring_that_wrapped_many_times_reads_in_order_while_running_and_after(tmp_path):
    s = sink(tmp_path, 4096)
    data = lines(5000)  # 185 KB through a 4 KB log: about 60 laps
    for i in range(0, len(data), 777):
        s.write(data[i : i + 777])
        assert os.path.getsize(s.path) <= 4096
        if s.state and s.state.end - s.state.origin > 3 * s.state.cap:
            model(data[: i + 777], s)  # qex logs of the running job: in order, whatever the lap
    assert s.state.end == len(data) and s.state.cap
    s.close()
    dropped, dropped_lines = check_cut_file(s.path, data, 4096)
    assert (s.dropped_bytes, s.dropped_lines) == (dropped, dropped_lines)
    cut = read_cut(s.path)
    assert cut.final and cut.cap == 0 and (cut.dropped_bytes, cut.dropped_lines) == (dropped, dropped_lines)
    assert Follower(s.path).read() == open(s.path, "rb").read()


def test_a_chunk_larger_than_the_ring_keeps_its_own_end(tmp_path):
    s = sink(tmp_path, 4096)
    data = lines(100) + os.urandom(50000) + lines(10)
    s.write(data[:4000])
    s.write(data[4000:])  # one write laps the ring several times
    s.close()
    check_cut_file(s.path, data, 4096)


def rebuilt(data: bytes, at: int, chunk: bytes, gaps: list) -> bool:
    """Whether ``chunk``, read from position ``at``, is the output there once the gaps the
    reader counted in it are skipped."""
    cur = at
    for p, n in sorted(gaps):
        if cur <= p <= cur + len(chunk):
            if chunk[: p - cur] != data[cur:p]:
                return False
            chunk, cur = chunk[p - cur :], p + n
    return chunk == data[cur : cur + len(chunk)]


def test_a_follower_reads_every_byte_while_the_ring_wraps_and_a_slow_one_says_what_it_missed(tmp_path):
    s = sink(tmp_path, 8192)
    keeping, slow = Follower(s.path), Follower(s.path, [])
    data, got, late = lines(4000, width=53), [], []
    for n, i in enumerate(range(0, len(data), 1000)):
        s.write(data[i : i + 1000])
        got.append(keeping.read())
        if n % 20 == 0:
            late.append((slow.pos, slow.read()))
    s.close()
    got.append(keeping.read())
    late.append((slow.pos, slow.read()))
    assert b"".join(got) == data
    assert slow.gaps and sum(n for _, n in slow.gaps) + sum(len(b) for _, b in late) == len(data)
    assert all(rebuilt(data, at, chunk, slow.gaps) for at, chunk in late)


def test_what_the_writer_overwrote_during_a_read_is_a_gap_not_data(tmp_path, monkeypatch):
    """The writer laps part of the ring between the reader's look at the record and its
    read of the data: the reader keeps only what the record read after says is intact."""
    s = sink(tmp_path, 4096)
    data = lines(1000)
    s.write(data[:20000])
    f = Follower(s.path, [])
    real, calls = logread.read_cut, []

    def racing(path):
        calls.append(path)
        got = real(path)
        if len(calls) == 1:  # the record is read, the data not yet
            s.write(data[20000:21000])
        return got

    monkeypatch.setattr(logread, "read_cut", racing)
    out = f.read()
    ((at, n),) = f.gaps
    tail = out[at:]
    assert at == s.state.head and out[:at] == data[:at] and tail
    assert data[at + n : at + n + len(tail)] == tail  # (the overwritten slots hold bytes 20000 on)
    assert at + n >= 21000 - s.state.cap
    monkeypatch.setattr(logread, "read_cut", real)
    s.write(data[21000:])
    s.close()
    assert data.endswith(f.read())


def test_a_retry_after_a_supervisor_died_mid_ring_unrolls_what_it_left(tmp_path):
    first, second = lines(3000), lines(200, width=45)
    s = sink(tmp_path, 4096)
    s.write(first)
    os.close(s.fd)  # the supervisor died: no unroll, the record says a ring
    assert read_cut(s.path).cap and not read_cut(s.path).final
    again = sink(tmp_path, 4096)
    assert read_cut(s.path).cap == 0  # unrolled in order before going on
    again.write(second)
    again.close()
    dropped, dropped_lines = check_cut_file(s.path, first + second, 4096)
    assert (again.dropped_bytes, again.dropped_lines) == (dropped, dropped_lines)


def test_a_ring_handed_over_across_an_exec_goes_on(tmp_path):
    s = sink(tmp_path, 4096)
    data = lines(3000)
    s.write(data[:50000])
    t = Sink.resume(s.handover())
    t.write(data[50000:])
    t.close()
    dropped, dropped_lines = check_cut_file(s.path, data, 4096)
    assert (t.dropped_bytes, t.dropped_lines) == (dropped, dropped_lines)


def format1(tmp_path, data: bytes, limit: int) -> tuple[str, bytes]:
    """A log as a qex before the ring left it mid-job: head, live marker, the window in order
    (half the limit), and a qexcut1 record with the counts of what slid away."""
    head, marker = data[: limit // 4], b"[qex] ---- more of stdout is being left out here: old ----\n"
    marker = (b"" if head.endswith(b"\n") else b"\n") + marker
    window = data[-(limit // 2) :]
    gone = data[len(head) : len(data) - len(window)]
    path = str(tmp_path / "stdout.log")
    with open(path, "wb") as fh:
        fh.write(head + marker + window)
    fields = b"qexcut1 4 0 0 %d %d %d %d %d 0 %d" % (
        len(head),
        len(marker),
        len(data) - len(window),
        len(gone),
        gone.count(b"\n"),
        head.endswith(b"\n"),
    )
    with open(path + ".cut", "wb") as fh:
        fh.write((fields + b" %08x" % binascii.crc32(fields)).ljust(255) + b"\n")
    return path, head + marker + window


def test_a_format_1_log_reads_and_its_job_goes_on_after_an_upgrade(tmp_path):
    data, more = lines(500), lines(3000)[500:]
    path, body = format1(tmp_path, data, 4096)
    assert Follower(path).read() == body  # qex logs of a job an older qex supervises
    f = Follower(path, [])
    f.pos = len(data) - 100
    assert f.read() == data[-100:] and not f.gaps
    old = Sink(path, 4096, label="stdout", setting="[logs] max_bytes = 4KB")  # (its handover, as the watcher gets it)
    handed = list(old.handover())
    os.close(old.fd)
    handed[11] = open(path + ".cut", "rb").read()  # the state, as the older qex encoded it
    handed[12] = True
    t = Sink.resume(tuple(handed[:18]))
    t.fd = os.open(path, os.O_RDWR)
    t.write(more)
    t.close()
    dropped, dropped_lines = check_cut_file(path, data + more, 4096)
    assert (t.dropped_bytes, t.dropped_lines) == (dropped, dropped_lines)


def test_a_format_1_log_handed_to_a_new_finisher_is_closed_with_its_counts(tmp_path):
    data = lines(500)
    path, _ = format1(tmp_path, data, 4096)
    t = Sink(path, 4096, label="stdout", setting="[logs] max_bytes = 4KB")
    assert t.state.cap == 0 and t.state.end == -1
    t.changed = True  # (the older qex slid the window in this attempt)
    t.close()
    body = open(path, "rb").read()
    m = MARKER.search(body)
    head, tail = body[: m.start()], body[m.end() :]
    assert head == data[:1024] and data.endswith(tail) and len(tail) == 2048
    assert int(m.group(1)) == len(data) - 1024 - 2048 == t.dropped_bytes
    assert int(m.group(2)) == data[1024:-2048].count(b"\n") == t.dropped_lines


def test_the_record_round_trips_and_a_torn_one_is_refused():
    s = CutState(
        gen=3,
        head=1024,
        marker=90,
        origin=1114,
        cap=2982,
        end=10**12,
        reserve=10**12 + 700,
        dropped_bytes=91,
        dropped_lines=2,
        lines=12345,
        mid_line=True,
        head_nl=False,
    )
    back = CutState.decode(s.encode())
    assert all(getattr(back, n) == getattr(s, n) for n in CutState.FIELDS)
    torn = s.encode().replace(b" 3 ", b" 4 ", 1)
    assert CutState.decode(torn) is None and CutState.decode(b"") is None


def test_a_retry_without_a_limit_after_a_cut_attempt_keeps_all_it_writes(tmp_path):
    first, second = lines(3000), lines(500, width=45)
    s = sink(tmp_path, 4096)
    s.write(first)
    s.close()
    again = sink(tmp_path, None)  # ([logs] max_bytes = 0 for the retry)
    f = Follower(again.path)
    again.write(second[:7000])
    assert f.read().endswith(second[:7000])  # (read to the end of the file, as it grows)
    again.write(second[7000:])
    again.close()
    body = open(s.path, "rb").read()
    assert body.endswith(first[-2000:] + second) and f.read() == second[7000:]
    assert (again.dropped_bytes, again.dropped_lines) == (s.dropped_bytes, s.dropped_lines)
