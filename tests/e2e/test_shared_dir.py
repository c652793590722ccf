"""One state directory shared by two real users (qex init --shared). Root only:
the users are made with useradd and qex runs as them through setpriv."""

import json
import os
import stat
import subprocess
import threading
import time

import pytest
from multiuser_helpers import World, gated, held_cpu, job_dir, open_gate, shared_lab, wait_for

# Claims within a 2-core machine: a claim of more cores than the machine has is refused.
CONFIG = '[budget]\ncpu = 1.5\nmem = "8GB"\n[defaults]\nmem = "100MB"\n'


@pytest.fixture
def lab(users):
    yield from shared_lab(users, CONFIG)


def mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_init_makes_a_setgid_group_directory_and_refuses_what_it_must(lab, users):
    w, one, two = lab
    root = one.state
    assert mode(root) == 0o3770 and os.stat(root).st_gid == users.gid()  # setgid, sticky, group-writable
    assert mode(os.path.join(root, "lock")) == 0o640 and os.stat(os.path.join(root, "lock")).st_uid == users.uid(
        one.name
    )
    job = one.submit("--env", "SECRET=s3cret", "--", "true")
    one.wait_state(job, "completed")
    mine = os.path.join(root, f"member-{users.uid(one.name)}")  # one's own state directory in it
    assert mode(mine) == 0o2750 and os.stat(mine).st_uid == users.uid(one.name)
    assert mode(os.path.join(mine, "jobs")) == 0o2750
    jobdir = job_dir(root, job)
    assert os.path.dirname(os.path.dirname(jobdir)) == mine
    assert mode(jobdir) == 0o2750 and mode(os.path.join(jobdir, "spec.json")) == 0o600
    assert mode(os.path.join(jobdir, "stdout.log")) == 0o600 and mode(os.path.join(jobdir, "status.json")) == 0o640
    assert mode(os.path.join(mine, "index.json")) == 0o640 and mode(os.path.join(mine, "journal.jsonl")) == 0o640
    info = two.run("info", check=0).stdout
    assert f"shared by the group {users.group} (owner {one.user})" in info, info

    refused = two.run("init", "--shared", os.path.join(w.dir, "other"), "--group", "root")
    assert refused.returncode == 1 and "not a member of the group root" in refused.stderr
    private = w.actor(1, os.path.join(w.dir, "private"))
    private.submit("--", "true")
    again = two.run("init", "--shared", private.state, "--group", users.group)
    assert again.returncode == 1 and "holds a private queue" in again.stderr, again.stderr
    bad = two.run("init", "--shared", os.path.join(w.dir, "x"), "--group", "no-such-group-here")
    assert bad.returncode == 2 and "--group" in bad.stderr


def test_another_user_cannot_kill_cancel_clean_or_read_the_secrets_of_my_jobs(lab):
    w, one, two = lab
    running = one.submit(
        "--cpu", "1.5", "--env", "SECRET=s3cret", "--tag", "lab", "--", *gated(w.gate("r"), then="echo out-s3cret")
    )
    one.wait_state(running, "running")
    queued = one.submit("--cpu", "0.5", "--tag", "lab", "--", "true")
    done = one.submit("--cpu", "0.05", "--", "sh", "-c", "echo out-s3cret")
    assert one.record(queued)["state"] == "queued"
    before = {j: one.record(j)["state"] for j in (running, queued)}

    for args in (
        ("kill", running),
        ("cancel", queued),
        ("status", running, "--show-env"),
        ("logs", running),
        ("status", done, "--json", "--show-env"),
    ):
        r = two.run(*args)
        assert r.returncode == 1, (args, r.returncode, r.stdout, r.stderr)
        assert f"belongs to {one.user}" in r.stderr and "only its owner (or root)" in r.stderr, (args, r.stderr)
        assert "s3cret" not in r.stdout + r.stderr, (args, r.stdout)
    for args in (("kill", "--tag", "lab"), ("cancel", "--mine"), ("kill", "--name", "*")):  # bulk: never hers
        r = two.run(*args)
        assert r.returncode == 127 and "of yours" in r.stderr, (args, r.returncode, r.stderr)
    assert {j: one.record(j)["state"] for j in (running, queued)} == before  # untouched
    assert not one.record(running).get("kill_requested")

    spec = os.path.join(job_dir(one.state, running), "spec.json")
    peek = subprocess.run(w.users.wrap(two.name, ["cat", spec]), capture_output=True, text=True)
    assert peek.returncode != 0 and "s3cret" not in peek.stdout  # the file itself is closed to them

    open_gate(w.gate("r"))
    one.wait_state(running, "completed")
    one.wait_state(done, "completed")
    r = two.run("clean", done)
    assert r.returncode == 1 and f"belongs to {one.user}" in r.stderr
    assert os.path.isdir(job_dir(one.state, done))
    assert one.run("clean", done, check=0).returncode == 0  # its owner can
    assert not os.path.exists(job_dir(one.state, done))


