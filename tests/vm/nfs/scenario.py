"""The NFS scenario of tests/vm/test_nfs.py, run in the guest by nfs/serve.sh once the export
is mounted twice (/run/a, /run/b: two machines' views of one state directory).

1. Followers on A (``qex events``, which follows, then ``qex wait`` and ``qex logs --follow``) see a
   job submitted and finished through B; each line is stamped with the time it arrived, and
   compared with the record's ``submitted_at`` and ``ended_at`` (one guest clock).
2. Six jobs submitted through each mount at the same moment (two fan-outs), one core each,
   against one budget of 2 cores: each job writes when it starts and ends; the most that
   ever ran at once is counted.

Writes what it saw as JSON to the path given (the host's test asserts on it).
"""

import json
import os
import subprocess
import sys
import threading
import time

PY = sys.executable
CONFIG = "/run/qex.toml"
GATE = "/run/gate"


def env(side: str) -> dict:
    return {
        **os.environ,
        "QEX_STATE_DIR": f"/run/{side}/state",
        "QEX_CONFIG": CONFIG,
        "QEX_PEER_DIR": f"/run/peers-{side}",
        "XDG_CACHE_HOME": f"/run/cache-{side}",
        "HOME": "/run",
        "QEX_LOCK_TIMEOUT": "120",
    }


T0 = time.time()


def say(what: str) -> None:
    print(f"nfs: {time.time() - T0:7.2f} s {what}", flush=True)


def qex(side: str, *args: str) -> subprocess.CompletedProcess:
    start = time.time()
    done = subprocess.run(
        [PY, "-m", "qex", *args], env=env(side), capture_output=True, text=True, cwd="/run", timeout=240
    )
    say(f"qex {' '.join(args[:2])} through {side}: {done.returncode} in {time.time() - start:.2f} s")
    return done


class Lines:
    """A follower's stdout, each line with the time it arrived; ``ended``: when it closed (exit)."""

    def __init__(self, side: str, *args: str):
        self.proc = subprocess.Popen(
            [PY, "-m", "qex", *args],
            env=env(side),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd="/run",
        )
        self.lines: list = []
        self.ended = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))
        self.ended = time.time()

    def until(self, predicate, limit: float = 90.0):
        end = time.time() + limit
        while time.time() < end:
            for t, line in list(self.lines):
                if predicate(line):
                    return t, line
            time.sleep(0.02)
        return None

    def why(self) -> str:
        """Its stderr, if it has ended."""
        return self.proc.stderr.read() if self.proc.poll() is not None else "(still running)"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()


def _at(seen) -> str:
    return "never" if seen is None else f"{seen[0] - T0:.2f} s"


def event_of(job_id: str, state: str):
    def match(line: str) -> bool:
        try:
            e = json.loads(line)
        except ValueError:
            return False
        return e.get("event") == "job" and e.get("id") == job_id and e.get("state") == state

    return match


def followers(out: dict) -> None:
    ev = Lines("a", "events", "--json")  # (it follows until stopped)
    say("qex events started on A")
    if ev.until(lambda line: '"event":"stream"' in line.replace(" ", "")) is None:
        out["errors"].append(f"qex events on A printed no stream line: {ev.why()}")
        return
    script = f"echo started; while [ ! -e {GATE} ]; do sleep 0.05; done; echo out-from-b"
    sub = qex("b", "submit", "--name", "nfsjob", "--", "sh", "-c", script)
    job_id = sub.stdout.strip()
    if sub.returncode != 0 or not job_id:
        out["errors"].append(f"submit through B: {sub.returncode} {sub.stderr}")
        return
    wait = Lines("a", "wait", job_id)
    logs = Lines("a", "logs", "--follow", "--stdout", job_id)
    started = logs.until(lambda line: line == "started")
    running = ev.until(event_of(job_id, "running"))
    say(f"the job runs; A's logs --follow saw it at {_at(started)}, A's events at {_at(running)}")
    if started is None or running is None:
        out["errors"].append(
            f"A's followers never saw the job run (logs: {started} {logs.why()}, events: {running} {ev.why()})"
        )
    out["wait_alive_at_gate"] = wait.proc.poll() is None
    open(GATE, "w").close()
    say("gate open")
    queued = ev.until(event_of(job_id, "queued"), 5)
    done = ev.until(event_of(job_id, "completed"))
    for follower in (wait, logs):
        follower.proc.wait(timeout=120)
        while follower.ended is None:
            time.sleep(0.01)
    with open(f"/run/b/state/jobs/{job_id}/status.json") as fh:  # (the record, read through B: no interpreter)
        rec = json.load(fh)
    out["record"] = {k: rec.get(k) for k in ("state", "submitted_at", "started_at", "ended_at")}
    out["wait_rc"], out["logs_lines"] = wait.proc.returncode, [line for _, line in logs.lines]
    out["stderr"] = {"wait": wait.why(), "logs": logs.why()}  # (what a follower said, if anything)
    # From the moment B's qex committed each change (its journal event's time, read through B):
    # the job's own end (ended_at) comes earlier by what its supervisor takes to record it.
    committed = {}
    with open("/run/b/state/journal.jsonl") as fh:
        for line in fh:
            e = json.loads(line)
            if e.get("id") == job_id and e.get("change") == "state":
                committed.setdefault(e["state"], e["time"])
    queued_at, ended_at = committed.get("queued", rec["submitted_at"]), committed.get("completed", rec["ended_at"])
    out["committed"] = committed
    out["latency"] = {
        "events_submitted": None if queued is None else queued[0] - queued_at,
        "events_ended": None if done is None else done[0] - ended_at,
        "wait_ended": wait.ended - ended_at,
        "logs_ended": logs.ended - ended_at,
    }
    out["after_the_jobs_end"] = {"wait": wait.ended - rec["ended_at"], "logs": logs.ended - rec["ended_at"]}
    ev.stop()


