"""Shared fixtures: a private queue per test (state dir, config, peer dir) and
a runner that calls the real `qex` in a real process, as a user would."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

QEX = [sys.executable, "-m", "qex"]


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


class Queue:
    """One test's qex: its own state directory, config and peer directory."""

    def __init__(self, root):
        self.root = root
        self.state = os.path.join(root, "state")
        self.config = os.path.join(root, "qex.toml")
        self.peers = os.path.join(root, "peers")
        self.env = {**os.environ, "QEX_STATE_DIR": self.state, "QEX_CONFIG": self.config,
                    "QEX_PEER_DIR": self.peers, "QEX_KILL_GRACE": "2"}
        self.env.pop("CUDA_VISIBLE_DEVICES", None)
        # Every qex call would recompile every module it imports (~0.3 s) without its bytecode cache.
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)

    def write_config(self, text: str) -> None:
        with open(self.config, "w") as fh:
            fh.write(text)

    def run(self, *args, input=None, timeout=60, env=None, check=None) -> subprocess.CompletedProcess:
        """Run `qex ARGS...` to completion; returns the CompletedProcess (text). Its stdin is
        ``input``, else /dev/null (`qex run` gives its stdin to its job: never the terminal
        of whoever runs the tests)."""
        given = {"input": input} if input is not None else {"stdin": subprocess.DEVNULL}
        proc = subprocess.run(QEX + [str(a) for a in args], **given, capture_output=True, text=True,
                              timeout=timeout, env={**self.env, **(env or {})}, cwd=self.root)
        if check is not None:
            assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
        return proc

    def popen(self, *args, env=None, **kw) -> subprocess.Popen:
        kw.setdefault("stdin", subprocess.DEVNULL)  # (as run: never the terminal of whoever runs the tests)
        return subprocess.Popen(QEX + [str(a) for a in args], env={**self.env, **(env or {})},
                                cwd=self.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)

    def submit(self, *args, **kw) -> str:
        """Submit and return the id (asserts exit 0 and a clean stdout)."""
        proc = self.run("submit", *args, **kw)
        assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
        job_id = proc.stdout.strip()
        assert len(job_id) == 36 and "\n" not in job_id, proc.stdout
        return job_id

    def record(self, job_id: str) -> dict:
        with open(os.path.join(self.state, "jobs", job_id, "status.json")) as fh:
            return json.load(fh)

    def records(self) -> list[dict]:
        out = []
        jobs = os.path.join(self.state, "jobs")
        for name in sorted(os.listdir(jobs)) if os.path.isdir(jobs) else []:
            path = os.path.join(jobs, name, "status.json")
            if not name.startswith(".") and os.path.exists(path):
                with open(path) as fh:
                    out.append(json.load(fh))
        return sorted(out, key=lambda r: r["seq"])

    def wait_for(self, predicate, timeout=20.0, what="condition", interval=0.02):
        """Poll ``predicate`` until it returns a truthy value; fail after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(interval)

    def wait_state(self, job_id: str, states, timeout=20.0) -> dict:
        states = {states} if isinstance(states, str) else set(states)

        def check():
            try:
                rec = self.record(job_id)
            except (FileNotFoundError, ValueError):
                return None
            return rec if rec["state"] in states else None

        return self.wait_for(check, timeout, f"job {job_id[:8]} to be {sorted(states)}")

    def processes(self) -> list[int]:
        """Pids of live processes whose environment names this queue's state dir."""
        return qex_processes(self.state)

    def gate(self, name: str) -> str:
        """A path a job can wait on; the test creates it to let the job go on."""
        return os.path.join(self.root, f"gate-{name}")


def qex_processes(state_dir: str) -> list[int]:
    needle = f"QEX_STATE_DIR={state_dir}".encode()
    me = os.getpid()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                environ = fh.read().split(b"\0")
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
            if needle in environ and b") Z" not in stat:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:  # the process may end meanwhile
                    if b"qex" in fh.read():
                        found.append(int(pid))
        except OSError:
            continue
    return found


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
