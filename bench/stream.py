#!/usr/bin/env python3
"""Streaming through `qex run`: a large file's bytes, against `cat` alone and `tsp -f`.

    python bench/stream.py [--mb N] [--rounds R] [--keep-file]

Issue 29: `qex run` is a pipe; the target is at least half of `cat`'s throughput.
Makes a file of N MB (default 1024) of random bytes in a temporary directory, then
runs R rounds (default 2), each tool in turn within a round:

- ``cat FILE > DEST``
- ``cat FILE | cat > DEST``: a shell pipe with one more process, what anything that
  streams through a pipe is bounded by (``cat FILE > file`` itself copies in the
  kernel, ``copy_file_range``, with no pipe at all)
- ``qex run --quiet -- cat FILE > DEST`` (a fresh state directory, the default config:
  ``[logs] max_bytes`` 32MB, so the log is cut all along while the stream stays whole;
  the first round's output to a file is compared with FILE, byte for byte)
- ``tsp -f cat FILE`` if task-spooler is installed (its own socket and TMPDIR; tsp
  writes the job's output to a file of its own, never to stdout: DEST does not apply)

DEST is /dev/null and a file beside FILE (the page cache, mostly). Prints the best and
the median MB/s of each and their ratios to ``cat`` and to the pipe to the same DEST (a
shared machine's noise is large: say which), and writes every sample to ``bench/results/stream-<time>.json``
(``--results-dir``; ``''`` for none). Standard library only; runs the qex of this checkout
(``python -m qex`` with this repository first on PYTHONPATH). I/O heavy: N MB read R x 7
times, N MB written R x 4 times.
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")


def make_file(path: str, mb: int) -> None:
    block = os.urandom(1 << 20)
    with open(path, "wb") as fh:
        for i in range(mb):
            fh.write(block[i % 251 :] + block[: i % 251])  # (each MB differs: no dedupe anywhere)


def timed(argv: list[str], dest: str, env: dict | None = None) -> float:
    with open(dest, "wb") as out:
        t0 = time.perf_counter()
        subprocess.run(argv, stdout=out, stdin=subprocess.DEVNULL, check=True, env=env)
        return time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mb", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--keep-file", action="store_true", help="leave the temporary directory (prints its path)")
    p.add_argument("--results-dir", default=RESULTS, help="where stream-<time>.json goes ('' for none)")
    args = p.parse_args()
    load_at_start = os.getloadavg()[0]
    tmp = tempfile.mkdtemp(prefix="qex-bench-stream-")
    src, out_file = os.path.join(tmp, "input.bin"), os.path.join(tmp, "output.bin")
    env = {
        **os.environ,
        "QEX_STATE_DIR": os.path.join(tmp, "state"),
        "QEX_CONFIG": os.path.join(tmp, "none.toml"),
        "QEX_PEER_DIR": os.path.join(tmp, "peers"),
        "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    tsp = shutil.which("tsp")
    tsp_env = {**os.environ, "TS_SOCKET": os.path.join(tmp, "ts.sock"), "TMPDIR": tmp}
    qex = [sys.executable, "-m", "qex", "run", "--quiet", "--", "cat", src]
    pipe = ["sh", "-c", 'cat "$1" | cat', "sh", src]
    secs_of: dict[tuple[str, str], list[float]] = {}
    try:
        make_file(src, args.mb)
        subprocess.run(["cat", src], stdout=subprocess.DEVNULL, check=True)  # (in the page cache for all)
        for r in range(args.rounds):
            for dest in (os.devnull, out_file):
                where = "/dev/null" if dest == os.devnull else "file"
                for name, argv, e in (("cat", ["cat", src], None), ("cat | cat", pipe, None), ("qex run", qex, env)):
                    secs_of.setdefault((name, where), []).append(timed(argv, dest, e))
                    if name == "qex run" and where == "file" and r == 0:
                        ok = subprocess.run(["cmp", src, out_file]).returncode == 0
                        print(f"qex run output to a file is {'byte-exact' if ok else 'NOT byte-exact'}")
                        if not ok:
                            return 1
            if tsp:
                t0 = time.perf_counter()
                subprocess.run([tsp, "-f", "cat", src], stdout=subprocess.DEVNULL, env=tsp_env, check=True)
                secs_of.setdefault(("tsp -f", "its file"), []).append(time.perf_counter() - t0)
                subprocess.run([tsp, "-C"], env=tsp_env, stdout=subprocess.DEVNULL)  # (its finished jobs' files stay)
                for name in os.listdir(tmp):
                    if name.startswith("ts-out."):
                        os.unlink(os.path.join(tmp, name))
        report(args, secs_of, load_at_start)
        if not tsp:
            print("tsp -f: task-spooler is not installed (apt-get install task-spooler)")
    finally:
        if tsp:
            subprocess.run([tsp, "-K"], env=tsp_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if args.keep_file:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


def report(args, secs_of: dict, load_at_start: float) -> None:
    """The table (best and median MB/s, each against ``cat`` and the pipe to the same place) and the results file."""
    print(
        f"{args.mb} MB, {args.rounds} round(s) (load average {load_at_start:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end, {os.cpu_count()} cores)"
    )
    print(
        f"{'tool':10} {'to':10} {'best MB/s':>10} {'vs cat':>7} {'vs pipe':>8} {'median':>8} {'vs cat':>7} "
        f"{'vs pipe':>8}"
    )
    rows = []
    for (name, where), secs in sorted(secs_of.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        base = secs_of.get(("cat", where)) or secs_of[("cat", "file")]
        pipe = secs_of.get(("cat | cat", where)) or secs_of[("cat | cat", "file")]
        best, median = min(secs), statistics.median(secs)
        print(
            f"{name:10} {where:10} {args.mb / best:10.0f} {min(base) / best:6.2f}x {min(pipe) / best:7.2f}x "
            f"{args.mb / median:8.0f} {statistics.median(base) / median:6.2f}x "
            f"{statistics.median(pipe) / median:7.2f}x"
        )
        rows.append(
            {
                "tool": name,
                "to": where,
                "seconds": secs,
                "best_mb_s": args.mb / best,
                "median_mb_s": args.mb / median,
                "best_vs_cat": min(base) / best,
                "median_vs_cat": statistics.median(base) / median,
                "best_vs_pipe": min(pipe) / best,
                "median_vs_pipe": statistics.median(pipe) / median,
            }
        )
    if args.results_dir:
        os.makedirs(args.results_dir, exist_ok=True)
        path = os.path.join(args.results_dir, time.strftime("stream-%Y%m%d-%H%M%S.json"))
        with open(path, "w") as fh:
            json.dump(
                {
                    "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "host": platform.node(),
                    "cpus": os.cpu_count(),
                    "kernel": platform.release(),
                    "mb": args.mb,
                    "rounds": args.rounds,
                    "load_at_start": load_at_start,
                    "load_at_end": os.getloadavg()[0],
                    "rows": rows,
                },
                fh,
                indent=1,
            )
        print(f"results: {path}")


if __name__ == "__main__":
    sys.exit(main())
