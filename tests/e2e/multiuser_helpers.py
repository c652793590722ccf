"""Real users for the multi-user tests: ``useradd`` as root, qex run as them.

A session creates one group and two users (removed at the end) and finds an
interpreter those users can run qex with: the test's own interpreter when they
can reach it, else the system python3 with qex and its libraries on
PYTHONPATH (same minor version; pure-Python libraries). Without root, or
without either, the tests that need real users skip and say why.
"""

import fcntl
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile

from driver import Qex, job_dir, processes, read_record, stores, wait_for  # noqa: F401  (for the tests)
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


def make_users(n: int = 2) -> tuple["Users", str | None]:
    """``n`` real users in one group; returns them and why they could not be made (None: made)."""
    u = Users(n)
    why = u.create()
    if why is None:
        # The users read qex's bytecode (PYTHONDONTWRITEBYTECODE): compile it once, as root.
        import compileall

        compileall.compile_dir(os.path.join(PROJECT, "qex"), quiet=1)
    return u, why


def users_or_skip(n: int = 2):
    """For a fixture: ``yield from`` it to get ``n`` test users, created once and removed
    afterwards; the test is skipped (with the reason) where they cannot be made."""
    import pytest

    u, why = make_users(n)
    if why:
        u.remove()
        pytest.skip(why)
    try:
        yield u
    finally:
        u.remove()


def shared_lab(users: "Users", config_text: str):
    """For a fixture: a world whose first two users share one state directory that the
    first made (qex init --shared) and the second has entered; yields (world, one, two)."""
    w = World(users, users.base, config_text)
    shared = os.path.join(w.dir, "lab-queue")
    one = w.actor(0, shared)
    one.run("init", "--shared", shared, "--group", users.group, check=0)
    two = w.actor(1, shared)
    two.run("list", check=0)  # (its own directory in it)
    try:
        yield w, one, two
    finally:
        w.close()


class Users:
    """One group and ``n`` users (default two) for a test session."""

    def __init__(self, n: int = 2):
        tag = secrets.token_hex(3)
        self.group = f"qexg{tag}"
        self.names = [f"qex{chr(ord('a') + i)}{tag}" for i in range(n)]
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
            r = run(
                "useradd", "-M", "-N", "-g", "users", "-G", self.group, "-s", "/usr/sbin/nologin", "-d", self.base, name
            )
            if r.returncode != 0:
                return f"useradd {name} failed: {r.stderr.strip()}"
            self.made.append(name)
        for python in (sys.executable, "/usr/bin/python3"):
            probe = subprocess.run(
                self.wrap(self.names[0], [python, "-c", "import qex.cli, attrs, cattrs, tomlkit"]),
                env=self.env({}),
                capture_output=True,
                text=True,
                cwd=self.base,
            )
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
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": self.base,
            "PYTHONPATH": self.pythonpath,
            "PYTHONDONTWRITEBYTECODE": "1",
            "QEX_KILL_GRACE": "2",
        }
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


class Actor(Qex):
    """qex as one user (or as this process's user when ``users`` is None): the one driver
    (tests/driver.py) with ``setpriv`` in front."""

    def __init__(self, name: str | None, users: Users | None, state: str, config: str, peers: str, cwd: str):
        self.name, self.users = name, users
        qvars = {"QEX_STATE_DIR": state, "QEX_CONFIG": config, "QEX_PEER_DIR": peers}
        if users is None:
            env = {**os.environ, **qvars, "QEX_KILL_GRACE": "2", "PYTHONDONTWRITEBYTECODE": "1"}
            env.pop("CUDA_VISIBLE_DEVICES", None)
            super().__init__(state, env, cwd, who=self.user)
        else:
            super().__init__(state, users.env(qvars), cwd, who=self.user)

    def argv(self, args) -> list[str]:
        if self.users is None:
            return super().argv(args)
        return self.users.wrap(self.name, [self.users.python, "-m", "qex", *map(str, args)])

    @property
    def user(self) -> str:
        import pwd

        return self.name or pwd.getpwuid(os.getuid()).pw_name


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
    return [
        pid
        for pid, cmd in processes(f"QEX_STATE_DIR={state}".encode(), exact=True)
        if b"-m\0qex" in cmd or cmd.startswith(b"qex: ")
    ]


def processes_of(state: str, but_group: int | None = None) -> list[int]:
    """Live processes whose environment names the state directory ``state``: its
    supervisors (the minimal watcher too), its
    waker, and its jobs, but those of process group ``but_group`` (a job's)."""
    from e2e_helpers import proc_stat

    out = []
    for pid, _ in processes(f"QEX_STATE_DIR={state}".encode(), exact=True):
        st = proc_stat(pid)
        if st is not None and st[2] != but_group:
            out.append(pid)
    return out


def kill_everything_under(base: str) -> None:
    """SIGKILL every process (qex or job) whose state directory is under ``base``."""
    for pid, _ in list(processes(f"QEX_STATE_DIR={base}".encode())):
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
