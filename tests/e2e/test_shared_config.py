"""A config another user could change is refused by every command, and no job
and no hook of it runs; `qex info` says whose stop hook runs (issue 30)."""

import grp
import json
import os

import pytest
from e2e_helpers import gated, open_gate

from qex.config import trust

ROOT = os.geteuid() == 0


def hook_config(q, path=None):
    """A config whose stop hook would make the file it returns."""
    marker = os.path.join(q.root, "hooked")
    with open(path or q.config, "w") as fh:
        fh.write(f"[hooks]\non_stop = {json.dumps(['touch', marker])}\n")
    return marker


def lab_gid() -> int:
    """A group of several users (a lab's), not this user's private group."""
    candidates = [g.gr_gid for g in grp.getgrall() if g.gr_name in ("users", "nogroup")] if ROOT else os.getgroups()
    for gid in candidates + ([65534] if ROOT else []):
        if not trust._private_group(gid, os.geteuid()):
            return gid
    pytest.skip("no group but this user's private one to give the file to")


def no_job(q):
    jobs = os.path.join(q.state, "jobs")
    return not [n for n in os.listdir(jobs) if not n.startswith(".")] if os.path.isdir(jobs) else True


def assert_refused_everywhere(q, marker, *fragments):
    for argv, code in ((("info",), 1), (("submit", "--", "true"), 121), (("run", "--", "true"), 121)):
        proc = q.run(*argv)
        assert proc.returncode == code, (argv, proc.returncode, proc.stderr)
        assert proc.stderr.startswith("qex: ") and proc.stdout == "", (argv, proc.stdout, proc.stderr)
        for fragment in fragments:
            assert fragment in proc.stderr, (argv, proc.stderr)
    assert no_job(q) and not q.processes()
    assert not os.path.exists(marker)


def test_a_group_writable_config_is_refused_and_nothing_runs(q):
    marker = hook_config(q)
    gid = lab_gid()
    os.chown(q.config, -1, gid)
    os.chmod(q.config, 0o664)
    assert_refused_everywhere(
        q,
        marker,
        f"{q.config} is writable by the group {grp.getgrgid(gid).gr_name} (mode 0664)",
        f"chmod g-w {q.config}",
    )
    os.chmod(q.config, 0o644)  # the remedy the sentence gives
    job = q.submit("--", "true")
    q.wait_state(job, "completed")
    q.wait_for(lambda: os.path.exists(marker), what="the hook of a config only its owner writes")


def test_a_config_in_a_directory_the_group_can_write_is_refused(q):
    shared = os.path.join(q.root, "lab")
    os.mkdir(shared)
    config = os.path.join(shared, "qex.toml")
    marker = hook_config(q, config)
    os.chown(shared, -1, lab_gid())
    os.chmod(shared, 0o775)
    q.env["QEX_CONFIG"] = config
    assert_refused_everywhere(
        q, marker, f"{config} is in {shared}, which is writable by the group", "and not sticky", f"chmod g-w {shared}"
    )


@pytest.mark.skipif(not ROOT, reason="giving a file to another user needs root")
def test_a_config_of_another_user_is_refused(q):
    marker = hook_config(q)
    os.chown(q.config, 65534, -1)
    assert_refused_everywhere(q, marker, f"{q.config} belongs to", "(uid 65534)", "run their commands as you")


def test_a_hook_written_into_a_config_opened_while_a_job_runs_never_runs(q):
    q.write_config("")
    job = q.submit("--", *gated(q, "go"))
    q.wait_state(job, "running")
    marker = hook_config(q)  # another member of the group adds a hook ...
    os.chmod(q.config, 0o666)  # ... to a config that anyone may now write
    open_gate(q, "go")
    q.wait_state(job, "completed")
    q.wait_for(lambda: not q.processes(), what="the job's supervisor to end")
    assert not os.path.exists(marker)  # the supervisor kept the config it had read


def test_info_says_whose_hook_runs_and_as_whom(q):
    hook_config(q)
    text = q.run("info", check=0).stdout
    me = trust._user(os.geteuid())
    line = next(x for x in text.splitlines() if x.startswith("hooks "))
    assert f'on_stop "touch {q.root}/hooked" from {q.config} (owner {me}), run as you ({me})' in line, line
    hooks = json.loads(q.run("info", "--json", check=0).stdout)["hooks"]
    assert hooks["on_stop"] == ["touch", os.path.join(q.root, "hooked")] and hooks["config"] == q.config
    assert hooks["owner"] == hooks["run_as"] == me and "completed" in hooks["states"]
    q.write_config("")
    assert not [x for x in q.run("info", check=0).stdout.splitlines() if x.startswith("hooks ")]
    assert json.loads(q.run("info", "--json", check=0).stdout)["hooks"] is None
