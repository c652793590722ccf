"""Multi-user crash rounds (issue 34): real users share one budget while qex processes die.

Two or three real Unix users (made as root: ``tests/e2e/multiuser_helpers.py``)
each submit, cancel, wait for and kill their own jobs, and try (and fail) to
act on the others', while random SIGKILLs hit any user's qex commands and
wakers and supervisors (``kill_supervisors``; ``QEX_MU_KILL_SUPERVISORS=0``
spares the supervisors). Two layouts (docs/multiuser.md):

- ``private``: a state directory per user, one peer directory (mode 1777, made
  by root) and one config;
- ``shared``: one directory made by ``qex init --shared DIR --group G`` (run as
  the first user); every user has ``QEX_STATE_DIR=DIR``.

What a round checks, from outside qex (never through its code):

- **one budget**: a sampler thread lists, every few milliseconds, the processes
  of every user's jobs from ``/proc`` (a job's processes carry ``QEXMU_TAG`` in
  their environment; its devices in ``CUDA_VISIBLE_DEVICES``) and sums what
  they claimed: cores, memory, each device's VRAM (a whole device alone), the
  counted pool ``net``. The sum is never over the budget. A job whose
  supervisor was killed still runs (its leader's parent is no qex any more):
  it counts all the same, and the violation says so ("orphaned");
- **final**: after the kills stop, each user types one plain command (``qex
  list``); then every job reaches a final state within the bound, and no qex
  process is left;
- **ran once**: each job's command appends ``start TAG ID ATTEMPT UID`` to a log
  when it starts: at most once per attempt, exactly once for a completed job;
- **true owner**: every ``status.json`` is owned by the owner of the directory
  it is in (private: the state directory; shared: ``member-<uid>``), its
  ``uid`` and ``owner`` say so, the job was submitted by that user (its spec's
  tag) and its command ran as them (``id -u``);
- **secrets**: each submission gets ``--env SECRET_<tag>=<random>`` (and some
  jobs print it): as each user, every file under the test's directory is read,
  and none readable holds another user's secret; no command of another user
  prints it;
- **refusals**: kill, cancel, logs and status --show-env of another's job exit
  non-zero, and no job ends cancelled or killed unless its owner asked;
- and every invariant of invariants.py on each user's state directory.

Everything random comes from one seed, printed with any violation.
"""

import json
import os
import random
import secrets
import signal
import subprocess
import sys
import threading
import time

from driver import Qex

from crash import invariants as inv
from qex.linux.title import SUPERVISOR

HERE = os.path.dirname(os.path.abspath(__file__))
_E2E = os.path.join(os.path.dirname(HERE), "e2e")
if _E2E not in sys.path:
    sys.path.insert(0, _E2E)

from multiuser_helpers import PROJECT, Users, World, make_users, users_or_skip  # noqa: E402,F401  (for bench/soak.py, the rounds)

ID_LEN = 36
TAG_VAR = "QEXMU_TAG"
GB = 1024**3
MB = 1024**2

CONFIG = """\
[budget]
cpu = 3
mem = "3GB"

[defaults]
mem = "100MB"

[[pool]]
name = "gpu"
devices = ["8GB", "8GB"]
env = "CUDA_VISIBLE_DEVICES"

[[pool]]
name = "net"
count = 2
"""
BUDGET = {"cpu": 3000, "mem": 3 * GB, "gpu": [8 * GB, 8 * GB], "net": 2}

LAYOUTS = ("private", "shared")
KINDS = ("command", "waker", "supervisor")
ADMIT_WAIT = 0.5  # qex.users.peer_admission.ADMIT_WAIT: a pass waits that long for the admission lock
KILL_WEIGHTS = {"command": 1, "waker": 1, "supervisor": 2, "other": 0.5}
# Supervisors are SIGKILLed too, by default (QEX_MU_KILL_SUPERVISORS=0: not). For a while they
# were not: one killed between its spawn and its pid line, of a user with no memory cgroup (an
# unprivileged one here), left a job that ran on while the pass recorded it lost and freed its
# claim, and the sampler saw the budget exceeded (seed 3043910452). The pass now finds such a job
# by the peer lock it holds and stops it before its claim goes (qex.queue.reconcile).
KILL_SUPERVISORS = os.environ.get("QEX_MU_KILL_SUPERVISORS", "1") != "0"


# ---- /proc -----------------------------------------------------------------------------------


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _stat(pid: str) -> tuple[str, int, int] | None:
    """(state letter, ppid, start time in clock ticks) of a process, or None if gone."""
    data = _read(f"/proc/{pid}/stat")
    if not data:
        return None
    try:
        rest = data[data.rindex(b")") + 2 :].split()
        return rest[0].decode(), int(rest[1]), int(rest[19])
    except (ValueError, IndexError):
        return None


def _environ(pid) -> dict[bytes, bytes]:
    data = _read(f"/proc/{pid}/environ") or b""
    return dict(item.partition(b"=")[::2] for item in data.split(b"\0") if item)


def _uid_of(pid) -> int | None:
    data = _read(f"/proc/{pid}/status") or b""
    for line in data.splitlines():
        if line.startswith(b"Uid:"):
            return int(line.split()[1])
    return None


def _fd_targets(pid) -> list[str]:
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    out = []
    for fd in names:
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return out


def _cmd(pid) -> str:
    return (_read(f"/proc/{pid}/cmdline") or b"").replace(b"\0", b" ").decode(errors="replace")


def _is_qex_cmdline(cmd: bytes) -> bool:
    """A qex command, a supervisor or watcher, a waker or a hook runner: ``python -m qex``,
    ``-m qex.supervisor...``, or the title a process qex leaves running gives itself
    (``qex: waker for uid ...``: ``qex.linux.title``, written over its argv)."""
    return b"-m\0qex" in cmd or b"qex.supervisor" in cmd or cmd.startswith(b"qex: ")


