"""N calls of a function that returns at once, two at a time: qex.Executor against
submitit's LocalExecutor and concurrent.futures.ProcessPoolExecutor(2), in one run.

    .venv/bin/python bench/python_executor.py [--n 200] [--rounds 1] [--profile]

(``pip install -e '.[bench]'`` for submitit; without it, its row is left out.)

qex: ``Executor(cpu=1)`` on a queue of its own whose budget is 2 cores, so two calls
run at once and the rest wait in the queue; ``map`` (one group, one submission) and
``submit`` (one submission per call) are timed apart. submitit's LocalExecutor has
no queue: it starts every job at once (so it does not keep to two at a time; its
time is the target's reference). ProcessPoolExecutor(2) reuses two warm workers:
the floor. For qex it also prints how many calls ran at once at most (from the
records: it must be 2), where a call's time goes (submitted -> started -> ended,
from the records), and with ``--profile`` the submitting side's profile.
"""

import argparse
import concurrent.futures as cf
import json
import os
import statistics
import sys
import tempfile
import time


def noop(x):
    return x


def queue_env(root: str) -> None:
    config = os.path.join(root, "qex.toml")
    with open(config, "w") as fh:
        fh.write('[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "64MB"\n')
    os.chmod(config, 0o600)
    os.environ.update(
        QEX_STATE_DIR=os.path.join(root, "state"),
        QEX_CONFIG=config,
        QEX_PEER_DIR=os.path.join(root, "peers"),
        XDG_CACHE_HOME=os.path.join(root, "cache"),
    )


def run_qex(n: int, how: str, profile: bool) -> tuple[float, list[str]]:
    import qex

    with qex.Executor(cpu=1) as ex:
        prof = None
        if profile:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        t0 = time.perf_counter()
        if how == "map":
            futures = None
            results = list(ex.map(noop, range(n)))
        else:
            futures = [ex.submit(noop, i) for i in range(n)]
            results = [f.result() for f in futures]
        took = time.perf_counter() - t0
        if prof is not None:
            prof.disable()
            import pstats

            print(f"\n-- profile of the submitting program, qex {how} --")
            pstats.Stats(prof).sort_stats("tottime").print_stats(14)
    assert results == list(range(n)), results[:5]
    return took, [f.job.id for f in futures] if futures else []


def run_submitit(n: int, root: str) -> float | None:
    try:
        import submitit
    except ImportError:
        return None
    ex = submitit.LocalExecutor(folder=os.path.join(root, "submitit"))
    ex.update_parameters(timeout_min=10)
    t0 = time.perf_counter()
    jobs = [ex.submit(noop, i) for i in range(n)]
    results = [j.result() for j in jobs]
    took = time.perf_counter() - t0
    assert results == list(range(n))
    return took


def run_pool(n: int) -> float:
    t0 = time.perf_counter()
    with cf.ProcessPoolExecutor(2) as pool:
        results = list(pool.map(noop, range(n)))
    took = time.perf_counter() - t0
    assert results == list(range(n))
    return took


def records(state: str) -> list[dict]:
    out = []
    jobs = os.path.join(state, "jobs")
    for name in os.listdir(jobs):
        try:
            with open(os.path.join(jobs, name, "status.json")) as fh:
                out.append(json.load(fh))
        except (OSError, ValueError):
            pass
    return out


def most_at_once(recs: list[dict]) -> int:
    events = sorted([(r["started_at"], 1) for r in recs] + [(r["ended_at"], -1) for r in recs])
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def phases(recs: list[dict]) -> str:
    """Median seconds from submission to start (queueing included) and from start to end."""
    run = statistics.median(r["ended_at"] - r["started_at"] for r in recs)
    return f"median start->end {run * 1000:.0f} ms (the runner: an interpreter, cloudpickle, the call, its result)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="qex-bench-py-")
    queue_env(root)
    rows: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        rows.setdefault("qex.Executor.map", []).append(run_qex(args.n, "map", args.profile)[0])
        rows.setdefault("qex.Executor.submit", []).append(run_qex(args.n, "submit", args.profile)[0])
        took = run_submitit(args.n, root)
        if took is not None:
            rows.setdefault("submitit.LocalExecutor", []).append(took)
        rows.setdefault("ProcessPoolExecutor(2)", []).append(run_pool(args.n))
    recs = [r for r in records(os.environ["QEX_STATE_DIR"]) if r.get("started_at") and r.get("ended_at")]
    print(
        f"\n{args.n} calls of a function that returns at once, two at a time; {os.cpu_count()} cores; "
        f"python {sys.version.split()[0]}; best of {args.rounds}"
    )
    ref = min(rows["submitit.LocalExecutor"]) if "submitit.LocalExecutor" in rows else None
    for name, times in rows.items():
        best = min(times)
        vs = f"  {best / ref:5.2f}x submitit" if ref else ""
        print(f"  {name:<26} {best:7.2f} s  {best / args.n * 1000:6.1f} ms/call{vs}")
    print(f"  qex: at most {most_at_once(recs)} calls ran at once (budget: 2 cores, 1 each); {phases(recs)}")


if __name__ == "__main__":
    main()