def test_the_two_users_jobs_share_one_budget_exactly(lab):
    w, one, two = lab
    seen, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            seen.append(held_cpu(one.state))
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    jobs = []
    for i in range(3):  # interleaved: 6 half-core jobs against a budget of 1.5
        jobs.append((one, one.submit("--cpu", "0.5", "--", *gated(w.gate(f"1-{i}")))))
        jobs.append((two, two.submit("--cpu", "0.5", "--", *gated(w.gate(f"2-{i}")))))
    wait_for(lambda: held_cpu(one.state) == 1.5, 10, "the budget to be full")
    owners = {
        json.load(open(os.path.join(job_dir(one.state, j), "status.json")))["owner"]
        for _, j in jobs
        if one.record(j)["state"] in ("starting", "running")
    }
    assert owners == {one.user, two.user}  # both users' jobs run at once, in one budget
    for i in range(3):
        open_gate(w.gate(f"1-{i}"))
        open_gate(w.gate(f"2-{i}"))
        time.sleep(0.2)
    for actor, job in jobs:
        rec = actor.wait_state(job, "completed", timeout=20)
        assert rec["owner"] == actor.user
    stop.set()
    sampler.join()
    assert max(seen) == 1.5 and len(seen) > 50, (max(seen), len(seen))  # exactly full, never over


def test_a_member_cannot_put_anything_into_another_members_job_directory(lab):
    w, one, two = lab
    blocker = one.submit("--cpu", "1.5", "--", *gated(w.gate("b")))
    one.wait_state(blocker, "running")
    ok = os.path.join(w.dir, "ran-the-real-spec")
    bad = os.path.join(w.dir, "ran-the-planted-spec")
    victim = one.submit("--cpu", "0.5", "--", "touch", ok)
    target = os.path.join(job_dir(one.state, victim), "spec.json")
    planted = json.dumps({"id": victim, "command": ["touch", bad], "cwd": w.dir, "env": {}})
    swap = "import os,sys; t=sys.argv[1]; open(t+'.x','w').write(sys.argv[2]); os.rename(t+'.x', t)"
    tried = subprocess.run(
        w.users.wrap(two.name, [w.users.python, "-c", swap, target, planted]),
        env=w.users.env({}),
        cwd=w.dir,
        capture_output=True,
        text=True,
    )
    assert tried.returncode != 0 and "Permission denied" in tried.stderr  # the directory is one's alone
    assert os.stat(target).st_uid == w.users.uid(one.name)

    open_gate(w.gate("b"))
    rec = one.wait_state(victim, ("failed", "completed"), timeout=15)
    assert rec["state"] == "completed", rec
    assert os.path.exists(ok) and not os.path.exists(bad)


def test_only_the_owner_pauses_the_whole_shared_queue_and_any_member_pauses_a_lock(lab):
    w, one, two = lab
    refused = two.run("pause", "queue", "--reason", "mine now")
    assert refused.returncode == 1 and f"belongs to {one.user}" in refused.stderr, refused.stderr
    assert not os.path.exists(os.path.join(one.state, "pause", "queue.json"))
    two.run("pause", "lock", "dataset", "--reason", "reindexing", check=0)
    job = one.submit("--lock", "dataset", "--", "true")
    assert "reindexing" in one.record(job)["blocked_reason"]
    one.run("pause", "queue", "--reason", "maintenance", check=0)  # the owner may
    one.run("resume", "queue", check=0)
    two.run("resume", "lock", "dataset", check=0)
    one.wait_state(job, "completed")


def test_a_directory_shared_by_hand_is_refused_with_the_command_that_makes_it(users):
    """Issue 23, 12: chmod 2770 and chgrp, as a person makes one. Before, the first
    user's qex made jobs/ private and the second user's submit failed."""
    w = World(users, users.base, CONFIG)
    try:
        path = os.path.join(w.dir, "by-hand")
        os.mkdir(path)
        os.chown(path, users.uid(users.names[0]), users.gid())
        os.chmod(path, 0o2770)
        for i in (0, 1):
            r = w.actor(i, path).run("submit", "--", "true")
            assert r.returncode == 121 and f"qex init --shared {path}" in r.stderr, r.stderr
        assert os.listdir(path) == []  # never half-shared
        w.actor(0, path).run("init", "--shared", path, check=0)
        for i in (0, 1):
            actor = w.actor(i, path)
            actor.wait_state(actor.submit("--", "true"), "completed")
    finally:
        w.close()
