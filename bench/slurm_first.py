"""Submission to the job's first instruction on Slurm: `qex submit` (kind slurm) against plain `sbatch`.

    python bench/slurm_first.py [--rounds N] [--json OUT]

Starts the test suite's one-node Slurm on loopback (tests/slurm/cluster.py: root, Debian's
slurm-wlm and munge), then runs N interleaved rounds of the same job submitted two ways on
that same cluster in the same run:

- qex:    `qex submit -- sh -c 'date +%s%N > MARK'` with `[backend] kind = "slurm"`
- sbatch: `sbatch --parsable --wrap "date +%s%N > MARK"` (the same options qex gives:
          --cpus-per-task=1, --export=NONE, its own output file)

and measures from just before the submitting process starts to the clock time the job's
first instruction (`date`) wrote. Prints one table row per way (median, min, max in ms) and
the difference of the medians: what qex's step (a Python start, the state lock, the
supervisor's spawn) adds on the node to Slurm's own scheduling and launch.
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

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "slurm"))

from cluster import Cluster, why_not  # noqa: E402


def wait_for(path: str, bound: float = 120.0) -> int:
    end = time.monotonic() + bound
    while time.monotonic() < end:
        try:
            with open(path) as fh:
                text = fh.read().strip()
            if text:
                return int(text)
        except FileNotFoundError:
            pass
        time.sleep(0.002)
    raise SystemExit(f"no mark at {path} after {bound:.0f} s")


def one(argv: list[str], env: dict, mark: str, cwd: str) -> tuple[float, float]:
    """(ms until the submitting command returned, ms until the job's first instruction)."""
    t0 = time.time_ns()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    returned = time.time_ns()
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed: {proc.stderr}")
    return (returned - t0) / 1e6, (wait_for(mark) - t0) / 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--json")
    args = ap.parse_args()
    reason = why_not()
    if reason:
        print(f"n/a: {reason}")
        return 0
    root = tempfile.mkdtemp(prefix="qex-bench-slurm-")
    os.chmod(root, 0o755)
    cluster = Cluster(os.path.join(root, "cluster"))
    os.makedirs(cluster.root)
    try:
        cluster.start()
        with open(os.path.join(root, "qex.toml"), "w") as fh:
            fh.write('[backend]\nkind = "slurm"\n[defaults]\nmem = "64MB"\n')
        env = {
            **os.environ,
            **cluster.env,
            "QEX_STATE_DIR": os.path.join(root, "state"),
            "QEX_CONFIG": os.path.join(root, "qex.toml"),
            "QEX_PEER_DIR": os.path.join(root, "peers"),
            "PYTHONPATH": REPO,
        }
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        qex = [sys.executable, "-m", "qex"]
        subprocess.run(qex + ["submit", "--", "true"], env=env, capture_output=True, check=True)  # warm caches
        samples, returns = {"qex": [], "sbatch": []}, {"qex": [], "sbatch": []}
        for i in range(args.rounds):
            for way in ("qex", "sbatch") if i % 2 == 0 else ("sbatch", "qex"):
                mark = os.path.join(root, f"mark-{way}-{i}")
                job = f"date +%s%N > {mark}"
                if way == "qex":
                    argv = qex + ["submit", "--", "sh", "-c", job]
                else:
                    argv = [
                        "sbatch",
                        "--parsable",
                        "--cpus-per-task=1",
                        "--mem=64M",
                        "--export=NONE",
                        f"--output={os.path.join(root, 'sbatch-%j.log')}",
                        "--wrap",
                        job,
                    ]
                back, first = one(argv, env, mark, root)
                returns[way].append(back)
                samples[way].append(first)
        rows = {w: (statistics.median(s), min(s), max(s)) for w, s in samples.items()}
        print(
            f"| way | first instruction: median ms | min | max | the command returned: median ms | rounds "
            f"({os.cpu_count()} cores) |"
        )
        print("| --- | --- | --- | --- | --- | --- |")
        for way, (med, lo, hi) in rows.items():
            print(
                f"| {way} | {med:.0f} | {lo:.0f} | {hi:.0f} | {statistics.median(returns[way]):.0f} | {args.rounds} |"
            )
        print(f"qex adds {rows['qex'][0] - rows['sbatch'][0]:.0f} ms (medians) to plain sbatch")
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"first_ms": samples, "returned_ms": returns, "rounds": args.rounds}, fh, indent=1)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
