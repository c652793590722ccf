"""Where a job's memory cgroup goes (qex/linux/cgroup.py): the parsing is
pure and tested on the shapes real machines show; one test makes a real cgroup
where this machine allows it."""

import os

import pytest

from qex.linux import cgroup, cgroup_where

# This CI machine: cgroup v1 memory controller, the process in a nested cgroup,
# a cgroup2 hierarchy mounted beside it with no memory controller (hybrid).
HYBRID_CGROUP = """\
9:name=systemd:/
4:memory:/process_api/6422d486afee97efd12feebad7dc28ff
3:cpuset:/
0::/
"""
HYBRID_MOUNTS = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""


def test_v1_memory_wins_over_a_v2_hierarchy_that_lacks_the_controller():
    assert cgroup_where.locate(HYBRID_CGROUP, HYBRID_MOUNTS) == (
        "v1",
        "/sys/fs/cgroup/memory/process_api/6422d486afee97efd12feebad7dc28ff",
    )


def test_a_container_mount_rooted_at_its_own_cgroup_is_located_and_a_path_outside_is_not():
    # docker without a cgroup namespace: /proc/self/cgroup names the host path,
    # and the mount's root is that same path.
    proc = "5:memory,foo:/docker/abc\n"
    mounts = "50 40 0:40 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory,foo\n"
    assert cgroup_where.locate(proc, mounts) == ("v1", "/sys/fs/cgroup/memory")
    assert cgroup_where.locate("5:memory:/docker/abc/sub\n", mounts) == ("v1", "/sys/fs/cgroup/memory/sub")
    # a path outside what is mounted cannot be reached: no cgroup rather than a wrong one
    assert cgroup_where.locate("5:memory:/elsewhere\n", mounts) is None


def test_a_v2_cgroup_under_an_escaped_mount_point_is_located():
    proc = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-1.scope\n"
    mounts = r"60 1 0:26 / /sys/fs/cgroup\040x rw - cgroup2 cgroup2 rw,nsdelegate" + "\n"
    assert cgroup_where.locate(proc, mounts) == (
        "v2",
        "/sys/fs/cgroup x/user.slice/user-1000.slice/user@1000.service/app.slice/run-1.scope",
    )


def test_without_a_v2_or_a_v1_memory_cgroup_none_is_located():
    assert cgroup_where.locate("3:cpu:/\n", "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n") is None
    assert cgroup_where.locate("", "") is None


def test_names_carry_the_job_and_the_attempt():
    job = "0193f7a2-1c2d-7e3f-8a9b-0c1d2e3f4a5b"
    name = cgroup.name_of(job, 3)
    assert name == f"qex-{job}-3"
    assert cgroup.job_of(name) == job
    for other in ("qextest-1-2", "qex-", "qex-abc", "memory.stat", f"qex-{job}-x"):
        assert cgroup.job_of(other) is None, other


def test_a_flat_keyed_counter_is_read_and_a_missing_key_or_file_is_none(tmp_path):
    path = tmp_path / "memory.oom_control"
    path.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    assert cgroup.read_counter(str(path), "oom_kill") == 3
    assert cgroup.read_counter(str(path), "oom_group_kill") is None
    assert cgroup.read_counter(str(tmp_path / "missing"), "oom_kill") is None


def test_the_pid_file_names_the_jobs_cgroup_on_either_line(tmp_path, monkeypatch):
    job = "0193f7a2-1c2d-7e3f-8a9b-0c1d2e3f4a5b"
    monkeypatch.setattr(cgroup, "mount_points", lambda: ["/sys/fs/cgroup/memory"])
    path = f"/sys/fs/cgroup/memory/a b/qex-{job}-2"
    for line in (
        f"- 4242 777{cgroup.note(cgroup.JobCgroup('v1', path))}\n",  # the intent, before the spawn
        f"4343 888 v1 {path}\n",
        f"4343 0 v1 {path}\n",
    ):  # the job's line (0: no start time)
        (tmp_path / "pid").write_text(line)
        cg = cgroup.recorded(str(tmp_path), job)
        assert cg is not None and (cg.kind, cg.path) == ("v1", path), line
    for line in (
        "4343 888\n",
        "- 4242 777\n",
        f"4343 888 v1 /elsewhere/qex-{job}-2\n",
        f"4343 888 v3 {path}\n",
        "4343 888 v1 /sys/fs/cgroup/memory/qex-another-1\n",
    ):
        (tmp_path / "pid").write_text(line)
        assert cgroup.recorded(str(tmp_path), job) is None, line
    (tmp_path / "cgroup").write_text(f"v2 /sys/fs/cgroup/memory/qex-{job}-1\n")  # an older supervisor's note
    assert cgroup.recorded(str(tmp_path), job).path == f"/sys/fs/cgroup/memory/qex-{job}-1"