def qex_processes(states: list[str]) -> dict[int, int]:
    """Live qex processes (commands, supervisors and watchers, wakers) of these state
    directories, never a job's: pid -> uid."""
    needles = {s.encode() for s in states}
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        env = _environ(name)
        if env.get(b"QEX_STATE_DIR") not in needles or TAG_VAR.encode() in env:
            continue
        st = _stat(name)
        cmd = _read(f"/proc/{name}/cmdline") or b""
        if st is None or st[0] in "ZX" or not _is_qex_cmdline(cmd):
            continue
        uid = _uid_of(name)
        if uid is not None:
            found[int(name)] = uid
    return found


def _journal_and_index(store: str, job: str) -> str:
    """A stuck job's last events in its user's journal (seq, state, change, pid) and its
    index.json entry's state: whether a pass applied what the journal says (the journal
    is the write-ahead log; index.json may lag it)."""
    events = []
    for line in (_read(os.path.join(store, "journal.jsonl")) or b"").splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict) and e.get("id") == job:
            j = e.get("job") or {}
            events.append(f"{e.get('seq')}:{e.get('state')}/{e.get('change')}/pid {j.get('supervisor_pid')}")
    try:
        entry = json.loads(_read(os.path.join(store, "index.json")) or b"{}").get("jobs", {}).get(job) or {}
    except (ValueError, AttributeError):
        entry = {"state": "unreadable"}
    return f"journal events {events[-4:]}, index.json entry {entry.get('state')!r}"


def _ticks_now() -> int:
    data = _read("/proc/uptime") or b"0"
    return int(float(data.split()[0]) * os.sysconf("SC_CLK_TCK")) + 1


# ---- the sampler: what the jobs' processes hold, summed over every user ----------------------


class Sampler(threading.Thread):
    """Lists the live processes of every job (``/proc``) and sums their claims.

    One scan lists ``/proc`` first (at t0), then reads each process: a process in
    that list that is still alive when read was alive at t0, so the jobs one scan
    finds all ran at the same instant. A process started after t0 (a reused pid)
    is left to the next scan. ``claims``: tag -> what its submission claimed."""

    def __init__(self, claims: dict, budget: dict, interval: float = 0.02):
        super().__init__(daemon=True)
        self.claims, self.budget, self.interval = claims, budget, interval
        self.cache: dict[tuple[str, int], tuple | None] = {}  # (pid, start) -> job key info, None: not a job
        self.first_seen: dict[tuple[str, int], float] = {}
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.episodes: list[dict] = []  # each overrun: its first sample, and how long it lasted
        self._open: dict | None = None
        self.scans = 0
        self.peak = {"cpu": 0, "mem": 0, "net": 0}
        self.seen_jobs: set[str] = set()
        self.last_live: list = []
        self.peers: str | None = None  # the peer directory, read when an overrun begins
        self.admit_id: str | None = None  # the admission lock's dev:ino as /proc/locks writes it
        self.admit_holders: dict[str, float] = {}  # pid -> since when it holds it
        self.admit_holds: list[tuple[float, float, str]] = []  # (from, to, pid) of each hold seen

    def run(self):
        while not self.stop_flag.is_set():
            try:
                self.scan()
            except Exception as exc:  # a sampler that stops must say so
                with self.lock:
                    self.episodes.append({"error": repr(exc), "at": time.time()})
            self.stop_flag.wait(self.interval)

    def stop(self):
        self.stop_flag.set()
        self.join(5)

    def take(self) -> list[dict]:
        """The overruns seen since the last call (an open one is closed)."""
        with self.lock:
            self._open = None
            out, self.episodes = self.episodes, []
            return out

    def take_admit_holds(self) -> list[tuple[float, float, str]]:
        with self.lock:
            out, self.admit_holds = self.admit_holds, []
            return out

    def _info(self, pid: str, start: int, now: float):
        key = (pid, start)
        if key in self.cache and (self.cache[key] is not None or now - self.first_seen[key] > 0.5):
            return self.cache[key]
        # (a process seen in its first half second is read again: a posix_spawn's child before its exec)
        env = _environ(pid)
        tag = env.get(TAG_VAR.encode())
        info = None
        if tag is not None and b"QEX_JOB_ID" in env:
            info = (
                tag.decode(),
                env[b"QEX_JOB_ID"].decode(),
                env.get(b"QEX_ATTEMPT", b"1").decode(),
                env.get(b"CUDA_VISIBLE_DEVICES", b"").decode(),
                env.get(b"QEX_GPU_VRAM", b"").decode(),
            )
        self.cache[key] = info
        self.first_seen.setdefault(key, now)
        return info

    def scan(self) -> None:
        now = time.monotonic()
        t0 = _ticks_now()
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
        live: dict[tuple[str, str], dict] = {}  # (job id, attempt) -> what it holds and who runs it
        procs: dict[str, tuple] = {}
        keys_now = set()
        for pid in pids:
            st = _stat(pid)
            if st is None or st[0] in "ZX" or st[2] > t0:
                continue
            keys_now.add((pid, st[2]))
            info = self._info(pid, st[2], now)
            if info is None:
                continue
            procs[pid] = (info, st[1], st[2])
        for pid, (info, ppid, start) in procs.items():
            tag, job, attempt, devices, vram = info
            entry = live.setdefault(
                (job, attempt),
                {
                    "tag": tag,
                    "job": job,
                    "attempt": attempt,
                    "devices": devices,
                    "vram": vram,
                    "pids": [],
                    "orphaned": None,
                    "start": start,
                },
            )
            entry["pids"].append(int(pid))
            entry["start"] = min(entry["start"], start)
            if str(ppid) not in procs:  # the job's leader: its parent is its supervisor, or not
                entry["orphaned"] = not _is_qex_cmdline(_read(f"/proc/{ppid}/cmdline") or b"")
        for key in [k for k in self.cache if k not in keys_now]:
            self.cache.pop(key, None)
            self.first_seen.pop(key, None)
        self.scans += 1
        self.watch_admit_lock()
        self.judge(live)

    def watch_admit_lock(self) -> None:
        """Who holds the peer directory's admission lock (``/proc/locks``), since when: a
        pass waits for it at most half a second, then admits without it."""
        if self.admit_id is None:
            try:
                st = os.stat(os.path.join(self.peers, ".admit.lock"))
            except (OSError, TypeError):
                return
            self.admit_id = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        now = time.time()
        holders = set()
        for line in (_read("/proc/locks") or b"").decode(errors="replace").splitlines():
            parts = line.split()
            if len(parts) >= 6 and parts[1] == "FLOCK" and parts[3] == "WRITE" and parts[5] == self.admit_id:
                holders.add(parts[4])
        for pid in holders:
            self.admit_holders.setdefault(pid, now)
        for pid in [p for p in self.admit_holders if p not in holders]:
            began = self.admit_holders.pop(pid)
            with self.lock:
                self.admit_holds.append((began, now, pid))

    def published(self) -> str:
        """What the peer records said at that instant: per uid, its jobs' cores."""
        if not self.peers:
            return ""
        out = []
        try:
            names = sorted(os.listdir(self.peers))
        except OSError:
            return ""
        for name in names:
            if name.endswith(".json"):
                try:
                    with open(os.path.join(self.peers, name)) as fh:
                        rec = json.load(fh)
                    out.append(f"uid {rec.get('uid')}: {[j.get('cpu') for j in rec.get('jobs', ())]} cores")
                except (OSError, ValueError):
                    pass
        return "; ".join(out) or "none"

    def judge(self, live: dict) -> None:
        cpu = mem = net = 0
        whole: dict[int, list] = {}
        shared: dict[int, list] = {}
        for entry in live.values():
            claim = self.claims.get(entry["tag"])
            if claim is None:
                continue  # (another test's job)
            self.seen_jobs.add(entry["job"])
            entry["user"] = claim["user"]
            cpu += claim["cpu"]
            mem += claim["mem"]
            net += claim["net"]
            for d in (int(x) for x in entry["devices"].split(",") if x.strip().isdigit()):
                if claim["gpu"] == "whole":
                    whole.setdefault(d, []).append(entry)
                elif claim["gpu"]:
                    shared.setdefault(d, []).append((entry, claim["gpu"]))
        self.last_live = sorted(
            (e["user"], e["job"][:8], "orphaned" if e["orphaned"] else "supervised")
            for e in live.values()
            if "user" in e
        )
        self.peak = {
            "cpu": max(self.peak["cpu"], cpu),
            "mem": max(self.peak["mem"], mem),
            "net": max(self.peak["net"], net),
        }
        over = []
        if cpu > self.budget["cpu"]:
            over.append(f"{cpu / 1000:g} cores of {self.budget['cpu'] / 1000:g}")
        if mem > self.budget["mem"]:
            over.append(f"{mem / GB:g}GB of memory of {self.budget['mem'] / GB:g}GB")
        if net > self.budget["net"]:
            over.append(f"{net} units of net of {self.budget['net']}")
        for d, cap in enumerate(self.budget["gpu"]):
            users = whole.get(d, [])
            parts = shared.get(d, [])
            used = cap * len(users) + sum(size for _, size in parts)
            if used > cap:
                over.append(
                    f"device gpu:{d} used {used / GB:g}GB of {cap / GB:g}GB by "
                    f"{len(users)} whole and {len(parts)} partial claims"
                )
        with self.lock:
            if not over:
                self._open = None
                return
            jobs = sorted(live.values(), key=lambda e: (e.get("user", ""), e["job"]))
            sig = tuple(sorted(live))
            if self._open is not None and self._open["sig"] == sig:
                self._open["samples"] += 1
                self._open["last"] = time.time()
                return
            self._open = {
                "sig": sig,
                "over": over,
                "at": time.time(),
                "last": time.time(),
                "samples": 1,
                "jobs": [dict(e) for e in jobs if e["tag"] in self.claims],
                "published": self.published(),
            }
            self.episodes.append(self._open)


