"""A followed job's sink moves its bytes in the kernel (``Sink.take``: tee(2) into the
follower's FIFO, splice into the log): real pipes and files, every byte in order in
both, the limit and its counts exact, a full FIFO taking nothing."""

import fcntl
import os

import pytest
from test_logs import check_cut_file, lines, sink

from qex.linux import tee as tee_module
from qex.supervisor.logcut import newlines as _newlines

F_SETPIPE_SZ = 1031


def pipes(size=1 << 20):
    """(job's read end, job's write end, FIFO's read end, FIFO's write end), non-blocking."""
    job_r, job_w = os.pipe2(os.O_NONBLOCK)
    fifo_r, fifo_w = os.pipe2(os.O_NONBLOCK)
    for fd in (job_r, fifo_r):
        fcntl.fcntl(fd, F_SETPIPE_SZ, size)
    return job_r, job_w, fifo_r, fifo_w


def drain(fd):
    out = b""
    while True:
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk


def test_take_gives_every_byte_to_the_fifo_and_the_log_across_the_cuts(tmp_path):
    job_r, job_w, fifo_r, fifo_w = pipes()
    s = sink(tmp_path, 4096)
    s.attach(fifo_w, str(tmp_path / "fifo"))
    data, streamed, buffer = lines(3000), b"", bytearray(1 << 20)
    for i in range(0, len(data), 7001):
        os.write(job_w, data[i : i + 7001])
        assert s.take(job_r, buffer) == len(data[i : i + 7001])
        assert not s.pending and not s.held
        assert os.path.getsize(tmp_path / "stdout.log") <= 4096  # the cap, while the job writes
        streamed += drain(fifo_r)
    os.close(job_w)
    assert s.take(job_r, buffer) == 0  # the pipe's end
    s.close()
    assert streamed == data
    dropped, dropped_lines = check_cut_file(tmp_path / "stdout.log", data, 4096)
    assert s.bytes == len(data) and s.dropped_bytes == dropped and s.dropped_lines == dropped_lines


def test_a_full_fifo_takes_nothing_until_it_has_room(tmp_path):
    job_r, job_w, fifo_r, fifo_w = pipes(size=4096)
    s = sink(tmp_path, None)
    s.attach(fifo_w, str(tmp_path / "fifo"))
    os.write(fifo_w, b"f" * 4096)  # the follower has not read anything yet
    os.write(job_w, b"job output\n")
    buffer = bytearray(1 << 16)
    assert s.take(job_r, buffer) is None and s.held
    assert os.path.getsize(tmp_path / "stdout.log") == 0  # nothing taken: the job's pipe still holds it
    assert drain(fifo_r) == b"f" * 4096
    assert s.take(job_r, buffer) == 11 and not s.held
    assert drain(fifo_r) == b"job output\n"
    with pytest.raises(BlockingIOError):  # empty, the job still there
        s.take(job_r, buffer)
    s.close()
    assert open(tmp_path / "stdout.log", "rb").read() == b"job output\n"


def test_a_follower_let_go_of_while_held_finds_its_fifo_gone(tmp_path):
    """A stopped job's last output waits in its pipe for a follower that does not read:
    letting it go (qex.supervisor.watch._let_go) removes the FIFO, which is how the
    follower learns its copy is short (qex.supervisor.pipes.Ends.cut)."""
    path = str(tmp_path / "stdout.pipe")
    os.mkfifo(path, 0o600)
    fifo_r = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    fifo_w = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    fcntl.fcntl(fifo_r, F_SETPIPE_SZ, 4096)
    job_r, job_w = os.pipe2(os.O_NONBLOCK)
    s = sink(tmp_path, None)
    s.attach(fifo_w, path)
    os.write(fifo_w, b"f" * 4096)
    os.write(job_w, b"last words\n")
    assert s.take(job_r, bytearray(1 << 16)) is None
    s.drop_tee(cut=True)
    assert not os.path.exists(path) and s.tee == -1
    assert s.take(job_r, bytearray(1 << 16)) == 11  # the log alone, from now on
    s.close()
    assert open(tmp_path / "stdout.log", "rb").read() == b"last words\n"
    os.close(fifo_r)


