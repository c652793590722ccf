"""The benchmark harness imports and its qex workloads produce numbers on a tiny N.

It never installs or runs a peer (--no-peers), never calls apt-get, and writes
its results into the test's temp directory. The real benchmark is
`python bench/run.py` (bench/README.md); it is not a test.
"""

import importlib.util
import json
import os
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_PY = os.path.join(ROOT, "bench", "run.py")

TINY = [
    "warmup=0",
    "submit_n=2",
    "first_n=1",
    "drain_n=3",
    "history=0,50",
    "history_submit_n=1",
    "list_n=1",
    "list_n_large=1",
    "fanout_n=5",
    "fanout_samples=1",
    "waiting=2",
    "output_mb=1",
    "cpu_samples=1",
    "events_n=2",
]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("qex_bench_run", RUN_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_harness_measures_qex_on_a_tiny_n(bench, tmp_path, monkeypatch, capsys):
    def no_install(*args, **kwargs):
        raise AssertionError("the smoke test must never install peers")

    monkeypatch.setattr(bench, "ensure_peers", no_install)
    out = tmp_path / "raw.json"
    argv = ["--no-peers", "--no-settle", "--results-dir", str(tmp_path / "results"), "--json", str(out)]
    for item in TINY:
        argv += ["--set", item]
    t0 = time.monotonic()
    result = bench.execute(argv)
    took = time.monotonic() - t0
    table = capsys.readouterr().out

    rows = result["rows"]
    errors = [r for r in rows if r["note"].startswith("error")]
    assert not errors, errors

    def median(workload, tool, metric=None, signed=False):
        found = [
            r
            for r in rows
            if r["workload"] == workload and r["tool"] == tool and (metric is None or r["metric"] == metric)
        ]
        assert found, (workload, tool, metric)
        assert found[0]["median"] is not None, found[0]
        assert signed or found[0]["median"] >= 0, found[0]
        return found[0]["median"]

    assert median("1 submit", "qex submit") > 0
    assert median("1 submit", "python -c pass") > 0
    assert median("1 submit", "python floor (flock+fsync+double-fork)") > 0
    assert median("2 first instruction", "qex submit") > 0
    assert median("3 drain", "qex") > 0
    assert median("4 history", "qex submit", "submit @0") > 0
    assert median("4 history", "qex submit", "submit @50") > 0
    assert median("4 history", "qex list --state running", "list --state running @50") > 0
    assert median("4 history", "qex list (all)", "list total @50") > 0
    assert median("6 memory", "qex", "USS of a running job's supervisor") > 0
    median("6 memory", "qex", "processes per waiting job (2 waiting)")
    # a difference of two CPU times over a tiny output: only its presence is checked at this N
    median("7 supervisor cpu", "qex", "supervisor CPU per MB of output", signed=True)
    # peers were not asked for: their rows say n/a, never a crash
    tsp = [r for r in rows if r["tool"] == "tsp"]
    assert tsp and all(r["median"] is None and r["note"].startswith("n/a") for r in tsp)

    assert "ratio qex/peer" in table and "Targets" in table
    assert json.loads(out.read_text())["rows"]
    assert len(os.listdir(tmp_path / "results")) == 1
    # Not a measurement (a bench never is, in a test): a guard against a workload that
    # would wait for ever. Its tiny N takes ~20 s on these machines (each qex call is an
    # interpreter's start, and every workload waits for an idle queue).
    assert took < 180, f"the smoke run took {took:.1f}s: a workload waited for something that never came"


def test_a_run_waits_for_the_file_system_after_the_last_run_s_removal(bench):
    assert bench.settle_wait(1000.0, None) == 0.0
    assert bench.settle_wait(1000.0, 1000.0 - 10) == bench.SETTLE_SECS - 10
    assert bench.settle_wait(1000.0, 1000.0 - bench.SETTLE_SECS - 1) == 0.0
    assert bench.settle_wait(1000.0, 2000.0) == 0.0  # a mark from the future (a clock set back): no wait


def test_a_run_waits_for_a_removal_still_under_way_unless_its_run_is_gone(bench, tmp_path, monkeypatch):
    mark = tmp_path / "cleaned-at"
    monkeypatch.setattr(bench, "CLEANED_AT", str(mark))
    bench.mark_removal(f"{bench.REMOVING} {os.getpid()}")  # this process: alive
    assert bench.read_cleaned_at() == bench.REMOVING
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
    bench.mark_removal(f"{bench.REMOVING} {child}")  # a run killed while it removed: no wait for ever,
    assert bench.read_cleaned_at() == os.stat(mark).st_mtime  # but the wait after it counts from its start
    bench.mark_removal(1234.5)
    assert bench.read_cleaned_at() == 1234.5
    mark.unlink()
    assert bench.read_cleaned_at() is None


def test_the_disk_s_busy_time_is_read_for_a_path_on_a_block_device_and_none_elsewhere(bench):
    st = os.stat(RUN_PY)
    on_device = os.path.exists(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/stat")
    busy = bench.disk_busy_ms(RUN_PY)
    assert (type(busy) is int and busy >= 0) if on_device else busy is None
    assert bench.disk_busy_ms("/proc") is None  # (no block device under it)


def test_the_top_bench_measures_a_first_frame_and_idle_cpu(tmp_path):
    """bench/top.py on a tiny queue: it runs qex top in a pseudo-terminal and cleans up."""
    import subprocess
    import sys

    out = tmp_path / "top.json"
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "bench", "top.py"),
            "--queued",
            "5",
            "--samples",
            "1",
            "--idle",
            "1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert 0 < result["first_frame_median_s"] < 30 and 0 <= result["idle_cpu_share_of_one_core"] < 1, result
