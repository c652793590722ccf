#!/usr/bin/env python3
"""Streaming through `qex run`: a large file's bytes, against `cat` alone and `tsp -f`.

    python bench/stream.py [--mb N] [--rounds R] [--keep-file]

Issue 29: `qex run` is a pipe; the target is at least half of `cat`'s throughput.
Makes a file of N MB (default 1024) of random bytes in a temporary directory, then
runs R rounds (default 2), each tool in turn within a round:

- ``cat FILE > DEST``
- ``qex run --quiet -- cat FILE > DEST`` (a fresh state directory, the default config:
  ``[logs] max_bytes`` 32MB, so the log is cut all along while the stream stays whole;
  the first round's output to a file is compared with FILE, byte for byte)
- ``tsp -f cat FILE`` if task-spooler is installed (its own socket and TMPDIR; tsp
  writes the job's output to a file of its own, never to stdout: DEST does not apply)

DEST is /dev/null and a file beside FILE (the page cache, mostly). Prints the best MB/s
of each and the ratio to ``cat`` to the same DEST. Standard library only; runs the qex
of this checkout (``python -m qex`` with this repository first on PYTHONPATH). I/O heavy:
N MB read R x 5 times, N MB written R x 3 times.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_file(path: str, mb: int) -> None:
    block = os.urandom(1 << 20)
    with open(path, "wb") as fh:
        for i in range(mb):
            fh.write(block[i % 251:] + block[:i % 251])  # (each MB differs: no dedupe anywhere)


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
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="qex-bench-stream-")
    src, out_file = os.path.join(tmp, "input.bin"), os.path.join(tmp, "output.bin")
    env = {**os.environ, "QEX_STATE_DIR": os.path.join(tmp, "state"), "QEX_CONFIG": os.path.join(tmp, "none.toml"),
           "QEX_PEER_DIR": os.path.join(tmp, "peers"), "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    tsp = shutil.which("tsp")
    tsp_env = {**os.environ, "TS_SOCKET": os.path.join(tmp, "ts.sock"), "TMPDIR": tmp}
    qex = [sys.executable, "-m", "qex", "run", "--quiet", "--", "cat", src]
    best: dict[tuple[str, str], float] = {}
    try:
        make_file(src, args.mb)
        subprocess.run(["cat", src], stdout=subprocess.DEVNULL, check=True)  # (in the page cache for all)
        for r in range(args.rounds):
            for dest in (os.devnull, out_file):
                where = "/dev/null" if dest == os.devnull else "file"
                for name, argv, e in (("cat", ["cat", src], None), ("qex run", qex, env)):
                    secs = timed(argv, dest, e)
                    best[(name, where)] = min(best.get((name, where), secs), secs)
                    if name == "qex run" and where == "file" and r == 0:
                        ok = subprocess.run(["cmp", src, out_file]).returncode == 0
                        print(f"qex run output to a file is {'byte-exact' if ok else 'NOT byte-exact'}")
                        if not ok:
                            return 1
            if tsp:
                t0 = time.perf_counter()
                subprocess.run([tsp, "-f", "cat", src], stdout=subprocess.DEVNULL, env=tsp_env, check=True)
                secs = time.perf_counter() - t0
                best[("tsp -f", "its file")] = min(best.get(("tsp -f", "its file"), secs), secs)
                subprocess.run([tsp, "-C"], env=tsp_env, stdout=subprocess.DEVNULL)  # (its finished jobs' files stay)
                for name in os.listdir(tmp):
                    if name.startswith("ts-out."):
                        os.unlink(os.path.join(tmp, name))
        print(f"{args.mb} MB, best of {args.rounds} (load average {os.getloadavg()[0]:.1f}, "
              f"{os.cpu_count()} cores)")
        print(f"{'tool':10} {'to':10} {'MB/s':>8} {'vs cat':>7}")
        for (name, where), secs in sorted(best.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            base = best.get(("cat", where)) or best.get(("cat", "file"))
            print(f"{name:10} {where:10} {args.mb / secs:8.0f} {base / secs:6.2f}x")
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


if __name__ == "__main__":
    sys.exit(main())
