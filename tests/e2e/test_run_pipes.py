"""Issue 29, points 1 and 2: `qex run` is a pipe. Every byte of the job's stdout reaches
stdout and of its stderr stderr, in order, whatever [logs] max_bytes keeps on disk; its
stdin reaches the job until its end of file. `submit` keeps /dev/null, or takes --stdin.
Real jobs, real supervisors, bytes compared with cmp."""

import os
import re
import subprocess
import sys
import time

import pytest
from e2e_helpers import gated, open_gate

QEX = [sys.executable, "-m", "qex"]  # (as tests/conftest.py: the qex of PYTHONPATH)

CAP = 64 * 1024
LIMIT_64KB = '[logs]\nmax_bytes = "64KB"\n[defaults]\nmem = "64MB"\n'
MARK = b"[qex] ----"


@pytest.fixture
def capped(q):
    q.write_config(LIMIT_64KB)
    return q


def payload(path: str, size: int, seed: int = 0) -> bytes:
    """``size`` bytes of every value (no newline at the end), written to ``path``."""
    block = bytes((i * 7 + seed) % 256 for i in range(4093))  # (prime length: no period the cut could hide)
    data = (block * (size // len(block) + 1))[:size]
    with open(path, "wb") as fh:
        fh.write(data)
    return data


def shell(q, script: str, timeout: float = 60, stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    """``sh -c script`` with $QEX the qex command line and this queue's environment."""
    env = {**q.env, "QEX": " ".join(QEX)}
    return subprocess.run(["sh", "-c", script], stdin=stdin, capture_output=True, timeout=timeout, env=env, cwd=q.root)


def job_of(stderr: bytes) -> str:
    """The id in `qex run`'s "qex: job ID" line."""
    return re.search(rb"qex: job ([0-9a-f-]{36})", stderr).group(1).decode()


# -- point 1: every byte, whatever the log keeps --------------------------------------------------------


def test_run_delivers_every_byte_of_stdout_and_stderr_at_three_times_the_log_cap(capped):
    q = capped
    src = os.path.join(q.root, "out.bin")
    data = payload(src, 3 * CAP + 12345)
    err_src = os.path.join(q.root, "err.bin")
    payload(err_src, 3 * CAP + 777, seed=3)
    proc = shell(
        q,
        f'$QEX run -- sh -c "cat {src}; cat {err_src} >&2" > got.out 2> got.err; echo $? > rc; '
        f"cmp {src} got.out && echo same-out; tail -c {3 * CAP + 777} got.err | cmp {err_src} - "
        "&& echo same-err",
    )
    assert open(os.path.join(q.root, "rc")).read().strip() == "0", proc
    assert b"same-out" in proc.stdout and b"same-err" in proc.stdout, (proc.stdout, proc.stderr)
    with open(os.path.join(q.root, "got.out"), "rb") as fh:
        got = fh.read()
    assert got == data and MARK not in got
    # the log on disk was cut (the cap is about the file), the stream was not
    with open(os.path.join(q.root, "got.err"), "rb") as fh:
        rec = q.record(job_of(fh.read()))
    assert rec["logs_dropped"]["stdout_bytes"] > 0 and rec["logs_dropped"]["stderr_bytes"] > 0


def test_a_slow_reader_holds_the_job_back_and_still_gets_every_byte_across_the_watcher(capped):
    """The reader sleeps past the supervisor's slimming (the minimal watcher takes over with
    output still waiting for the reader) and past the job's end."""
    q = capped
    src = os.path.join(q.root, "big.bin")
    payload(src, 4 * 1024 * 1024 + 3)
    proc = shell(
        q,
        f"$QEX run --quiet -- sh -c 'cat {src}; sleep 0.7; echo tail' | (sleep 1.5; cat) > got; "
        f"(cat {src}; echo tail) | cmp - got && echo same",
    )
    assert proc.stdout.strip() == b"same", proc


def test_submit_follow_delivers_every_byte_too(capped):
    q = capped
    src = os.path.join(q.root, "f.bin")
    payload(src, 3 * CAP + 5)
    proc = shell(q, f"$QEX submit --follow -- cat {src} > got; echo $?; cmp {src} got && echo same")
    assert proc.stdout.split() == [b"0", b"same"], proc


def test_logs_follow_that_came_late_says_what_it_missed_on_stderr_never_in_the_data(capped):
    q = capped
    src = os.path.join(q.root, "l.bin")
    data = payload(src, 6 * CAP)
    job = q.submit("--", *gated(q, "late", before=f"cat {src}; "))
    q.wait_for(
        lambda: os.path.exists(os.path.join(q.state, "jobs", job, "stdout.log.cut")),
        timeout=20,
        what="the log to be cut",
    )
    follower = subprocess.Popen(
        QEX + ["logs", job, "--follow", "--stdout"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=q.env,
        cwd=q.root,
    )
    time.sleep(0.5)
    open_gate(q, "late")
    out, err = follower.communicate(timeout=30)
    assert follower.returncode == 1, err
    assert MARK not in out
    assert b"are not shown" in err and b"[logs] max_bytes" in err
    assert data.startswith(out[: CAP // 4]) and data.endswith(out[CAP // 4 :])  # the head, then the window


def test_run_whose_reader_goes_away_stops_its_job_as_a_pipe_stops_its_writer(q):
    t0 = time.monotonic()
    proc = shell(q, "$QEX run -- seq 1 100000000000 | head -n 2; echo done")
    assert proc.stdout.split() == [b"1", b"2", b"done"], proc
    assert time.monotonic() - t0 < 30
    rec = q.wait_state(job_of(proc.stderr), ("killed", "failed", "completed"), timeout=30)
    assert rec["state"] == "killed", rec


# -- point 2: standard input -----------------------------------------------------------------------------


def test_run_forwards_its_stdin_byte_for_byte_and_the_job_sees_its_end(q):
    data = bytes(range(256)) * 4096 + b"no newline at the end \x00\xff"
    with open(os.path.join(q.root, "in.bin"), "wb") as fh:
        fh.write(data)
    proc = shell(
        q,
        r"printf 'a\000b\377c' | $QEX run --quiet -- cat | od -An -c; "
        "$QEX run --quiet -- cat < in.bin | cmp - in.bin && echo same",
    )
    assert proc.stdout.split() == [b"a", b"\\0", b"b", b"377", b"c", b"same"], proc
    proc = shell(q, "echo data | $QEX run --quiet -- sh -c 'cat; echo eof-seen'")
    assert proc.stdout == b"data\neof-seen\n", proc


def test_run_stops_reading_when_the_job_closes_its_stdin_or_ends(q):
    proc = shell(q, "yes | $QEX run --quiet -- head -c 6; echo; yes | $QEX run --quiet -- true; echo rc=$?", timeout=60)
    assert proc.stdout == b"y\ny\ny\n\nrc=0\n", proc


def test_submit_keeps_dev_null_and_gives_a_file_with_stdin(q):
    src = os.path.join(q.root, "input.txt")
    with open(src, "w") as fh:
        fh.write("from a file\n")
    plain = q.submit("--", "sh", "-c", "readlink /proc/self/fd/0; cat", input="not for the job\n")
    from_file = q.submit("--stdin", "input.txt", "--", "cat")
    copied = q.submit("--stdin", "-", "--", "cat", input="a copy\n")
    for job in (plain, from_file, copied):
        q.wait_state(job, "completed")
    assert q.run("logs", plain).stdout == "/dev/null\n"
    assert q.run("logs", from_file).stdout == "from a file\n"
    assert q.run("logs", copied).stdout == "a copy\n"
    help_text = q.run("submit", "--help").stdout
    assert "--stdin" in help_text and "/dev/null for submit" in " ".join(help_text.split())


def test_stdin_copies_at_most_64mib_and_refuses_more_with_a_sentence(q):
    big = os.path.join(q.root, "big.in")
    with open(big, "wb") as fh:
        fh.truncate(64 * 1024 * 1024 + 1)
    with open(big, "rb") as fh:
        proc = subprocess.run(
            QEX + ["submit", "--stdin", "-", "--", "cat"],
            stdin=fh,
            capture_output=True,
            text=True,
            env=q.env,
            cwd=q.root,
            timeout=60,
        )
    assert proc.returncode == 121 and "larger than 64MiB" in proc.stderr and "--stdin FILE" in proc.stderr
    assert q.records() == []
    proc = q.run("submit", "--stdin", "no-such-file", "--", "cat")
    assert proc.returncode == 121 and "--stdin" in proc.stderr and "no-such-file" in proc.stderr


def test_a_rerun_reads_the_same_input(q):
    job = q.submit("--stdin", "-", "--", "cat", input="again\n")
    q.wait_state(job, "completed")
    again = q.run("rerun", job, check=0).stdout.strip()
    q.wait_state(again, "completed")
    assert q.run("logs", again).stdout == "again\n"


def test_stdin_goes_with_one_job_not_each_line(q):
    proc = q.run("submit", "--each-line", "-", "--stdin", "-", "--", "echo", "{}", input="a\n")
    assert proc.returncode == 121 and "--stdin" in proc.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
