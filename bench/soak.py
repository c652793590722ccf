"""Soak mode of the crash harness: random rounds for as long as asked.

    python bench/soak.py --minutes 30 [--seed N] [--crash-rate 0.25] [--kill-rate 0.6]

Each round starts a few qex commands at once, arms random crash points in some
(QEX_CRASH_AT), SIGKILLs random qex processes, waits (bounded) for every job
to end, then checks every invariant of tests/crash/invariants.py. It stops at
the first violation and prints the seed that replays it (the same seed gives
the same choices; the kernel's timing still differs), and otherwise prints the
numbers: rounds, commands, jobs, kills, crash points. Exit 0 when no round
broke a promise, 1 otherwise.
"""

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from crash.harness import Harness  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--crash-rate", type=float, default=0.25, help="share of commands armed with a crash point")
    p.add_argument("--kill-rate", type=float, default=0.6, help="share of rounds with at least one SIGKILL")
    p.add_argument("--fresh-every", type=int, default=500, help="start a new state directory every N rounds")
    args = p.parse_args()
    seed = random.randrange(1 << 32) if args.seed is None else args.seed
    end = time.monotonic() + args.minutes * 60
    totals = {"rounds": 0, "commands": 0, "kills": 0, "crash points": 0, "jobs": 0}
    t0 = time.monotonic()
    part = 0
    while time.monotonic() < end:
        root = tempfile.mkdtemp(prefix="qex-soak-")
        h = Harness(root, seed + part)
        problems = []
        while time.monotonic() < end and h.rounds < args.fresh_every and not problems:
            problems = h.round()
            if h.rounds % 25 == 0:
                print(f"  {h.summary()} ({time.monotonic() - t0:.0f}s)", flush=True)
        from crash import invariants as inv

        totals["rounds"] += h.rounds
        totals["commands"] += h.calls
        totals["kills"] += h.kills
        totals["crash points"] += h.crashes_armed
        totals["jobs"] += len(inv.read_view(h.state).records)
        if problems:
            print(f"VIOLATION with seed {seed + part} (replay: --seed {seed + part}); state kept in {root}")
            print("\n".join(problems[:30]))
            print("-- the last rounds:\n" + "\n".join(h.log[-3:]))
            return 1
        shutil.rmtree(root, ignore_errors=True)
        part += 1
    print(f"no violation in {time.monotonic() - t0:.0f}s: " + ", ".join(f"{v} {k}" for k, v in totals.items())
          + f" (seed {seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
