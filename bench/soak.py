"""Soak mode of the crash harness: random rounds for as long as asked.

    python bench/soak.py --minutes 30 [--seed N] [--crash-rate 0.25] [--kill-rate 0.6]
    python bench/soak.py --users 3 --layout private|shared --minutes 3 [--seed N]   (as root)

Each round starts a few qex commands at once, arms random crash points in some
(QEX_CRASH_AT), SIGKILLs random qex processes, waits (bounded) for every job
to end, then checks every invariant of tests/crash/invariants.py. It stops at
the first violation and prints the seed that replays it (the same seed gives
the same choices; the kernel's timing still differs), and otherwise prints the
numbers: rounds, commands, jobs, kills, crash points. Exit 0 when no round
broke a promise, 1 otherwise.

With ``--users N`` (2 or 3) the rounds are the multi-user ones of
tests/crash/multiuser.py (issue 34), in one ``--layout``: N real users (made
as root, removed at the end) submit, cancel, wait for and kill their own jobs
and try to act on the others', while any user's qex processes are SIGKILLed;
after each round: one budget never exceeded by all users' live jobs together,
every job final, none run twice, true owners, no secret readable by another
user. It goes on after a violation and prints each (the first 30), then the
numbers: rounds, jobs, kills (by kind), violations. Without root it says why
and exits 0 (skipped).
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
    p.add_argument(
        "--crash-rate",
        type=float,
        default=None,
        help="share of commands armed with a crash point (default 0.25; 0.1 with --users)",
    )
    p.add_argument(
        "--kill-rate",
        type=float,
        default=None,
        help="share of rounds with at least one SIGKILL (default 0.6; 0.8 with --users)",
    )
    p.add_argument(
        "--fresh-every",
        type=int,
        default=None,
        help="start a new state directory every N rounds (default 500; 40 with --users)",
    )
    p.add_argument("--users", type=int, default=0, help="multi-user rounds with N real users (2 or 3; needs root)")
    p.add_argument(
        "--layout",
        choices=("private", "shared"),
        default="private",
        help="with --users: a private state directory each and a peer directory, or one shared",
    )
    args = p.parse_args()
    seed = random.randrange(1 << 32) if args.seed is None else args.seed
    if args.users:
        return multiuser(args, seed)
    args.fresh_every = args.fresh_every or 500
    args.crash_rate = 0.25 if args.crash_rate is None else args.crash_rate
    args.kill_rate = 0.6 if args.kill_rate is None else args.kill_rate
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
    print(
        f"no violation in {time.monotonic() - t0:.0f}s: "
        + ", ".join(f"{v} {k}" for k, v in totals.items())
        + f" (seed {seed})"
    )
    return 0


def multiuser(args, seed: int) -> int:
    from crash.multiuser import make_users, run_rounds

    if not 2 <= args.users <= 3:
        print("--users takes 2 or 3", file=sys.stderr)
        return 2
    if os.getuid() != 0:
        print("skipped: the multi-user rounds create real users, which needs root")
        return 0
    users, why = make_users(args.users)
    if why:
        users.remove()
        print(f"skipped: {why}")
        return 0
    t0 = time.monotonic()
    violations = []

    def on_round(h, got):
        violations.extend(got)
        for problem in got:
            print(f"VIOLATION {problem}", flush=True)
        if h.rounds % 10 == 0:
            print(f"  {h.summary()} ({time.monotonic() - t0:.0f}s)", flush=True)

    try:
        problems, totals = run_rounds(
            users,
            args.layout,
            seed,
            minutes=args.minutes,
            stop_at_first=False,
            fresh_every=args.fresh_every or 40,
            on_round=on_round,
            crash_rate=0.1 if args.crash_rate is None else args.crash_rate,
            kill_rate=0.8 if args.kill_rate is None else args.kill_rate,
        )
    finally:
        users.remove()
    kinds = ", ".join(f"{n} {k}" for k, n in totals["kinds"].items())
    print(
        f"{args.layout}, {args.users} users, {time.monotonic() - t0:.0f}s: {totals['rounds']} rounds, "
        f"{totals['jobs']} jobs, {totals['commands']} commands, {totals['kills']} kills ({kinds}), "
        f"{totals['refusals']} refusals, {len(problems)} violations (seed {seed})"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