def one_budget(out: dict) -> None:
    os.makedirs("/run/iv", exist_ok=True)
    script = 'echo "$(date +%s.%N) start" >> /run/iv/$1; sleep 1; echo "$(date +%s.%N) end" >> /run/iv/$1'
    procs = []
    for side, first in (("a", 0), ("b", 6)):
        with open(f"/run/lines-{side}", "w") as fh:
            fh.write("".join(f"{side}{i}\n" for i in range(first, first + 6)))
        procs.append(
            subprocess.Popen(
                [
                    PY,
                    "-m",
                    "qex",
                    "submit",
                    "--each-line",
                    f"/run/lines-{side}",
                    "--cpu",
                    "1",
                    "--mem",
                    "10MB",
                    "--",
                    "sh",
                    "-c",
                    script,
                    "job",
                    "{}",
                ],
                env=env(side),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd="/run",
            )
        )
    say("two fan-outs submitted")
    for (side, _), p in zip((("a", 0), ("b", 6)), procs):
        _, stderr = p.communicate(timeout=240)
        if p.returncode != 0:
            out["errors"].append(f"fan-out through {side}: {p.returncode} {stderr}")
    end = time.time() + 400  # every job's end in its file (read here: no interpreter to start)
    while time.time() < end and sum(_ended(n) for n in os.listdir("/run/iv")) < 12:
        time.sleep(0.2)
    say("the fan-outs' jobs ended")
    while time.time() < end and not all(s in FINAL for s in _states()):
        time.sleep(0.2)
    out["budget_states"] = _states()
    edges = []
    for name in sorted(os.listdir("/run/iv")):
        with open(f"/run/iv/{name}") as fh:
            for line in fh:
                t, what = line.split()
                edges.append((float(t), 1 if what == "start" else -1))
    most = now = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # (an end before a start at one instant)
        now += step
        most = max(most, now)
    out["jobs_ran"] = len(os.listdir("/run/iv"))
    out["max_running"] = most


def stale_reads(out: dict, writes: int = 200) -> None:
    """A record rewritten through B (``fs.write_atomic``, as qex writes status.json) while A reads
    it: qex's read (``fs.read_json``) never fails; one open-fstat-read without its retry is counted
    beside it, to show how often the other mount's rename left A's open file stale (ESTALE)."""
    import errno

    from qex.store import fs

    os.makedirs("/run/b/stale", exist_ok=True)
    fs.write_atomic("/run/b/stale/status.json", b'{"n": 0}')
    done = threading.Event()

    def writer() -> None:
        for n in range(1, writes + 1):
            fs.write_atomic("/run/b/stale/status.json", b'{"n": %d}' % n, sync_dir=False)
        done.set()

    threading.Thread(target=writer, daemon=True).start()
    reads = raw_stale = 0
    failures: list = []
    while not done.is_set():
        try:
            fs._read_bytes("/run/a/stale/status.json", None, None)  # (one try: what the retry is for)
        except OSError as exc:
            raw_stale += exc.errno == errno.ESTALE
        try:
            fs.read_json("/run/a/stale/status.json")
        except (OSError, ValueError) as exc:
            failures.append(repr(exc))
        reads += 1
    out["stale"] = {"reads": reads, "one_try_estale": raw_stale, "qex_read_failures": failures[:5]}
    say(
        f"stale: {reads} reads through A while B rewrote {writes} times: {raw_stale} single tries ESTALE, "
        f"{len(failures)} of qex's failed"
    )


FINAL = ("completed", "failed", "killed", "timeout", "oom", "expired", "cancelled", "skipped")


def _states() -> list[str]:
    """The states of the fan-outs' jobs, from their records (read through A)."""
    states = []
    for job_id in os.listdir("/run/a/state/jobs"):
        try:
            with open(f"/run/a/state/jobs/{job_id}/status.json") as fh:
                rec = json.load(fh)
        except (OSError, ValueError):
            states.append("unreadable")
            continue
        if rec.get("name") != "nfsjob":
            states.append(rec["state"])
    return sorted(states)


def _ended(name: str) -> bool:
    with open(f"/run/iv/{name}") as fh:
        return "end" in fh.read()


def main() -> None:
    with open(CONFIG, "w") as fh:
        fh.write('[budget]\ncpu = "2"\nmem = "1GB"\n[defaults]\ncpu = 1\nmem = "10MB"\n[learn]\nenabled = false\n')
    out: dict = {"errors": []}
    first = qex("a", "info")  # (the first flock waits out the server's grace period)
    if first.returncode != 0:
        out["errors"].append(f"qex info through A: {first.returncode} {first.stderr}")
    t0 = time.time()
    followers(out)
    t1 = time.time()
    one_budget(out)
    t2 = time.time()
    stale_reads(out)
    out["seconds"] = {"followers": t1 - t0, "budget": t2 - t1, "stale": time.time() - t2}
    with open(sys.argv[1], "w") as fh:
        json.dump(out, fh, indent=1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
