"""The peer directory, in-process: publishing, reading, liveness, hostile entries.

flock locks belong to open file descriptions, so a lock taken here through one
descriptor is seen as held through another: the liveness rule can be checked
without a second process (the e2e tests do it with real ones).
"""

import fcntl
import json
import os
import stat
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qex.admit import DeviceUse, PeerHold
from qex.base.paths import user_name
from qex.config.context import Context
from qex.config.keys import PoolDef
from qex.config.model import Config
from qex.store.state import Index, Store
from qex.users import peer_admission, peer_publish, peer_record, peer_scan
from qex.users import peer_dir as pdir  # (peer_dir is a fixture here)

GB = 1 << 30
DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
POOLS = (
    PoolDef(name="net", count=4),
    PoolDef(name="gpu", count=None, devices=(24 * GB, 24 * GB, 24 * GB), size_label="vram", env="CUDA_VISIBLE_DEVICES"),
)


@pytest.fixture
def peer_dir(tmp_path, monkeypatch):
    path = str(tmp_path / "peers")
    monkeypatch.setenv("QEX_PEER_DIR", path)
    return path


def make_ctx(tmp_path, name: str) -> Context:
    store = Store(str(tmp_path / name))
    store.ensure()
    return Context(
        store=store,
        config=Config(path=str(tmp_path / "absent.toml"), pools=POOLS),
        uid=os.getuid(),
        user="tester",
        cores=8,
        mem_total=64 * GB,
    )


def entry(cpu=1000, mem=GB, pools=None, assigned=(), lock=None, uid=None, state="running"):
    return {
        "state": state,
        "uid": os.getuid() if uid is None else uid,
        "cpu": cpu,
        "mem": mem,
        "pools": pools or {},
        "assigned": [list(a) for a in assigned],
        "peer_lock": lock,
    }


def publish(ctx, jobs: dict) -> str | None:
    idx = Index({})
    idx.jobs.update(jobs)
    return peer_publish.publish_locked(ctx, idx)


def start_job(ctx, job_id: str, **kw):
    fd, name = pdir.hold_job_lock(ctx, job_id)
    assert fd >= 0 and name.endswith(".lock")
    return fd, entry(lock=name, **kw)


def write(path: str, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)


