"""A member of a shared state directory who attacks another (issue 30), and members
whose processes die (issue 34). Real users made as root (the test skips, with the
reason, elsewhere): ``bob`` made the directory, ``mallory`` is a member of its group."""

import json
import os
import signal
import subprocess
import textwrap

import pytest
from multiuser_helpers import World, gated, open_gate, qex_pids, shared_lab, wait_for

# Claims within a 2-core machine: a claim of more cores than the machine has is refused.
CONFIG = '[budget]\ncpu = 1.5\nmem = "8GB"\n[defaults]\nmem = "100MB"\n'


@pytest.fixture
def lab(users):
    yield from shared_lab(users, CONFIG)


def member(actor, users) -> str:
    return os.path.join(actor.state, f"member-{users.uid(actor.name)}")


def as_user(w, name: str, script: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        w.users.wrap(name, [w.users.python, "-c", textwrap.dedent(script), *map(str, args)]),
        env=w.users.env({}),
        cwd=w.dir,
        capture_output=True,
        text=True,
        timeout=30,
    )


def processes_of(state: str, uid: int) -> list[int]:
    out = []
    for pid in qex_pids(state):
        try:
            with open(f"/proc/{pid}/status") as fh:
                if any(line.split()[1:2] == [str(uid)] for line in fh if line.startswith("Uid:")):
                    out.append(pid)
        except OSError:
            pass
    return out


ATTACKS = r"""
import json, os, sys
bob, job, other_file = sys.argv[1], sys.argv[2], sys.argv[3]
jobdir = os.path.join(bob, "jobs", job)
done = []
def attempt(what, fn):
    try:
        fn()
        done.append(what)
    except OSError:
        pass
spec = json.dumps({"id": job, "command": ["touch", sys.argv[4]], "cwd": "/", "env": {}})
attempt("append to the journal", lambda: open(os.path.join(bob, "journal.jsonl"), "a").write('{"event": "job"}\n'))
attempt("replace the index", lambda: os.rename(other_file, os.path.join(bob, "index.json")))
attempt("put a spec in the job", lambda: os.rename(other_file, os.path.join(jobdir, "spec.json")))
attempt("make a log in the job", lambda: open(os.path.join(jobdir, "stdout.log"), "w"))
attempt("make hook.log in the job", lambda: open(os.path.join(jobdir, "hook.log"), "w"))
attempt("move the job directory", lambda: os.rename(jobdir, jobdir + ".x"))
attempt("make a pause", lambda: open(os.path.join(bob, "pause-queue.json"), "w"))
attempt("write the learner's store", lambda: open(os.path.join(bob, "learn.json"), "w"))
attempt("plant a waker lock", lambda: os.symlink("/etc/passwd", os.path.join(bob, "waker-0.lock")))
attempt("move bob's directory", lambda: os.rename(bob, bob + ".x"))
attempt("remove the shared lock", lambda: os.unlink(os.path.join(os.path.dirname(bob), "lock")))
print(json.dumps(done))
"""


def test_a_member_can_change_nothing_in_another_members_directory(lab, users):
    w, bob, mallory = lab
    blocker = bob.submit("--cpu", "1.5", "--", *gated(w.gate("b")))
    bob.wait_state(blocker, "running")
    ok, bad = os.path.join(w.dir, "ran-bobs-command"), os.path.join(w.dir, "ran-mallorys-command")
    victim = bob.submit("--cpu", "0.5", "--", "touch", ok)
    assert bob.record(victim)["state"] == "queued"
    hers = os.path.join(w.dir, "planted.json")
    with open(hers, "w") as fh:
        json.dump({"id": victim, "command": ["touch", bad], "cwd": w.dir, "env": {}}, fh)
    os.chmod(hers, 0o666)
    r = as_user(w, mallory.name, ATTACKS, member(bob, users), victim, hers, bad)
    assert r.returncode == 0 and json.loads(r.stdout) == [], (r.stdout, r.stderr)
    open_gate(w.gate("b"))
    rec = bob.wait_state(victim, ("completed", "failed"), timeout=20)
    assert rec["state"] == "completed" and rec["command"] == ["touch", ok]
    assert os.path.exists(ok) and not os.path.exists(bad)


