"""Multi-user crash rounds (issue 34) in the suite: real users, both layouts, random
SIGKILLs of any user's qex commands, wakers and supervisors (QEX_MU_KILL_SUPERVISORS=0
spares the supervisors: multiuser.KILL_SUPERVISORS); one budget, final states, no job run
twice, true owners, private secrets (tests/crash/multiuser.py says how each is
observed). Needs root (to make the users); skips elsewhere, with the reason.

A few rounds here (QEX_MU_ROUNDS per layout, default 3); many behind the soak
marker (QEX_SOAK_MINUTES per layout, QEX_SOAK_USERS users, default 3), or
``bench/soak.py --users N --layout private|shared``. QEX_CRASH_SEED replays."""

import json
import os
import random
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from crash import invariants as inv
from crash import multiuser
from crash.multiuser import BUDGET, GB, LAYOUTS, TAG_VAR, MultiHarness, Sampler, run_rounds, users_or_skip

ROUNDS = int(os.environ.get("QEX_MU_ROUNDS", "3"))  # ~3 s each on 2 cores


@pytest.fixture(scope="module")
def users():
    yield from users_or_skip(2)


def _report(problems: list[str], totals: dict, seed: int) -> str:
    return (
        f"replay with QEX_CRASH_SEED={seed}\n{totals.get('last')}\n"
        + "\n".join(problems[:20])
        + "\n-- the last rounds:\n"
        + "\n".join(totals.get("log") or ())
    )


@pytest.mark.parametrize("layout", LAYOUTS)
def test_multiuser_rounds_with_kills_keep_one_budget_owners_and_secrets(users, layout):
    seed = int(os.environ.get("QEX_CRASH_SEED") or random.randrange(1 << 32))
    t0 = time.monotonic()
    problems, totals = run_rounds(users, layout, seed, rounds=ROUNDS)
    print(f"{totals['last']} in {time.monotonic() - t0:.1f}s")
    assert not problems, _report(problems, totals, seed)


@pytest.mark.soak
@pytest.mark.skipif(
    not os.environ.get("QEX_SOAK_MINUTES"), reason="soak mode: set QEX_SOAK_MINUTES (or run bench/soak.py --users N)"
)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_multiuser_rounds_for_qex_soak_minutes_keep_one_budget_owners_and_secrets(layout):
    minutes = float(os.environ["QEX_SOAK_MINUTES"])
    seed = int(os.environ.get("QEX_CRASH_SEED") or random.randrange(1 << 32))
    for u in users_or_skip(int(os.environ.get("QEX_SOAK_USERS", "3"))):
        problems, totals = run_rounds(u, layout, seed, minutes=minutes, stop_at_first=False, kill_supervisors=True)
        print(
            f"{totals['last']}; {totals['rounds']} rounds, {totals['jobs']} jobs, {totals['kills']} kills "
            f"{totals['kinds']}, {len(problems)} violations"
        )
        assert not problems, _report(problems, totals, seed)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("point", ["commit.before_index:1", "commit.after_index:1"])
