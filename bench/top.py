#!/usr/bin/env python3
"""qex top with a long queue: start to first frame, and CPU per refresh while idle.

    .venv/bin/python bench/top.py [--queued 1000] [--samples 5] [--idle 20] [--json OUT]

A fresh queue ([budget] cpu = 1, a pool of 4 GPUs declared in the config: no
GPU needed) holds one running job (it waits on a file) and QUEUED jobs behind
it (one `--each-line` submission). Then:

- first frame: from just before `qex top` is started in a pseudo-terminal
  (160x50, TERM=xterm) to the moment its status line (the last line of the
  first frame) has come out of the terminal; SAMPLES runs, each quit with q;
- idle CPU: one `qex top` left running IDLE seconds with nothing changing in
  the queue (it reads the queue every second and draws the clock, the
  elapsed times): its user+system CPU time over that wall time, as a share of
  one core, and per refresh;
- `qex top --once` to a pipe (every row printed), and `python -c pass`, the
  interpreter's own start, for scale.

Targets (issue 24): first frame under 0.5 s, under 5% of one core idle.
Standard library only; it removes what it made (the queue is cancelled, the
gate opened, every process of the run's tag waited for).
"""

import argparse
import fcntl
import json
import os
import pty
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run import TAG_VAR, find_qex, tagged_pids, wait_untagged  # noqa: E402

CONFIG = """[budget]
cpu = 1
mem = "8GB"
[defaults]
mem = "64MB"
[[pool]]
name = "gpu"
devices = ["24GB", "24GB", "24GB", "24GB"]
"""
MARK = b"q quit"  # the end of the status line: the first frame is whole


def prepare(root: str, queued: int, qex: list[str], env: dict) -> str:
    """The queue: one running job on a gate, ``queued`` waiting behind it; the group id."""
    with open(os.path.join(root, "qex.toml"), "w") as fh:
        fh.write(CONFIG)
    gate = os.path.join(root, "gate")
    subprocess.run(
        qex + ["submit", "--name", "blocker", "--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done"],
        env=env,
        check=True,
        capture_output=True,
    )
    lines = os.path.join(root, "lines")
    with open(lines, "w") as fh:
        fh.write("".join(f"{i}\n" for i in range(queued)))
    done = subprocess.run(
        qex + ["submit", "--each-line", lines, "--max-jobs", str(queued), "--", "echo", "{}"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


def spawn_top(qex: list[str], env: dict) -> tuple[subprocess.Popen, int]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    proc = subprocess.Popen(
        qex + ["top"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**env, "TERM": "xterm"},
        start_new_session=True,
        pass_fds=(),
    )
    os.close(slave)
    return proc, master


def read_until(master: int, mark: bytes, limit: float) -> bytes:
    seen, end = b"", time.monotonic() + limit
    while mark not in seen[-4096:]:
        left = end - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"no {mark!r} from qex top within {limit}s: {seen[-400:]!r}")
        ready, _, _ = select.select([master], [], [], left)
        if ready:
            try:
                seen += os.read(master, 65536)
            except OSError:
                break
    return seen


def drain(master: int, seconds: float) -> None:
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        ready, _, _ = select.select([master], [], [], left)
        if ready:
            try:
                os.read(master, 65536)
            except OSError:
                return


def quit_top(proc: subprocess.Popen, master: int) -> None:
    try:
        os.write(master, b"q")
        proc.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()
    finally:
        os.close(master)


def cpu_secs(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def first_frames(qex, env, samples: int) -> list[float]:
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        proc, master = spawn_top(qex, env)
        read_until(master, MARK, 30)
        out.append(time.perf_counter() - t0)
        quit_top(proc, master)
    return out


def idle_cpu(qex, env, seconds: float) -> tuple[float, float]:
    proc, master = spawn_top(qex, env)
    try:
        read_until(master, MARK, 30)
        drain(master, 2.0)  # past the start (imports, the first reads)
        c0, t0 = cpu_secs(proc.pid), time.monotonic()
        drain(master, seconds)
        c1, t1 = cpu_secs(proc.pid), time.monotonic()
    finally:
        quit_top(proc, master)
    return (c1 - c0) / (t1 - t0), (c1 - c0) / (t1 - t0)  # refreshes: one a second (qex.cli.top.REFRESH)


def timed(argv, env, samples: int) -> list[float]:
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--queued", type=int, default=1000)
    p.add_argument("--samples", type=int, default=5)
    p.add_argument("--idle", type=float, default=20.0, help="seconds of idle refreshing measured")
    p.add_argument("--json", metavar="OUT")
    args = p.parse_args()
    qex, interp = find_qex()
    root = tempfile.mkdtemp(prefix="qex-bench-top-")
    tag = f"top-{os.getpid()}"
    env = {
        **os.environ,
        "QEX_STATE_DIR": os.path.join(root, "state"),
        "QEX_CONFIG": os.path.join(root, "qex.toml"),
        "QEX_PEER_DIR": os.path.join(root, "peers"),
        TAG_VAR: tag,
    }
    env.pop("NO_COLOR", None)
    group = None
    try:
        load = os.getloadavg()
        group = prepare(root, args.queued, qex, env)
        frames = first_frames(qex, env, args.samples)
        share, per_refresh = idle_cpu(qex, env, args.idle)
        once = timed(qex + ["top", "--once"], env, args.samples)
        bare = timed([interp, "-c", "pass"], env, args.samples)
        result = {
            "queued": args.queued,
            "loadavg_at_start": load,
            "first_frame_s": frames,
            "first_frame_median_s": statistics.median(frames),
            "idle_cpu_share_of_one_core": share,
            "idle_cpu_per_refresh_s": per_refresh,
            "idle_seconds": args.idle,
            "once_s": once,
            "once_median_s": statistics.median(once),
            "python_pass_median_s": statistics.median(bare),
        }
        print(f"qex top, {args.queued} queued + 1 running (load at start {load[0]:.2f}):")
        print(
            f"  start to first frame  median {result['first_frame_median_s'] * 1000:.0f} ms "
            f"(min {min(frames) * 1000:.0f}, max {max(frames) * 1000:.0f}; target < 500 ms)"
        )
        print(
            f"  idle, refreshing      {share * 100:.2f}% of one core, {per_refresh * 1000:.1f} ms CPU per refresh "
            f"(target < 5%)"
        )
        print(f"  qex top --once        median {result['once_median_s'] * 1000:.0f} ms (every row, to a pipe)")
        print(f"  python -c pass        median {result['python_pass_median_s'] * 1000:.0f} ms")
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(result, fh, indent=1)
        return 0
    finally:
        if group:
            subprocess.run(qex + ["cancel", group], env=env, capture_output=True)
        open(os.path.join(root, "gate"), "w").close()
        try:
            wait_untagged(tag, limit=60)
        except Exception:  # noqa: BLE001 - whatever is left is killed below
            pass
        for pid in tagged_pids(tag):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