def describe_episode(ep: dict, claims: dict, records: dict, killed: dict | None = None) -> str:
    """An overrun in words: each live job, whether its supervisor was there, how it ended;
    ``killed``: pid -> (time, kind, uid) of the test's SIGKILLs."""
    if "error" in ep:
        return f"the sampler failed: {ep['error']}"
    parts = []
    last = max(e["start"] for e in ep["jobs"]) if ep["jobs"] else None
    for e in ep["jobs"]:
        c = claims[e["tag"]]
        rec = records.get(e["job"], {})
        why = ""
        if e["orphaned"]:
            kill = (killed or {}).get(rec.get("supervisor_pid"))
            why = (
                f" (the test SIGKILLed it, a {kill[1]}, {ep['at'] - kill[0]:.2f}s before)"
                if kill
                else " (not by the test's SIGKILL: a crash point?)"
            )
        gpu = ""
        if c["gpu"]:
            gpu = f", gpu:{e['devices']} " + ("whole" if c["gpu"] == "whole" else f"{c['gpu'] / GB:g}GB")
        parts.append(
            f"{c['user']}'s {e['job'][:8]}{' (STARTED LAST)' if e['start'] == last else ''} "
            f"({c['cpu'] / 1000:g} cores, {c['mem'] / MB:g}MB"
            f"{', net ' + str(c['net']) if c['net'] else ''}{gpu}; "
            f"{'ORPHANED: its supervisor is gone' + why if e['orphaned'] else 'supervised'}; "
            f"ended {rec.get('state')}{': ' + str(rec.get('error'))[:60] if rec.get('error') else ''})"
        )
    return (
        f"budget exceeded: {'; '.join(ep['over'])} for {ep['last'] - ep['at']:.3f}s "
        f"({ep['samples']} samples) by {len(ep['jobs'])} live jobs: "
        + ", ".join(parts)
        + f"; the peer records then: {ep.get('published') or '?'}"
    )


# ---- one user's qex command ------------------------------------------------------------------


