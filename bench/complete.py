#!/usr/bin/env python3
"""Shell completion with a long queue: the time `qex __complete jobs` takes, and the
time bash takes to complete `qex wait <TAB>` through the generated script.

    .venv/bin/python bench/complete.py [--queued 10000] [--ended 0] [--samples 10] [--json OUT]

A fresh queue, paused (nothing starts), holds QUEUED jobs from one `--each-line`
submission: QUEUED entries in the active index, the file completion reads. With
--ended N it also holds N ended jobs (a second fan-out, cancelled), read from the
end of history.jsonl. Then SAMPLES runs of each, wall time:

- `qex __complete jobs` (the hidden fast path: the index and the end of the history);
- bash: `source <(qex completions bash)` done once, then `_qex` called with
  COMP_WORDS=(qex wait "") in the same shell, timed inside bash (EPOCHREALTIME);
- `python -c pass`, the interpreter's own start, for scale.

Target (issue 25): under 100 ms with 10,000 records. Standard library only; it
removes what it made.
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


def _qex() -> list[str]:
    here = os.path.join(os.path.dirname(sys.executable), "qex")
    return [here] if os.path.exists(here) else [sys.executable, "-m", "qex"]


def _timed(argv, env, samples) -> list[float]:
    out = []
    for _ in range(samples):
        t = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        out.append(time.perf_counter() - t)
    return out


def _bash(env, samples, shim_dir) -> list[float]:
    script = (
        "source <(qex completions bash); for i in $(seq %d); do s=$EPOCHREALTIME; "
        'COMP_WORDS=(qex wait ""); COMP_CWORD=2; _qex; e=$EPOCHREALTIME; '
        'echo "$s $e ${#COMPREPLY[@]}"; done' % samples
    )
    proc = subprocess.run(
        ["bash", "-c", script],
        env={**env, "PATH": f"{shim_dir}:{env['PATH']}"},
        capture_output=True,
        text=True,
        check=True,
    )
    rows = [line.split() for line in proc.stdout.splitlines()]
    return [float(e) - float(s) for s, e, _ in rows], int(rows[-1][2])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queued", type=int, default=10000)
    ap.add_argument("--ended", type=int, default=0)
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--json", metavar="OUT")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="qex-bench-complete-")
    env = {
        **os.environ,
        "QEX_STATE_DIR": f"{root}/state",
        "QEX_CONFIG": f"{root}/qex.toml",
        "QEX_PEER_DIR": f"{root}/peers",
    }
    with open(env["QEX_CONFIG"], "w") as fh:
        fh.write('[budget]\ncpu = 2\n[defaults]\nmem = "64MB"\n[[pool]]\nname = "scratch"\ncount = 2\n')
    qex = _qex()
    shim = os.path.join(root, "bin")
    os.mkdir(shim)
    with open(os.path.join(shim, "qex"), "w") as fh:
        fh.write("#!/bin/sh\nexec " + " ".join(qex) + ' "$@"\n')
    os.chmod(os.path.join(shim, "qex"), 0o755)
    try:
        subprocess.run(qex + ["pause", "queue"], env=env, check=True, capture_output=True)
        for n, what in ((a.ended, "ended"), (a.queued, "queued")):
            if n:
                lines = os.path.join(root, f"{what}.txt")
                with open(lines, "w") as fh:
                    fh.write("".join(f"{what}-{i}\n" for i in range(n)))
                subprocess.run(
                    qex + ["submit", "--each-line", lines, "--max-jobs", str(n), "--name", what, "--", "echo", "{}"],
                    env=env,
                    check=True,
                    capture_output=True,
                )
                if what == "ended":
                    subprocess.run(qex + ["cancel", "--mine"], env=env, check=True, capture_output=True)
        ask = _timed(qex + ["__complete", "jobs"], env, a.samples)
        in_bash, offered = _bash(env, a.samples, shim)
        floor = _timed([sys.executable, "-c", "pass"], env, a.samples)
        result = {
            "queued": a.queued,
            "ended": a.ended,
            "offered": offered,
            "complete_jobs_ms": [round(x * 1000, 1) for x in ask],
            "bash_tab_ms": [round(x * 1000, 1) for x in in_bash],
            "python_floor_ms": [round(x * 1000, 1) for x in floor],
        }
        for key in ("complete_jobs_ms", "bash_tab_ms", "python_floor_ms"):
            print(f"{key:18} median {statistics.median(result[key]):7.1f}  max {max(result[key]):7.1f}")
        print(f"offered {offered} words ({a.queued} queued, {a.ended} ended jobs)")
        if a.json:
            with open(a.json, "w") as fh:
                json.dump(result, fh, indent=1)
    finally:
        subprocess.run(qex + ["resume", "queue"], env=env, capture_output=True)
        subprocess.run(qex + ["cancel", "--mine"], env=env, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
