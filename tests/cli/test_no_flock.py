"""Issue 28, NFS: where the file system gives no flock (ENOLCK: an NFSv3 mount whose lock
manager is not running; EOPNOTSUPP, ENOSYS: some FUSE file systems), qex refuses with a
sentence and never goes on unlocked. The kernel's answer is injected (the flock call
raises what such a file system returns); the command is the real one, in a subprocess."""

import errno
import os
import subprocess
import sys

import pytest

WRAPPER = """
import errno, fcntl, os, sys
def flock(fd, op):
    raise OSError(errno.{name}, os.strerror(errno.{name}))
fcntl.flock = flock
from qex.cli import main
sys.argv = ["qex"] + sys.argv[1:]
main()
"""


@pytest.mark.parametrize("name", ["ENOLCK", "EOPNOTSUPP"])
def test_a_state_directory_without_flock_is_refused_and_nothing_is_done(tmp_path, name):
    state = tmp_path / "state"
    env = {
        **os.environ,
        "QEX_STATE_DIR": str(state),
        "QEX_CONFIG": str(tmp_path / "none.toml"),
        "QEX_PEER_DIR": str(tmp_path / "peers"),
    }
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER.format(name=name), "submit", "--", "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 121, done.stderr
    assert "Traceback" not in done.stderr
    assert f"{state}/lock cannot be locked: {os.strerror(getattr(errno, name))}" in done.stderr
    assert "qex never runs unlocked, so nothing was done" in done.stderr
    jobs = state / "jobs"
    assert not jobs.exists() or not list(jobs.iterdir()), "no job queued unlocked"


def test_the_other_locks_refuse_the_same_way(tmp_path, monkeypatch):
    import fcntl

    from qex.base.errors import StoreError
    from qex.store import lock

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    path = str(tmp_path / "alive.lock")
    for call in (lambda: lock.hold(path), lambda: lock.is_held(path)):
        with pytest.raises(StoreError, match="cannot be locked: No locks available"):
            call()