FAKE = r"""
import json, os, sys, time
mine, bob_uid, pid, target, gate_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
now = time.time()
def job(i, state, cpu):
    jid = f"{i:08x}-0000-4000-8000-000000000000"
    os.makedirs(os.path.join(mine, "jobs", jid), exist_ok=True)
    rec = {"id": jid, "state": state, "uid": bob_uid, "owner": "bob", "command": ["touch", target],
           "cwd": "/", "env": {}, "seq": i, "submitted_at": now - 100 + i, "name": f"fake{i}",
           "claims": {"cpu": cpu, "mem": 1, "pools": {}}, "pid": pid, "supervisor_pid": pid}
    for name in ("status.json", "spec.json"):
        with open(os.path.join(mine, "jobs", jid, name), "w") as fh:
            json.dump(rec, fh)
    with open(os.path.join(mine, "jobs", jid, "pid"), "w") as fh:
        fh.write(str(pid))
    entry = {"seq": i, "state": state, "owner": "bob", "uid": bob_uid, "name": f"fake{i}", "priority": 99,
             "cpu": cpu, "mem": 1, "pools": {}, "assigned": [], "needs": [], "after": [], "deadline": None,
             "passed_by": 0, "reason": None, "holder": None, "submitted_at": now - 100 + i, "pid": pid}
    return jid, entry
jobs = dict([job(1, "queued", 1000), job(2, "running", 1000), job(3, "queued", float("inf")),
             job(4, "queued", -6000), job(5, "running", -6000)])
with open(os.path.join(mine, "index.json"), "w") as fh:
    json.dump({"format": 1, "seq": 9, "offset": 0, "next_job": 9, "jobs": jobs}, fh)
print(json.dumps(sorted(jobs)))
"""


def test_records_a_member_forges_in_their_own_directory_are_never_run_signalled_or_trusted(lab, users):
    w, bob, mallory = lab
    sleeper = subprocess.Popen(w.users.wrap(bob.name, ["sleep", "300"]))  # a process of bob's, outside qex
    try:
        target = os.path.join(w.dir, "forged-job-ran")
        r = as_user(
            w, mallory.name, FAKE, member(mallory, users), users.uid(bob.name), sleeper.pid, target, w.gate("x")
        )
        assert r.returncode == 0, r.stderr
        forged = json.loads(r.stdout)
        # bob fills the 1.5-core budget and queues behind it: the forged negative claims free nothing
        running = [bob.submit("--cpu", "0.5", "--", *gated(w.gate(f"r{i}"))) for i in range(3)]
        for job in running:
            bob.wait_state(job, "running")
        waiting = bob.submit("--cpu", "0.5", "--", "sh", "-c", "exit 5")
        for cmd in (("list",), ("info",), ("status", forged[0]), ("status", waiting)):
            out = bob.run(*cmd)
            assert "Traceback" not in out.stderr and out.returncode in (0, 1), (cmd, out.stderr)
        status = json.loads(bob.run("status", "--json", forged[0], check=0).stdout)[0]
        assert status["owner"] == mallory.user and status["uid"] == users.uid(mallory.name)
        assert bob.record(waiting)["state"] == "queued"  # the budget is full: 1.5 of bob's cores
        for i in range(3):
            open_gate(w.gate(f"r{i}"))
        rec = bob.wait_state(waiting, ("failed", "completed"), timeout=20)
        assert rec["exit_code"] == 5
        assert sleeper.poll() is None  # bob's own process was never signalled on mallory's word
        assert not os.path.exists(target)  # and her forged job never ran as bob
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_pause_counts_as_its_files_owner_whatever_it_says(lab, users):
    w, bob, mallory = lab
    r = as_user(
        w,
        mallory.name,
        """
        import json, os, sys
        d = os.path.join(sys.argv[1], "pause"); os.makedirs(d, exist_ok=True)
        for name, kind in (("queue.json", "queue"), ("lock-data.json", "lock")):
            with open(os.path.join(d, name), "w") as fh:
                json.dump({"id": "1", "kind": kind, "user": "bob", "uid": int(sys.argv[2]), "since": 1}, fh)
        """,
        member(mallory, users),
        users.uid(bob.name),
    )
    assert r.returncode == 0, r.stderr
    free = bob.submit("--", "true")
    assert bob.wait_state(free, "completed")  # a queue pause of a member who does not own the directory holds nothing
    held = bob.submit("--lock", "data", "--", "true")
    reason = bob.record(held)["blocked_reason"]
    assert f"{mallory.user} paused it" in reason and "bob" not in reason, reason
    refused = bob.run("resume", "lock", "data")
    assert refused.returncode != 0  # bob cannot end her pause: it is hers (the file's owner)
    mallory.run("resume", "lock", "data", check=0)
    bob.wait_state(held, "completed")


def test_a_name_names_ones_own_job_and_another_members_only_as_user_slash_name(lab):
    w, bob, mallory = lab
    hers = mallory.submit("--name", "train", "--cpu", "0.5", "--", *gated(w.gate("m")))
    mine = bob.submit("--name", "train", "--cpu", "0.5", "--", *gated(w.gate("b"), then="exit 3"))
    bob.wait_state(mine, "running")
    assert json.loads(bob.run("status", "--json", "train", check=0).stdout)[0]["id"] == mine
    theirs = json.loads(bob.run("status", "--json", f"{mallory.user}/train", check=0).stdout)[0]
    assert theirs["id"] == hers
    open_gate(w.gate("b"))
    assert bob.run("wait", mine, timeout=30).returncode == 3
    open_gate(w.gate("m"))
    assert mallory.wait_state(hers, "completed")
    # ended, both names keep naming: the newest ended job of that name, in each one's directory
    assert bob.run("wait", "train", timeout=30).returncode == 3
    assert bob.run("wait", f"{mallory.user}/train", timeout=30).returncode == 0
    assert json.loads(bob.run("status", "--json", f"{mallory.user}/train", check=0).stdout)[0]["id"] == hers
    bob.run("clean", "train", check=0)
    assert bob.run("wait", "train").returncode == 127  # a bare name never names another member's job


