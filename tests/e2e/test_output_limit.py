"""[logs] max_bytes end to end: real jobs, real supervisors, the files a user reads."""

import os
import re
import signal
import sys
import threading
import time

import pytest

LIMIT_64KB = '[logs]\nmax_bytes = "64KB"\n[defaults]\nmem = "10MB"\n'
MARKER = re.compile(
    rb"\n?\[qex\] ---- (\d+) bytes \([^)]*\) and (\d+) line\(s\) of stdout are not in this file: "
    rb"they passed \[logs\] max_bytes = 64KB \(raise it in [^)]*; 0 keeps everything\)"
    rb"(; the text below starts in the middle of a line)? ----\n"
)

WRITER = (
    "import sys\n"
    "n = int(sys.argv[1])\n"
    "out = sys.stdout.buffer\n"
    "for i in range(n):\n"
    "    out.write(b'line %08d of the output of this job\\n' % i)\n"
)
LINE = 38  # bytes per line written by WRITER


def stream_of(n):
    return b"".join(b"line %08d of the output of this job\n" % i for i in range(n))


def log(q, job, name="stdout.log"):
    with open(os.path.join(q.state, "jobs", job, name), "rb") as fh:
        return fh.read()


def test_a_job_writing_5mb_under_a_64kb_limit_keeps_head_and_tail_and_counts_exactly(q):
    q.write_config(LIMIT_64KB)
    n = 5 * 1024 * 1024 // LINE + 1
    job = q.submit("--", sys.executable, "-c", WRITER, str(n))
    rec = q.wait_state(job, ("completed", "failed"), timeout=60)
    assert rec["state"] == "completed" and rec["exit_code"] == 0  # never fails because of the limit
    body, whole = log(q, job), stream_of(n)
    m = MARKER.match(body, 16384)  # the head is the first quarter of the limit
    assert m, body[16384 - 100 : 16384 + 400]
    head, tail = body[: m.start()], body[m.end() :]
    assert whole.startswith(head) and m.group(0).startswith(b"\n") == (not head.endswith(b"\n"))
    assert whole.endswith(tail) and tail.endswith(b"line %08d of the output of this job\n" % (n - 1))
    assert body.startswith(b"line 00000000 of the output")
    assert len(body) <= 64 * 1024 + len(m.group(0))
    dropped = rec["logs_dropped"]
    assert dropped["stdout_bytes"] == int(m.group(1)) == len(whole) - len(head) - len(tail)
    assert dropped["stdout_lines"] == int(m.group(2)) == whole[len(head) : len(whole) - len(tail)].count(b"\n")
    assert dropped["stderr_bytes"] == 0 and dropped["incomplete"] is False
    shown = q.run("status", job).stdout
    assert f"{dropped['stdout_bytes']} bytes, {dropped['stdout_lines']} lines) of stdout left out" in shown
    logs = q.run("logs", job)
    assert logs.stdout.encode() == body
    assert "left out by [logs] max_bytes" in logs.stderr


def test_a_job_under_the_limit_keeps_every_byte(q):
    q.write_config(LIMIT_64KB)
    payload = bytes(range(256)) * 255  # 65280 bytes, every byte value, just under 64KB
    src = os.path.join(q.root, "payload.bin")
    with open(src, "wb") as fh:
        fh.write(payload)
    job = q.submit("--", "cat", src)
    rec = q.wait_state(job, "completed")
    assert log(q, job) == payload
    assert rec["logs_dropped"]["stdout_bytes"] == 0 and rec["logs_dropped"]["stdout_lines"] == 0
    assert not os.path.exists(os.path.join(q.state, "jobs", job, "stdout.log.cut"))


def _peak_rss_of_supervisor(q, megabytes, limit_config):
    """Run a job that writes ``megabytes`` and then waits; read its supervisor's VmHWM."""
    q.write_config(limit_config)
    written, gate = q.gate(f"written-{megabytes}"), q.gate(f"go-{megabytes}")
    script = (
        "import os, sys, time\n"
        "chunk = b'y' * 1023 + b'\\n'\n"
        f"for _ in range({megabytes} * 1024):\n"
        "    sys.stdout.buffer.write(chunk)\n"
        "sys.stdout.flush()\n"
        f"open({written!r}, 'w').close()\n"
        f"while not os.path.exists({gate!r}):\n"
        "    time.sleep(0.02)\n"
    )
    job = q.submit("--", sys.executable, "-c", script)
    q.wait_for(lambda: os.path.exists(written), timeout=60, what="the job to write its output")
    rec = q.wait_state(job, "running")
    # The pipe holds at most 64KB the supervisor has not read yet; wait until the file stops growing.
    path = os.path.join(q.state, "jobs", job, "stdout.log")
    sizes = []

    def settled():
        sizes.append(
            (os.path.getsize(path), open(path + ".cut", "rb").read() if os.path.exists(path + ".cut") else b"")
        )
        return len(sizes) > 3 and sizes[-1] == sizes[-2] == sizes[-3]

    q.wait_for(settled, timeout=20, what="the supervisor to drain the pipe", interval=0.05)
    with open(f"/proc/{rec['supervisor_pid']}/status") as fh:
        hwm = int(re.search(r"VmHWM:\s+(\d+) kB", fh.read()).group(1)) * 1024
    open(gate, "w").close()
    done = q.wait_state(job, "completed", timeout=30)
    return hwm, done