class Call:
    def __init__(self, user: int, op: str, argv: list[str], target: str | None = None, tag: str | None = None):
        self.user, self.op, self.argv, self.target, self.tag = user, op, argv, target, tag
        self.crash: str | None = None
        self.proc: subprocess.Popen | None = None
        self.code: int | None = None
        self.out = self.err = ""
        self.killed = False

    def __repr__(self):
        extra = f" QEX_CRASH_AT={self.crash}" if self.crash else ""
        return (
            f"<user{self.user} {self.op}{extra} {' '.join(self.argv)[:80]} -> {self.code}"
            f"{' (killed)' if self.killed else ''}>"
        )


class MultiHarness:
    """Rounds of several real users' qex commands in one layout; see the module's doc."""

    def __init__(
        self,
        users: Users,
        layout: str,
        seed: int,
        crash_rate: float = 0.1,
        kill_rate: float = 0.8,
        settle_limit: float = 60.0,
        calls_per_user: tuple[int, int] = (5, 8),
        kill_supervisors: bool = KILL_SUPERVISORS,
    ):
        assert layout in LAYOUTS, layout
        self.users, self.layout, self.seed = users, layout, seed
        self.rng = random.Random(seed)
        self.crash_rate, self.kill_rate, self.settle_limit = crash_rate, kill_rate, settle_limit
        self.calls_per_user = calls_per_user
        self.kill_supervisors = kill_supervisors
        self.world = World(users, users.base, CONFIG)
        self.names = list(users.names)
        self.uids = [users.uid(n) for n in self.names]
        self.log_path = os.path.join(self.world.dir, "starts.log")
        fd = os.open(self.log_path, os.O_CREAT | os.O_WRONLY, 0o666)
        os.close(fd)
        os.chmod(self.log_path, 0o666)
        if layout == "private":
            self.states = [os.path.join(self.world.dir, f"state-{i}") for i in range(len(self.names))]
        else:
            shared = os.path.join(self.world.dir, "shared")
            self.states = [shared] * len(self.names)
        self.claims: dict[str, dict] = {}  # tag -> its submission's claims, user, secret
        self.printed: list[set[str]] = [set() for _ in self.names]  # ids each user's commands printed
        self.owner_acted: dict[str, set[str]] = {}  # job id -> ops its owner started on it (kill, cancel)
        self.deferred: list[Call] = []
        self.rounds = self.calls = self.jobs = self.crashes_armed = 0
        self.kills = {k: 0 for k in KINDS + ("other", "armed")}
        self.refusals = 0
        self.admit_holds = self.admit_long = 0  # holds of the admission lock seen; those over ADMIT_WAIT
        self.killed: dict[int, tuple] = {}  # pid -> (when, kind, uid) of each SIGKILL of the test
        self.round_calls: list[Call] = []
        self.round_t0 = time.time()
        self.log: list[str] = []
        self.sampler = Sampler(self.claims, BUDGET)
        self.sampler.peers = self.world.peers
        self.sampler.start()
        if layout == "shared":
            r = self.qex(0, "init", "--shared", shared, "--group", users.group)
            if r.returncode != 0:
                raise RuntimeError(f"qex init --shared failed ({r.returncode}): {r.stderr}")

    # ---- running qex as a user ------------------------------------------------------------
    def env(self, user: int, crash: str | None = None) -> dict:
        extra = {
            "QEX_STATE_DIR": self.states[user],
            "QEX_CONFIG": self.world.config,
            "QEX_PEER_DIR": self.world.peers,
            "QEX_KILL_GRACE": "0.5",
            "QEX_WAKER_INTERVAL": "0.2",
        }
        if crash:
            extra["QEX_CRASH_AT"] = crash
        return self.users.env(extra)

    def argv(self, user: int, args) -> list[str]:
        return self.driver(user).argv(args)

    def driver(self, user: int, crash: str | None = None) -> Qex:
        """User ``user``'s qex (the tests' one driver: tests/driver.py)."""
        return Qex(
            self.states[user],
            self.env(user, crash),
            self.world.dir,
            self.users.wrap(self.names[user], [self.users.python, "-m", "qex"]),
            self.names[user],
        )

    def qex(self, user: int, *args, timeout: float = 90) -> subprocess.CompletedProcess:
        self.calls += 1
        return self.driver(user).run(*args, timeout=timeout)

    def start(self, call: Call) -> None:
        call.proc = self.driver(call.user, call.crash).popen(*call.argv)
        self.calls += 1

    def close(self) -> None:
        self.sampler.stop()
        self.world.close()

    # ---- the operations ---------------------------------------------------------------------
    def job_script(self, rng, tag: str, echo_secret: bool) -> str:
        seconds = rng.choice((0, 0.05, 0.1, 0.3, 0.3, 0.6, 1.0))
        code = rng.choice((0, 0, 0, 0, 1, 3))
        script = f'echo "start ${TAG_VAR} $QEX_JOB_ID $QEX_ATTEMPT $(id -u)" >> {self.log_path}; '
        if echo_secret:
            script += f'echo "$SECRET_{tag}"; '
        if seconds:
            script += f"sleep {seconds}; "
        return script + f"exit {code}"

    def op_submit(self, user: int, rng) -> Call:
        tag = f"r{self.rounds}u{user}x{rng.randrange(1 << 30):x}"
        claim = {
            "user": self.names[user],
            "uid": self.uids[user],
            "secret": secrets.token_hex(12),
            "cpu": 0,
            "mem": 0,
            "net": 0,
            "gpu": None,
        }
        cpu = rng.choice(("0.5", "1", "1", "2"))
        mem = rng.choice(("100MB", "100MB", "500MB", "1GB", "2GB"))
        claim["cpu"], claim["mem"] = round(float(cpu) * 1000), int(mem[:-2]) * (GB if mem.endswith("GB") else MB)
        args = ["submit", "--cpu", cpu, "--mem", mem]
        r = rng.random()
        if r < 0.15:
            args += ["--gpu", "1"]
            claim["gpu"] = "whole"
        elif r < 0.3:
            size = rng.choice((4, 6))
            args += ["--vram", f"{size}GB"]
            claim["gpu"] = size * GB
        if rng.random() < 0.25:
            args += ["--claim", "net=1"]
            claim["net"] = 1
        own = sorted(self.printed[user])
        if own and rng.random() < 0.1:
            args += ["--after", rng.choice(own)]
        args += ["--env", f"{TAG_VAR}={tag}", "--env", f"SECRET_{tag}={claim['secret']}"]
        script = self.job_script(rng, tag, rng.random() < 0.3)
        self.claims[tag] = claim
        if rng.random() < 0.15:  # a fan-out: several jobs of one submission, one tag
            path = os.path.join(self.world.dir, f"lines-{tag}.txt")
            with open(path, "w") as fh:
                fh.write("".join(f"{i}\n" for i in range(rng.randint(2, 3))))
            os.chmod(path, 0o644)
            return Call(user, "fanout", args + ["--each-line", path, "--", "sh", "-c", script, "{}"], tag=tag)
        return Call(user, "submit", args + ["--", "sh", "-c", script], tag=tag)

    def pick_own(self, user: int, rng) -> str | None:
        own = sorted(self.printed[user])
        return rng.choice(own[-12:]) if own else None

    def op_own(self, user: int, rng) -> Call | None:
        target = self.pick_own(user, rng)
        if target is None:
            return None
        verb = rng.choice(("kill", "kill", "cancel", "cancel", "wait", "status"))
        if verb == "wait":
            return Call(user, "wait", ["wait", target, "--timeout", "0.5", "--quiet"], target=target)
        if verb == "status":
            return Call(user, "status", ["status", target, "--json"], target=target)
        self.owner_acted.setdefault(target, set()).add(verb)
        return Call(user, verb, [verb, target], target=target)

    def op_others(self, user: int, rng) -> Call | None:
        others = [u for u in range(len(self.names)) if u != user and self.printed[u]]
        if not others:
            return None
        victim = rng.choice(others)
        target = rng.choice(sorted(self.printed[victim])[-12:])
        verb = rng.choice((["kill"], ["cancel"], ["logs"], ["status", "--show-env"]))
        return Call(user, "others-" + verb[0], verb + [target], target=target)

    def op_list(self, user: int, rng) -> Call:
        return Call(user, "list", ["list", "--json"])

    def make_call(self, user: int, rng) -> Call | None:
        ops = ((6, self.op_submit), (2, self.op_own), (1.5, self.op_others), (0.5, self.op_list))
        op = rng.choices([f for _, f in ops], weights=[w for w, _ in ops])[0]
        return op(user, rng)

    # ---- one round -----------------------------------------------------------------------------
    def round(self) -> list[str]:
        rng = self.rng
        self.rounds += 1
        self.sampler.take()  # (the time between rounds belongs to no round: nothing runs then)
        self.killed.clear()
        calls: list[Call] = []
        for user in range(len(self.names)):
            for _ in range(rng.randint(*self.calls_per_user)):
                call = self.make_call(user, rng)
                if call is None:
                    continue
                if rng.random() < self.crash_rate:
                    from qex.base.faults import POINTS

                    call.crash = f"{rng.choice(POINTS)}:{rng.randint(1, 3)}"
                    self.crashes_armed += 1
                calls.append(call)
        rng.shuffle(calls)
        self.round_calls = calls
        t0 = time.monotonic()
        self.round_t0 = time.time()
        # SIGKILLs at random instants: while the commands run (most of what lives then is a
        # command), then after they ended, while the jobs run (supervisors, wakers)
        early, late = (
            sorted(rng.uniform(lo, hi) for _ in range(self.kill_count(rng))) for lo, hi in ((0.05, 1.5), (0.0, 1.0))
        )
        for call in calls:
            self.start(call)
            time.sleep(rng.random() * 0.03)
        self.kill_at(rng, t0, early, calls)
        problems = []
        for call in calls:
            try:
                call.out, call.err = call.proc.communicate(timeout=90)
            except subprocess.TimeoutExpired:
                call.proc.kill()
                call.out, call.err = call.proc.communicate()
                problems.append(f"{call!r} did not end within 90s (a hang)")
            call.code = call.proc.returncode
            problems += self.check_call(call)
        self.kill_at(rng, time.monotonic(), late, calls)
        problems += self.settle()
        problems += self.check_round()
        self.log.append(f"round {self.rounds} ({time.monotonic() - t0:.2f}s): {calls}")
        return [f"{self.layout} round {self.rounds}: {p}" for p in problems]

    def kill_count(self, rng) -> int:
        return rng.choices((0, 1, 2), weights=(1 - self.kill_rate, self.kill_rate * 0.6, self.kill_rate * 0.4))[0]

    def kill_at(self, rng, t0: float, times: list[float], calls: list[Call]) -> None:
        for when in times:
            delay = t0 + when - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.kill_one(rng, calls)

    def kill_one(self, rng, calls: list[Call]) -> None:
        """SIGKILL one qex process of a random user: a command, a waker or (``kill_supervisors``)
        a supervisor."""
        procs = qex_processes(sorted(set(self.states)))
        if not procs:
            return
        by_call = {c.proc.pid: c for c in calls if c.proc.poll() is None}
        kinds: dict[tuple[int, str], list[int]] = {}
        for pid, uid in procs.items():
            if pid in by_call:
                kind = "command"
            else:
                targets = _fd_targets(pid)
                if any(os.path.basename(t).startswith("waker-") and t.endswith(".lock") for t in targets):
                    kind = "waker"
                elif any(t.endswith("/alive.lock") for t in targets) or _cmd(pid).startswith(SUPERVISOR):
                    kind = "supervisor"
                else:
                    kind = "other"  # a fork between two of these, or a command of the settling
            if kind != "supervisor" or self.kill_supervisors:
                kinds.setdefault((uid, kind), []).append(pid)
        if not kinds:
            return
        present = sorted({k for _, k in kinds})  # a kind first (supervisors the most), then a user who has one
        kind = rng.choices(present, weights=[KILL_WEIGHTS[k] for k in present])[0]
        uid = rng.choice(sorted(u for u, k in kinds if k == kind))
        pid = rng.choice(kinds[(uid, kind)])
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            return
        self.kills[kind] += 1
        self.killed[pid] = (time.time(), kind, uid)
        if pid in by_call:
            by_call[pid].killed = True

    def check_call(self, call: Call) -> list[str]:
        problems = []
        if "Traceback" in call.err:
            problems.append(f"{call!r} printed a traceback:\n{call.err[-1500:]}")
        for tag, claim in self.claims.items():  # no command prints another user's secret
            if claim["user"] != self.names[call.user] and claim["secret"] in call.out + call.err:
                problems.append(f"{call!r} printed the secret of {claim['user']}'s job {tag}")
        if call.op in ("submit", "fanout"):
            ids = [w for w in call.out.split() if len(w) == ID_LEN]
            if call.op == "submit":
                self.printed[call.user].update(ids)
        if call.code == -signal.SIGKILL and (call.killed or call.crash):
            return problems
        if call.code is not None and call.code < 0:
            return problems + [f"{call!r} died of signal {-call.code} that the test did not send"]
        if call.op in ("submit", "fanout"):
            if call.code != 0 or len(call.out.strip()) != ID_LEN:
                problems.append(f"{call!r} exited {call.code} printing {call.out.strip()[:80]!r}: {call.err[-500:]}")
        elif call.op.startswith("others-"):
            self.refusals += 1
            words = ("belongs to", "only its owner") if self.layout == "shared" else ("no job",)
            if call.code == 0 or not any(w in call.err for w in words):
                problems.append(
                    f"{call!r} acted on another user's job: exit {call.code}, "
                    f"stdout {call.out[-300:]!r}, stderr {call.err[-300:]!r}"
                )
        elif call.op in ("kill", "cancel"):
            if call.code not in (0, 1):
                problems.append(f"{call!r} exited {call.code}: {call.err[-500:]}")
        elif call.op in ("list", "status"):
            if call.code != 0:
                problems.append(f"{call!r} exited {call.code}: {call.err[-500:]}")
        elif call.op == "wait" and call.code != 124:
            self.deferred.append(call)
        return problems

    # ---- the end of a round ------------------------------------------------------------------
    def records(self) -> dict[str, tuple[int, str, dict | None]]:
        """Every job directory: id -> (index of the store's user, the store, status.json or None)."""
        out = {}
        for user, store in enumerate(self.stores()):
            jobs = os.path.join(store, "jobs")
            for name in sorted(os.listdir(jobs)) if os.path.isdir(jobs) else ():
                if name.startswith("."):
                    continue
                try:
                    with open(os.path.join(jobs, name, "status.json")) as fh:
                        rec = json.load(fh)
                except (OSError, ValueError):
                    rec = None
                out[name] = (user, store, rec)
        return out

    def stores(self) -> list[str]:
        """Each user's state directory (shared: their member directory), in the users' order."""
        if self.layout == "private":
            return list(self.states)
        return [os.path.join(self.states[0], f"member-{uid}") for uid in self.uids]

    def settle(self) -> list[str]:
        """The kills have stopped: each user types one plain command; then, within the
        bound, every job is final and no qex process is left."""
        problems = []
        # A process forked by a command armed with a crash point keeps its counts: a
        # supervisor or waker that may still die by it. The kills have stopped once the
        # last of them is gone: by itself (bounded), else by the test's SIGKILL.
        deadline = time.monotonic() + 20
        while (armed := self.armed_processes()) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid, uid in armed.items():
            try:
                os.kill(pid, signal.SIGKILL)
                self.kills["armed"] += 1
                self.killed[pid] = (time.time(), "process armed with a crash point", uid)
            except OSError:
                pass
        before = self.holders_now()  # (said only if the round does not settle)
        lists = []
        for user in range(len(self.names)):
            r = self.qex(user, "list")
            lists.append(f"{self.names[user]}: {r.stdout.strip()[-400:]!r}")
            if r.returncode != 0 or "Traceback" in r.stderr:
                problems.append(f"{self.names[user]}'s qex list exited {r.returncode}: {r.stderr[-800:]}")
        deadline = time.monotonic() + self.settle_limit
        states = sorted(set(self.states))
        while True:
            # (a directory without a record is a submission killed before its first event: no job)
            active = {j: v for j, v in self.records().items() if v[2] is not None and v[2].get("state") in inv.ACTIVE}
            procs = qex_processes(states)
            if not active and not procs:
                return problems
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        live = set(self.sampler.seen_jobs)
        for job, (user, store, rec) in sorted(active.items()):
            problems.append(
                f"{self.names[user]}'s job {job[:8]} is still {rec.get('state')} "
                f"{self.settle_limit:g}s after the kills stopped: "
                f"{rec.get('blocked_reason') or rec.get('error') or ''} "
                f"(its processes {'were seen' if job in live else 'never seen'} alive; "
                f"{self.job_dir_now(store, job, rec)})"
            )
        if active:
            problems.append(
                "this round's SIGKILLs: "
                + ", ".join(
                    f"{kind} {pid} of uid {uid} at +{when - self.round_t0:.2f}s"
                    for pid, (when, kind, uid) in self.killed.items()
                )
                + "; armed crash points: "
                + ", ".join(f"{c.op} of {self.names[c.user]}: {c.crash}" for c in self.round_calls if c.crash)
            )
        if active:
            problems.append("what the users' qex read then: " + self.peers_now())
            problems.append(f"before the users' qex list: {before}; their lists: {'; '.join(lists)}")
        if procs:
            problems.append(
                f"qex processes remain {self.settle_limit:g}s after the kills stopped: "
                + ", ".join(f"{pid} of uid {uid} ({_cmd(pid)[-60:]!r})" for pid, uid in sorted(procs.items()))
            )
        return problems

    def holders_now(self) -> str:
        """Each active job's lock files (alive.lock, its peer lock), who holds them; the
        users' wakers' locks."""
        held: dict[str, list[str]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                for t in _fd_targets(name):
                    if t.endswith(".lock"):
                        tag = _environ(name).get(TAG_VAR.encode())
                        held.setdefault(t, []).append(f"{name}{' (job ' + tag.decode() + ')' if tag else ''}")
        out = []
        for job, (user, store, rec) in sorted(self.records().items()):
            if rec and rec.get("state") in inv.ACTIVE:
                alive = os.path.join(store, "jobs", job, "alive.lock")
                peer = [
                    t for t in held if os.path.basename(t).startswith(f"u{self.uids[user]}-") and f".{job[:8]}." in t
                ]
                out.append(
                    f"{self.names[user]}'s {job[:8]} {rec.get('state')}: alive.lock held by "
                    f"{held.get(alive) or 'nobody'}, peer lock by {[held[t] for t in peer] or 'nobody'}"
                )
        wakers = {t: pids for t, pids in held.items() if os.path.basename(t).startswith("waker-")}
        return "; ".join(out) + f"; waker locks held: {wakers or 'none'}"

    def armed_processes(self) -> dict[int, int]:
        return {
            pid: uid for pid, uid in qex_processes(sorted(set(self.states))).items() if b"QEX_CRASH_AT" in _environ(pid)
        }

    def job_dir_now(self, store: str, job: str, rec: dict) -> str:
        d = os.path.join(store, "jobs", job)
        try:
            names = sorted(os.listdir(d))
        except OSError:
            names = []
        pid = (_read(os.path.join(d, "pid")) or b"").decode(errors="replace").strip().replace("\n", " | ")
        log = (_read(os.path.join(d, "supervisor.log")) or b"").decode(errors="replace")[-300:]
        waker = (_read(os.path.join(store, "waker.log")) or b"").decode(errors="replace")[-300:]
        return (
            f"supervisor_pid {rec.get('supervisor_pid')}, files {names}, pid file {pid!r}, "
            f"supervisor.log {log!r}, waker.log {waker!r}, {_journal_and_index(store, job)}"
        )

    def peers_now(self) -> str:
        """The peer directory in words (for a stuck round): each record's jobs, each lock's holders."""
        holders: dict[str, list[str]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                for t in _fd_targets(name):
                    if t.startswith(self.world.peers + "/"):
                        env = _environ(name)
                        what = "job " + env[TAG_VAR.encode()].decode() if TAG_VAR.encode() in env else _cmd(name)[:70]
                        holders.setdefault(os.path.basename(t), []).append(f"pid {name} uid {_uid_of(name)} {what!r}")
        out = []
        for name in sorted(os.listdir(self.world.peers)):
            path = os.path.join(self.world.peers, name)
            if name.endswith(".json"):
                try:
                    with open(path) as fh:
                        rec = json.load(fh)
                    jobs = [(j.get("cpu"), j.get("pools"), j.get("lock")) for j in rec.get("jobs", ())]
                except (OSError, ValueError) as exc:
                    jobs = [repr(exc)]
                out.append(f"record {name} of uid {os.stat(path).st_uid}: {jobs}")
            elif name.endswith(".lock"):
                out.append(f"lock {name}: held by {holders.get(name) or 'nobody'}")
        procs = qex_processes(sorted(set(self.states)))
        out.append(
            "qex processes: " + ", ".join(f"{pid} uid {uid} {_cmd(pid)[-50:]!r}" for pid, uid in sorted(procs.items()))
        )
        out.append(f"jobs alive: {self.sampler.last_live or 'none'}")
        return "; ".join(out)

    def runs(self) -> tuple[dict, dict]:
        """The start log: (id, attempt) -> times started; id -> (tag, uid it ran as)."""
        runs, who = {}, {}
        with open(self.log_path) as fh:
            for line in fh:
                parts = line.split()
                if len(parts) != 5 or parts[0] != "start":
                    continue
                _, tag, job, attempt, uid = parts
                runs[(job, int(attempt))] = runs.get((job, int(attempt)), 0) + 1
                who[job] = (tag, int(uid))
        return runs, who

    def check_round(self) -> list[str]:
        from qex.base import outcome
        from qex.store import records as recs

        problems = []
        records = self.records()
        self.jobs = sum(1 for v in records.values() if v[2] is not None)
        # one budget
        flat = {j: v[2] or {} for j, v in records.items()}
        armed = ", ".join(f"{self.names[c.user]}'s {c.op}: {c.crash}" for c in self.round_calls if c.crash)
        holds = self.sampler.take_admit_holds()
        self.admit_long += sum(1 for a, b, _ in holds if b - a > ADMIT_WAIT)
        self.admit_holds += len(holds)
        for ep in self.sampler.take():
            long = [
                f"pid {pid} {b - a:.2f}s ending {b - ep.get('at', b):+.2f}s"
                for a, b, pid in holds
                if b - a > ADMIT_WAIT and ep.get("at", b) - 5 < b < ep.get("at", b) + 1
            ]
            problems.append(
                describe_episode(ep, self.claims, flat, self.killed)
                + f"; crash points armed this round: {armed or 'none'}"
                + f"; admission lock held over {ADMIT_WAIT}s (the others then admit without it) "
                f"around then: {long or 'never'}"
            )
        runs, who = self.runs()
        # each user's state directory keeps every single-user promise
        for user, store in enumerate(self.stores()):
            if not os.path.isdir(store):
                continue
            try:
                view = inv.read_view(store)
            except AssertionError as exc:
                problems.append(str(exc))
                continue
            mine = {k: n for k, n in runs.items() if k[0] in view.status}
            problems += [
                f"{self.names[user]}: {p}" for p in inv.check(view, known=self.printed[user], quiescent=True, runs=mine)
            ]
        # true owners
        problems += self.check_owners(records, who)
        # nobody's job ended by another's hand; a wait's code is its job's
        for job, (user, _store, rec) in records.items():
            if rec is None:
                continue
            state = rec.get("state")
            if state in ("cancelled", "killed") and not (self.owner_acted.get(job, set()) & {"kill", "cancel"}):
                problems.append(
                    f"{self.names[user]}'s job {job[:8]} ended {state} but its owner never asked "
                    f"({rec.get('error') or ''})"
                )
        for call in self.deferred:
            rec = flat.get(call.target)
            want = outcome.exit_code(recs.load(recs.Status, rec)) if rec else None
            if rec and rec.get("state") in inv.FINAL and call.code != want:
                problems.append(
                    f"{call!r} exited {call.code} but its job {call.target[:8]} is {rec.get('state')} "
                    f"which means {want}"
                )
        self.deferred.clear()
        problems += self.check_secrets()
        return problems

    def check_owners(self, records: dict, who: dict) -> list[str]:
        problems = []
        for user, store in enumerate(self.stores()):
            if os.path.isdir(store) and os.stat(store).st_uid != self.uids[user]:
                problems.append(f"{store} is owned by uid {os.stat(store).st_uid}, not {self.names[user]}")
        for job, (user, store, rec) in records.items():
            if rec is None:
                continue
            uid, name = self.uids[user], self.names[user]
            path = os.path.join(store, "jobs", job, "status.json")
            try:
                file_uid = os.stat(path).st_uid
            except OSError:
                file_uid = None
            if (rec.get("uid"), rec.get("owner"), file_uid) != (uid, name, uid):
                problems.append(
                    f"job {job[:8]} in {name}'s directory says uid {rec.get('uid')} owner "
                    f"{rec.get('owner')!r}, its status.json is owned by uid {file_uid}"
                )
            try:
                with open(os.path.join(store, "jobs", job, "spec.json")) as fh:
                    tag = (json.load(fh).get("env") or {}).get(TAG_VAR)
            except (OSError, ValueError):
                tag = None
            claim = self.claims.get(tag)
            if claim is not None and claim["uid"] != uid:
                problems.append(f"job {job[:8]} of {claim['user']}'s submission {tag} is in {name}'s directory")
            if job in who:
                ran_tag, ran_uid = who[job]
                if ran_uid != uid or (tag is not None and ran_tag != tag):
                    problems.append(f"job {job[:8]} of {name} ran as uid {ran_uid} with the tag {ran_tag}")
        return problems

    def check_secrets(self) -> list[str]:
        """As each user: read every file under the test's directory; none readable holds
        another user's secret."""
        problems = []
        for user, name in enumerate(self.names):
            theirs = {c["secret"]: f"{c['user']}'s {tag}" for tag, c in self.claims.items() if c["user"] != name}
            if not theirs:
                continue
            r = subprocess.run(
                self.users.wrap(name, [self.users.python, "-c", READ_ALL, self.world.dir]),
                input=json.dumps(theirs),
                env=self.users.env({}),
                cwd="/",
                capture_output=True,
                text=True,
                timeout=60,
            )
            if r.returncode != 0:
                problems.append(f"the reading of every file as {name} failed: {r.stderr[-500:]}")
                continue
            for path, whose in json.loads(r.stdout):
                problems.append(f"{name} can read {path}, which holds the secret of {whose}")
        return problems

    def summary(self) -> str:
        kills = ", ".join(f"{n} {k}s" for k, n in self.kills.items() if n)
        return (
            f"{self.layout} seed {self.seed}: {len(self.names)} users, {self.rounds} rounds, {self.calls} qex "
            f"commands, {self.jobs} jobs, {sum(self.kills.values())} SIGKILLs ({kills or 'none'}), "
            f"{self.crashes_armed} armed crash points, {self.refusals} refusals checked, "
            f"{self.admit_long} of {self.admit_holds} holds of the admission lock over {ADMIT_WAIT}s, "
            f"{self.sampler.scans} samples (peak {self.sampler.peak['cpu'] / 1000:g} cores, "
            f"{self.sampler.peak['mem'] / GB:.2f}GB, {self.sampler.peak['net']} net)"
        )


# Run as one test user: every regular file under a directory that this user can read,
# searched for the secrets given on stdin (secret -> whose); prints [path, whose] pairs.
READ_ALL = r"""
import json, os, sys
secrets = {k.encode(): v for k, v in json.load(sys.stdin).items()}
found = []
for top, dirs, files in os.walk(sys.argv[1]):
    for name in files:
        path = os.path.join(top, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            data = os.read(fd, 4 << 20)
        except OSError:
            data = b""
        finally:
            os.close(fd)
        found += [[path, whose] for s, whose in secrets.items() if s in data]
print(json.dumps(found))
"""


def run_rounds(
    users: Users,
    layout: str,
    seed: int,
    rounds: int | None = None,
    minutes: float | None = None,
    stop_at_first: bool = True,
    fresh_every: int = 40,
    on_round=None,
    **kw,
) -> tuple[list[str], dict]:
    """Rounds in one layout, a fresh directory every ``fresh_every``; returns the violations and totals."""
    totals = {"rounds": 0, "jobs": 0, "kills": 0, "commands": 0, "refusals": 0}
    kinds = {k: 0 for k in KINDS + ("other", "armed")}
    problems: list[str] = []
    end = None if minutes is None else time.monotonic() + minutes * 60
    part = 0

    def more() -> bool:
        if stop_at_first and problems:
            return False
        if rounds is not None and totals["rounds"] >= rounds:
            return False
        return end is None or time.monotonic() < end

    while more():
        h = MultiHarness(users, layout, seed + part, **kw)
        try:
            while more() and h.rounds < fresh_every:
                got = h.round()
                totals["rounds"] += 1
                problems += [f"(seed {h.seed}) {p}" for p in got]
                if on_round is not None:
                    on_round(h, got)
        finally:
            h.close()
            totals["jobs"] += h.jobs
            totals["commands"] += h.calls
            totals["refusals"] += h.refusals
            for k, n in h.kills.items():
                kinds[k] += n
            totals["kills"] += sum(h.kills.values())
            totals["last"] = h.summary()
            totals["log"] = h.log[-2:]
        part += 1
    totals["kinds"] = kinds
    return problems, totals
