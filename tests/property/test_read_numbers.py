"""Any JSON value in any field of what a member of a shared state directory can write
(issue 30): a job record, an index entry or counter, a journal line, a pause file, a
peer record, learn.json. The reading code, run in-process as a command runs it, ends in
nothing but qex's own errors, and never changes another job's record.

The paths read: each record (``read_status_dict``, ``qex list``'s row), the readers'
index (``read_index_jobs``), a pass's load (the index and the journal replayed), its
snapshot and admission, the pauses and the peer directory on the way, ``qex info``
gathered and rendered, and the learner's claim.
"""

import fcntl
import json
import os
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qex.base import machine
from qex.base.errors import QexError
from qex.config.context import Context
from qex.config.model import Config
from qex.jobs import learn
from qex.jobs.request import Request
from qex.jobs.submit import build
from qex.queue.txn import Txn
from qex.store import check
from qex.store.state import Store
from qex.users import peer_record

GB = 1 << 30

NUMBERS = [1e308, -1e308, float("nan"), float("inf"), -2, -1, 0, 2**62, 2**64, 10**30, 0.5, "1", True]
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**80), 2**80)
    | st.floats()
    | st.text(max_size=6)
    | st.sampled_from(NUMBERS)
)
json_values = st.one_of(
    st.sampled_from(NUMBERS),
    st.recursive(  # (half of them a number out of its bounds)
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
        max_leaves=6,
    ),
)

RECORD_FIELDS = sorted(check.STATUS_NUMBERS) + [
    "claims.cpu",
    "claims.mem",
    "claims.cpu",
    "claims.mem",
    "claims.pools",
    "claims.pools.x.count",
    "usage.max_rss",
    "usage.cpu_secs",
    "logs_dropped.stdout_bytes",
    "attempts",
    "state",
    "command",
    "assigned",
    "needs",
]
ENTRY_FIELDS = sorted(check.ENTRY_NUMBERS) + ["cpu", "mem", "pools", "assigned", "state", "needs", "group"]
INDEX_FIELDS = ["seq", "offset", "next_job", "synced", "journal_ino", "saved_at", "format", "stream", "jobs", "damaged"]
EVENT_FIELDS = ["seq", "commit", "event", "job", "job.claims", "job.submitted_at", "job.seq", "job.pid"]
PAUSE_FIELDS = ["id", "reason", "user", "uid", "pid", "ppid", "since", "until", "ended_at"]
PEER_FIELDS = [
    "jobs.cpu",
    "jobs.mem",
    "jobs.pools",
    "jobs.devices",
    "jobs.lock",
    "format",
    "jobs",
    "kind",
    "state_dir",
    "boot_id",
]
LEARN_FIELDS = ["s", "s.value", "s.kind", "at", "commands"]
TARGETS = {
    "record": RECORD_FIELDS,
    "entry": ENTRY_FIELDS,
    "index": INDEX_FIELDS,
    "journal": EVENT_FIELDS,
    "pause": PAUSE_FIELDS,
    "peer": PEER_FIELDS,
    "learn": LEARN_FIELDS,
}


def put(data: dict, path: str, value) -> None:
    """``data`` at the dotted ``path`` (made as it goes) set to ``value``."""
    *parents, last = path.split(".")
    for p in parents:
        if not isinstance(data.get(p), dict):
            data[p] = {}
        data = data[p]
    data[last] = value


def write(path: str, data) -> None:
    with open(path, "w") as fh:
        fh.write(json.dumps(data))  # (NaN and Infinity as the tokens Python's json reads back)


def read(path: str):
    with open(path) as fh:
        return json.load(fh)


def queue(root: str) -> tuple[Context, list[str]]:
    """Three queued jobs committed (a fourth, its directory made, never committed: a submission
    under way), the queue paused so that nothing starts."""
    store = Store(os.path.join(root, "state"))
    store.ensure()
    config = Config.default(os.path.join(root, "none.toml"))
    config = Config(
        **{**{f: getattr(config, f) for f in config.field_names()}, "peers_dir": os.path.join(root, "peers")}
    )
    ctx = Context(store=store, config=config, uid=os.getuid(), user="tester", cores=8, mem_total=16 * GB)
    built = [build(ctx, Request(command=["true", str(i)], mem="10MB")) for i in range(3)]
    for b in built:
        store.create_job_dir(b.spec, sync=False)
    with store.lock():
        txn = Txn(store, store.load_index_locked(save_replayed=False))
        for b in built:
            txn.put(b.record.evolve(seq=txn.idx.next_job), None)
            txn.idx.next_job += 1
        txn.commit(True)
    os.makedirs(os.path.join(store.root, "pause"))
    write(
        os.path.join(store.root, "pause", "queue.json"),
        {
            "format": 1,
            "kind": "queue",
            "id": "p1",
            "user": "tester",
            "uid": os.getuid(),
            "pid": 1,
            "ppid": 0,
            "since": 1.7e9,
            "until": None,
        },
    )
    return ctx, [b.record.id for b in built]


