"""The job's own follower (qex.cli.stream.Pipes) on real FIFOs: what it copies, and that
a pause of the wait ends soon after the output stops (the job may have ended: its record
is final a moment after its last byte), not at the end of the pause."""

import os
import time

from qex.cli import stream
from qex.store import layout
from qex.supervisor import pipes


def test_a_pause_ends_soon_after_the_output_stops_and_every_byte_is_copied(tmp_path):
    ends = pipes.make(str(tmp_path), forward_stdin=False)
    writer = os.open(tmp_path / layout.STDOUT_PIPE, os.O_WRONLY | os.O_NONBLOCK)  # (the supervisor's end)
    out_path = tmp_path / "out"
    with open(out_path, "wb") as out, open(tmp_path / "err", "wb") as err:
        follower = stream.Pipes(ends, (out, err))
        os.write(writer, b"the last line of a job\n")
        t0 = time.monotonic()
        follower.idle(30.0)  # the wait's pause: 30 s, far more than the quick look takes
        took = time.monotonic() - t0
        follower.finish()
    os.close(writer)
    assert open(out_path, "rb").read() == b"the last line of a job\n"
    assert took < 10.0, took  # (the quick look: 20 ms of quiet within 0.5 s of the output)


def test_without_output_a_pause_lasts_what_the_wait_asked(tmp_path):
    ends = pipes.make(str(tmp_path), forward_stdin=False)
    with open(tmp_path / "out", "wb") as out, open(tmp_path / "err", "wb") as err:
        follower = stream.Pipes(ends, (out, err))
        t0 = time.monotonic()
        follower.idle(0.3)
        took = time.monotonic() - t0
        follower.finish()
    assert took >= 0.3