def test_a_stopped_log_still_moves_the_pipe_on(tmp_path):
    job_r, job_w, fifo_r, fifo_w = pipes()
    s = sink(tmp_path, None)
    s.attach(fifo_w, str(tmp_path / "fifo"))
    s.failed = "the disk is nearly full"
    buffer = bytearray(1 << 16)
    for part in (b"one\n", b"two\n"):
        os.write(job_w, part)
        assert s.take(job_r, buffer) == 4
    assert drain(fifo_r) == b"one\ntwo\n"  # each byte once: the pipe is at the next byte after each take
    s.close()
    assert open(tmp_path / "stdout.log", "rb").read() == b""


def test_a_log_that_fails_mid_chunk_drops_the_rest_of_that_chunk_only(tmp_path, monkeypatch):
    """The error comes after part of a chunk went into the file: the rest of that
    chunk is taken off the pipe, never a byte of the next (the FIFO has the next
    one to come, by the next tee)."""
    job_r, job_w, fifo_r, fifo_w = pipes()
    s = sink(tmp_path, 4096)
    s.attach(fifo_w, str(tmp_path / "fifo"))

    def refuse():
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(s, "_cut", refuse)
    first, second = lines(300)[:10000], lines(301)[-5000:]
    os.write(job_w, first + second)
    assert s.take(job_r, bytearray(len(first))) == len(first)
    assert s.failed == "No space left on device"
    assert s.take(job_r, bytearray(1 << 16)) == len(second)
    assert drain(fifo_r) == first + second
    assert open(tmp_path / "stdout.log", "rb").read() == first[:4096]  # up to the cap, then stopped


def test_a_gone_follower_leaves_the_log_alone_with_every_byte(tmp_path):
    job_r, job_w, fifo_r, fifo_w = pipes()
    s = sink(tmp_path, None)
    s.attach(fifo_w, str(tmp_path / "fifo"))
    os.close(fifo_r)
    os.write(job_w, b"still logged\n")
    assert s.take(job_r, bytearray(1 << 16)) == 13
    assert s.tee == -1
    s.close()
    assert open(tmp_path / "stdout.log", "rb").read() == b"still logged\n"


def test_without_tee_the_bytes_are_copied_the_same(tmp_path, monkeypatch):
    monkeypatch.setattr(tee_module, "_TEE", [False])
    job_r, job_w, fifo_r, fifo_w = pipes()
    s = sink(tmp_path, 4096)
    s.attach(fifo_w, str(tmp_path / "fifo"))
    data, streamed, buffer = lines(500), b"", bytearray(1 << 20)
    for i in range(0, len(data), 5000):
        os.write(job_w, data[i : i + 5000])
        assert s.take(job_r, buffer) == len(data[i : i + 5000])
        streamed += drain(fifo_r)
    s.close()
    assert streamed == data
    check_cut_file(tmp_path / "stdout.log", data, 4096)


@pytest.mark.parametrize(
    "chunk",
    [
        b"",
        b"\n",
        b"\n" * (1 << 20),
        b"x" * (1 << 20),
        bytes(range(256)) * 4096,
        b"x" * 10000 + b"\n" * 80000 + b"x" * 110000,  # sparse where it samples, dense between
        b"x" * 70000 + b"\n",
        (b"a line of text\n" * 70000),
        (b"y" * 99 + b"\n") * 10000,
        os.urandom(1 << 20),
    ],
)
def test_newlines_are_counted_exactly_whatever_their_density(chunk):
    assert _newlines(chunk) == _newlines(memoryview(chunk)[:]) == chunk.count(b"\n")
