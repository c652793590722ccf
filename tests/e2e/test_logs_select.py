"""qex logs selects lines (issue 25): --head, --lines A:B, --grep with -F, -C and
--max-count, -n, --json (one object per line), short flags (-f, -n, -q), and a cap of
what a terminal gets with no selection (none in a pipe)."""

import json
import os
import pty
import subprocess
import sys

QEX = [sys.executable, "-m", "qex"]  # (as tests/conftest.py: the qex of PYTHONPATH)

SCRIPT = "for i in $(seq 1 30); do echo line-$i; done; echo err-1 >&2; printf no-newline"


def _logs(q, job, *args, check=0):
    return q.run("logs", job, *args, check=check)


def test_logs_selects_lines_as_head_sed_and_grep_would(q):
    job = q.submit("--", "sh", "-c", SCRIPT)
    q.wait_state(job, "completed")
    assert _logs(q, job, "--stdout", "--head", "3").stdout == "line-1\nline-2\nline-3\n"
    assert _logs(q, job, "--stdout", "--lines", "5:7").stdout == "line-5\nline-6\nline-7\n"
    assert _logs(q, job, "--stdout", "--lines", "30:").stdout == "line-30\nno-newline"
    assert _logs(q, job, "--stdout", "--lines", ":2", "-n").stdout == "1:line-1\n2:line-2\n"
    assert (
        _logs(q, job, "--stdout", "--grep", "line-1[0-9]", "--max-count", "2", "-n").stdout
        == "10:line-10\n11:line-11\n"
    )
    assert (
        _logs(q, job, "--stdout", "--grep", "line-(5|9)$", "-C", "1", "-n").stdout
        == "4-line-4\n5:line-5\n6-line-6\n--\n8-line-8\n9:line-9\n10-line-10\n"
    )
    assert _logs(q, job, "--stdout", "--grep", "line-1.", "-F").stdout == ""  # a fixed string, not a pattern
    assert (
        _logs(q, job, "--stdout", "--grep", "line-1.", "--lines", "1:12", "--tail", "2").stdout == "line-11\nline-12\n"
    )  # --lines, then --grep, then --tail
    both = _logs(q, job, "--head", "1")
    assert (both.stdout, both.stderr) == ("line-1\n", "err-1\n")  # each stream to its own

    rows = [json.loads(line) for line in _logs(q, job, "--json").stdout.splitlines()]
    assert len(rows) == 32 and rows[0] == {"stream": "stdout", "line": 1, "text": "line-1", "context": False}
    assert rows[30] == {"stream": "stdout", "line": 31, "text": "no-newline", "context": False}
    assert rows[31] == {"stream": "stderr", "line": 1, "text": "err-1", "context": False}
    near = [
        json.loads(line)
        for line in _logs(q, job, "--json", "--stdout", "--grep", "line-2$", "-C", "1").stdout.splitlines()
    ]
    assert [(r["line"], r["context"]) for r in near] == [(1, True), (2, False), (3, True)]

    assert _logs(q, job, "-f", "--stderr").stdout == "err-1\n"  # an ended job: all of it, and back
    assert q.run("wait", "-q", job, check=0).stdout == ""


def test_logs_refuses_a_selection_it_cannot_make_with_2_and_the_remedy(q):
    job = q.submit("--", "true")
    q.wait_state(job, "completed")
    for args, words in (
        (("--follow", "--head", "3"), "drop --follow"),
        (("-C", "2"), "add --grep"),
        (("--max-count", "1"), "add --grep"),
        (("-F",), "add --grep"),
        (("--lines", "7:5"), "--lines: '7:5'"),
        (("--lines", "x"), "--lines: 'x'"),
        (("--head", "-1"), "--head: -1 is below 0"),
        (("--grep", "("), "-F takes it"),
    ):
        proc = _logs(q, job, *args, check=None)
        assert proc.returncode == 2 and words in proc.stderr, (args, proc.returncode, proc.stderr)


def test_a_terminal_gets_the_last_1000_lines_and_a_notice_a_pipe_gets_all(q):
    job = q.submit("--", "seq", "1", "1005")
    q.wait_state(job, "completed")
    assert len(_logs(q, job).stdout.splitlines()) == 1005  # a pipe: no cap
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        QEX + ["logs", job], stdin=subprocess.DEVNULL, stdout=follower, stderr=subprocess.PIPE, env=q.env, cwd=q.root
    )
    os.close(follower)
    data = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # (EIO: the other end closed)
            break
        if not chunk:
            break
        data += chunk
    os.close(leader)
    assert proc.wait(timeout=30) == 0
    lines = data.decode().splitlines()
    assert len(lines) == 1000 and lines[0] == "6" and lines[-1] == "1005", (len(lines), lines[:2])
    assert "the last 1000 of 1005 lines" in proc.stderr.read().decode()
