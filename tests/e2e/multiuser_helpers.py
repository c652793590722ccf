"""Real users for the multi-user tests: ``useradd`` as root, qex run as them.

A session creates one group and two users (removed at the end) and finds an
interpreter those users can run qex with: the test's own interpreter when they
can reach it, else the system python3 with qex and its libraries on
PYTHONPATH (same minor version; pure-Python libraries). Without root, or
without either, the tests that need real users skip and say why.
"""

import fcntl
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from e2e_helpers import gate_command, release

import qex

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(qex.__file__)))
HOLDING = ("starting", "running")


def library_path() -> str:
    """qex's source and the directories of the libraries it imports."""
    import attrs
    import cattrs
    import tomlkit
    import yaml

    dirs = [PROJECT]
    for mod in (attrs, cattrs, tomlkit, yaml):
        d = os.path.dirname(os.path.dirname(os.path.abspath(mod.__file__)))
        if d not in dirs:
            dirs.append(d)
    return os.pathsep.join(dirs)


def users_or_skip():
    """For a fixture: ``yield from`` it to get the test users, created once and removed
    afterwards; the test is skipped (with the reason) where they cannot be made."""
    import pytest

    u = Users()
    why = u.create()
    if why:
        u.remove()
        pytest.skip(why)
    try:
        yield u
    finally:
        u.remove()


class Users:
    """One group and two users for a test session."""

    def __init__(self):
        tag = secrets.token_hex(3)
        self.group = f"qexg{tag}"
        self.names = [f"qexa{tag}", f"qexb{tag}"]
        self.base = tempfile.mkdtemp(prefix="qex-mu-", dir="/tmp")
        os.chmod(self.base, 0o755)
        self.made: list[str] = []
        self.python = None
        self.pythonpath = library_path()

    def create(self) -> str | None:
        """Make the users; returns why the tests must skip, or None."""
        if os.getuid() != 0:
            return "creating real users needs root"
        if not shutil.which("useradd") or not shutil.which("setpriv"):
            return "useradd or setpriv is missing"
        run = lambda *a: subprocess.run(a, capture_output=True, text=True)  # noqa: E731
        if run("groupadd", self.group).returncode != 0:
            return f"groupadd {self.group} failed"
        self.made.append("group")
        for name in self.names:
            r = run("useradd", "-M", "-N", "-g", "users", "-G", self.group, "-s", "/usr/sbin/nologin",
                    "-d", self.base, name)
            if r.returncode != 0:
                return f"useradd {name} failed: {r.stderr.strip()}"
            self.made.append(name)
        for python in (sys.executable, "/usr/bin/python3"):
            probe = subprocess.run(self.wrap(self.names[0], [python, "-c", "import qex.cli, attrs, cattrs, tomlkit"]),
                                   env=self.env({}), capture_output=True, text=True, cwd=self.base)
            if probe.returncode == 0:
                self.python = python
                return None
        return "no python interpreter that the test users can run qex with"

    def uid(self, name: str) -> int:
        import pwd

        return pwd.getpwnam(name).pw_uid

    def gid(self) -> int:
        import grp

        return grp.getgrnam(self.group).gr_gid

    def wrap(self, name: str, argv: list[str]) -> list[str]:
        return ["setpriv", f"--reuid={name}", "--regid=users", "--init-groups", "--", *argv]

    def env(self, extra: dict) -> dict:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": self.base,
               "PYTHONPATH": self.pythonpath, "PYTHONDONTWRITEBYTECODE": "1", "QEX_KILL_GRACE": "2"}
        env.update(extra)
        return env

    def remove(self) -> None:
        kill_everything_under(self.base)
        for name in self.made:
            if name != "group":
                subprocess.run(["userdel", name], capture_output=True)
        if "group" in self.made:
            subprocess.run(["groupdel", self.group], capture_output=True)
        shutil.rmtree(self.base, ignore_errors=True)