def test_an_outsider_is_told_they_are_not_in_the_group(lab, users):
    w, bob, _mallory = lab
    outsider = w.actor(0, bob.state)
    outsider.name = "nobody"
    for cmd in (("list",), ("events",), ("submit", "--", "true")):
        r = outsider.run(*cmd, timeout=20)
        assert r.returncode != 0, (cmd, r.stdout)
        assert f"you are not in the group {users.group}" in r.stderr, (cmd, r.stderr)


def test_a_reservation_lasts_only_while_its_owner_has_a_qex_alive(lab, users):
    """Issue 34, C and B: alice's job waits; her waker is SIGKILLed; bob's later job
    must not wait for a reservation nobody will honour, and alice's next command
    starts hers."""
    w, alice, bob = lab
    first = bob.submit("--cpu", "1.5", "--", *gated(w.gate("bob")))
    bob.wait_state(first, "running")
    hers = alice.submit("--cpu", "0.5", "--", "true")
    second = bob.submit("--cpu", "1.5", "--", "true")  # behind alice's in the one order
    assert alice.record(hers)["state"] == "queued"
    wait_for(lambda: processes_of(alice.state, users.uid(alice.name)), 10, "alice's waker")
    for pid in processes_of(alice.state, users.uid(alice.name)):
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not processes_of(alice.state, users.uid(alice.name)), 10, "alice's processes to die")
    open_gate(w.gate("bob"))
    bob.wait_state(second, "completed", timeout=30)  # no capacity held for a job nobody starts
    words = bob.run("status", "--json", hers, check=0).stdout
    assert f"no qex of {alice.user}'s is running" in words, words
    assert alice.record(hers)["state"] == "queued"
    info = bob.run("info", check=0).stdout
    assert f"member    {alice.user}: 1 queued, 0 running; no qex of theirs is running" in info, info
    alice.run("list", check=0)  # any command of hers: her job starts
    alice.wait_state(hers, "completed", timeout=30)


def test_a_killed_waker_leaves_no_work_behind_a_reason_that_is_no_longer_true(users):
    """Issue 34, B, with private queues and one peer directory: alice's job waits
    for bob's; her only process, her waker, is SIGKILLed; bob's job ends. Her
    next command of any kind (here `list`) shows the truth and starts her job."""
    w = World(users, users.base, CONFIG)
    try:
        alice, bob = w.actor(0), w.actor(1)
        his = bob.submit("--cpu", "1.5", "--", *gated(w.gate("bob")))
        bob.wait_state(his, "running")
        hers = alice.submit("--cpu", "1", "--", "true")
        assert bob.user in alice.record(hers)["blocked_reason"]
        wait_for(lambda: processes_of(alice.state, users.uid(alice.name)), 10, "alice's waker")
        for pid in processes_of(alice.state, users.uid(alice.name)):
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not processes_of(alice.state, users.uid(alice.name)), 10, "alice's processes to die")
        open_gate(w.gate("bob"))
        bob.wait_state(his, "completed")
        listed = alice.run("list", check=0).stdout
        assert bob.user not in listed, listed  # never a reason naming a holding that is gone
        alice.wait_state(hers, "completed", timeout=30)
    finally:
        w.close()


def test_a_member_who_holds_the_shared_lock_is_named_and_nobody_hangs(lab, users):
    w, bob, mallory = lab
    hold = subprocess.Popen(
        w.users.wrap(
            mallory.name,
            [
                w.users.python,
                "-c",
                textwrap.dedent("""
            import fcntl, os, sys
            fd = os.open(sys.argv[1], os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX)
            print("held", flush=True)
            sys.stdin.read()
            """),
                os.path.join(bob.state, "lock"),
            ],
        ),
        env=w.users.env({}),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert hold.stdout.readline().strip() == "held"
        r = bob.run("submit", "--lock-timeout", "3", "--", "true", timeout=30)
        assert r.returncode == 121, (r.returncode, r.stderr)
        assert f"pid {hold.pid}" in r.stderr or mallory.user in r.stderr, r.stderr
        assert "shared directory's lock" in r.stderr, r.stderr
    finally:
        hold.stdin.close()
        hold.wait()
    assert bob.run("submit", "--wait", "--", "true", timeout=30).returncode == 0
