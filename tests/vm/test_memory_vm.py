"""Issue 28 on a real kernel: per-job memory accounting on cgroup v2 under systemd 252.

Two boots (tests/vm/harness.py), each running the whole scenario
(tests/vm/scenarios/memory.py) and leaving /tmp/memory.json, which these tests read:

- as the login-session user (session-1.scope, a user manager): each attempt in its own
  scope of the user manager; the 4 x 50MB tree's peak from that scope; a job that grows
  until the kernel kills it in its app.slice (MemoryMax=300M, the root step) is oom
  with evidence cgroup and retried; nothing qex-* left once the record is written; the
  same tree without a cgroup (QEX_CGROUP=off), sampled from /proc, within 10% of the
  scope's peak; and the cost of the scope on submit-to-first-instruction, written to
  bench/results/;
- as root in a system service: the same, with the system manager's qex.slice
  (MemoryMax=300M there).
"""

import json
import os
import pathlib
import time

import pytest
from harness import PROJECT, run_vm

HERE = pathlib.Path(__file__).resolve().parent
MB = 1 << 20


def _boot(tmp_path: pathlib.Path, kind: str, args: str) -> dict:
    script = tmp_path / "run.sh"
    script.write_text(f'export MEMORY_ARGS="{args}"\n. "$QEX_VM_PROJECT/tests/vm/scenarios/memory.sh"\n')
    res = run_vm(
        script,
        kind=kind,
        mb=2048,
        pre_root=HERE / "scenarios" / "limit-slices.sh",
        timeout=480,
        workdir=tmp_path / "vm",
    )
    try:
        found = json.loads((res.out / "memory.json").read_text())
    except (OSError, ValueError):
        pytest.fail(f"no results from the guest (rc {res.rc}):\n{res.console[-4000:]}")
    found["_console"], found["_seconds"] = res.console[-4000:], res.seconds
    return found


def _check_tree(found: dict) -> None:
    tree = found["tree"]
    assert tree.get("rc") == 0 and tree["state"] == "completed", found["_console"]
    usage = tree["usage"]
    assert usage["peak_from"] == "cgroup" and usage["max_rss"] >= 200 * MB, usage
    unit, leaf = tree["log"].strip().rsplit("/", 2)[-2:]  # its own scope's job leaf, not the session's scope
    assert unit.startswith("qex-") and unit == leaf + ".scope" and leaf.endswith("-1"), tree["log"]
    assert tree["left"] == {"units": [], "cgroups": []}, tree["left"]


def _check_oom(found: dict) -> None:
    grow = found["grow"]
    assert grow.get("state") == "completed", grow
    first, second = grow["attempts"]
    assert first["state"] == "oom" and first["oom_evidence"] == "cgroup", first
    assert first["usage"]["oom_kills"] >= 1 and first["usage"]["peak_from"] == "cgroup"
    assert "as the OOM count of its cgroup shows" in first["error"] and "Retry 1 of 1" in first["error"]
    assert second["claims"]["mem"] >= 2 * first["claims"]["mem"] and second["state"] == "completed"
    assert "attempt 2 stayed small" in grow["log"]
    assert grow["left"] == {"units": [], "cgroups": []}, grow["left"]


def test_as_the_session_user_each_attempt_gets_a_scope_of_the_user_manager(tmp_path):
    found = _boot(tmp_path, "systemd-user", "--cost")
    assert found["uid"] != 0
    line = next(x for x in found["info"].splitlines() if x.startswith("memory"))
    assert "a systemd scope per job (the user manager" in line, found["info"]
    _check_tree(found)
    _check_oom(found)
    sampled, truth = found["tree_sampled"]["usage"], found["tree"]["usage"]
    assert sampled["peak_from"] == "proc-sample" and sampled["sample_period"] >= 0.2
    assert abs(sampled["max_rss"] - truth["max_rss"]) <= 0.10 * truth["max_rss"], (sampled, truth)
    cost = found["cost"]
    _record_cost(found)
    assert len(cost["submit_scope"]) >= 4 and len(cost["submit_off"]) >= 4, cost
    # The spawn's part, where the scope once cost 2.2x: now the same two cgroup.procs writes as a
    # cgroup of qex's own. The whole submit-to-first-instruction is recorded, not asserted: in TCG on a
    # loaded 2-core host one submission takes 1-11 s (bench/README.md, bench/results/).
    assert cost["spawn_ratio"] <= 1.5, cost


def test_as_root_in_a_system_service_each_attempt_gets_a_scope_under_qex_slice(tmp_path):
    found = _boot(tmp_path, "systemd-root", "--no-sampled")
    assert found["uid"] == 0
    line = next(x for x in found["info"].splitlines() if x.startswith("memory"))
    assert "a systemd scope per job (the system manager" in line and "qex.slice" in line, found["info"]
    _check_tree(found)
    _check_oom(found)


def _record_cost(found: dict) -> None:
    """The figure, with the raw samples, in bench/results/ (as bench/run.py's results)."""
    folder = PROJECT / "bench" / "results"
    folder.mkdir(parents=True, exist_ok=True)
    name = time.strftime("%Y%m%dT%H%M%S") + "-vm-scope-cost.json"
    data = {
        "what": "submit-to-first-instruction in a systemd 252 guest (TCG), session user, "
        "with the job's systemd scope vs without (QEX_CGROUP=off); medians of alternating runs",
        "cost": found["cost"],
        "guest_seconds": found["_seconds"],
        "host_load": os.getloadavg(),
    }
    (folder / name).write_text(json.dumps(data, indent=1))
