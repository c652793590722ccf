"""A shared state directory whose other member writes anything into their own files
(issue 30): random JSON in any field of their queued job's index entry, their job's
record and their pause file. This member's pass, its readers (status, names,
info) and its pauses meet only qex's own refusals (sentences), never a
traceback, and this member's own job is untouched.

Root only (the other member's files must be another uid's); skipped elsewhere."""

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

OTHER = 65534  # the other member: nobody
FAKE = "0badc0de-0000-4000-8000-000000000001"

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)


def entry() -> dict:
    return {
        "seq": 1,
        "state": "queued",
        "owner": "nobody",
        "uid": OTHER,
        "name": "fake",
        "priority": 0,
        "cpu": 1000,
        "mem": 1 << 20,
        "pools": {},
        "assigned": [],
        "needs": [],
        "after": [],
        "deadline": None,
        "passed_by": 0,
        "reason": None,
        "holder": None,
        "submitted_at": 1.0,
        "attempt": 1,
    }


def record() -> dict:
    return {
        "id": FAKE,
        "seq": 1,
        "state": "queued",
        "name": "fake",
        "command": ["true"],
        "cwd": "/",
        "owner": "nobody",
        "uid": OTHER,
        "submitted_at": 1.0,
        "claims": {"cpu": 1.0, "mem": 1 << 20, "pools": {}},
    }


def a_pause() -> dict:
    return {
        "format": 1,
        "kind": "lock",
        "name": "data",
        "id": "1",
        "reason": "r",
        "user": "nobody",
        "uid": OTHER,
        "since": 1.0,
        "until": None,
    }


@pytest.fixture(scope="module")
def world():
    if os.getuid() != 0:
        pytest.skip("the other member's files must belong to another user: needs root")
    base = tempfile.mkdtemp(prefix="qex-foreign-")
    root = os.path.join(base, "lab")
    env = {
        **os.environ,
        "QEX_STATE_DIR": root,
        "QEX_CONFIG": os.path.join(base, "qex.toml"),
        "QEX_PEER_DIR": os.path.join(base, "peers"),
    }
    with open(env["QEX_CONFIG"], "w") as fh:
        fh.write('[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "64MB"\n')
    qex = [sys.executable, "-m", "qex"]
    for args in (("init", "--shared", root), ("pause", "lock", "x")):
        subprocess.run(qex + list(args), env=env, check=True, capture_output=True)
    mine = subprocess.run(
        qex + ["submit", "--lock", "x", "--", "true"], env=env, check=True, capture_output=True, text=True
    ).stdout.strip()
    other = os.path.join(root, f"member-{OTHER}")
    for d in (other, os.path.join(other, "jobs"), os.path.join(other, "jobs", FAKE), os.path.join(other, "pause")):
        os.mkdir(d, 0o750)
        os.chown(d, OTHER, -1)
    lock = os.path.join(other, f"waker-{OTHER}.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o640)
    os.fchown(fd, OTHER, -1)
    fcntl.flock(fd, fcntl.LOCK_EX)  # "a waker of theirs is running": their queued job counts
    saved = {k: os.environ.get(k) for k in ("QEX_STATE_DIR", "QEX_CONFIG", "QEX_PEER_DIR")}
    os.environ.update({k: env[k] for k in saved})
    try:
        from qex.config.context import Context

        yield Context.load(), mine, other
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        os.close(fd)
        subprocess.run(qex + ["cancel", mine], env=env, capture_output=True)
        subprocess.run(qex + ["resume", "lock", "x"], env=env, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def put(path: str, data) -> None:
    with open(path, "w") as fh:
        try:
            fh.write(json.dumps(data))
        except ValueError:
            fh.write(json.dumps(data, default=str))
    os.chown(path, OTHER, -1)
    os.chmod(path, 0o640)


def poisoned(base: dict, key: str, value) -> dict:
    out = json.loads(json.dumps(base))
    *parents, last = key.split(".")
    node = out
    for p in parents:
        node = node[p]
    node[last] = value
    return out


NASTY = st.sampled_from([float("inf"), float("-inf"), float("nan"), 1e308, -6000, -1, 2**64, "1", True, None])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(which=st.sampled_from(["index", "record", "pause"]), key=st.data(), value=json_values)
def test_whatever_another_member_writes_in_their_files_is_read_without_a_traceback(world, which, key, value):
    from qex.base.errors import QexError
    from qex.cli.render import list_row
    from qex.jobs.resolve import resolve
    from qex.queue import engine, info, pause

    ctx, mine, other = world
    base = {"index": entry(), "record": record(), "pause": a_pause()}[which]
    nested = ["claims.cpu", "claims.mem", "claims.pools"] if which == "record" else []
    field = key.draw(st.sampled_from(sorted(base) + nested + ["extra"]))
    value = key.draw(st.one_of(NASTY, st.just(value)))
    idx, rec, pse = entry(), record(), a_pause()
    if which == "index":
        idx = poisoned(idx, field, value)
    elif which == "record":
        rec = poisoned(rec, field, value)
    else:
        pse = poisoned(pse, field, value)
    put(os.path.join(other, "index.json"), {"format": 1, "seq": 1, "offset": 0, "next_job": 2, "jobs": {FAKE: idx}})
    put(os.path.join(other, "jobs", FAKE, "status.json"), rec)
    put(os.path.join(other, "pause", "lock-data.json"), pse)

    engine.run_pass(ctx)
    for read in (
        lambda: list_row(ctx.store.read_live(FAKE), time.time()),
        lambda: resolve(ctx.store, "nobody/fake"),
        lambda: resolve(ctx.store, FAKE[:8]),
        lambda: info.render(info.gather(ctx)),
        lambda: pause.current(ctx, time.time()),
    ):
        try:
            read()
        except QexError as exc:
            assert str(exc) and "Traceback" not in str(exc)
    assert ctx.store.read_live(mine).state == "queued"  # this member's own job: untouched
