"""The window of a cut log kept as a ring, end to end: `qex logs` of a running job whose
window has wrapped many times prints head, marker and the newest output in order; the
final file and the record's counts are exact."""

import os
import re
import sys

LIMIT_64KB = '[logs]\nmax_bytes = "64KB"\n[defaults]\nmem = "20MB"\n'
LIVE = re.compile(rb"\n?\[qex\] ---- more of stdout is being left out here: it passed [^\n]*----\n")
WRITER = (
    "import os, sys, time\n"
    "out = sys.stdout.buffer\n"
    "for i in range(int(sys.argv[1])):\n"
    "    out.write(b'line %08d of the output of this job\\n' % i)\n"
    "out.flush()\n"
    "while not os.path.exists(sys.argv[2]):\n"
    "    time.sleep(0.01)\n"
)


def stream_of(n):
    return b"".join(b"line %08d of the output of this job\n" % i for i in range(n))


def test_logs_of_a_running_job_whose_ring_wrapped_reads_in_order_and_the_end_is_exact(q):
    q.write_config(LIMIT_64KB)
    n = 2 * 1024 * 1024 // 38  # 2 MB through a 48 KB window: about 40 laps
    job = q.submit("--", sys.executable, "-c", WRITER, str(n), q.gate("end"))
    whole = stream_of(n)
    last = b"line %08d of the output of this job\n" % (n - 1)
    q.wait_for(lambda: q.run("logs", job).stdout.encode().endswith(last), timeout=30, what="the last line in the log")
    shown = q.run("logs", job).stdout.encode()  # the job still runs: its window is a ring
    m = LIVE.search(shown)
    assert m, shown[16000:17000]
    head, tail = shown[: m.start()], shown[m.end() :]
    assert head == whole[:16384] and whole.endswith(tail) and len(tail) > 32 * 1024
    with open(os.path.join(q.state, "jobs", job, "stdout.log"), "rb") as fh:
        raw = fh.read()
    assert len(raw) <= 64 * 1024 and raw != shown  # (on disk, out of order until the end)
    open(q.gate("end"), "w").close()
    rec = q.wait_state(job, "completed", timeout=30)
    with open(os.path.join(q.state, "jobs", job, "stdout.log"), "rb") as fh:
        body = fh.read()
    end = body.index(b"----\n", 16384) + 5
    marker, tail = body[16384:end], body[end:]
    dropped = rec["logs_dropped"]
    assert body[:16384] == whole[:16384] and whole.endswith(tail) and len(body) <= 64 * 1024 + len(marker)
    assert dropped["stdout_bytes"] == len(whole) - 16384 - len(tail)
    assert dropped["stdout_lines"] == whole[16384 : len(whole) - len(tail)].count(b"\n")
    assert b"%d bytes (" % dropped["stdout_bytes"] in marker and q.run("logs", job).stdout.encode() == body