class Actor:
    """qex as one user (or as this process's user when ``users`` is None)."""

    def __init__(self, name: str | None, users: Users | None, state: str, config: str, peers: str, cwd: str):
        self.name, self.users, self.state, self.cwd = name, users, state, cwd
        self.vars = {"QEX_STATE_DIR": state, "QEX_CONFIG": config, "QEX_PEER_DIR": peers}

    @property
    def user(self) -> str:
        import pwd

        return self.name or pwd.getpwuid(os.getuid()).pw_name

    def argv(self, args) -> list[str]:
        if self.users is None:
            return [sys.executable, "-m", "qex", *map(str, args)]
        return self.users.wrap(self.name, [self.users.python, "-m", "qex", *map(str, args)])

    def env(self) -> dict:
        if self.users is None:
            env = {**os.environ, **self.vars, "QEX_KILL_GRACE": "2", "PYTHONDONTWRITEBYTECODE": "1"}
            env.pop("CUDA_VISIBLE_DEVICES", None)
            return env
        return self.users.env(self.vars)

    def run(self, *args, timeout=30, check=None) -> subprocess.CompletedProcess:
        proc = subprocess.run(self.argv(args), env=self.env(), cwd=self.cwd, capture_output=True, text=True,
                              timeout=timeout)
        if check is not None:
            assert proc.returncode == check, (self.user, args, proc.returncode, proc.stdout, proc.stderr)
        return proc

    def submit(self, *args) -> str:
        proc = self.run("submit", *args, check=0)
        job_id = proc.stdout.strip()
        assert len(job_id) == 36, proc
        return job_id

    def record(self, job_id: str) -> dict:
        return read_record(self.state, job_id)

    def wait_state(self, job_id: str, states, timeout=20.0) -> dict:
        states = {states} if isinstance(states, str) else set(states)

        def check():
            try:
                rec = self.record(job_id)
            except (OSError, ValueError):
                return None
            return rec if rec["state"] in states else None

        return wait_for(check, timeout, f"job {job_id[:8]} of {self.user} to be {sorted(states)}")


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


def wait_for(predicate, timeout=20.0, what="condition", interval=0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# A job that waits on a file the test makes, and the release of it (one home: e2e_helpers).
gated, open_gate = gate_command, release


def held_cpu(state: str) -> float:
    """Cores held by starting/running jobs, read under the state lock (shared):
    one consistent instant between two passes."""
    fd = os.open(os.path.join(state, "lock"), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        from qex.store.state import Store

        jobs = [e for s in stores(state) for e in Store(s).read_index_jobs().values()]  # (and the journal's tail)
    finally:
        os.close(fd)
    return sum(e["cpu"] for e in jobs if e["state"] in HOLDING) / 1000


def qex_pids(state: str) -> list[int]:
    """Live qex processes (commands, supervisors, wakers) of one state directory: a command's
    line is ``python -m qex ...``, what qex leaves running names itself ``qex: ...`` (qex.linux.title)."""
    return [pid for pid, cmd in _processes(f"QEX_STATE_DIR={state}".encode(), exact=True)
            if b"-m\0qex" in cmd or cmd.startswith(b"qex: ")]


def processes_of(state: str, but_group: int | None = None) -> list[int]:
    """Live processes whose environment names the state directory ``state``: its
    supervisors (the minimal watcher too), its
    waker, and its jobs, but those of process group ``but_group`` (a job's)."""
    from e2e_helpers import proc_stat

    out = []
    for pid, _ in _processes(f"QEX_STATE_DIR={state}".encode(), exact=True):
        st = proc_stat(pid)
        if st is not None and st[2] != but_group:
            out.append(pid)
    return out


def _processes(needle: bytes, exact: bool = False):
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


def kill_everything_under(base: str) -> None:
    """SIGKILL every process (qex or job) whose state directory is under ``base``."""
    for pid, _ in list(_processes(f"QEX_STATE_DIR={base}".encode())):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class World:
    """A directory for one test that the test users can use, with one config
    and one peer directory (made by root with mode 1777, as an administrator would)."""

    def __init__(self, users: "Users | None", root: str, config_text: str):
        self.users = users
        self.dir = tempfile.mkdtemp(prefix="t-", dir=root)
        os.chmod(self.dir, 0o1777)
        self.config = os.path.join(self.dir, "qex.toml")
        with open(self.config, "w") as fh:
            fh.write(config_text)
        os.chmod(self.config, 0o644)
        self.peers = os.path.join(self.dir, "peers")
        os.mkdir(self.peers)
        os.chmod(self.peers, 0o1777)

    def actor(self, index: int, state: str | None = None) -> Actor:
        name = self.users.names[index] if self.users else None
        state = state or os.path.join(self.dir, f"state-{index}")
        return Actor(name, self.users, state, self.config, self.peers, self.dir)

    def gate(self, name: str) -> str:
        return os.path.join(self.dir, f"gate-{name}")

    def close(self) -> None:
        kill_everything_under(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)
