"""qex.supervisor.gate: a job forked behind a gate runs nothing until the gate opens, then
is set up as posix_spawn would (its fds, its own process group), or reports a failed exec."""

import os
import sys
import time

import pytest

from qex.supervisor.gate import Gated
from qex.supervisor.spawn import Child


def test_nothing_runs_before_the_gate_opens_and_then_the_job_is_set_up(tmp_path):
    mark = tmp_path / "ran"
    gated = Gated(Child, "/bin/sh", ["sh", "-c", f'echo out; echo err >&2; : > {mark}; exit 3'], {"PATH": "/bin"})
    deadline = time.monotonic() + 10
    while open(f"/proc/{gated.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "S":  # blocked on the gate
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not mark.exists() and os.readlink(f"/proc/{gated.pid}/exe") == os.path.realpath(sys.executable)  # not exec'd
    child = gated.open()
    assert child.stdout.read() == b"out\n" and child.stderr.read() == b"err\n"
    assert child.wait() == 3 and mark.exists()
    assert os.getpgid(0) != child.pid  # (its own group: the supervisor's is not the job's)


def test_an_exec_that_fails_is_an_oserror_and_the_process_is_reaped(tmp_path):
    gated = Gated(Child, str(tmp_path / "missing"), ["missing"], {})
    with pytest.raises(FileNotFoundError):
        gated.open()
    with pytest.raises(ChildProcessError):
        os.waitpid(gated.pid, os.WNOHANG)