def test_a_submission_killed_after_its_gate_leaves_no_job_unseen_by_the_others(users, layout, point):
    """Found by the rounds: a submission's early supervisor starts its job once the
    commit is durable; a submission killed between that and its peer record left
    the job running, counted by no other user until its owner's next pass (its
    end, perhaps hours later): another user's job started beside it."""
    h = MultiHarness(users, layout, 1)
    try:
        gate = os.path.join(h.world.dir, "gate")
        killed = subprocess.run(
            h.argv(1, ["submit", "--cpu", "2", "--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done"]),
            env=h.env(1, point),
            cwd=h.world.dir,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert killed.returncode == -9, killed
        deadline = time.monotonic() + 10  # (read as root: a command of the other user's would pass, and publish)
        while not any(r and r["state"] == "running" for _u, _s, r in h.records().values()):
            assert time.monotonic() < deadline, "the killed submission's job never ran"
            time.sleep(0.05)
        his = h.qex(0, "submit", "--cpu", "2", "--", "true")  # (2 + 2 of a 3-core budget: waits)
        assert his.returncode == 0, his.stderr
        job = his.stdout.strip()
        time.sleep(1.0)  # (a pass that would start it has had its chance)
        rec = json.loads(h.qex(0, "status", "--json", job).stdout)[0]
        assert rec["state"] == "queued" and users.names[1] in (rec.get("blocked_reason") or ""), rec
        with open(gate, "w"):
            pass
        deadline = time.monotonic() + 30
        while json.loads(h.qex(0, "status", "--json", job).stdout)[0]["state"] != "completed":
            assert time.monotonic() < deadline, "the job did not start once the other user's ended"
            time.sleep(0.2)
    finally:
        h.close()


# ---- the checks see what they are there to see ------------------------------------------------


def test_the_sampler_counts_live_job_processes_and_sees_an_overrun():
    claims = {
        t: {"user": "u", "uid": 1, "secret": "", "cpu": 2000, "mem": GB, "net": 1, "gpu": "whole"} for t in ("t1", "t2")
    }
    sampler = Sampler(claims, BUDGET, interval=0.01)
    procs = [
        subprocess.Popen(
            ["sleep", "5"],
            env={
                "PATH": os.environ["PATH"],
                TAG_VAR: t,
                "QEX_JOB_ID": f"job-{t}",
                "QEX_ATTEMPT": "1",
                "CUDA_VISIBLE_DEVICES": "1",
            },
        )
        for t in claims
    ]
    try:
        sampler.start()
        deadline = time.monotonic() + 10
        while sampler.scans < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        sampler.stop()
        for p in procs:
            p.kill()
            p.wait()
    episodes = sampler.take()
    assert len(episodes) == 1, episodes  # one overrun, however many samples saw it
    over = " ".join(episodes[0]["over"])
    assert "4 cores of 3" in over and "device gpu:1" in over, over
    assert {e["job"] for e in episodes[0]["jobs"]} == {"job-t1", "job-t2"}
    assert all(e["orphaned"] for e in episodes[0]["jobs"])  # their parent is no qex


def test_the_rounds_see_the_waker_and_the_supervisors_under_their_titles(q):
    """A waker or a supervisor writes its title over its argv (``qex: waker for uid ...``:
    qex.linux.title). The rounds took neither for a qex process: the settling never
    waited for a waker armed with a crash point, which then died at its commit of a
    start after the users' last commands, leaving a job 'starting' that nothing
    requeued (QEX_CRASH_SEED=2511588720); no random SIGKILL ever hit a waker or a
    supervisor; and every job was called orphaned."""
    gate = q.gate("g")
    armed = {"QEX_CRASH_AT": "engine.early_gate:99"}  # (a count never reached: armed, never fired)
    holder = q.submit("--cpu", "1", "--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done", env=armed)
    after = q.submit("--needs", holder, "--", "true")  # (queued: a waker stays for it)
    try:
        sup = q.wait_state(holder, "running")["supervisor_pid"]

        def titled() -> dict[int, bytes]:
            cmds = {pid: multiuser._read(f"/proc/{pid}/cmdline") or b"" for pid in q.processes()}
            return {pid: cmd for pid, cmd in cmds.items() if cmd.startswith(b"qex: ")}

        seen = q.wait_for(
            lambda: (t := titled()) and sup in t and any(c.startswith(b"qex: waker") for c in t.values()) and t,
            what="the job's supervisor and the waker under their titles",
        )
        assert set(seen) <= set(multiuser.qex_processes([q.state])), seen
        assert set(seen) <= set(multiuser.MultiHarness.armed_processes(SimpleNamespace(states=[q.state]))), seen
        pids = inv.job_processes([holder])[holder]  # (the sampler's "orphaned": the leader's parent is no qex)
        parents = {st[1] for st in map(multiuser._stat, map(str, pids)) if st} - set(pids)
        assert parents == {sup} and multiuser._is_qex_cmdline(multiuser._read(f"/proc/{sup}/cmdline") or b""), parents
    finally:
        open(gate, "w").close()
    q.wait_state(holder, "completed")
    q.wait_state(after, "completed")


def test_a_file_another_user_can_read_with_a_secret_in_it_is_found(users):
    h = MultiHarness(users, "private", 1)
    try:
        h.claims["t"] = {
            "user": users.names[1],
            "uid": users.uid(users.names[1]),
            "secret": "s3cr3t-planted",
            "cpu": 0,
            "mem": 0,
            "net": 0,
            "gpu": None,
        }
        leak = os.path.join(h.world.dir, "leak.txt")
        with open(leak, "w") as fh:
            fh.write("x s3cr3t-planted y")
        os.chmod(leak, 0o644)
        hidden = os.path.join(h.world.dir, "hidden.txt")
        with open(hidden, "w") as fh:
            fh.write("s3cr3t-planted")
        os.chmod(hidden, 0o600)  # root's, unreadable by the users
        problems = h.check_secrets()
        assert problems == [f"{users.names[0]} can read {leak}, which holds the secret of {users.names[1]}'s t"]
    finally:
        h.close()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
