"""The tests' one driver of the command line: `qex` in a real process, as a
user (or a script) would run it, and the polls that wait on what it did.

Every way the tests run qex goes through ``Qex``: the private queue of a test
(``conftest.Queue``), a real user of a shared lab (``multiuser_helpers.Actor``),
and the crash rounds' commands (``crash.harness``, ``crash.multiuser``). They
differ only in the command's prefix (``setpriv`` for another user), its
environment and its working directory.
"""

import json
import os
import subprocess
import sys
import time

QEX = [sys.executable, "-m", "qex"]


def wait_for(predicate, timeout=20.0, what="condition", interval=0.02):
    """Poll ``predicate`` until it returns a truthy value (returned); fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def stores(state: str) -> list[str]:
    """The state directories in ``state``: itself, or (a shared directory) its members'."""
    if not os.path.isdir(state) or os.path.isdir(os.path.join(state, "jobs")):
        return [state]
    return [os.path.join(state, n) for n in sorted(os.listdir(state)) if n.startswith("member-")] or [state]


def job_dir(state: str, job_id: str) -> str:
    """Where job ``job_id``'s directory is (in whichever member's directory it is)."""
    for store in stores(state):
        path = os.path.join(store, "jobs", job_id)
        if os.path.isdir(path):
            return path
    return os.path.join(state, "jobs", job_id)


def read_record(state: str, job_id: str) -> dict:
    with open(os.path.join(job_dir(state, job_id), "status.json")) as fh:
        return json.load(fh)


class Qex:
    """qex as one caller: ``prefix`` (the command that runs qex), ``env``, ``cwd``, and
    the state directory its records are read from. stdin is /dev/null unless given:
    `qex run` hands its stdin to its job, never the terminal of whoever runs the tests."""

    def __init__(self, state: str, env: dict, cwd: str, prefix: list[str] = QEX, who: str = ""):
        self.state, self.env, self.cwd, self.prefix, self.who = state, env, cwd, prefix, who

    def argv(self, args) -> list[str]:
        return [*self.prefix, *map(str, args)]

    def run(self, *args, input=None, timeout=60, env=None, check=None) -> subprocess.CompletedProcess:
        """Run `qex ARGS...` to completion (text); with ``check``, assert its exit code."""
        given = {"input": input} if input is not None else {"stdin": subprocess.DEVNULL}
        proc = subprocess.run(
            self.argv(args),
            **given,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**self.env, **(env or {})},
            cwd=self.cwd,
        )
        if check is not None:
            assert proc.returncode == check, (self.who, args, proc.returncode, proc.stdout, proc.stderr)
        return proc

    def popen(self, *args, env=None, **kw) -> subprocess.Popen:
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("text", True)
        return subprocess.Popen(self.argv(args), env={**self.env, **(env or {})}, cwd=self.cwd, **kw)

    def submit(self, *args, **kw) -> str:
        """Submit and return the id (asserts exit 0 and a clean stdout)."""
        proc = self.run("submit", *args, **kw)
        assert proc.returncode == 0, (self.who, proc.returncode, proc.stdout, proc.stderr)
        job_id = proc.stdout.strip()
        assert len(job_id) == 36 and "\n" not in job_id, proc.stdout
        return job_id

    def record(self, job_id: str) -> dict:
        return read_record(self.state, job_id)

    def wait_for(self, predicate, timeout=20.0, what="condition", interval=0.02):
        return wait_for(predicate, timeout, what, interval)

    def wait_state(self, job_id: str, states, timeout=20.0) -> dict:
        """The record of ``job_id`` once its state is one of ``states``."""
        states = {states} if isinstance(states, str) else set(states)

        def check():
            try:
                rec = self.record(job_id)
            except (OSError, ValueError):
                return None
            return rec if rec["state"] in states else None

        whose = f" of {self.who}" if self.who else ""
        return wait_for(check, timeout, f"job {job_id[:8]}{whose} to be {sorted(states)}")


def processes(needle: bytes, exact: bool = False):
    """(pid, command line) of each live process but this one (zombies left out) with an
    environment entry equal to ``needle`` (``exact``) or starting with it."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                environ = fh.read().split(b"\0")
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmd = fh.read()
            with open(f"/proc/{name}/stat", "rb") as fh:
                zombie = b") Z" in fh.read()
        except OSError:
            continue
        if not zombie and any(e == needle if exact else e.startswith(needle) for e in environ):
            yield int(name), cmd