def test_a_note_that_names_a_foreign_path_is_never_used(tmp_path):
    job = "0193f7a2-1c2d-7e3f-8a9b-0c1d2e3f4a5b"
    (tmp_path / "cgroup").write_text(f"v1 /home/someone/qex-{job}-1\n")
    assert cgroup.recorded(str(tmp_path), job) is None
    (tmp_path / "cgroup").write_text("v1 /sys/fs/cgroup/memory/qex-another-1\n")
    assert cgroup.recorded(str(tmp_path), job) is None


def test_a_real_job_cgroup_is_made_inside_ours_and_removed():
    job = "0193f7a2-0000-7000-8000-000000000001"
    cg, why = cgroup.create(job, 1)
    if cg is None:
        pytest.skip(f"no memory cgroup can be made here ({why})")
    try:
        kind, parent = cgroup.here()
        assert os.path.dirname(cg.path) == parent, "the job's cgroup must be nested in ours"
        assert cg.oom_kills() == 0
        assert cg.peak() is not None or kind == "v2"
        assert cg.members() == []
    finally:
        assert cg.remove()
    assert not os.path.exists(cg.path)


def _reap_all() -> list[int]:
    codes = []
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return codes
        codes.append(os.waitstatus_to_exitcode(status))


JOIN_SPAWN_LEAVE = """
import json, os, subprocess, sys
from qex.linux import cgroup
cg, why = cgroup.create(sys.argv[1], 1)
if cg is None:
    print(json.dumps({"skip": why})); sys.exit(0)
def mine():
    return [l for l in open("/proc/self/cgroup").read().splitlines() if cg.kind == "v2" or ":memory:" in l]
home = mine()
cg.join()
inside = mine()
child = subprocess.run(["cat", "/proc/self/cgroup"], capture_output=True, text=True).stdout
cg.leave()
back = mine()
members = cg.members()
removed = cg.remove()
print(json.dumps({"name": os.path.basename(cg.path), "kind": cg.kind, "home": home, "inside": inside, "child": child,
                  "back": back, "members": members, "removed": removed}))
"""


def test_join_moves_the_caller_in_its_child_is_born_inside_and_leave_brings_it_home():
    """The supervisor's move for the spawn (JobCgroup.join / leave), in a real process:
    on cgroup v1 it moves its one thread through ``tasks``, so it must still land the
    process and the job it spawns in the job's cgroup, and come back whole."""
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "QEX_CGROUP"}
    out = subprocess.run(
        [sys.executable, "-c", JOIN_SPAWN_LEAVE, "0193f7a2-0000-7000-8000-00000000000j"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    if "skip" in got:
        pytest.skip(f"no memory cgroup can be made here ({got['skip']})")
    name = got["name"]
    assert not any(name in line for line in got["home"])
    assert any(line.endswith("/" + name) for line in got["inside"]), got["inside"]
    mark = ":memory:" if got["kind"] == "v1" else "0::"
    child_memory = [line for line in got["child"].splitlines() if mark in line]
    assert child_memory and all(ln.endswith("/" + name) for ln in child_memory), got["child"]
    assert got["back"] == got["home"]
    assert got["members"] == []
    assert got["removed"]


def _warm_children(monkeypatch, kind: str | None) -> list[int]:
    monkeypatch.delenv("QEX_CGROUP", raising=False)
    where = cgroup.here()
    if where is None or not os.access(os.path.join(where[1], "cgroup.procs"), os.W_OK):
        pytest.skip("no memory cgroup this process may write to (needs root on cgroup v1, or a delegated v2)")
    if kind is not None:
        monkeypatch.setattr(cgroup, "here", lambda: (kind, where[1]))
    _reap_all()
    with open("/proc/self/cgroup") as fh:
        before = fh.read()
    cgroup.warm()
    codes = _reap_all()
    with open("/proc/self/cgroup") as fh:
        assert fh.read() == before  # the caller never moves
    return codes


def test_warm_on_cgroup_v2_moves_a_child_to_where_it_is(monkeypatch):
    """Where a move takes the kernel's global lock (v2's cgroup.procs), a submission
    warms it in a throwaway child (qex.linux.cgroup.warm)."""
    assert _warm_children(monkeypatch, "v2") == [0]  # one child, and it succeeded


def test_warm_on_cgroup_v1_forks_nothing(monkeypatch):
    """On v1 the supervisor moves one thread, which takes no global lock: nothing to warm."""
    assert _warm_children(monkeypatch, "v1") == []


def test_warm_does_nothing_when_cgroups_are_off(monkeypatch):
    monkeypatch.setenv("QEX_CGROUP", "off")
    _reap_all()
    cgroup.warm()
    assert _reap_all() == []