def test_the_peak_memory_of_the_supervisor_does_not_grow_with_the_output(q):
    small, _ = _peak_rss_of_supervisor(q, 1, LIMIT_64KB)
    large, rec = _peak_rss_of_supervisor(q, 64, LIMIT_64KB)
    assert rec["logs_dropped"]["stdout_bytes"] > 63 * 1024 * 1024
    # Not even with a large limit: the tail is kept on disk, not in a buffer.
    big_limit, rec2 = _peak_rss_of_supervisor(q, 48, '[logs]\nmax_bytes = "32MB"\n[defaults]\nmem = "10MB"\n')
    assert rec2["logs_dropped"]["stdout_bytes"] > 0
    print(
        f"supervisor VmHWM: 1MB out {small >> 10}KB, 64MB out {large >> 10}KB, "
        f"48MB out at a 32MB limit {big_limit >> 10}KB"
    )
    assert large - small < 4 * 1024 * 1024
    assert big_limit - small < 4 * 1024 * 1024


def test_logs_follow_keeps_reading_across_the_cut(q):
    q.write_config(LIMIT_64KB)
    bursts, per_burst = 6, 20 * 1024 // LINE  # each burst fits in the free half of the window
    script = (
        "import os, sys, time\n"
        f"per, root = {per_burst}, {q.root!r}\n"
        f"for k in range({bursts}):\n"
        "    for i in range(k * per, (k + 1) * per):\n"
        "        sys.stdout.write('line %08d of the output of this job\\n' % i)\n"
        "    sys.stdout.flush()\n"
        "    while not os.path.exists(os.path.join(root, 'gate-%d' % k)):\n"
        "        time.sleep(0.01)\n"
    )
    job = q.submit("--", sys.executable, "-c", script)
    q.wait_state(job, "running")
    follower = q.popen("logs", job, "--follow", "--stdout")
    got = bytearray()

    def read_all():
        fd = follower.stdout.fileno()
        while chunk := os.read(fd, 65536):
            got.extend(chunk)

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    try:
        for k in range(bursts):
            last = b"line %08d of the output of this job\n" % ((k + 1) * per_burst - 1)
            q.wait_for(lambda: last in got, timeout=20, what=f"the follower to show burst {k}")
            open(q.gate(str(k)), "w").close()  # the next burst slides the window
        q.wait_state(job, "completed")
        follower.wait(timeout=20)
    finally:
        if follower.poll() is None:
            follower.kill()
        reader.join(timeout=10)
    assert follower.returncode == 0
    assert MARKER.search(log(q, job))  # the file was cut ...
    assert bytes(got) == stream_of(bursts * per_burst)  # ... and the follower read every line, in order


def test_a_grandchild_holding_the_output_open_still_gives_a_record_in_bounded_time(q):
    q.write_config(LIMIT_64KB)
    job = q.submit("--", "sh", "-c", "sleep 60 & echo started")
    t0 = time.monotonic()
    rec = q.wait_state(job, ("completed", "failed"), timeout=20)
    took = time.monotonic() - t0
    try:
        assert rec["state"] == "completed" and rec["exit_code"] == 0
        assert rec["logs_dropped"]["incomplete"] is True
        assert "still held its output open" in rec["error"]
        assert log(q, job) == b"started\n"
        assert took < 10
        assert "may be incomplete" in q.run("status", job).stdout
    finally:
        try:
            os.killpg(rec["pid"], signal.SIGKILL)  # the sleep left in the job's process group
        except OSError:
            pass


@pytest.mark.parametrize("value", ['"1KB"', '"100"'])
def test_a_limit_too_small_for_the_marker_is_refused_with_the_remedy(q, value):
    q.write_config(f"[logs]\nmax_bytes = {value}\n")
    proc = q.run("submit", "--", "true")
    assert proc.returncode == 121
    assert "[logs] max_bytes" in proc.stderr and "4KB" in proc.stderr and q.config in proc.stderr
