"""The CPU the waker of a paused queue uses while nothing changes.

    python bench/waker_idle.py [--jobs 1000,10000] [--seconds 30] [--settle 5] [--json OUT]

For each N: a fresh state directory, `qex pause queue`, then N jobs queued by one
`qex submit --each-line`; once the submission has returned and `--settle` seconds
have passed, the waker's user+system clock ticks (/proc/PID/stat) and the opens of
index.json (inotify on the state directory; nothing else runs) are counted over
`--seconds`. qex is run as `python -m qex` with this interpreter in a temporary
directory (never the current one, which `-m` would put first on the path), so the
qex on PYTHONPATH is measured: `PYTHONPATH=/path/to/other/checkout python
bench/waker_idle.py` measures another version.
"""

import argparse
import ctypes
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

TICK = os.sysconf("SC_CLK_TCK")
IN_OPEN = 0x20
_EVENT = struct.Struct("iIII")


def ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def holder_of(path: str) -> int | None:
    """The waker that holds the lock ``path`` (named ``qex: waker``: the first child of
    its double fork holds the lock too, for a moment)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == path for fd in fds):
                with open(f"/proc/{pid}/comm") as fh:
                    if fh.read().strip() == "qex: waker":
                        return int(pid)
        except OSError:
            continue
    return None


def watch_opens(directory: str) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0 or libc.inotify_add_watch(fd, os.fsencode(directory), IN_OPEN) < 0:
        raise OSError(ctypes.get_errno(), "inotify")
    return fd


def count_opens(fd: int, name: bytes, seconds: float) -> int:
    n, end = 0, time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if not select.select([fd], [], [], left)[0]:
            continue
        try:
            buf = os.read(fd, 1 << 16)
        except BlockingIOError:
            continue
        off = 0
        while off < len(buf):
            length = _EVENT.unpack_from(buf, off)[3]
            start = off + _EVENT.size
            n += buf[start : start + length].rstrip(b"\0") == name
            off = start + length
    return n


def run_one(root: str, jobs: int, seconds: float, settle: float) -> dict:
    state = os.path.join(root, f"state-{jobs}")
    config = os.path.join(root, "qex.toml")
    with open(config, "w") as fh:
        fh.write('[budget]\ncpu = 2\n[defaults]\nmem = "64MB"\n')
    env = {**os.environ, "QEX_STATE_DIR": state, "QEX_CONFIG": config, "QEX_PEER_DIR": os.path.join(root, "peers")}
    qex = [sys.executable, "-m", "qex"]
    subprocess.run(qex + ["pause", "queue"], env=env, check=True, capture_output=True, cwd=root)
    lines = os.path.join(root, f"lines-{jobs}")
    with open(lines, "w") as fh:
        fh.write("".join(f"{i}\n" for i in range(jobs)))
    t0 = time.monotonic()
    subprocess.run(
        qex + ["submit", "--each-line", lines, "--max-jobs", str(jobs), "--", "true", "{}"],
        env=env,
        check=True,
        capture_output=True,
        cwd=root,
    )
    submitted = time.monotonic() - t0
    lock = os.path.join(state, f"waker-{os.getuid()}.lock")
    end = time.monotonic() + 10
    while (pid := holder_of(lock)) is None and time.monotonic() < end:
        time.sleep(0.05)
    if pid is None:
        raise SystemExit(f"no waker holds {lock}")
    time.sleep(settle)
    fd = watch_opens(state)
    try:
        before, t1 = ticks(pid), time.monotonic()
        opens = count_opens(fd, b"index.json", seconds)
        used, wall = ticks(pid) - before, time.monotonic() - t1
    finally:
        os.close(fd)
    shutil.rmtree(state)  # the waker of a removed state directory ends (qex.queue.waker._still_found)
    end = time.monotonic() + 10
    while holder_of(lock) == pid and time.monotonic() < end:
        time.sleep(0.1)
    if holder_of(lock) == pid:
        os.kill(pid, signal.SIGKILL)
    return {
        "jobs": jobs,
        "submit_s": round(submitted, 2),
        "seconds": round(wall, 2),
        "ticks": used,
        "core_pct": round(100.0 * used / TICK / wall, 2),
        "index_opens": opens,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", default="1000,10000", help="queued jobs, comma-separated (default 1000,10000)")
    ap.add_argument("--seconds", type=float, default=30.0, help="how long to count (default 30)")
    ap.add_argument("--settle", type=float, default=5.0, help="wait after the submission (default 5)")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    where = subprocess.run(
        [sys.executable, "-c", "import os, qex; print(os.path.dirname(os.path.dirname(qex.__file__)))"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    ).stdout.strip()
    with open("/proc/loadavg") as fh:
        load = fh.read().split()[:3]
    print(f"waker of a paused queue, idle (qex from {where}; clock tick {1000 / TICK:.0f} ms; load {' '.join(load)})")
    print(f"{'jobs':>7}{'submit s':>10}{'seconds':>9}{'ticks':>7}{'% core':>8}{'index opens':>13}")
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for n in (int(x) for x in args.jobs.split(",")):
            r = run_one(root, n, args.seconds, args.settle)
            rows.append(r)
            print(
                f"{r['jobs']:>7}{r['submit_s']:>10}{r['seconds']:>9}{r['ticks']:>7}{r['core_pct']:>8}"
                f"{r['index_opens']:>13}"
            )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"qex": where, "load": load, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
