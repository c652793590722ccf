"""Many qex processes at once against a small budget: the sampled sum of running
claims never exceeds the budget, a pool or a device, every job ends, and a
dedupe key gives exactly one job."""

import random
import threading
import time

from crash import invariants as inv
from crash.harness import BUDGET, CONFIG


def test_many_processes_submitting_cancelling_killing_never_exceed_the_budget(q):
    q.write_config(CONFIG)
    rng = random.Random(7)
    samples, problems, most = [], [], [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            try:
                view = inv.read_view(q.state)
            except (AssertionError, FileNotFoundError):
                time.sleep(0.01)
                continue
            found = inv.check_capacity(view, BUDGET) + inv.check_index(view) + inv.check_records(view)
            problems.extend(found)
            running = sum(1 for r in view.records.values() if r.get("state") in inv.HOLDING)
            most[0] = max(most[0], running)
            samples.append(running)
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    printed = []
    try:
        for wave in range(3):
            procs = []
            for _ in range(10):
                claims = rng.choice(
                    (
                        ["--cpu", "1"],
                        ["--cpu", "0.5", "--gpu", "1"],
                        ["--cpu", "1", "--lock", "L"],
                        ["--vram", "6GB", "--cpu", "0.5"],
                        ["--claim", "net=1", "--cpu", "0.5"],
                        ["--cpu", "2"],
                    )
                )
                seconds = rng.choice(("0.1", "0.2", "0.3"))
                procs.append(("submit", q.popen("submit", *claims, "--", "sleep", seconds)))
            for job in rng.sample(printed, min(len(printed), 4)):
                procs.append(("control", q.popen(rng.choice(("cancel", "kill")), job)))
            for kind, proc in procs:
                out, err = proc.communicate(timeout=60)
                assert "Traceback" not in err, err
                if kind == "submit":
                    assert proc.returncode == 0, err
                    printed.append(out.strip())
                else:
                    assert proc.returncode in (0, 1), err
        done = q.run("wait", *printed, "--timeout", "60", "--quiet", timeout=90)
        assert done.returncode != 124, "jobs did not end"
        q.wait_for(lambda: not q.processes(), what="no qex process")
    finally:
        stop.set()
        sampler.join(timeout=10)
    assert not problems, problems[:10]
    assert most[0] >= 2, f"never saw two jobs running at once in {len(samples)} samples: the test proves nothing"
    view = inv.read_view(q.state)
    assert not inv.check(view, known=printed, quiescent=True, budget=BUDGET)
    assert len(view.records) == len(printed)


def test_many_submissions_with_one_dedupe_key_at_once_make_exactly_one_job(q):
    q.write_config(CONFIG)
    gate = q.gate("build")  # the job runs until every submission has answered (a slow box: seconds)
    procs = [
        q.popen("submit", "--dedupe-key", "build", "--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done")
        for _ in range(10)
    ]
    ids = set()
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0 and "Traceback" not in err, err
            ids.add(out.strip())
    finally:
        open(gate, "w").close()
    assert len(ids) == 1, ids
    q.wait_state(ids.pop(), "completed")
    q.wait_for(lambda: not q.processes(), what="no qex process")
    view = inv.read_view(q.state)
    assert len([r for r in view.records.values() if r.get("dedupe_key") == "build"]) == 1
    assert not inv.check(view, quiescent=True)