def poison(ctx: Context, ids: list[str], target: str, field: str, value) -> None:
    """``value`` at ``field`` of ``target``, the file of the first job (or of the queue)."""
    root, victim = ctx.store.root, ids[0]
    if target == "record":
        path = ctx.store.path(victim, "status.json")
        rec = read(path)
        put(rec, field, value)
        write(path, rec)
    elif target in ("entry", "index"):
        path = os.path.join(root, "index.json")
        data = read(path)
        put(data["jobs"][victim] if target == "entry" else data, field, value)
        write(path, data)
    elif target == "journal":
        rec = read(ctx.store.path(victim, "status.json"))
        event = {"event": "job", "seq": read(os.path.join(root, "index.json"))["seq"] + 1, "job": rec}
        put(event, field, value)
        with open(os.path.join(root, "journal.jsonl"), "a") as fh:
            fh.write(json.dumps(event) + "\n")
    elif target == "pause":
        path = os.path.join(root, "pause", "queue.json")
        data = read(path)
        put(data, field, value)
        write(path, data)
        write(os.path.join(root, "pause", ".ended-p0.json"), {"id": "p0", "since": value, "ended_at": value})
    elif target == "peer":
        job = {"cpu": 1.0, "mem": GB, "pools": {}, "devices": [], "lock": "peerjob.lock"}
        rec = {
            "format": 1,
            "kind": peer_record.KIND,
            "user": "other",
            "uid": os.getuid(),
            "state_dir": "/other",
            "state_id": "1:2",
            "boot_id": machine.boot_id(),
            "host": "h",
            "jobs": [job],
        }
        if field.startswith("jobs."):
            put(job, field[5:], value)
        else:
            put(rec, field, value)
        write(os.path.join(ctx.config.peers_dir, "u1-other.json"), rec)
    else:
        entry = {"n": "true", "at": 1, "s": [["peak", 100 << 20]]}
        if field == "s.value":
            entry["s"] = [["peak", value]]
        elif field == "s.kind":
            entry["s"] = [[value, 100 << 20]]
        else:
            entry[field] = value
        key = learn.key_of(["true", "0"])
        write(os.path.join(root, "learn.json"), {"format": 1, "commands": {key: entry}})


def read_everything(ctx: Context, ids: list[str]) -> None:
    """What list, status, info and a submission read, as they read it."""
    from qex.cli.render import describe, list_row
    from qex.queue import info, pause_view

    store = ctx.store
    index = store.read_index_jobs()
    for job_id in ids:
        try:
            rec = store.read_live(job_id, index)
        except QexError:
            continue
        list_row(rec, 1.8e9)
        describe(rec)
    gathered = info.gather(ctx)  # (a pass's load, the pauses, the peers, a snapshot, admission)
    info.render(gathered)
    with store.lock():
        idx = store.load_index_locked()
    for p in pause_view.listing(store, idx.jobs, 1.8e9):
        pause_view.render(p, 1.8e9)
    learn.claim_for(store.root, ["true", "0"], None, 0.2, most=ctx.mem_total)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(TARGETS)).flatmap(lambda t: st.tuples(st.just(t), st.sampled_from(TARGETS[t]))), json_values
)
def test_any_value_anywhere_is_read_or_refused_and_touches_no_other_job(where, value):
    target, field = where
    root = tempfile.mkdtemp(prefix="qex-numbers-")
    lock_fd = -1
    try:
        ctx, ids = queue(root)
        os.makedirs(ctx.config.peers_dir, mode=0o755)
        lock_fd = os.open(os.path.join(ctx.config.peers_dir, "peerjob.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        others = {j: open(ctx.store.path(j, "status.json"), "rb").read() for j in ids[1:]}
        poison(ctx, ids, target, field, value)
        try:
            read_everything(ctx, ids)
        except QexError:
            pass
        for job_id, data in others.items():
            with open(ctx.store.path(job_id, "status.json"), "rb") as fh:
                assert fh.read() == data, f"job {job_id[:8]}'s record changed"
            if target != "index":  # (the index's own jobs and counters: what it lists is what it says)
                assert job_id in ctx.store.read_index_jobs(), f"job {job_id[:8]} left the queue"
    finally:
        if lock_fd >= 0:
            os.close(lock_fd)
        shutil.rmtree(root, ignore_errors=True)
