"""Shared fixtures: a private queue per test (state dir, config, peer dir) and
a runner that calls the real `qex` in a real process, as a user would.

The tree of tests/ mirrors qex/ (tests/store/ tests qex/store/, ...), beside
e2e/ (a user's view), crash/, property/ and vm/, slurm/, gpu/. A helper of one
folder's tests may serve another's: every folder is on the import path, whatever
subset of the tests runs."""

import json
import os
import signal
import sys

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
for _name in sorted(os.listdir(_HERE)):
    _dir = os.path.join(_HERE, _name)
    if (
        os.path.isdir(_dir)
        and _name not in ("data", "fakes")
        and not _name.startswith((".", "_"))
        and _dir not in sys.path
    ):
        sys.path.append(_dir)

from driver import Qex, processes  # noqa: E402


def pytest_configure(config):
    """The tests' parsed-config cache (qex.config.cache) lives in a private
    directory, never in the ~/.cache of whoever runs them."""
    import tempfile

    config._qex_cache = tempfile.mkdtemp(prefix="qex-test-cache-")
    os.environ["XDG_CACHE_HOME"] = config._qex_cache
    # A run started in the background of a shell (`pytest &`, nohup) ignores SIGINT and SIGQUIT,
    # and every qex it starts would inherit that: the tests that interrupt `qex wait` or
    # `qex run` with a signal need it delivered, as it is from a terminal.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def pytest_unconfigure(config):
    import shutil

    if getattr(config, "_qex_cache", None):
        shutil.rmtree(config._qex_cache, ignore_errors=True)


class Queue(Qex):
    """One test's qex: its own state directory, config and peer directory (the driver: tests/driver.py)."""

    def __init__(self, root):
        self.root = root
        self.config = os.path.join(root, "qex.toml")
        self.peers = os.path.join(root, "peers")
        state = os.path.join(root, "state")
        env = {
            **os.environ,
            "QEX_STATE_DIR": state,
            "QEX_CONFIG": self.config,
            "QEX_PEER_DIR": self.peers,
            "QEX_KILL_GRACE": "2",
        }
        env.pop("CUDA_VISIBLE_DEVICES", None)
        # Every qex call would recompile every module it imports (~0.3 s) without its bytecode cache.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        super().__init__(state, env, root)

    def write_config(self, text: str) -> None:
        with open(self.config, "w") as fh:
            fh.write(text)

    def records(self) -> list[dict]:
        out = []
        jobs = os.path.join(self.state, "jobs")
        for name in sorted(os.listdir(jobs)) if os.path.isdir(jobs) else []:
            path = os.path.join(jobs, name, "status.json")
            if not name.startswith(".") and os.path.exists(path):
                with open(path) as fh:
                    out.append(json.load(fh))
        return sorted(out, key=lambda r: r["seq"])

    def processes(self) -> list[int]:
        """Pids of live processes whose environment names this queue's state dir."""
        return qex_processes(self.state)

    def gate(self, name: str) -> str:
        """A path a job can wait on; the test creates it to let the job go on."""
        return os.path.join(self.root, f"gate-{name}")


def qex_processes(state_dir: str) -> list[int]:
    """Live qex processes (and jobs started as ``qex ...``) whose environment names ``state_dir``."""
    return [pid for pid, cmd in processes(f"QEX_STATE_DIR={state_dir}".encode(), exact=True) if b"qex" in cmd]


@pytest.fixture
def q(tmp_path):
    queue = Queue(str(tmp_path))
    yield queue
    for pid in qex_processes(queue.state):  # never leave a supervisor or waker behind
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    remove_job_cgroups(queue.state)


def remove_job_cgroups(state_dir: str) -> None:
    """A supervisor killed above leaves its job's memory cgroup: stop what is in it and remove it."""
    from qex.linux import cgroup

    jobs = os.path.join(state_dir, "jobs")
    for name in os.listdir(jobs) if os.path.isdir(jobs) else ():
        if not name.startswith("."):
            cgroup.stop_and_remove(os.path.join(jobs, name), name, kill=True)
