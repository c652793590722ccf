#!/usr/bin/env python3
"""qex side by side with task-spooler, nq and GNU parallel, in one run.

    /tmp/v/bin/python bench/run.py [--quick] [--only NAME,...] [--json OUT]
                                   [--no-peers] [--no-install] [--set KEY=VALUE ...]

Run it with the interpreter of the venv qex is installed in (never a pyenv
shim). Standard library only. bench/README.md says what each workload
measures and how to read the table. Raw results go to
bench/results/<timestamp>.json (and to OUT with --json).
"""

import argparse
import dataclasses
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FLOOR = os.path.join(HERE, "floor_submit.py")
RESULTS = os.path.join(HERE, "results")
# A run removes its temporary tree (100,000 records with the history workload). On
# an ext4 without a journal the kernel then skips the freed inodes for minutes when
# it makes new ones, and every file a queue makes costs far more (bench/README.md):
# a run waits until SETTLE_SECS have passed since the last run's removal. The kernel
# skips an inode freed less than 60 s ago, and less than 360 s ago while its block
# of the inode table is still dirty (fs/ext4/ialloc.c, recently_deleted:
# RECENTCY_MIN 60 + RECENTCY_DIRTY 300), which the new files of a drain keep it.
SETTLE_SECS = 420
CLEANED_AT = os.path.join(tempfile.gettempdir(), "qex-bench-cleaned-at")

FINAL = frozenset(("completed", "failed", "killed", "timeout", "oom", "expired", "cancelled", "skipped"))
TAG_VAR = "QEX_BENCH_TAG"
# binary -> Debian package
PEERS = {"tsp": "task-spooler", "nq": "nq", "parallel": "parallel", "hyperfine": "hyperfine"}
WORKLOADS = ("submit", "first", "drain", "history", "fanout", "memory", "cpu", "events")
CONFIG = '[budget]\ncpu = 2\n\n[defaults]\nmem = "64MB"\n'
WAIT_LIMIT = 120.0  # seconds any single wait may take before the row is an error


@dataclasses.dataclass
class Sizes:
    """How much of each workload; --quick and --set change these."""

    warmup: int = 2
    submit_n: int = 30
    first_n: int = 20
    drain_n: int = 1000
    drain_rounds: int = 5  # interleaved rounds of every tool's drain
    history: tuple = (0, 10_000, 100_000)
    history_submit_n: int = 30
    list_n: int = 5
    list_n_large: int = 3  # list samples at >= 50,000 records
    fanout_n: int = 1000
    fanout_samples: int = 3
    waiting: int = 20
    output_mb: int = 200
    cpu_samples: int = 3
    events_n: int = 10


QUICK = dict(
    warmup=1,
    submit_n=5,
    first_n=5,
    drain_n=50,
    drain_rounds=1,
    history=(0, 1000),
    history_submit_n=5,
    list_n=2,
    list_n_large=2,
    fanout_n=1000,
    fanout_samples=1,
    output_mb=20,
    cpu_samples=1,
    events_n=3,
)


class BenchError(Exception):
    """A workload could not be measured; its row says why."""


# ---- small helpers -------------------------------------------------------------


def log(text: str) -> None:
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {text}\n")
    sys.stderr.flush()


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as fh:
            return " ".join(fh.read().split()[:3])
    except OSError:
        return "?"


def median(xs):
    return statistics.median(xs) if xs else None


def new_id() -> str:
    h = bytearray(os.urandom(16))
    h[6] = (h[6] & 0x0F) | 0x40
    h[8] = (h[8] & 0x3F) | 0x80
    x = h.hex()
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


def run_timed(argv, env, cwd=None, timeout=WAIT_LIMIT, stdin=None):
    """Run argv to its exit; returns (seconds, stdout text, returncode).

    stdout goes to a file, not a pipe, so a detached child that kept the
    pipe open could not stretch the measurement: we time the process exit.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as errf:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=out, stderr=errf, stdin=stdin if stdin is not None else subprocess.DEVNULL
        )
        rc, timed_out = wait_exact(proc, timeout)
        secs = time.perf_counter() - t0
        if timed_out:
            raise BenchError(f"{' '.join(argv[:4])}... took more than {timeout:.0f}s")
        out.seek(0)
        errf.seek(0)
        text = out.read().decode(errors="replace")
        if rc != 0:
            raise BenchError(
                f"{' '.join(map(str, argv[:6]))} exited {rc}: {errf.read().decode(errors='replace').strip()[:300]}"
            )
    return secs, text, rc


def wait_exact(proc: subprocess.Popen, timeout: float) -> tuple[int, bool]:
    """Wait in a blocking waitpid (Popen.wait(timeout) polls with sleeps of up to 50 ms,
    which would round every sample up); a timer kills the process at the limit."""
    fired = threading.Event()

    def expire():
        fired.set()
        try:
            proc.kill()
        except OSError:
            pass

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        rc = proc.wait()
    finally:
        timer.cancel()
    return rc, fired.is_set()


def quiet(argv, env, cwd=None, timeout=WAIT_LIMIT, check=False):
    proc = subprocess.run(
        argv,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise BenchError(
            f"{' '.join(map(str, argv[:6]))} exited {proc.returncode}: "
            f"{proc.stderr.decode(errors='replace').strip()[:300]}"
        )
    return proc


def poll(predicate, what: str, limit: float = WAIT_LIMIT, every: float = 0.005):
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise BenchError(f"gave up waiting {limit:.0f}s for {what}")
        time.sleep(every)


# ---- processes ----------------------------------------------------------------


def _proc_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2 :][:1].decode()


def alive(pid: int) -> bool:
    return _proc_state(pid) not in (None, "Z", "X")


def tagged_pids(tag: str, prefix: bool = False) -> list[int]:
    """Live processes whose environment carries QEX_BENCH_TAG=tag (ours, by construction);
    with ``prefix``, every tag that starts with ``tag``."""
    needle = f"{TAG_VAR}={tag}".encode() if prefix else f"{TAG_VAR}={tag}\0".encode()
    found = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if needle in env + b"\0" and alive(int(name)):
            found.append(int(name))
    return found


def wait_untagged(tag: str, keep=(), limit: float = WAIT_LIMIT) -> None:
    """Until no process of this tag (other than ``keep``) is alive: the tool is idle."""
    poll(lambda: not [p for p in tagged_pids(tag) if p not in keep], f"the processes of {tag} to end", limit)


def uss(pid: int) -> int | None:
    """Unique set size in bytes: Private_Clean + Private_Dirty of smaps_rollup."""
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith(("Private_Clean:", "Private_Dirty:")):
                    total += int(line.split()[1]) * 1024
    except OSError:
        return None
    return total


def ppid_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return int(data[data.rindex(b")") + 2 :].split()[1])


def comm_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return "?"


def kill_pids(pids) -> None:
    """End processes this harness started (found by its tag), by their id."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        time.sleep(0.2)
        pids = [p for p in pids if alive(p)]
        if not pids:
            return


# ---- the tools ----------------------------------------------------------------


def find_qex() -> tuple[list[str], str]:
    """argv prefix for qex, and the interpreter it runs on (for `python -c pass`).

    The console script beside this interpreter is what a user runs; its
    shebang names the interpreter. A pyenv shim is never used.
    """
    script = os.path.join(os.path.dirname(sys.executable), "qex")
    if os.path.isfile(script) and os.access(script, os.X_OK):
        with open(script, "rb") as fh:
            first = fh.readline().decode(errors="replace").strip()
        interp = first[2:].strip().split()[0] if first.startswith("#!") else ""
        if interp and os.path.exists(interp) and "shims" not in interp:
            return [script], interp
    return [sys.executable, "-m", "qex"], sys.executable