def hold_named(dirpath: str, name: str) -> int:
    """A lock file at ``name`` held the way a supervisor holds one."""
    fd = os.open(os.path.join(dirpath, name), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def reasons(scan) -> dict[str, str]:
    return {i.file: i.reason for i in scan.ignored}


# ---- publishing and reading ---------------------------------------------------------


def test_a_published_record_counts_for_another_queue_while_its_job_lock_is_held(tmp_path, peer_dir):
    a, b = make_ctx(tmp_path, "a"), make_ctx(tmp_path, "b")
    fd1, e1 = start_job(a, "job1-aaaa", cpu=3000, mem=4 * GB, pools={"net": [1, None], "target": [1, None]})
    fd2, e2 = start_job(a, "job2-bbbb", cpu=500, mem=GB, pools={"gpu": [1, None]}, assigned=[("gpu", [1], None)])
    assert publish(a, {"job1-aaaa": e1, "job2-bbbb": e2, "q": entry(state="queued")}) is None

    st_dir = os.stat(peer_dir)
    assert stat.S_IMODE(st_dir.st_mode) == 0o1777  # made like /tmp: sticky
    rec_path = os.path.join(peer_dir, pdir.key(a) + ".json")
    assert stat.S_IMODE(os.stat(rec_path).st_mode) == 0o644
    rec = json.load(open(rec_path))
    assert rec["kind"] == "qex-peer" and rec["format"] == 1 and len(rec["jobs"]) == 2
    assert all("target" not in j["pools"] for j in rec["jobs"])  # a lock is never published

    me = user_name()  # the owner is the file's owner, whatever the record says
    assert peer_scan.holdings(b) == [PeerHold(me, 3500, 5 * GB, (("net", 1),), (DeviceUse("gpu", (1,), None),))]
    assert peer_scan.scan(a).peers == () and peer_scan.scan(a).ignored == ()  # a queue never counts itself

    os.close(fd2)  # job2's supervisor is gone: only job1 counts
    [p] = peer_scan.scan(b).peers
    assert (p.cpu, p.mem, p.jobs, p.stale_jobs, p.assigned) == (3000, 4 * GB, 1, 1, ())
    os.close(fd1)  # every supervisor gone: the record stops counting
    scan = peer_scan.scan(b)
    assert scan.peers == ()
    assert reasons(scan)[pdir.key(a) + ".json"] == (
        f"stale: no lock of its jobs is held (the qex processes of {me} that held them are gone)"
    )


def test_publishing_writes_only_on_change_and_removes_the_record_when_nothing_is_held(tmp_path, peer_dir):
    a = make_ctx(tmp_path, "a")
    fd, e = start_job(a, "job1-aaaa")
    publish(a, {"job1-aaaa": e})
    path = os.path.join(peer_dir, pdir.key(a) + ".json")
    first = os.stat(path)
    publish(a, {"job1-aaaa": e})
    assert os.stat(path).st_ino == first.st_ino  # nothing changed: nothing written
    os.close(fd)
    assert publish(a, {}) is None
    assert not os.path.exists(path)
    assert not [n for n in os.listdir(peer_dir) if n.endswith(".lock")]  # its unheld lock was swept


def test_a_stale_lock_of_this_queue_is_swept_and_a_held_one_is_kept(tmp_path, peer_dir):
    a = make_ctx(tmp_path, "a")
    fd1, e1 = start_job(a, "job1-aaaa")
    fd2, e2 = start_job(a, "job2-bbbb", cpu=2000)
    os.close(fd2)  # its supervisor was SIGKILLed: the file stays behind
    publish(a, {"job1-aaaa": e1})
    locks = sorted(n for n in os.listdir(peer_dir) if n.endswith(".lock"))
    assert locks == [e1["peer_lock"]]
    os.close(fd1)


def test_the_format_1_record_on_disk_loads_forever_and_counts(tmp_path, peer_dir):
    b = make_ctx(tmp_path, "b")
    os.makedirs(peer_dir)
    data = open(os.path.join(DATA, "peer-record-format1.json"), "rb").read()
    write(os.path.join(peer_dir, "u1000-638068458206511b.json"), data)
    fds = [hold_named(peer_dir, j["lock"]) for j in json.loads(data)["jobs"]]
    [p] = peer_scan.scan(b).peers
    assert (p.cpu, p.mem, p.units, p.assigned, p.jobs, p.state_dir) == (
        3500,
        5 * GB,
        (("net", 1),),
        (("gpu", (1,), None),),
        2,
        "/home/alice/.local/state/qex",
    )
    for fd in fds:
        os.close(fd)


def test_a_record_of_a_newer_format_parses_and_its_cores_and_memory_count(tmp_path, peer_dir):
    b = make_ctx(tmp_path, "b")
    os.makedirs(peer_dir)
    data = open(os.path.join(DATA, "peer-record-newer.json"), "rb").read()
    write(os.path.join(peer_dir, "u1000-aaaaaaaaaaaaaaaa.json"), data)
    fds = [hold_named(peer_dir, j["lock"]) for j in json.loads(data)["jobs"]]
    [p] = peer_scan.scan(b).peers
    assert (p.cpu, p.mem, p.format) == (3250, 2 * GB, 7)
    assert p.units == (("net", 2),) and p.assigned == (("gpu", (0, 2), 8 * GB),)
    for fd in fds:
        os.close(fd)


def test_a_record_of_an_older_shape_with_only_cpu_mem_and_lock_counts(tmp_path, peer_dir):
    b = make_ctx(tmp_path, "b")
    os.makedirs(peer_dir)
    write(
        os.path.join(peer_dir, "old.json"), b'{"kind":"qex-peer","jobs":[{"cpu":1,"mem":1048576,"lock":"old.1.lock"}]}'
    )
    fd = hold_named(peer_dir, "old.1.lock")
    [p] = peer_scan.scan(b).peers
    assert (p.cpu, p.mem, p.units, p.assigned, p.state_dir) == (1000, 1 << 20, (), (), "")
    os.close(fd)


# ---- hostile ground ------------------------------------------------------------------


def scan_with_deadline(ctx, seconds=10.0):
    """Scan in a thread: a hang fails the test instead of blocking the suite."""
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("scan", peer_scan.scan(ctx)), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "scanning the peer directory hung"
    return box["scan"]


def test_hostile_entries_are_ignored_with_a_reason_and_never_hang(tmp_path, peer_dir):
    b = make_ctx(tmp_path, "b")
    os.makedirs(peer_dir)
    good = b'{"kind":"qex-peer","jobs":[{"cpu":1,"mem":0,"lock":"ok.lock"}]}'
    victim = str(tmp_path / "victim.json")
    write(victim, good)
    os.symlink(victim, os.path.join(peer_dir, "link.json"))
    os.mkfifo(os.path.join(peer_dir, "fifo.json"))
    os.mkfifo(os.path.join(peer_dir, "fifo.lock"))
    write(os.path.join(peer_dir, "big.json"), b" " * (peer_record.MAX_RECORD + 1))
    write(os.path.join(peer_dir, "cut.json"), good[:30])
    write(os.path.join(peer_dir, "foreign.json"), b'{"hello": "world"}')
    write(os.path.join(peer_dir, "hard.json"), good)
    os.link(os.path.join(peer_dir, "hard.json"), os.path.join(peer_dir, "hard2.json"))
    write(os.path.join(peer_dir, "neg.json"), b'{"kind":"qex-peer","jobs":[{"cpu":-4,"mem":0,"lock":"ok.lock"}]}')
    write(os.path.join(peer_dir, "nan.json"), b'{"kind":"qex-peer","jobs":[{"cpu":NaN,"mem":0,"lock":"ok.lock"}]}')
    write(os.path.join(peer_dir, "bool.json"), b'{"kind":"qex-peer","jobs":[{"cpu":true,"mem":0,"lock":"ok.lock"}]}')
    write(os.path.join(peer_dir, "escape.json"), b'{"kind":"qex-peer","jobs":[{"cpu":1,"mem":0,"lock":"../x.lock"}]}')
    write(os.path.join(peer_dir, "pipelock.json"), b'{"kind":"qex-peer","jobs":[{"cpu":1,"mem":0,"lock":"fifo.lock"}]}')
    write(
        os.path.join(peer_dir, "dev.json"),
        b'{"kind":"qex-peer","jobs":[{"cpu":1,"mem":0,"devices":[{"pool":"gpu","devices":[-1]}],"lock":"ok.lock"}]}',
    )
    fd = hold_named(peer_dir, "ok.lock")
    scan = scan_with_deadline(b)
    why = reasons(scan)
    assert why["link.json"] == "a symbolic link: not followed"
    assert why["fifo.json"] == "not a regular file (a FIFO)"
    assert "larger than" in why["big.json"]
    assert why["cut.json"] == "truncated or not JSON"
    assert "foreign" in why["foreign.json"]
    assert "hard links" in why["hard.json"] and "hard links" in why["hard2.json"]
    for name in ("neg.json", "bool.json"):
        assert "jobs[0].cpu" in why[name], (name, why[name])
    assert "NaN" in why["nan.json"]
    assert "jobs[0].lock" in why["escape.json"]
    assert "stale" in why["pipelock.json"]  # a FIFO as a lock proves nothing, and never blocks
    assert "device indices" in why["dev.json"]
    assert scan.peers == ()  # none of them counts
    assert open(victim, "rb").read() == good
    os.close(fd)


@pytest.mark.skipif(os.getuid() != 0, reason="chown needs root")
def test_a_lock_file_owned_by_someone_else_proves_nothing(tmp_path, peer_dir):
    b = make_ctx(tmp_path, "b")
    os.makedirs(peer_dir)
    write(os.path.join(peer_dir, "r.json"), b'{"kind":"qex-peer","jobs":[{"cpu":1,"mem":0,"lock":"r.1.lock"}]}')
    fd = hold_named(peer_dir, "r.1.lock")
    os.chown(os.path.join(peer_dir, "r.1.lock"), 4242, 4242)  # planted by another user
    assert peer_scan.scan(b).peers == ()
    os.chown(os.path.join(peer_dir, "r.1.lock"), 0, 0)
    assert len(peer_scan.scan(b).peers) == 1
    os.close(fd)


def test_a_symlink_as_the_peer_directory_is_refused_and_nothing_is_written_through_it(tmp_path, peer_dir):
    target = tmp_path / "elsewhere"
    target.mkdir()
    os.symlink(str(target), peer_dir)
    a = make_ctx(tmp_path, "a")
    assert pdir.hold_job_lock(a, "job1-aaaa") == (-1, None)
    problem = publish(a, {"job1-aaaa": entry(lock=None)})
    assert "symbolic link" in problem
    assert "symbolic link" in peer_scan.scan(a).problem
    assert os.listdir(target) == []


def test_a_peer_directory_writable_by_others_without_the_sticky_bit_is_refused(tmp_path, peer_dir):
    os.makedirs(peer_dir)
    os.chmod(peer_dir, 0o777)
    a = make_ctx(tmp_path, "a")
    assert "sticky" in peer_scan.scan(a).problem
    assert pdir.hold_job_lock(a, "job1-aaaa") == (-1, None)


def test_a_symlink_planted_at_this_queues_record_name_is_never_followed(tmp_path, peer_dir):
    a = make_ctx(tmp_path, "a")
    os.makedirs(peer_dir)
    os.chmod(peer_dir, 0o1777)
    victim = str(tmp_path / "victim.txt")
    write(victim, b"precious\n")
    name = os.path.join(peer_dir, pdir.key(a) + ".json")
    os.symlink(victim, name)
    fd, e = start_job(a, "job1-aaaa")
    publish(a, {"job1-aaaa": e})
    assert open(victim, "rb").read() == b"precious\n"
    os.close(fd)


# ---- records hold what was published, exactly ------------------------------------------

JOBS = st.lists(
    st.tuples(
        st.integers(0, 64000),
        st.integers(0, 1 << 40),
        st.integers(0, 3),
        st.sets(st.integers(0, 2), max_size=2),
        st.booleans(),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(JOBS)
def test_what_a_record_says_is_what_the_reader_counts(tmp_path_factory, jobs):
    """Random running jobs of queue A, some of whose supervisors died: B counts
    exactly the cores, memory, units and devices of the live ones."""
    root = tmp_path_factory.mktemp("prop")
    os.environ["QEX_PEER_DIR"] = str(root / "peers")
    try:
        a, b = make_ctx(root, "a"), make_ctx(root, "b")
        entries, fds, want = {}, [], [0, 0, 0, []]
        for i, (cpu, mem, net, devs, alive) in enumerate(jobs):
            assigned = [("gpu", sorted(devs), None)] if devs else []
            fd, e = start_job(
                a, f"job{i}-xxxx", cpu=cpu, mem=mem, pools={"net": [net, None]} if net else {}, assigned=assigned
            )
            entries[f"job{i}-xxxx"] = e
            if alive:
                fds.append(fd)
                want[0] += cpu
                want[1] += mem
                want[2] += net
                want[3] += [DeviceUse("gpu", tuple(sorted(devs)), None)] if devs else []
            else:
                os.close(fd)
        publish(a, entries)
        held = peer_scan.holdings(b)
        if not fds:
            assert held == []
        else:
            [h] = held
            assert (h.cpu, h.mem, dict(h.units).get("net", 0)) == tuple(want[:3])
            assert sorted(h.assigned, key=lambda u: u.devices) == sorted(want[3], key=lambda u: u.devices)
        for fd in fds:
            os.close(fd)
    finally:
        del os.environ["QEX_PEER_DIR"]


# ---- one admission at a time across queues ------------------------------------------------


def test_a_pass_waits_for_another_queues_admission_and_then_sees_its_record(tmp_path, peer_dir):
    """A's pass holds the admission lock between reading the peers and
    publishing; B's pass, meanwhile, waits, then counts A's new job."""
    from qex.jobs.request import Request
    from qex.jobs.submit import build, submit_many

    a, b = make_ctx(tmp_path, "a"), make_ctx(tmp_path, "b")
    for ctx in (a, b):
        ctx.config = Config(
            path=str(tmp_path / "absent.toml"), budget_cpu=4000, budget_mem=8 * GB, default_mem=1 << 20, reserve_mem=0
        )
    built = [build(b, Request(command=["true"], cpu="3"))]
    box = {}
    with peer_admission.admission(a, True) as held:
        assert held.fd is not None
        worker = threading.Thread(target=lambda: box.setdefault("result", submit_many(b, built)), daemon=True)
        worker.start()
        worker.join(0.2)
        assert worker.is_alive(), "B's pass admitted while A's admission was in progress"
        fd, e = start_job(a, "job1-aaaa", cpu=3000, mem=1 << 20)
        publish(a, {"job1-aaaa": e})
    worker.join(10)
    ids, result = box["result"]
    rec = b.store.read_status_dict(ids[0])
    assert rec["state"] == "queued" and rec["blocked_holder"] == "peer", rec
    assert result.launches == []
    os.close(fd)


def test_a_hostile_holder_of_the_admission_lock_slows_a_pass_down_but_never_stops_it(tmp_path, peer_dir):
    a, b = make_ctx(tmp_path, "a"), make_ctx(tmp_path, "b")
    with peer_admission.admission(a, True):
        with peer_admission.admission(b, True) as second:  # gives up after ADMIT_WAIT
            assert second.fd is None


def test_a_scan_that_found_nothing_is_not_made_again_while_the_directory_is_unchanged(tmp_path, peer_dir, monkeypatch):
    a, b = make_ctx(tmp_path, "a"), make_ctx(tmp_path, "b")
    a_fd, a_job = start_job(a, "aaaaaaaa-1")
    publish(a, {"aaaaaaaa-1": a_job})  # only a's own record and lock: nothing for a to count
    scans = []
    real = peer_scan.scan
    monkeypatch.setattr(peer_scan, "scan", lambda ctx: (scans.append(1), real(ctx))[1])  # what holdings calls
    old = os.stat(peer_dir).st_mtime_ns - 10**9
    os.utime(peer_dir, ns=(old, old))  # a directory time older than the clock's tick
    assert peer_scan.holdings(a) == [] and peer_scan.holdings(a) == [] and len(scans) == 1
    b_fd, b_job = start_job(b, "bbbbbbbb-1")
    publish(b, {"bbbbbbbb-1": b_job})  # another queue's record: the directory changes
    assert [h.cpu for h in peer_scan.holdings(a)] == [1000] and len(scans) == 2
    assert [h.cpu for h in peer_scan.holdings(a)] == [1000] and len(scans) == 3  # a peer: looked at every time
    os.close(b_fd)  # its supervisor is gone: its lock is let go, the directory stays as it was
    assert peer_scan.holdings(a) == [] and len(scans) == 4
    os.close(a_fd)


def queue_with_a_published_job(tmp_path, monkeypatch):
    """Queue a, whose one job is in its peer record; returns (ctx, the job's lock fd, the
    list that gets one item per scan of the peer directory)."""
    a = make_ctx(tmp_path, "a")
    fd, job = start_job(a, "aaaaaaaa-1")
    publish(a, {"aaaaaaaa-1": job})
    scans = []
    real = peer_scan.scan
    monkeypatch.setattr(peer_scan, "scan", lambda ctx: (scans.append(1), real(ctx))[1])  # what holdings calls
    return a, fd, scans


def test_a_directory_changed_within_the_clocks_tick_of_a_scan_is_scanned_again(tmp_path, peer_dir, monkeypatch):
    a, fd, scans = queue_with_a_published_job(tmp_path, monkeypatch)
    now = os.stat(peer_dir).st_mtime_ns + 10**9  # a time the next scan cannot be a tick past
    os.utime(peer_dir, ns=(now, now))
    assert peer_scan.holdings(a) == [] and peer_scan.holdings(a) == [] and len(scans) == 2
    os.close(fd)


def test_a_directory_with_whole_second_times_is_trusted_only_two_seconds_on(tmp_path, peer_dir, monkeypatch):
    """On a file system that keeps whole seconds (NFS, small ext4 inodes), a peer record
    made later in the second of a scan leaves the directory's time as it was."""
    a, fd, scans = queue_with_a_published_job(tmp_path, monkeypatch)
    import time

    second = (time.time_ns() // 10**9 - 1) * 10**9  # a whole second, one ago
    os.utime(peer_dir, ns=(second, second))
    assert peer_scan.holdings(a) == [] and peer_scan.holdings(a) == [] and len(scans) == 2
    older = second - 2 * 10**9
    os.utime(peer_dir, ns=(older, older))
    assert peer_scan.holdings(a) == [] and peer_scan.holdings(a) == [] and len(scans) == 3
    os.close(fd)
