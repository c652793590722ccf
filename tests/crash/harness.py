"""The crash harness: random rounds of real qex commands while qex processes die.

One round starts a few qex commands at once (picked from ``OPERATIONS``), some
of them armed with a crash point (``QEX_CRASH_AT``, see qex/base/faults.py), and
SIGKILLs random qex processes — commands, supervisors, wakers — at random
instants. Then it waits (bounded) for every job to end and every qex process
to leave, and runs the invariant checker (invariants.py) on the state
directory. Everything random comes from one seed, printed with any violation.

To add an operation when a feature lands (fan-out, pipelines, pause, ...):
write ``def op_NAME(h, rng) -> Call | None`` and add it to ``OPERATIONS`` with
a weight; its ``check`` says which exit codes and outputs are allowed.
"""

import json
import os
import random
import signal
import subprocess
import tempfile
import time

from driver import Qex

from crash import invariants as inv

ID_LEN = 36

CONFIG = """\
[budget]
cpu = 2
mem = "4GB"

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
BUDGET = {"cpu": 2000, "mem": 4 * 1024**3, "pools": {"gpu": [8 * 1024**3, 8 * 1024**3], "net": 2}}


class Call:
    """One qex command of a round."""

    def __init__(self, op: str, argv: list[str], check=None, crash: str | None = None, job=None):
        self.op, self.argv, self.check, self.crash, self.job = op, argv, check, crash, job
        self.job_id: str | None = None
        self.proc: subprocess.Popen | None = None
        self.code: int | None = None
        self.out = self.err = ""
        self.killed = False

    def __repr__(self):
        extra = f" QEX_CRASH_AT={self.crash}" if self.crash else ""
        return f"<{self.op}{extra} {' '.join(self.argv)[:90]} -> {self.code}{' (killed)' if self.killed else ''}>"


class Harness:
    def __init__(
        self, root: str, seed: int, crash_rate: float = 0.25, kill_rate: float = 0.6, journal_max: int = 16384
    ):
        self.root = root
        self.seed = seed
        self.rng = random.Random(seed)
        self.state = os.path.join(root, "state")
        self.config = os.path.join(root, "qex.toml")
        self.runs_path = os.path.join(root, "runs.log")
        with open(self.config, "w") as fh:
            fh.write(CONFIG)
        self.env = {
            **os.environ,
            "QEX_STATE_DIR": self.state,
            "QEX_CONFIG": self.config,
            "QEX_PEER_DIR": os.path.join(root, "peers"),
            "QEX_KILL_GRACE": "0.5",
            "QEX_WAKER_INTERVAL": "0.2",
            "QEX_JOURNAL_MAX_BYTES": str(journal_max),
            # hundreds of short qex processes: let them share compiled modules
            "PYTHONPYCACHEPREFIX": os.path.join(tempfile.gettempdir(), "qex-crash-pycache"),
        }
        for name in ("QEX_CRASH_AT", "CUDA_VISIBLE_DEVICES", "PYTHONDONTWRITEBYTECODE"):
            self.env.pop(name, None)
        self.driver = Qex(self.state, self.env, root)  # (the tests' one driver: tests/driver.py)
        self.crash_rate, self.kill_rate = crash_rate, kill_rate
        self.known: set[str] = set()  # ids a command printed
        self.cleaned: set[str] = set()  # ids given to qex clean
        self.final_seen: set[str] = set()  # ids seen final at a round's end
        self.deferred: list[Call] = []  # run/wait calls checked against the final record
        self.protected: set[str] = set()  # ids a call of this round names: not cleaned in it
        self.rounds = self.kills = self.crashes_armed = self.calls = self.helped = 0
        self.helped_ids: set[str] = set()
        self.log: list[str] = []

    # ---- running qex ---------------------------------------------------------------
    def start(self, call: Call) -> None:
        env = dict(self.env)
        if call.crash:
            env["QEX_CRASH_AT"] = call.crash
        call.proc = self.driver.popen(*call.argv, env=env)
        self.calls += 1

    def qex(self, *argv, timeout=60) -> subprocess.CompletedProcess:
        self.calls += 1
        return self.driver.run(*argv, timeout=timeout)

    def job_command(self, rng, seconds: float, code: int = 0) -> list[str]:
        script = f'echo "$QEX_JOB_ID $QEX_ATTEMPT" >> {self.runs_path}; '
        if rng.random() < 0.3:
            script += "echo out; echo err >&2; "
        if seconds:
            script += f"sleep {seconds}; "
        script += f"exit {code}"
        return ["sh", "-c", script]

    def pick(self, rng, pool) -> str | None:
        pool = sorted(pool - self.cleaned)
        chosen = rng.choice(pool) if pool else None
        if chosen:
            self.protected.add(chosen)
        return chosen

    # ---- one round -------------------------------------------------------------------
    def round(self) -> list[str]:
        rng = self.rng
        self.rounds += 1
        self.protected = set()
        calls = []
        for _ in range(rng.randint(1, 3)):
            op = rng.choices(list(OPERATIONS), weights=[w for w, _ in OPERATIONS.values()])[0]
            call = OPERATIONS[op][1](self, rng)
            if call is None:
                continue
            if rng.random() < self.crash_rate:
                from qex.base.faults import POINTS

                call.crash = f"{rng.choice(POINTS)}:{rng.randint(1, 3)}"
                self.crashes_armed += 1
            calls.append(call)
        t0 = time.monotonic()
        for call in calls:
            self.start(call)
            time.sleep(rng.random() * 0.02)
        problems = []
        kills = rng.choices((0, 1, 2), weights=(1 - self.kill_rate, self.kill_rate * 0.7, self.kill_rate * 0.3))[0]
        for _ in range(kills):
            time.sleep(rng.random() * 0.2)
            self.kill_one(rng, calls)
        if rng.random() < 0.5:  # a sample in the middle of the traffic
            problems += self.check_now(quiescent=False)
        for call in calls:
            try:
                call.out, call.err = call.proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                call.proc.kill()
                call.out, call.err = call.proc.communicate()
                problems.append(f"{call!r} did not end within 60s (a hang)")
            call.code = call.proc.returncode
            problems += self.check_call(call)
        problems += self.settle()
        problems += self.check_now(quiescent=True)
        self.log.append(f"round {self.rounds} ({time.monotonic() - t0:.2f}s): {calls}")
        return [f"round {self.rounds}: {p}" for p in problems]

    def kill_one(self, rng, calls) -> None:
        """SIGKILL one random qex process of this state directory: a command, a supervisor or a waker."""
        from crash.invariants import qex_processes

        live_calls = [c for c in calls if c.proc.poll() is None]
        supervisors = []
        for job_id in list(self.known)[-20:]:
            try:
                with open(os.path.join(self.state, "jobs", job_id, "status.json")) as fh:
                    rec = json.load(fh)
            except (OSError, ValueError):
                continue
            if rec.get("state") in inv.HOLDING and rec.get("supervisor_pid"):
                supervisors.append(rec["supervisor_pid"])
        ours = set(qex_processes(self.state))
        kind = rng.choice(("command", "supervisor", "any"))
        if kind == "command" and live_calls:
            victim = rng.choice(live_calls)
            victim.killed = True
            pid = victim.proc.pid
        elif kind == "supervisor" and [p for p in supervisors if p in ours]:
            pid = rng.choice([p for p in supervisors if p in ours])
        elif ours:
            pid = rng.choice(sorted(ours))  # a waker, a supervisor, a command, a fork in between
            for c in calls:
                if c.proc.pid == pid:
                    c.killed = True
        else:
            return
        try:
            os.kill(pid, signal.SIGKILL)
            self.kills += 1
        except OSError:
            pass

    def check_call(self, call: Call) -> list[str]:
        problems = []
        if "Traceback" in call.err:
            problems.append(f"{call!r} printed a traceback:\n{call.err[-1500:]}")
        if call.code == -signal.SIGKILL and (call.killed or call.crash):
            ids = [w for w in call.out.split() if len(w) == ID_LEN]
            if call.op == "submit":
                self.known.update(ids)  # an id printed before the kill is a job all the same
            return problems
        if call.code is not None and call.code < 0:
            problems.append(f"{call!r} died of signal {-call.code} that the harness did not send")
            return problems
        if call.check is not None:
            problems += call.check(self, call)
        return problems

    # ---- the end of a round ------------------------------------------------------------
    def settle(self, limit: float = 30.0, passive: float = 3.0) -> list[str]:
        """Every job final and no qex process left, within ``limit``.

        First with no command typed, for ``passive`` seconds (supervisors and the
        waker finish the work by themselves); what is still active then gets the
        help a user gives: a qex wait, which runs a pass when a supervisor is gone.
        ``self.helped`` counts the rounds that needed it."""
        from crash.invariants import qex_processes

        problems = []
        deadline = time.monotonic() + limit
        quiet_until = time.monotonic() + passive
        while True:
            view = inv.read_view(self.state)
            active = [j for j, r in view.records.items() if r.get("state") in inv.ACTIVE]
            if not active and not view.unapplied and not qex_processes(self.state):
                return problems
            if time.monotonic() > quiet_until:
                break
            time.sleep(0.02)
        self.helped += 1
        self.log.append(
            f"round {self.rounds} settled with help: "
            + "; ".join(
                f"{j[:8]} {r.get('state')} ({r.get('blocked_reason') or ''})"
                for j, r in view.records.items()
                if r.get("state") in inv.ACTIVE
            )
            + f" unapplied={len(view.unapplied)} processes={qex_processes(self.state)}"
        )
        if view.unapplied or view.index is None:
            info = self.qex("info", "--json")  # any pass applies what a dead pass left
            if info.returncode != 0 or "Traceback" in info.stderr:
                problems.append(f"qex info failed ({info.returncode}): {info.stderr[-800:]}")
            view = inv.read_view(self.state)
        active = [j for j, r in view.records.items() if r.get("state") in inv.ACTIVE]
        if active:
            self.helped_ids.update(active)
            done = self.qex("wait", *active, "--quiet", "--timeout", f"{limit:g}", timeout=limit + 30)
            if done.returncode == 124:
                problems.append(f"jobs still active after {limit:g}s: {[a[:8] for a in active]}")
            if "Traceback" in done.stderr:
                problems.append(f"qex wait printed a traceback: {done.stderr[-1500:]}")
        while qex_processes(self.state):
            if time.monotonic() > deadline:
                problems.append(f"qex processes remain {limit:g}s after the round: {qex_processes(self.state)}")
                break
            time.sleep(0.01)
        return problems

    def check_now(self, quiescent: bool, ask_info: bool | None = None) -> list[str]:
        try:
            view = inv.read_view(self.state)
        except AssertionError as exc:
            return [str(exc)]
        runs = inv.read_runs(self.runs_path)
        problems = inv.check(
            view, known=self.known, cleaned=self.cleaned, quiescent=quiescent, budget=BUDGET, runs=runs
        )
        if view.holes > self.kills + self.crashes_armed:  # each needs a writer that died mid-append
            problems.append(
                f"journal: {view.holes} holes in the seq, more than the {self.kills} kills "
                f"and {self.crashes_armed} crash points that could cut an append"
            )
        if not quiescent:
            return problems
        leftover = inv.job_processes(view.records)
        for job_id, pids in leftover.items():
            problems.append(
                f"job {job_id[:8]} is {view.records[job_id].get('state')} but its processes {pids} still run"
            )
        for call in self.deferred:
            problems += call.job(self, call, view)
        self.deferred.clear()
        self.final_seen.update(j for j, r in view.records.items() if r.get("state") in inv.FINAL)
        if ask_info is None:
            ask_info = self.rounds % 5 == 0  # each qex call costs ~0.3s here; the index is checked every round
        if not ask_info:
            return problems
        info = self.qex("info", "--json")
        try:
            data = json.loads(info.stdout)
        except ValueError:
            return problems + [f"qex info --json printed no JSON ({info.returncode}): {info.stderr[-500:]}"]
        if data["held"]["jobs"] or data["held"]["cpu"] or data["held"]["mem"]:
            problems.append(f"qex info says capacity is held with no job running: {data['held']}")
        for pool in data["pools"]:
            if (
                pool["holders"]
                or pool.get("free", pool.get("total")) != pool.get("total")
                or any(d["free"] != d["capacity"] for d in pool.get("devices", ()))
            ):
                problems.append(f"qex info says the pool {pool['name']} is held with no job running: {pool}")
        return problems

    def summary(self) -> str:
        view = inv.read_view(self.state)
        return (
            f"seed {self.seed}: {self.rounds} rounds, {self.calls} qex commands, "
            f"{len(view.records)} jobs, {self.kills} SIGKILLs, {self.crashes_armed} armed crash points, "
            f"{self.helped} rounds settled only with a qex wait, "
            f"{len(inv.orphan_dirs(view))} directories of submissions killed before their first event"
        )


# ---- the operations ----------------------------------------------------------------------


def _claims(rng) -> list[str]:
    args = []
    if rng.random() < 0.7:
        args += ["--cpu", rng.choice(("0.5", "1", "1", "2"))]
    if rng.random() < 0.3:
        args += ["--mem", rng.choice(("100MB", "1GB", "3GB"))]
    r = rng.random()
    if r < 0.15:
        args += ["--gpu", "1"]
    elif r < 0.3:
        args += ["--vram", rng.choice(("4GB", "6GB"))]
    if rng.random() < 0.2:
        args += ["--claim", "net=1"]
    if rng.random() < 0.2:
        args += ["--lock", "L"]
    return args


def _expect(*codes):
    def check(h, call):
        if call.code not in codes:
            return [f"{call!r} exited {call.code}, expected one of {codes}: {call.err[-500:]}"]
        return []

    return check


def _submitted(h, call) -> list[str]:
    if call.code != 0:
        return [f"{call!r} exited {call.code}: {call.err[-500:]}"]
    job_id = call.out.strip()
    if len(job_id) != ID_LEN or "\n" in job_id:
        return [f"{call!r} printed {call.out!r}, not one id"]
    h.known.add(job_id)
    return []


def op_submit(h, rng) -> Call:
    seconds = rng.choice((0, 0, 0, 0.05, 0.1, 0.3, 0.6))
    code = rng.choice((0, 0, 0, 1, 3, 100))
    args = ["submit"] + _claims(rng)
    if rng.random() < 0.2:
        args += ["--timeout", "0.4"]
    if rng.random() < 0.15:
        args += ["--retries", "1"]
    if rng.random() < 0.2:
        args += ["--priority", str(rng.randint(-2, 2))]
    if rng.random() < 0.15:
        args += ["--max-queue-time", rng.choice(("0.3", "2"))]
    if rng.random() < 0.2:
        args += ["--dedupe-key", rng.choice(("k1", "k2"))]
    dep = h.pick(rng, h.known) if rng.random() < 0.15 else None
    if dep:
        args += [rng.choice(("--needs", "--after")), dep]
    return Call("submit", args + ["--"] + h.job_command(rng, seconds, code), _submitted)


def _check_run(h, call) -> list[str]:
    if "Traceback" in call.err:
        return []
    job_id = next((w for w in call.err.split() if len(w) == ID_LEN), None)
    if job_id is None:
        return [f"{call!r} exited {call.code} without naming its job: {call.err[-500:]}"]
    h.known.add(job_id)
    call.job = _run_matches_record
    call.job_id = job_id
    h.deferred.append(call)
    return []


def _run_matches_record(h, call, view) -> list[str]:
    from qex.base import outcome
    from qex.store import records

    rec = view.records.get(call.job_id)
    if rec is None:
        return [] if call.job_id in h.cleaned else [f"{call!r}: its job {call.job_id[:8]} has no record"]
    want = outcome.exit_code(records.load(records.Status, rec))
    if call.code != want:
        return [
            f"{call!r} exited {call.code} but its job {call.job_id[:8]} is {rec['state']} "
            f"(exit {rec.get('exit_code')}, signal {rec.get('signal')}) which means {want}"
        ]
    return []


def op_run(h, rng) -> Call:
    seconds = rng.choice((0, 0.05, 0.2))
    code = rng.choice((0, 0, 2, 99, 200))
    return Call("run", ["run"] + _claims(rng) + ["--"] + h.job_command(rng, seconds, code), _check_run)


def op_kill(h, rng) -> Call | None:
    target = h.pick(rng, h.known - h.final_seen) or h.pick(rng, h.known)
    return Call("kill", ["kill", target], _expect(0, 1)) if target else None


def op_cancel(h, rng) -> Call | None:
    target = h.pick(rng, h.known - h.final_seen) or h.pick(rng, h.known)
    return Call("cancel", ["cancel", target], _expect(0, 1)) if target else None


def _check_wait(h, call) -> list[str]:
    if call.code == 124:
        return []
    call.job = _run_matches_record
    h.deferred.append(call)
    return []


def op_wait(h, rng) -> Call | None:
    target = h.pick(rng, h.known)
    if not target:
        return None
    call = Call("wait", ["wait", target, "--timeout", "0.5", "--quiet"], _check_wait)
    call.job_id = target
    return call


def _check_json(h, call) -> list[str]:
    if call.code != 0:
        return [f"{call!r} exited {call.code}: {call.err[-500:]}"]
    try:
        json.loads(call.out)
    except ValueError:
        return [f"{call!r} printed no JSON: {call.out[:200]!r}"]
    return []


def op_status(h, rng) -> Call | None:
    target = h.pick(rng, h.known)
    return Call("status", ["status", target, "--json"], _check_json) if target else None


def op_list(h, rng) -> Call:
    return Call("list", ["list", "--json"], _check_json)


def op_info(h, rng) -> Call:
    return Call("info", ["info", "--json"], _check_json)


def op_clean(h, rng) -> Call | None:
    candidates = sorted(h.final_seen - h.protected - h.cleaned)
    target = rng.choice(candidates) if candidates else None
    if not target:
        return None
    h.cleaned.add(target)
    return Call("clean", ["clean", target], _expect(0, 1))


def _fanned(h, call) -> list[str]:
    if call.code != 0:
        return [f"{call!r} exited {call.code}: {call.err[-500:]}"]
    if len(call.out.strip()) != ID_LEN:
        return [f"{call!r} printed {call.out!r}, not one group id"]
    return []


def op_fanout(h, rng) -> Call:
    path = os.path.join(h.root, f"lines-{h.rounds}-{rng.randrange(1000)}.txt")
    lines = [rng.choice(("a", "b c", "# skipped", "", "x" * 20, "'quoted' $HOME")) for _ in range(rng.randint(1, 5))]
    if not any(line.strip() and not line.startswith("#") for line in lines):
        lines.append("last")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    script = f'echo "$QEX_JOB_ID $QEX_ATTEMPT" >> {h.runs_path}; exit {rng.choice((0, 0, 1))}'
    return Call(
        "fanout", ["submit", "--each-line", path] + _claims(rng)[:2] + ["--", "sh", "-c", script, "{}"], _fanned
    )


def op_pause(h, rng) -> Call:
    if rng.random() < 0.5:
        return Call("pause", ["pause", "queue", "--for", rng.choice(("0.3s", "1s"))], _expect(0))
    return Call("pause", ["pause", "lock", "L", "--for", "0.5s"], _expect(0))


def op_resume(h, rng) -> Call:
    return Call("resume", ["resume"] + rng.choice((["queue"], ["lock", "L"])), _expect(0, 1))


def _check_events(h, call) -> list[str]:
    if call.code not in (0, 124):
        return [f"{call!r} exited {call.code}: {call.err[-500:]}"]
    problems, prev = [], None
    for line in call.out.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            return [f"{call!r} printed a line that is not JSON: {line[:100]!r}"]
        if event.get("event") == "gap":
            prev = None
            continue
        seq = event.get("seq")
        if prev is not None and seq != prev + 1:
            problems.append(f"{call!r}: event seq {seq} follows {prev} with no gap line")
        prev = seq
    return problems


def op_events(h, rng) -> Call:
    return Call("events", ["events", "--json", "--since", "start", "--timeout", "0.3"], _check_events)


# name -> (weight, make a Call). Operations of features still on their branches
# (pipelines, peers) join here when they land.
OPERATIONS = {
    "submit": (8, op_submit),
    "run": (2, op_run),
    "kill": (2, op_kill),
    "cancel": (2, op_cancel),
    "wait": (2, op_wait),
    "status": (1, op_status),
    "list": (1, op_list),
    "info": (1, op_info),
    "clean": (1, op_clean),
    "pause": (1, op_pause),
    "resume": (1, op_resume),
    "events": (1, op_events),
    "fanout": (1, op_fanout),
}