class Tool:
    """One fresh instance of a tool: its own directories and environment."""

    counter = 0

    def __init__(self, bench, kind: str):
        Tool.counter += 1
        self.bench, self.kind = bench, kind
        self.tag = f"{bench.run_tag}-{kind}-{Tool.counter}"
        self.root = tempfile.mkdtemp(prefix=f"{kind}-", dir=bench.tmp)
        self.env = dict(bench.base_env)
        self.env[TAG_VAR] = self.tag
        self.env["TMPDIR"] = self.root

    def idle(self, keep=()):
        wait_untagged(self.tag, keep)

    def kill_all(self):
        kill_pids(tagged_pids(self.tag))


class Qex(Tool):
    def __init__(self, bench, config: str = CONFIG):
        super().__init__(bench, "qex")
        self.state = os.path.join(self.root, "state")
        self._jobs = None
        cfg = os.path.join(self.root, "qex.toml")
        with open(cfg, "w") as fh:
            fh.write(config)
        self.env.update(QEX_STATE_DIR=self.state, QEX_CONFIG=cfg, QEX_PEER_DIR=os.path.join(self.root, "peers"))
        self._final: set[str] = set()
        if bench.shared:  # --shared: the state directory is one that `qex init --shared` made
            subprocess.run(
                self.argv("init", "--shared", self.state), env=self.env, cwd=self.root, capture_output=True, check=True
            )

    @property
    def jobs(self) -> str:
        """The job directories: STATE/jobs, or (a shared directory of a qex with one
        directory per member) the first member's, once it exists."""
        if self._jobs is None:
            plain = os.path.join(self.state, "jobs")
            members = (
                sorted(n for n in os.listdir(self.state) if n.startswith("member-"))
                if os.path.isdir(self.state)
                else []
            )
            if os.path.isdir(plain) or members:
                self._jobs = plain if os.path.isdir(plain) else os.path.join(self.state, members[0], "jobs")
            else:
                return plain
        return self._jobs

    def argv(self, *args) -> list[str]:
        return self.bench.qex + [str(a) for a in args]

    def submit(self, *args) -> tuple[float, str]:
        secs, out, _ = run_timed(self.argv("submit", *args), self.env, cwd=self.root)
        job_id = out.strip().splitlines()[-1] if out.strip() else ""
        if not job_id:
            raise BenchError(f"qex submit {' '.join(args)} printed no id")
        return secs, job_id

    def record(self, job_id: str) -> dict | None:
        try:
            with open(os.path.join(self.jobs, job_id, "status.json")) as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return None

    def job_ids(self) -> list[str]:
        try:
            return [n for n in os.listdir(self.jobs) if not n.startswith(".")]
        except FileNotFoundError:
            return []

    def all_final(self, expect: int | None = None) -> bool:
        ids = self.job_ids()
        if expect is not None and len(ids) < expect:
            return False
        for job_id in ids:
            if job_id in self._final:
                continue
            rec = self.record(job_id)
            if rec is None or rec.get("state") not in FINAL:
                return False
            self._final.add(job_id)
        return True

    def drain(self, expect=None, every=0.005, limit=WAIT_LIMIT):
        poll(lambda: self.all_final(expect), "every qex record to be final", limit, every)

    def quiesce(self, limit=WAIT_LIMIT):
        """Every record final and no process of this queue left: an idle queue."""
        self.drain(limit=limit)
        wait_untagged(self.tag, limit=limit)


# ---- the harness ----------------------------------------------------------------


