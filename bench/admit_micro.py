"""Micro-benchmark of the pure admission pass (run on demand, never in CI).

    python bench/admit_micro.py [--repeat N] [SIZES...]

The drain's case: 2 running jobs of 1 core fill a 2-core budget, and N queued
jobs with identical claims (1 core, 64MB, no deps) wait behind them. Prints the
best and median wall time of ``qex.admit.admit`` per size (default 1000 and
10000 queued), and the cost of ``import qex.admit`` in a fresh interpreter.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

MB = 1 << 20


def snapshot(n: int):
    from qex import admit as A

    running = tuple(A.Running(f"r{i:05d}", 1000, 64 * MB) for i in range(2))
    queued = tuple(A.Queued(f"{i:08x}-q", i + 10, 0, 1000, 64 * MB, name="true") for i in range(n))
    return A.Snapshot(
        now=1000.0,
        cpu_budget=2000,
        mem_budget=8 << 30,
        mem_available=4 << 30,
        oversized="run-when-idle",
        max_bypass=2,
        pools=(),
        running=running,
        peers=(),
        queued=queued,
    )


def time_admit(n: int, repeat: int) -> tuple[float, float]:
    from qex.admit import admit

    snap = snapshot(n)
    admit(snap)  # warm up
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        admit(snap)
        samples.append((time.perf_counter() - t0) * 1000)
    return min(samples), statistics.median(samples)


def import_ms(repeat: int = 5) -> float:
    code = (
        "import time,sys; t=time.perf_counter(); import qex.admit; "
        "print((time.perf_counter()-t)*1000, 'attrs' in sys.modules or 'attr' in sys.modules)"
    )
    best, attrs_in = float("inf"), False
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
        best, attrs_in = min(best, float(out[0])), out[1] == "True"
    return best, attrs_in


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[1000, 10000])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    ms, attrs_in = import_ms()
    print(f"import qex.admit: {ms:.2f} ms (best of 5, fresh interpreter; attrs imported: {attrs_in})")
    for n in args.sizes:
        best, median = time_admit(n, max(3, args.repeat if n <= 1000 else args.repeat // 4))
        print(f"admit, 2 running + {n} queued: best {best:.2f} ms, median {median:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
