#!/usr/bin/env python3
"""Fan-out of N lines: wall time, qex CPU time and peak memory of the submitting command,
and the time of `qex list --group` over the N jobs.

    python bench/fanout.py [--lines 1000] [--samples 5] [--run] [--json OUT]

Run it with the interpreter of the venv qex is installed in. Each sample uses a
fresh private state directory (on the file system of $TMPDIR, as a user's
would be). By default the jobs `--needs` a gate job that never runs, so the
numbers are the submission alone and no job competes with the next sample;
--run lets the jobs run (the first pass then also forks their supervisors).
Standard library only. The reference Rust tool needed 4.9 s for 300 lines.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

QEX = [sys.executable, "-m", "qex"]
CONFIG = '[budget]\ncpu = 2\n\n[defaults]\nmem = "64MB"\n'


def timed(argv, env, cwd) -> dict:
    """Run argv; its wall time, CPU time (user+sys) and peak RSS (KiB), from wait4."""
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:  # files: a pipe could fill
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out_f, stderr=err_f)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read(), err_f.read()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:6])} ... failed ({proc.returncode}): {err.decode()[-500:]}")
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "user": usage.ru_utime,
        "sys": usage.ru_stime,
        "maxrss_kib": usage.ru_maxrss,
        "stdout": out.decode(),
    }


def sample(n: int, run: bool) -> dict:
    root = tempfile.mkdtemp(prefix="qex-bench-fanout-")
    env = {
        **os.environ,
        "QEX_STATE_DIR": os.path.join(root, "state"),
        "QEX_CONFIG": os.path.join(root, "qex.toml"),
        "QEX_PEER_DIR": os.path.join(root, "peers"),
    }
    try:
        with open(env["QEX_CONFIG"], "w") as fh:
            fh.write(CONFIG)
        lines = os.path.join(root, "inputs.txt")
        with open(lines, "w") as fh:
            fh.write("".join(f"input-{i:05d}.dat\n" for i in range(n)))
        extra = []
        if not run:
            gate = subprocess.run(
                QEX + ["submit", "--", "sleep", "3600"], env=env, cwd=root, capture_output=True, text=True, check=True
            ).stdout.strip()
            extra = ["--needs", gate]
        sub = timed(QEX + ["submit", "--each-line", lines, "--max-jobs", str(n), *extra, "--", "true", "{}"], env, root)
        group = sub["stdout"].strip()
        listed = timed(QEX + ["list", "--group", group], env, root)
        assert len(listed["stdout"].splitlines()) == n + 1, "list --group must show every job"
        as_json = timed(QEX + ["list", "--group", group, "--json"], env, root)
        bare = timed(QEX + ["version"], env, root)
        return {"submit": sub, "list": listed, "list_json": as_json, "startup": bare}
    finally:
        _stop_everything(env)
        shutil.rmtree(root, ignore_errors=True)


def _stop_everything(env) -> None:
    """Kill every job and supervisor of this private state directory (its own processes only)."""
    state = env["QEX_STATE_DIR"]
    needle = f"QEX_STATE_DIR={state}".encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    os.kill(int(pid), 9)
        except OSError:
            pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--run", action="store_true", help="let the jobs run (default: gated, submission only)")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    samples = [sample(args.lines, args.run) for _ in range(args.samples)]

    def med(kind, key):
        return statistics.median(s[kind][key] for s in samples)

    load = os.getloadavg()[0]
    print(
        f"qex fan-out of {args.lines} lines, {args.samples} samples (median), "
        f"{os.cpu_count()} cores, load {load:.1f}, state on {tempfile.gettempdir()}"
    )
    print(
        f"  submit --each-line : wall {med('submit', 'wall'):.3f} s, qex CPU {med('submit', 'cpu'):.3f} s "
        f"(user {med('submit', 'user'):.3f}, sys {med('submit', 'sys'):.3f}), "
        f"peak RSS {med('submit', 'maxrss_kib') / 1024:.1f} MiB"
    )
    print(f"  list --group       : wall {med('list', 'wall'):.3f} s, CPU {med('list', 'cpu'):.3f} s")
    print(f"  list --group --json: wall {med('list_json', 'wall'):.3f} s, CPU {med('list_json', 'cpu'):.3f} s")
    print(f"  qex version (start-up floor): wall {med('startup', 'wall'):.3f} s")
    walls = ", ".join(f"{s['submit']['wall']:.3f}" for s in samples)
    print(f"  every sample's submit wall: {walls}")
    if args.json:
        for s in samples:
            for part in s.values():
                part.pop("stdout", None)
        with open(args.json, "w") as fh:
            json.dump({"lines": args.lines, "run": args.run, "load": load, "samples": samples}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