class Bench:
    def __init__(self, sizes: Sizes, only, use_peers: bool, install: bool, results_dir: str | None, quick: bool):
        self.sizes, self.only, self.quick = sizes, only, quick
        self.shared = False  # --shared (execute sets it)
        self.use_peers, self.install = use_peers, install
        self.results_dir = results_dir
        self.qex, self.python = find_qex()
        self.run_tag = f"{os.getpid()}-{int(time.time())}"
        self.tmp = tempfile.mkdtemp(prefix="qex-bench-")
        self.base_env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("QEX_", "TS_", "NQ")) and k not in ("CUDA_VISIBLE_DEVICES",)
        }
        # An installed qex has its bytecode compiled. This shell may say
        # PYTHONDONTWRITEBYTECODE=1 and then an editable qex compiles every
        # module on every call; give Python a private cache instead (nothing is
        # written beside the sources). Workload 1 also measures the other way.
        self.base_env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.base_env["PYTHONPYCACHEPREFIX"] = os.path.join(self.tmp, "pycache")
        self.rows: list[dict] = []
        self.peers: dict[str, str | None] = {}
        self.notes: list[str] = []
        self.features: dict[str, bool] = {}
        self.load: dict[str, str] = {}
        self.head_at_start: str | None = None

    # -- rows --
    def row(self, workload, metric, tool, samples=(), unit="s", note="", vs=None, lower_better=True, **extra):
        r = dict(
            workload=workload,
            metric=metric,
            tool=tool,
            unit=unit,
            samples=list(samples),
            note=note,
            median=median(list(samples)),
            min=min(samples) if samples else None,
            max=max(samples) if samples else None,
            vs=vs,
            lower_better=lower_better,
            **extra,
        )
        self.rows.append(r)
        return r

    def na(self, workload, metric, tool, why, unit="s"):
        return self.row(workload, metric, tool, (), unit, note=f"n/a: {why}")

    def find(self, workload, metric, tool):
        for r in self.rows:
            if (r["workload"], r["metric"], r["tool"]) == (workload, metric, tool) and r["median"] is not None:
                return r
        return None

    def peer(self, binary: str) -> str | None:
        return self.peers.get(binary)

    # -- setup --
    def prepare(self):
        try:
            self.head_at_start = (
                subprocess.run(
                    ["git", "-C", ROOT, "rev-parse", "HEAD"],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    timeout=10,
                )
                .stdout.decode()
                .strip()
            )
        except Exception:
            self.head_at_start = None
        log(f"qex: {' '.join(self.qex)}  (interpreter {self.python}); temp {self.tmp}")
        if "shims" in sys.executable:
            self.notes.append(f"warning: {sys.executable} looks like a pyenv shim; numbers include it")
        self.features["each_line"] = self._supports(["submit", "--help"], "--each-line")
        self.features["events"] = self._command_exists("events")
        if self.use_peers:
            self.peers = ensure_peers(self.install, self.tmp)
        else:
            self.peers = {b: None for b in PEERS}
        for b, path in self.peers.items():
            log(f"peer {b}: {path or 'missing'}")
        self.prime()

    def prime(self):
        """Run each qex command once, so that the bytecode cache is warm before any sample."""
        q = Qex(self)
        try:
            _, job_id = q.submit("--", "true")
            q.quiesce()
            for args in (
                ["list"],
                ["list", "--state", "running"],
                ["status", job_id],
                ["wait", job_id],
                ["info"],
                ["kill", job_id],
                ["cancel", job_id],
                ["version"],
            ):
                quiet(q.argv(*args), q.env, cwd=q.root)
            quiet([self.python, FLOOR, os.path.join(q.root, "floor"), "--", "true"], q.env)
            quiet([self.python, "-c", "pass"], q.env)
            q.quiesce()
        except Exception as exc:
            log(f"priming the bytecode cache: {exc}")

    def _supports(self, args, word) -> bool:
        try:
            proc = quiet(self.qex + args, self.base_env, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return word in proc.stdout.decode(errors="replace")

    def _command_exists(self, name) -> bool:
        try:
            proc = quiet(self.qex + [name, "--help"], self.base_env, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return proc.returncode == 0

    # -- running --
    def run(self):
        self.prepare()
        started = time.time()
        for name in WORKLOADS:
            if self.only and name not in self.only:
                continue
            self.load[name] = loadavg()
            log(f"workload {name} (load average {self.load[name]})")
            t0 = time.monotonic()
            try:
                globals()[f"w_{name}"](self)
            except Exception as exc:  # one workload's failure is a row, never a crash
                self.row(name, "error", "qex", (), note=f"error: {type(exc).__name__}: {exc}")
                log(f"workload {name} failed: {exc}")
            log(f"workload {name} took {time.monotonic() - t0:.1f}s")
        self.elapsed = time.time() - started
        self.targets = targets(self)

    def cleanup(self, mark: bool = True):
        left = tagged_pids(f"{self.run_tag}-", prefix=True)
        if left:
            log(f"ending {len(left)} process(es) this run left: {', '.join(f'{p} {comm_of(p)}' for p in left)}")
            kill_pids(left)
        log(f"removing {self.tmp}")
        if mark:
            mark_removal(f"{REMOVING} {os.getpid()}")  # (a run started meanwhile waits for it: settle)
        shutil.rmtree(self.tmp, ignore_errors=True)
        if mark:
            mark_removal(time.time())

    def result(self) -> dict:
        return {
            "meta": meta(self),
            "sizes": dataclasses.asdict(self.sizes),
            "rows": self.rows,
            "targets": self.targets,
            "notes": self.notes,
        }


def ensure_peers(install: bool, tmp: str) -> dict:
    """Install the missing peers from Debian's packages; a failure leaves them missing."""
    missing = sorted({pkg for b, pkg in PEERS.items() if not shutil.which(b)})
    if missing and install:
        prefix = []
        if os.geteuid() != 0:
            prefix = ["sudo", "-n"] if shutil.which("sudo") else None
        if prefix is None or not shutil.which("apt-get"):
            log("cannot install peers (no apt-get, or not root and no sudo); their rows are n/a")
        else:
            env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
            logf = os.path.join(tmp, "apt.log")
            log(f"installing {' '.join(missing)} with apt-get (log: {logf})")
            with open(logf, "ab") as fh:

                def apt(*args):
                    try:
                        return subprocess.run(
                            prefix + ["apt-get", *args],
                            env=env,
                            stdout=fh,
                            stderr=fh,
                            stdin=subprocess.DEVNULL,
                            timeout=900,
                        ).returncode
                    except (OSError, subprocess.TimeoutExpired):
                        return 1

                if apt("install", "-y", *missing) != 0:
                    apt("update")
                    if apt("install", "-y", *missing) != 0:
                        log("apt-get install failed; the missing peers' rows are n/a")
    return {b: shutil.which(b) for b in PEERS}


def meta(b: Bench) -> dict:
    def version(argv):
        try:
            p = subprocess.run(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=10, stdin=subprocess.DEVNULL
            )
            return p.stdout.decode(errors="replace").strip().splitlines()[0][:120]
        except Exception:
            return None

    def git(*args):
        try:
            return (
                subprocess.run(
                    ["git", "-C", ROOT, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=10
                )
                .stdout.decode()
                .strip()
            )
        except Exception:
            return None

    return {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "python": b.python,
        "python_version": platform.python_version(),
        "qex": b.qex,
        "qex_version": version(b.qex + ["version"]),
        "git_head_at_start": b.head_at_start,
        "git_head_at_end": git("rev-parse", "HEAD"),
        "git_dirty_qex_at_end": bool(git("status", "--porcelain", "qex")),
        "quick": b.quick,
        "only": sorted(b.only) if b.only else None,
        "features": b.features,
        "peers": {
            k: (
                v,
                version([v, "-V"])
                if v and k == "tsp"
                else version([v, "--version"])
                if v and k in ("parallel", "hyperfine")
                else None,
            )
            for k, v in b.peers.items()
        },
        "elapsed_secs": round(getattr(b, "elapsed", 0.0), 1),
        "config": CONFIG,
        "load_at_start_of_each_workload": b.load,
        "load_at_end": loadavg(),
    }


# ---- interleaved sampling ----------------------------------------------------------


class Sampler:
    """One tool's way to take one sample; samples of all tools are interleaved
    (round-robin) so that a change of load on a shared machine hits them alike."""

    def __init__(self, label, sample, setup=None, teardown=None, note="", missing=None, **extra):
        self.label, self.sample, self.setup, self.teardown = label, sample, setup, teardown
        self.note, self.missing, self.extra = note, missing, extra
        self.samples: list[float] = []
        self.error: str | None = None


def interleave(b: "Bench", W: str, M: str, samplers: list[Sampler], n: int, unit="s") -> None:
    live = []
    for sp in samplers:
        if sp.missing:
            continue
        try:
            if sp.setup:
                sp.setup()
            live.append(sp)
        except Exception as exc:
            sp.error = f"{type(exc).__name__}: {exc}"
    try:
        for i in range(b.sizes.warmup + n):
            for sp in live:
                if sp.error:
                    continue
                try:
                    value = sp.sample()
                except Exception as exc:
                    sp.error = f"{type(exc).__name__}: {exc}"
                    continue
                if i >= b.sizes.warmup:
                    sp.samples.append(value)
    finally:
        for sp in live:
            if sp.teardown:
                try:
                    sp.teardown()
                except Exception as exc:
                    log(f"teardown of {sp.label}: {exc}")
    for sp in samplers:
        if sp.missing:
            b.na(W, sp.extra.get("metric", M), sp.label, sp.missing, unit)
        elif sp.error:
            b.row(W, sp.extra.get("metric", M), sp.label, (), unit, note=f"error: {sp.error}")
        else:
            b.row(W, sp.extra.get("metric", M), sp.label, sp.samples, unit, note=sp.note, vs=sp.extra.get("vs"))


def timed_only(argv, env, after=None, cwd=None):
    def sample():
        secs, _, _ = run_timed(argv, env, cwd=cwd)
        if after:
            after()
        return secs

    return sample


def tsp_tool(b: "Bench", slots="2") -> tuple[Tool, callable, callable]:
    t = Tool(b, "tsp")
    path = b.peer("tsp")

    def setup():
        quiet([path, "-S", slots], t.env, check=True)

    def teardown():
        quiet([path, "-K"], t.env)
        t.kill_all()

    return t, setup, teardown


def nq_tool(b: "Bench") -> Tool:
    t = Tool(b, "nq")
    t.env["NQDIR"] = os.path.join(t.root, "nq")
    os.mkdir(t.env["NQDIR"])
    return t


def missing(b: "Bench", binary: str) -> str | None:
    if b.peer(binary):
        return None
    return "--no-peers" if not b.use_peers else f"{PEERS[binary]} is not installed"


# ---- workload 1: submit latency on an idle queue ---------------------------------


def w_submit(b: Bench):
    n = b.sizes.submit_n
    W, M = "1 submit", "idle submit"
    q = Qex(b)
    floor = Tool(b, "floor")
    samplers = [
        Sampler("qex submit", lambda: qex_submit_sample(q)),
        Sampler("python -c pass", timed_only([b.python, "-c", "pass"], b.base_env)),
        Sampler(
            "python -S -c pass",
            timed_only([b.python, "-S", "-c", "pass"], b.base_env),
            note="info: the interpreter without site (the venv's .pth files)",
        ),
        Sampler(
            FLOOR_LABEL,
            timed_only([b.python, FLOOR, os.path.join(floor.root, "state"), "--", "true"], floor.env, floor.idle),
        ),
    ]
    samplers += peer_submit_samplers(b)
    q2 = Qex(b)
    q2.env.pop("PYTHONPYCACHEPREFIX", None)
    q2.env["PYTHONDONTWRITEBYTECODE"] = "1"
    have = os.path.isdir(os.path.join(ROOT, "qex", "__pycache__"))
    samplers.append(
        Sampler(
            "qex submit, PYTHONDONTWRITEBYTECODE=1",
            lambda: qex_submit_sample(q2),
            note=f"info: as a shell with that variable runs it; qex/__pycache__ "
            f"{'exists' if have else 'absent: every qex module compiled on every call'}",
        )
    )
    interleave(b, W, M, samplers, n)


FLOOR_LABEL = "python floor (flock+fsync+double-fork)"


def qex_submit_sample(q: "Qex") -> float:
    """One timed `qex submit -- true`; then (untimed) wait for an idle queue."""
    secs, _ = q.submit("--", "true")
    q.quiesce()
    return secs


def peer_submit_samplers(b: Bench) -> list[Sampler]:
    out = []
    tsp, nq, par = b.peer("tsp"), b.peer("nq"), b.peer("parallel")
    if tsp:
        ts, setup, teardown = tsp_tool(b)
        out.append(
            Sampler("tsp", timed_only([tsp, "true"], ts.env, lambda: quiet([tsp, "-w"], ts.env)), setup, teardown)
        )
    else:
        out.append(Sampler("tsp", None, missing=missing(b, "tsp")))
    if nq:
        tn = nq_tool(b)
        out.append(Sampler("nq", timed_only([nq, "true"], tn.env, lambda: quiet([nq, "-w"], tn.env))))
    else:
        out.append(Sampler("nq", None, missing=missing(b, "nq")))
    if par:
        tp = Tool(b, "parallel")
        out.append(
            Sampler(
                "parallel ::: true",
                timed_only([par, "--will-cite", ":::", "true"], tp.env),
                note="runs the job before it returns",
            )
        )
    else:
        out.append(Sampler("parallel ::: true", None, missing=missing(b, "parallel")))
    return out


# ---- workload 2: submit to the job's first instruction ----------------------------


def stamp_job(path: str) -> list[str]:
    return ["/bin/sh", "-c", f"echo $(date +%s%N) > {path}"]


def first_sampler(tool: Tool, argv_for, idle):
    """time.time_ns() just before the submitting process starts -> the job's `date +%s%N`."""
    counter = [0]

    def sample():
        counter[0] += 1
        path = os.path.join(tool.root, f"stamp-{counter[0]}")
        argv = argv_for(path)
        t0 = time.time_ns()
        run_timed(argv, tool.env, cwd=tool.root)

        def stamped():
            try:
                with open(path) as fh:
                    text = fh.read().strip()
                return int(text) if text else None
            except (OSError, ValueError):
                return None

        t_job = poll(stamped, "the job's first instruction", 30, 0.001)
        idle()
        return (t_job - t0) / 1e9

    return sample


def w_first(b: Bench):
    n = b.sizes.first_n
    W, M = "2 first instruction", "submit -> job's first instruction"
    q = Qex(b)
    floor = Tool(b, "floor")
    st = os.path.join(floor.root, "state")
    samplers = [
        Sampler("qex submit", first_sampler(q, lambda p: q.argv("submit", "--", *stamp_job(p)), q.quiesce)),
        Sampler("python floor", first_sampler(floor, lambda p: [b.python, FLOOR, st, "--", *stamp_job(p)], floor.idle)),
    ]
    tsp, nq, par = b.peer("tsp"), b.peer("nq"), b.peer("parallel")
    if tsp:
        t, setup, teardown = tsp_tool(b)
        samplers.append(
            Sampler(
                "tsp",
                first_sampler(t, lambda p: [tsp, *stamp_job(p)], lambda: quiet([tsp, "-w"], t.env)),
                setup,
                teardown,
            )
        )
    else:
        samplers.append(Sampler("tsp", None, missing=missing(b, "tsp")))
    if nq:
        tn = nq_tool(b)
        samplers.append(
            Sampler("nq", first_sampler(tn, lambda p: [nq, *stamp_job(p)], lambda: quiet([nq, "-w"], tn.env)))
        )
    else:
        samplers.append(Sampler("nq", None, missing=missing(b, "nq")))
    if par:
        tp = Tool(b, "parallel")
        samplers.append(
            Sampler(
                "parallel",
                first_sampler(tp, lambda p: [par, "--will-cite", ":::", f"echo $(date +%s%N) > {p}"], lambda: None),
            )
        )
    else:
        samplers.append(Sampler("parallel", None, missing=missing(b, "parallel")))
    interleave(b, W, M, samplers, n)


# ---- workload 3: drain ------------------------------------------------------------

LOOP = 'i=0; while [ "$i" -lt "$N" ]; do "$@" || exit 1; i=$((i+1)); done'


def loop_argv(n: int, argv: list[str]) -> tuple[list[str], dict]:
    return ["/bin/sh", "-c", LOOP, "loop", *argv], {"N": str(n)}


def w_drain(b: Bench):
    """One round is a drain of each tool, one after the other; the rounds repeat
    that order, so that a slower minute of a shared machine hits every tool alike
    (one drain each gave ratios from 0.79 to 1.23 on the same code here)."""
    n, rounds = b.sizes.drain_n, max(1, b.sizes.drain_rounds)
    W, M = "3 drain", f"{n} x true, 2 slots, submit -> all final"
    tools, absent = [("qex", lambda: drain_qex(b, n))], {}
    for label, binary, run in (
        ("tsp -S 2", "tsp", drain_tsp),
        ("parallel -j2", "parallel", drain_parallel),
        ("nq (serial)", "nq", drain_nq),
    ):
        if b.peer(binary):
            tools.append((label, lambda run=run, binary=binary: run(b, b.peer(binary), n)))
        else:
            absent[label] = missing(b, binary)
    got: dict[str, list] = {label: [] for label, _ in tools}
    busy: dict[str, list] = {label: [] for label, _ in tools}
    for r in range(rounds):
        for label, run in tools:
            # No drain pays for the writes of an earlier one: a tool that fsyncs (qex) would
            # otherwise wait behind the kernel's writeback of the files the last round made.
            os.sync()
            busy0 = disk_busy_ms(b.tmp)
            got[label].append(run())
            busy1 = disk_busy_ms(b.tmp)
            busy[label].append(None if busy0 is None or busy1 is None else busy1 - busy0)
        log(f"drain round {r + 1}/{rounds}: " + ", ".join(f"{k} {v[-1][0]:.2f}s" for k, v in got.items()))
    for label, samples in got.items():
        secs = [s for s, _ in samples]
        jps = n / median(secs)
        note, extra = samples[0][1], {"disk_busy_ms": busy[label]}
        if label == "qex":
            how, submitted = note[0], [sub for _, (_, sub) in samples]
            note = f"{how}; submitting took {median(submitted):.2f}s (median)"
            extra["submit_secs"] = submitted
        known = [ms for ms in busy[label] if ms is not None]
        disk = f"; disk busy {median(known):.0f} ms (median)" if known else ""
        b.row(W, M, label, secs, note=f"{note}; {jps:.0f} jobs/s (median){disk}", jobs_per_sec=jps, **extra)
    for label, why in absent.items():
        b.na(W, M, label, why)


def disk_busy_ms(path: str) -> int | None:
    """How long (ms) the block device under ``path`` has been busy since boot (the
    kernel's io_ticks), or None where it cannot be read (tmpfs, no sysfs)."""
    try:
        st = os.stat(path)
        with open(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/stat") as fh:
            return int(fh.read().split()[9])
    except (OSError, ValueError, IndexError):
        return None


def drain_qex(b: Bench, n: int) -> tuple[float, tuple]:
    q = Qex(b)
    if b.features.get("each_line"):
        lines = os.path.join(q.root, "lines")
        with open(lines, "w") as fh:
            fh.write("".join(f"{i}\n" for i in range(n)))
        argv, how = q.argv("submit", "--each-line", lines, "--cpu", "1", "--", "true", "{}"), "--each-line"
        env = q.env
    else:
        argv, extra = loop_argv(n, q.argv("submit", "--cpu", "1", "--", "true"))
        env, how = dict(q.env, **extra), f"a loop of {n} `qex submit` (no --each-line yet)"
    t0 = time.perf_counter()
    run_timed(argv, env, cwd=q.root, timeout=3600)
    submitted = time.perf_counter() - t0
    q.drain(expect=n, every=0.02, limit=3600)
    secs = time.perf_counter() - t0
    q.quiesce()
    return secs, (how, submitted)


def drain_tsp(b: Bench, tsp: str, n: int) -> tuple[float, str]:
    t = Tool(b, "tsp")
    t.env["TS_MAXFINISHED"] = str(n + 100)
    quiet([tsp, "-S", "2"], t.env, check=True)
    try:
        argv, extra = loop_argv(n, [tsp, "true"])
        t0 = time.perf_counter()
        run_timed(argv, dict(t.env, **extra), timeout=3600)

        def finished():
            out = quiet([tsp, "-l"], t.env).stdout.decode(errors="replace")
            return sum(1 for line in out.splitlines() if " finished " in line) >= n

        poll(finished, "tsp to finish", 3600, 0.02)
        return time.perf_counter() - t0, f"a loop of {n} `tsp true`"
    finally:
        quiet([tsp, "-K"], t.env)
        t.kill_all()


def drain_parallel(b: Bench, par: str, n: int) -> tuple[float, str]:
    t = Tool(b, "parallel")
    secs, _, _ = run_timed([par, "--will-cite", "-j2", "true", ":::", *map(str, range(n))], t.env, timeout=3600)
    return secs, "one command"


def drain_nq(b: Bench, nq: str, n: int) -> tuple[float, str]:
    t = Tool(b, "nq")
    t.env["NQDIR"] = os.path.join(t.root, "nq")
    os.mkdir(t.env["NQDIR"])
    argv, extra = loop_argv(n, [nq, "-q", "true"])
    t0 = time.perf_counter()
    run_timed(argv, dict(t.env, **extra), timeout=3600)
    run_timed([nq, "-w"], t.env, timeout=3600)
    return time.perf_counter() - t0, f"a loop of {n} `nq true`; one job at a time"


# ---- workload 4: scale with history ---------------------------------------------------


def fabricate(q: Qex, seed_id: str, count: int, first_seq: int) -> None:
    """``count`` finished records made on disk from the files of one real finished job."""
    seed_dir = os.path.join(q.jobs, seed_id)
    files = {}
    for name in os.listdir(seed_dir):
        path = os.path.join(seed_dir, name)
        if name.startswith(".") or not os.path.isfile(path) or os.path.islink(path):
            continue
        with open(path, "rb") as fh:
            files[name] = (fh.read(), os.stat(path).st_mode & 0o777)
    status = json.loads(files["status.json"][0])
    status.update(state="completed", exit_code=0, signal=None, error=None)
    dir_mode = os.stat(seed_dir).st_mode & 0o777
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    seed = seed_id.encode()
    for k in range(count):
        if k and k % 20_000 == 0:
            log(f"history: {k:,} of {count:,} made")
        job_id = new_id()
        d = os.path.join(q.jobs, job_id)
        os.mkdir(d, dir_mode)
        status["id"], status["seq"] = job_id, first_seq + k
        for name, (data, mode) in files.items():
            if name == "status.json":
                data = json.dumps(status, separators=(",", ":"), sort_keys=True).encode() + b"\n"
            elif seed in data:
                data = data.replace(seed, job_id.encode())
            fd = os.open(os.path.join(d, name), flags, mode)
            try:
                if data:
                    os.write(fd, data)
            finally:
                os.close(fd)


def timed_list(q: Qex, *args, timeout=900) -> tuple[float | None, float]:
    """(seconds to the first job line, seconds to the exit) of `qex list ARGS`."""
    job_line = re.compile(rb"^[0-9a-f]{8}")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        q.argv("list", *args),
        env=q.env,
        cwd=q.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    fired = threading.Event()
    timer = threading.Timer(timeout, lambda: (fired.set(), proc.kill()))
    timer.daemon = True
    timer.start()
    first = None
    try:
        for line in proc.stdout:
            if first is None and job_line.match(line):
                first = time.perf_counter() - t0
        proc.wait()
        total = time.perf_counter() - t0
    finally:
        timer.cancel()
        proc.stdout.close()
    if fired.is_set():
        raise BenchError(f"qex list {' '.join(args)} took more than {timeout}s")
    return first, total


def w_history(b: Bench):
    """One store per size, all made first; then the samples of every size are
    interleaved, so that load drift on the machine does not bias the ratio."""
    s = b.sizes
    W = "4 history"
    sizes = sorted(set(s.history))
    seed_q = Qex(b)
    _, seed = seed_q.submit("--", "true")
    seed_q.quiesce()
    stores = {}
    for size in sizes:
        q = Qex(b)
        if size:
            q_seed = os.path.join(q.jobs, seed)
            shutil.copytree(os.path.join(seed_q.jobs, seed), q_seed)
            log(f"history: making {size - 1:,} more finished records on disk")
            t0 = time.perf_counter()
            fabricate(q, seed, size - 1, first_seq=1_000_000)
            log(f"history: made them in {time.perf_counter() - t0:.1f}s")
        stores[size] = q
    base = sizes[0]
    lbl = lambda n: f"@{n:,}"  # noqa: E731
    samplers = [
        Sampler(
            "qex submit",
            (lambda q=q: qex_submit_sample(q)),
            metric=f"submit {lbl(n)}",
            vs=None if n == base else f"submit {lbl(base)}",
            note=f"{n:,} records before the samples",
        )
        for n, q in stores.items()
    ]
    interleave(b, W, "", samplers, s.history_submit_n)
    for n, q in stores.items():
        n_list = s.list_n_large if n >= 50_000 else s.list_n
        # The records were made on disk, not by qex: the first `qex list` reads each one and
        # writes the history index (what a store from an older qex pays once); timed apart.
        once = timed_list(q)
        b.row(
            W,
            f"list once, history rebuilt {lbl(n)}",
            "qex list (first run on the store)",
            [once[1]],
            note=f"first job line after {once[0] * 1000:.0f} ms" if once[0] is not None else "",
        )
        running, first, total = [], [], []
        for _ in range(n_list):
            running.append(timed_list(q, "--state", "running")[1])
            f, t = timed_list(q)
            total.append(t)
            if f is not None:
                first.append(f)
        vs = None if n == base else base
        b.row(
            W,
            f"list --state running {lbl(n)}",
            "qex list --state running",
            running,
            vs=vs and f"list --state running {lbl(vs)}",
        )
        b.row(
            W,
            f"list first line {lbl(n)}",
            "qex list (first job line)",
            first,
            vs=vs and f"list first line {lbl(vs)}",
            note="" if first else "n/a: no job line",
        )
        b.row(W, f"list total {lbl(n)}", "qex list (all)", total, vs=vs and f"list total {lbl(vs)}")


# ---- workload 5: fan-out ------------------------------------------------------------------


def w_fanout(b: Bench):
    n = b.sizes.fanout_n
    W, M = "5 fan-out", f"submit --each-line, {n} lines"
    if not b.features.get("each_line"):
        b.na(W, M, "qex", "`qex submit --each-line` is not there yet")
        return
    samples = []
    for _ in range(b.sizes.fanout_samples):
        q = Qex(b)
        lines = os.path.join(q.root, "lines")
        with open(lines, "w") as fh:
            fh.write("".join(f"{i}\n" for i in range(n)))
        secs, _, _ = run_timed(
            q.argv("submit", "--each-line", lines, "--", "true", "{}"), q.env, cwd=q.root, timeout=600
        )
        samples.append(secs)
        q.drain(expect=n, every=0.05, limit=3600)
        q.quiesce()
    b.row(W, M, "qex", samples)


# ---- workload 6: memory ----------------------------------------------------------------


def snapshot(tag: str) -> dict[int, int]:
    return {pid: uss(pid) or 0 for pid in tagged_pids(tag)}


def role_of(pid: int) -> str:
    """The command name, and what the process holds if it is a qex process (by its open files)."""
    name = comm_of(pid)
    try:
        targets = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return name
    if any(os.path.basename(t).startswith("waker") and t.endswith(".lock") for t in targets):
        return f"{name} (waker, one per queue)"
    if any(t.endswith("/alive.lock") for t in targets):
        return f"{name} (supervisor)"
    return name


def waiting_cost(before: dict, after: dict, n: int) -> tuple[float, float, list[str]]:
    new = {p: u for p, u in after.items() if p not in before}
    roles: dict[str, int] = {}
    for p in new:
        r = role_of(p)
        roles[r] = roles.get(r, 0) + 1
    return len(new) / n, sum(new.values()) / n, [f"{c} x {r}" for r, c in sorted(roles.items())]


def w_memory(b: Bench):
    n = b.sizes.waiting
    W = "6 memory"
    MP, MU, MS = (
        f"processes per waiting job ({n} waiting)",
        f"USS per waiting job ({n} waiting)",
        "USS of a running job's supervisor",
    )
    q = Qex(b)
    _, blocker = q.submit("--cpu", "2", "--", "sleep", "300")
    try:
        rec = poll(
            lambda: (r := q.record(blocker)) and r.get("state") == "running" and r.get("supervisor_pid") and r,
            "the blocker to run",
            30,
        )
        time.sleep(0.3)
        before = snapshot(q.tag)
        for _ in range(n):
            q.submit("--cpu", "2", "--", "true")
        time.sleep(0.5)
        after = snapshot(q.tag)
        procs, mem, names = waiting_cost(before, after, n)
        b.row(W, MP, "qex", [procs], unit="count", note=f"new processes: {', '.join(names) or 'none'}")
        b.row(W, MU, "qex", [mem], unit="B")
        sup = rec["supervisor_pid"]
        job = rec.get("pid")
        note = f"pid {sup} ({comm_of(sup)}); the job's parent: {ppid_of(job) if job else '?'}"
        b.row(W, MS, "qex", [uss(sup) or 0], unit="B", note=note)
    finally:
        quiet(q.argv("kill", blocker), q.env)
        try:
            q.quiesce()
        except BenchError:
            q.kill_all()
    memory_peers(b, W, MP, MU, MS, n)
    forked_python(b, W, MS)


def _sleep_pid(tag: str):
    for pid in tagged_pids(tag):
        if comm_of(pid) == "sleep":
            return pid
    return None


def memory_peers(b: Bench, W, MP, MU, MS, n):
    for binary, label, setup, submit in (
        ("tsp", "tsp", lambda t, x: quiet([x, "-S", "1"], t.env, check=True), lambda x: [x]),
        ("nq", "nq", None, lambda x: [x]),
    ):
        path = b.peer(binary)
        if not path:
            for m, unit in ((MP, "count"), (MU, "B"), (MS, "B")):
                b.na(W, m, label, missing(b, binary), unit)
            continue
        t = Tool(b, binary)
        if binary == "nq":
            t.env["NQDIR"] = os.path.join(t.root, "nq")
            os.mkdir(t.env["NQDIR"])
        try:
            if setup:
                setup(t, path)
            quiet(submit(path) + ["sleep", "300"], t.env, check=True)
            job = poll(lambda: _sleep_pid(t.tag), f"{binary}'s blocker to run", 30)
            time.sleep(0.3)
            before = snapshot(t.tag)
            for _ in range(n):
                quiet(submit(path) + ["true"], t.env, check=True)
            time.sleep(0.5)
            after = snapshot(t.tag)
            procs, mem, names = waiting_cost(before, after, n)
            b.row(W, MP, label, [procs], unit="count", note=f"new processes: {', '.join(names) or 'none'}")
            b.row(W, MU, label, [mem], unit="B")
            sup = ppid_of(job)
            b.row(W, MS, label, [uss(sup) or 0], unit="B", note=f"the job's parent: {comm_of(sup)}")
        finally:
            if binary == "tsp":
                quiet([path, "-K"], t.env)
            t.kill_all()


def forked_python(b: Bench, W, MS):
    """Reference: the USS of a forked child of a bare `python -S` whose parent has
    exited (as a double-forked supervisor's has), so no page is shared any more."""
    code = (
        "import os, sys, time\nif os.fork():\n    os._exit(0)\nprint(os.getpid(), flush=True)\n"
        "os.close(1)\ntime.sleep(30)\n"
    )
    t = Tool(b, "forkref")
    proc = subprocess.Popen([b.python, "-S", "-c", code], stdout=subprocess.PIPE, env=t.env, stdin=subprocess.DEVNULL)
    child = None
    try:
        child = int(proc.stdout.readline())
        proc.wait(10)
        time.sleep(0.2)
        b.row(
            W,
            MS,
            "forked python -S (reference)",
            [uss(child) or 0],
            unit="B",
            note="info: a fork of `python -S` after its parent exited",
        )
    finally:
        proc.stdout.close()
        if child:
            kill_pids([child])


# ---- workload 7: supervisor CPU per MB of output -------------------------------------------


def w_cpu(b: Bench):
    s = b.sizes
    W = "7 supervisor cpu"
    nbytes = s.output_mb * 1_000_000
    big = measure_supervisor_cpu(b, ["head", "-c", str(nbytes), "/dev/zero"], s.cpu_samples)
    small = measure_supervisor_cpu(b, ["true"], s.cpu_samples)
    own_big = [x["supervisor_cpu"] for x in big]
    own_small = [x["supervisor_cpu"] for x in small]
    b.row(W, "supervisor CPU, job `true`", "qex", own_small, note="fixed cost: setup, records, final pass")
    b.row(
        W,
        f"supervisor CPU, job writing {s.output_mb}MB",
        "qex",
        own_big,
        note=f"job's own CPU {median([x['job_cpu'] for x in big]):.3f}s (subtracted); "
        f"wall {median([x['wall'] for x in big]):.2f}s",
    )
    per_mb = [(x - median(own_small)) / s.output_mb for x in own_big]
    b.row(
        W,
        "supervisor CPU per MB of output",
        "qex",
        per_mb,
        unit="s/MB",
        note="(supervisor CPU - CPU with `true`) / MB; exact: wait4() rusage of the supervisor as subreaper",
    )


def measure_supervisor_cpu(b: Bench, command: list[str], n: int) -> list[dict]:
    """Run each job in a forked child that is a subreaper, so that the supervisor
    (orphaned by its double fork) becomes our child and wait4() gives its exact
    CPU time; the job's own CPU (usage.cpu_secs, which the supervisor's rusage
    includes because it reaps the job) is subtracted."""
    out = []
    for _ in range(n):
        q = Qex(b)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            code = 0
            try:
                result = _subreaper_run(q, command)
            except BaseException as exc:
                result = {"error": f"{type(exc).__name__}: {exc}"}
                code = 1
            try:
                os.write(w, json.dumps(result).encode())
            finally:
                os._exit(code)
        os.close(w)
        chunks = []
        while chunk := os.read(r, 65536):
            chunks.append(chunk)
        os.close(r)
        os.waitpid(pid, 0)
        result = json.loads(b"".join(chunks) or b'{"error": "no result"}')
        if "error" in result:
            raise BenchError(result["error"])
        out.append(result)
        q.quiesce()
    return out


def _subreaper_run(q: Qex, command: list[str]) -> dict:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise BenchError("prctl(PR_SET_CHILD_SUBREAPER) failed")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        q.argv("submit", "--", *command),
        env=q.env,
        cwd=q.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    out, err = proc.communicate(timeout=60)
    if proc.returncode != 0:
        raise BenchError(f"qex submit exited {proc.returncode}: {err.decode(errors='replace')[:300]}")
    job_id = out.decode().strip()
    reaped = {}
    deadline = time.monotonic() + WAIT_LIMIT
    while time.monotonic() < deadline:
        try:
            pid, _, ru = os.wait4(-1, os.WNOHANG)
            if pid:
                reaped[pid] = ru.ru_utime + ru.ru_stime
                continue
        except ChildProcessError:
            pass
        rec = q.record(job_id)
        if rec and rec.get("state") in FINAL and rec.get("supervisor_pid") in reaped:
            job_cpu = (rec.get("usage") or {}).get("cpu_secs") or 0.0
            total = reaped[rec["supervisor_pid"]]
            return {
                "supervisor_cpu": total - job_cpu,
                "job_cpu": job_cpu,
                "with_job": total,
                "wall": time.perf_counter() - t0,
                "state": rec["state"],
                "logs_dropped": rec.get("logs_dropped"),
            }
        time.sleep(0.002)
    raise BenchError("the supervisor did not end in time")


# ---- workload 8: events -----------------------------------------------------------------------


def w_events(b: Bench):
    W, M = "7b events", "state change -> `qex events` line"
    if not b.features.get("events"):
        b.na(W, M, "qex", "`qex events` is not there yet")
        return
    q = Qex(b)
    q.submit("--", "true")
    q.quiesce()
    proc = subprocess.Popen(
        q.argv("events", "--json", "--since", "now"),
        env=q.env,
        cwd=q.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    lat = []
    try:
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        time.sleep(0.5)
        for _ in range(b.sizes.events_n):
            q.submit("--", "true")
            end = time.monotonic() + 5
            while time.monotonic() < end:
                if not sel.select(0.5):
                    continue
                line = proc.stdout.readline()
                arrived = time.time()
                if not line:
                    break
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                when = next(
                    (ev[k] for k in ("time", "at", "ts", "t", "timestamp") if isinstance(ev.get(k), (int, float))), None
                )
                if when is not None:
                    lat.append(arrived - float(when))
                if ev.get("state") in FINAL or ev.get("to") in FINAL:
                    break
            q.drain()  # not quiesce: the `qex events` reader is a process of this queue too
    finally:
        proc.kill()
        proc.wait()
    if lat:
        b.row(W, M, "qex", lat, note="arrival time - the event's own timestamp")
    else:
        b.na(W, M, "qex", "no event line carried a timestamp")


# ---- targets and the table ----------------------------------------------------------------------


def targets(b: Bench) -> list[dict]:
    def med(w, m, t):
        r = b.find(w, m, t)
        return r["median"] if r else None

    def ratio(x, y):
        return x / y if x is not None and y else None

    sub = med("1 submit", "idle submit", "qex submit")
    py = med("1 submit", "idle submit", "python -c pass")
    floor = med("1 submit", "idle submit", "python floor (flock+fsync+double-fork)")
    first = med("2 first instruction", "submit -> job's first instruction", "qex submit")
    ffirst = med("2 first instruction", "submit -> job's first instruction", "python floor")
    hs = sorted(b.sizes.history)
    h = {n: med("4 history", f"submit @{n:,}", "qex submit") for n in hs}
    mid = next((n for n in hs if n >= 10_000), hs[1] if len(hs) > 1 else None)
    n = b.sizes.drain_n
    dm = f"{n} x true, 2 slots, submit -> all final"
    drain = med("3 drain", dm, "qex")
    out = [
        ("issue 2: submit / python -c pass", ratio(sub, py), 3.0, "x"),
        ("issue 2: first instruction / submit", ratio(first, sub), 2.0, "x"),
        (
            f"issue 2: submit @{mid:,} / @{hs[0]:,}" if mid else "issue 2: submit @10,000 / @0",
            ratio(h.get(mid), h.get(hs[0])),
            1.2,
            "x",
        ),
        ("issue 10.1: submit / python floor", ratio(sub, floor), 1.5, "x"),
        ("issue 10.2: first instruction / python floor's", ratio(first, ffirst), 1.5, "x"),
        ("issue 10.3: drain / parallel -j2 (must)", ratio(drain, med("3 drain", dm, "parallel -j2")), 1.0, "x"),
        ("issue 10.3: drain / tsp -S 2 (goal)", ratio(drain, med("3 drain", dm, "tsp -S 2")), 1.0, "x"),
        (f"issue 10.4: submit @{hs[-1]:,} / @{hs[0]:,}", ratio(h.get(hs[-1]), h.get(hs[0])), 1.2, "x"),
        (
            "issue 10.5: fan-out of 1000 lines",
            med("5 fan-out", f"submit --each-line, {b.sizes.fanout_n} lines", "qex"),
            1.0,
            "s",
        ),
        (
            "issue 10.6: processes per waiting job",
            med("6 memory", f"processes per waiting job ({b.sizes.waiting} waiting)", "qex"),
            0.0,
            "count",
        ),
        ("issue 10.6: supervisor USS", med("6 memory", "USS of a running job's supervisor", "qex"), 3 * 1024**2, "B"),
        (
            "issue 10.7: supervisor CPU per MB",
            med("7 supervisor cpu", "supervisor CPU per MB of output", "qex"),
            0.005,
            "s/MB",
        ),
        ("issue 10.7: events latency", med("7b events", "state change -> `qex events` line", "qex"), 0.050, "s"),
    ]
    return [
        {
            "target": name,
            "measured": value,
            "limit": limit,
            "unit": unit,
            "met": None if value is None else value <= limit,
        }
        for name, value, limit, unit in out
    ]


def fmt(value, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "s":
        return f"{value * 1000:.1f} ms" if abs(value) < 1 else f"{value:.2f} s"
    if unit == "s/MB":
        return f"{value * 1000:.2f} ms/MB"
    if unit == "B":
        return f"{value / 1024:.0f} kB" if abs(value) < 1024**2 else f"{value / 1024**2:.2f} MB"
    if unit == "count":
        return f"{value:g}"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:g} {unit}"


def ratio_text(b: Bench, r: dict) -> str:
    if r["median"] is None:
        return ""
    if r["vs"]:
        base = b.find(r["workload"], r["vs"], r["tool"])
        if base and base["median"]:
            return f"{r['median'] / base['median']:.2f}x vs {r['vs'].split()[-1]}"
        return ""
    if r["tool"].startswith("qex"):
        return ""
    mine = next(
        (
            x
            for x in b.rows
            if x["workload"] == r["workload"]
            and x["metric"] == r["metric"]
            and x["tool"].startswith("qex")
            and x["median"] is not None
        ),
        None,
    )
    if not mine or not r["median"]:
        return ""
    return f"{mine['median'] / r['median']:.2f}"


def table(b: Bench) -> str:
    lines = []
    header = ("workload", "metric", "tool", "median", "min-max", "n", "ratio qex/peer", "note")
    rows = []
    for r in b.rows:
        rng = "" if r["median"] is None else f"{fmt(r['min'], r['unit'])} - {fmt(r['max'], r['unit'])}"
        rows.append(
            (
                r["workload"],
                r["metric"],
                r["tool"],
                fmt(r["median"], r["unit"]),
                rng,
                str(len(r["samples"])),
                ratio_text(b, r),
                r["note"],
            )
        )
    widths = [max(len(x[i]) for x in rows + [header]) for i in range(len(header) - 1)]
    lines.append(" | ".join(h.ljust(w) for h, w in zip(header, widths)) + " | note")
    lines.append("-+-".join("-" * w for w in widths) + "-+-----")
    for x in rows:
        lines.append(" | ".join(v.ljust(w) for v, w in zip(x, widths)) + " | " + x[-1])
    lines.append("")
    lines.append("Targets (measured in this run):")
    tw = max(len(t["target"]) for t in b.targets)
    for t in b.targets:
        verdict = {True: "met", False: "MISSED", None: "n/a"}[t["met"]]
        lines.append(
            f"  {t['target'].ljust(tw)}  {fmt(t['measured'], t['unit']):>12}  "
            f"(target <= {fmt(t['limit'], t['unit'])})  {verdict}"
        )
    for note in b.notes:
        lines.append(f"note: {note}")
    if b.load:
        lines.append(
            "load average (1, 5, 15 min) at the start of each workload: "
            + "; ".join(f"{k} {v}" for k, v in b.load.items())
        )
    return "\n".join(lines)


# ---- entry point ---------------------------------------------------------------------------------


def parse_sets(pairs, sizes: Sizes) -> Sizes:
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not hasattr(sizes, key):
            raise SystemExit(
                f"--set {pair}: expected KEY=VALUE with KEY one of "
                f"{', '.join(f.name for f in dataclasses.fields(Sizes))}"
            )
        current = getattr(sizes, key)
        if isinstance(current, tuple):
            setattr(sizes, key, tuple(int(v) for v in value.split(",") if v))
        else:
            setattr(sizes, key, type(current)(value))
    return sizes


REMOVING = "removing"  # what CLEANED_AT says while a run removes its tree


def mark_removal(when) -> None:
    """Note in CLEANED_AT that a removal started (``REMOVING``) or when it ended."""
    try:
        with open(CLEANED_AT, "w") as fh:
            fh.write(f"{when}\n")
    except OSError:
        pass


def settle_wait(now: float, cleaned_at: float | None) -> float:
    """Seconds to wait before measuring, after a run that removed its tree at ``cleaned_at``."""
    if cleaned_at is None or cleaned_at > now:
        return 0.0
    return max(0.0, SETTLE_SECS - (now - cleaned_at))


def read_cleaned_at() -> float | str | None:
    try:
        with open(CLEANED_AT) as fh:
            text = fh.read().strip()
    except OSError:
        return None
    word, _, pid = text.partition(" ")
    if word == REMOVING:  # still removing, unless that run is gone (killed while it removed)
        try:
            os.kill(int(pid), 0)
        except (ValueError, ProcessLookupError):
            return _marked_at()  # (it ended then or later: the wait counts from its start)
        except PermissionError:
            pass
        return REMOVING
    try:
        return float(text)
    except ValueError:
        return None


def _marked_at() -> float | None:
    try:
        return os.stat(CLEANED_AT).st_mtime
    except OSError:
        return None


REMOVAL_LIMIT = 1800.0  # the longest a run waits for another's removal (a pid reused meanwhile)


def settle() -> None:
    """Wait out the last run's removal: until it has ended (a run still removing its
    tree frees inodes now), then SETTLE_SECS after its end."""
    cleaned_at, said, deadline = read_cleaned_at(), False, time.monotonic() + REMOVAL_LIMIT
    while cleaned_at == REMOVING and time.monotonic() < deadline:
        if not said:
            log("waiting: another run is still removing its files (bench/README.md; --no-settle skips this)")
            said = True
        time.sleep(5)
        cleaned_at = read_cleaned_at()
    if cleaned_at == REMOVING:
        cleaned_at = _marked_at()
    wait = settle_wait(time.time(), cleaned_at)
    if wait > 0:
        log(
            f"waiting {wait:.0f}s: the last run removed its files {SETTLE_SECS - wait:.0f}s ago, and new files "
            "cost more for minutes after a mass removal (bench/README.md; --no-settle skips this)"
        )
        time.sleep(wait)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="bench/run.py", description="qex against tsp, nq and GNU parallel.")
    p.add_argument("--quick", action="store_true", help="small N: a few minutes less")
    p.add_argument("--only", metavar="NAME,...", help=f"workloads among {','.join(WORKLOADS)}")
    p.add_argument("--json", metavar="OUT", help="also write the raw results here")
    p.add_argument("--no-peers", action="store_true", help="measure qex (and the Python floors) only")
    p.add_argument("--no-install", action="store_true", help="use the peers that are installed; install none")
    p.add_argument("--results-dir", default=RESULTS, help="where <timestamp>.json goes (default bench/results)")
    p.add_argument(
        "--no-settle",
        action="store_true",
        help="neither wait after a recent run's removal of its files, nor note this run's",
    )
    p.add_argument(
        "--shared",
        action="store_true",
        help="every qex state directory is made with `qex init --shared` (one member: this user)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a size, e.g. --set submit_n=10 --set history=0,1000",
    )
    args = p.parse_args(argv)
    only = None
    if args.only:
        only = {w.strip() for w in args.only.split(",") if w.strip()}
        unknown = only - set(WORKLOADS)
        if unknown:
            p.error(f"--only: unknown workload(s) {', '.join(sorted(unknown))}; choose from {', '.join(WORKLOADS)}")
    sizes = Sizes(**QUICK) if args.quick else Sizes()
    return args, only, parse_sets(args.set, sizes)


def main(argv=None) -> int:
    execute(sys.argv[1:] if argv is None else argv)
    return 0


def execute(argv) -> dict:
    """Run the benchmark for this command line; print the table; return the raw results."""
    args, only, sizes = parse_args(argv)
    if not args.no_settle:
        settle()
    b = Bench(
        sizes,
        only,
        use_peers=not args.no_peers,
        install=not args.no_install,
        results_dir=args.results_dir,
        quick=args.quick,
    )
    b.shared = args.shared
    try:
        b.run()
        result = b.result()
        print(table(b), flush=True)
        write_results(args, result)
    finally:
        b.cleanup(mark=not args.no_settle)  # after the table: removing 100,000 records can take minutes
    return result


def write_results(args, result: dict) -> None:
    paths = []
    if args.results_dir:
        os.makedirs(args.results_dir, exist_ok=True)
        paths.append(os.path.join(args.results_dir, time.strftime("%Y%m%d-%H%M%S") + ".json"))
    if args.json:
        paths.append(args.json)
    for path in paths:
        with open(path, "w") as fh:
            json.dump(result, fh, indent=1)
        log(f"raw results: {path}")


if __name__ == "__main__":
    sys.exit(main())
