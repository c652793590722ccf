"""The crash harness in CI: random rounds while qex processes are SIGKILLed and
passes die between their writes; the invariant checker after every round.

QEX_CRASH_SEED=N replays a failure; QEX_CRASH_ROUNDS sets the number of rounds.
The soak mode is bench/soak.py (as long as asked)."""

import os
import random
import time

import pytest

from crash.harness import Harness

ROUNDS = int(
    os.environ.get("QEX_CRASH_ROUNDS", "24")
)  # ~2 s each on 2 cores (the README's test command stays under 10 minutes there); the soak runs more


def test_random_rounds_with_kills_and_crash_points_keep_every_promise(tmp_path):
    seed = int(os.environ.get("QEX_CRASH_SEED") or random.randrange(1 << 32))
    h = Harness(str(tmp_path), seed)
    problems = []
    t0 = time.monotonic()
    try:
        while h.rounds < ROUNDS and not problems:
            problems += h.round()
    finally:
        summary = f"{h.summary()} in {time.monotonic() - t0:.1f}s"
        print(summary)
    assert not problems, (
        f"replay with QEX_CRASH_SEED={seed}\n{summary}\n"
        + "\n".join(problems[:20])
        + "\n-- the last rounds:\n"
        + "\n".join(h.log[-3:])
    )


@pytest.mark.soak
@pytest.mark.skipif(
    not os.environ.get("QEX_SOAK_MINUTES"), reason="soak mode: set QEX_SOAK_MINUTES (or run bench/soak.py)"
)
def test_rounds_for_qex_soak_minutes_with_kills_and_crash_points_keep_every_promise(tmp_path):
    minutes = float(os.environ["QEX_SOAK_MINUTES"])
    seed = int(os.environ.get("QEX_CRASH_SEED") or random.randrange(1 << 32))
    h = Harness(str(tmp_path), seed)
    end, problems = time.monotonic() + minutes * 60, []
    while time.monotonic() < end and not problems:
        problems += h.round()
    print(h.summary())
    assert not problems, f"replay with QEX_CRASH_SEED={seed}\n" + "\n".join(problems[:20])
