"""Admission with the VRAM the driver reports (issue 32): ``Snapshot.seen`` (VRAM
used outside qex, another queue's use) and ``Running.used`` (what a running job of
this queue uses on each device).

On random snapshots of a box with a pool gpu (``vram_snapshots``):

- no device is ever filled past its capacity by a start, counting a running job's
  use where it is above what it was given, the peers' use where it is above their
  claims, and the VRAM used outside qex; a whole-device claim gets a device nobody
  uses at all;
- a job that waits for VRAM outside qex would fit its devices if that use were gone,
  and its reason names each device used outside qex and how much;
- what changes nothing changes nothing: a use of 0 bytes, a use on a pool no
  config declares or on a device it does not have, a running job's use within
  what it was given give the very plan of the snapshot without them.
"""

from collections import defaultdict

from admit_ref import GB
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qex.admit import Claim, DeviceUse, PeerHold, PoolSpec, Queued, Running, Seen, Snapshot, admit
from qex.admit.model import OUTSIDE_USE, PEER_USE
from qex.base.units import format_size

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
VRAM_WORDS = "this job cannot fit while VRAM outside qex is in use"


def caps_of(snap) -> dict:
    return {p.name: p.devices for p in snap.pools if p.devices}


def per_device(caps: dict, uses) -> dict:
    out = defaultdict(int)
    for u in uses:
        for d in u.devices:
            if u.pool in caps and 0 <= d < len(caps[u.pool]):
                out[(u.pool, d)] += caps[u.pool][d] if u.size is None else u.size
    return out


def counted(snap) -> tuple[dict, dict]:
    """(what each device holds before the pass, the part of it used outside qex), by hand."""
    caps = caps_of(snap)
    load = defaultdict(int)
    for r in snap.running:
        given, used = per_device(caps, r.assigned), per_device(caps, r.used)
        for key in set(given) | set(used):
            load[key] += max(given.get(key, 0), min(used.get(key, 0), caps[key[0]][key[1]]))
    held = per_device(caps, [u for p in snap.peers for u in p.assigned])
    peer_seen, outside = defaultdict(int), defaultdict(int)
    for s in snap.seen:
        if s.pool in caps and 0 <= s.device < len(caps[s.pool]) and s.used > 0:
            (peer_seen if s.kind == PEER_USE else outside)[(s.pool, s.device)] += s.used
    for key in set(held) | set(peer_seen):
        load[key] += max(held.get(key, 0), min(peer_seen.get(key, 0), caps[key[0]][key[1]]))
    for key, n in outside.items():
        outside[key] = min(n, caps[key[0]][key[1]])
        load[key] += outside[key]
    return load, outside


@st.composite
def vram_snapshots(draw):
    """A box with a pool gpu of 1 to 4 devices: peers and running jobs that hold some of
    it (a running job may use more than it was given, or a device it was not given),
    VRAM used outside qex and by other queues' jobs, and queued jobs that claim it."""
    caps = tuple(draw(st.lists(st.sampled_from([16 * GB, 24 * GB, 40 * GB, 80 * GB]), min_size=1, max_size=4)))
    pools = (PoolSpec("gpu", devices=caps),) + ((PoolSpec("net", total=2),) if draw(st.booleans()) else ())
    load = [0] * len(caps)

    def hold(size, count):
        free = [i for i in range(len(caps)) if (load[i] == 0 if size is None else caps[i] - load[i] >= size)]
        if len(free) < count:
            return None
        chosen = tuple(sorted(draw(st.permutations(free))[:count]))
        for i in chosen:
            load[i] += caps[i] if size is None else size
        return DeviceUse("gpu", chosen, size)

    sizes = st.sampled_from([None, 4 * GB, 8 * GB, 16 * GB, 20 * GB, 30 * GB, 40 * GB])
    peers, running = [], []
    for k in range(draw(st.integers(0, 2))):
        use = hold(draw(sizes), draw(st.integers(1, 2)))
        if use is not None:
            peers.append(PeerHold(f"user{k}", 500, GB, (), (use,)))
    for k in range(draw(st.integers(0, 3))):
        size, count = draw(sizes), draw(st.integers(1, 2))
        use = hold(size, count)
        if use is None:
            continue
        used = [
            DeviceUse("gpu", (d,), draw(st.sampled_from([GB, 8 * GB, 20 * GB, 30 * GB, 70 * GB])))
            for d in use.devices
            if draw(st.booleans())
        ]
        if draw(st.integers(0, 4)) == 0:  # a device it was not given (the fence bypassed)
            used.append(DeviceUse("gpu", (draw(st.integers(0, len(caps) - 1)),), 2 * GB))
        running.append(Running(f"run{k}", 500, GB, (Claim("gpu", count, size),), (use,), tuple(used)))
    seen = []
    for _ in range(draw(st.integers(0, 4))):
        d = draw(st.integers(0, len(caps) - 1))
        used = draw(st.sampled_from([0, GB, 8 * GB, 16 * GB, 40 * GB, 70 * GB]))
        kind = draw(st.sampled_from([OUTSIDE_USE, OUTSIDE_USE, PEER_USE]))
        seen.append(Seen("gpu", d, used, kind, f"pid {draw(st.integers(2, 99))} (python) of bob"))
    queued = []
    for k in range(draw(st.integers(1, 8))):
        claims = (Claim("gpu", draw(st.integers(1, 3)), draw(sizes)),)
        if draw(st.integers(0, 3)) == 0:
            claims += (Claim("net", 1),)
        queued.append(
            Queued(
                f"q{k}",
                k,
                draw(st.integers(0, 1)),
                draw(st.sampled_from([500, 1000, 4000])),
                GB,
                claims,
                name=f"job{k}",
                passed_by=draw(st.integers(0, 2)),
            )
        )
    cpu = draw(st.sampled_from([2000, 8000, 64000]))
    return Snapshot(
        1000.0,
        cpu,
        64 * GB,
        draw(st.sampled_from([None, 64 * GB])),
        "run-when-idle",
        draw(st.integers(0, 2)),
        pools,
        tuple(running),
        tuple(peers),
        tuple(queued),
        seen=tuple(seen),
    )


def is_whole(caps: dict, c) -> bool:
    return c.name in caps and len(caps[c.name]) == 1 and (c.size is None or c.size >= caps[c.name][0])


def fits_devices(caps: dict, load: dict, c) -> bool:
    devs = caps[c.name]
    ok = [
        i
        for i in range(len(devs))
        if (load[(c.name, i)] == 0 and devs[i] > 0 if c.size is None else devs[i] - load[(c.name, i)] >= max(c.size, 1))
    ]
    return len(ok) >= c.count


@SETTINGS
@given(vram_snapshots())
def test_no_start_overfills_a_device_counting_the_vram_in_use(snap):
    plan = admit(snap)
    caps = caps_of(snap)
    load, _outside = counted(snap)
    for start in plan.start:  # (in queue order)
        for u in start.assigned:
            for d in u.devices:
                cap = caps[u.pool][d]
                if u.size is None:
                    assert load[(u.pool, d)] == 0 and cap > 0, (start, load)
                else:
                    assert cap - load[(u.pool, d)] >= max(u.size, 1), (start, dict(load))
                load[(u.pool, d)] += cap if u.size is None else u.size


@SETTINGS
@given(vram_snapshots())
def test_a_job_that_waits_for_vram_outside_qex_fits_beside_the_peers_alone_and_its_reason_names_it(snap):
    """Waiting "outside": with this queue's jobs gone it still would not fit (else it waits
    for them), and with the VRAM outside qex gone too it would ("peer" wins otherwise)."""
    plan = admit(snap)
    caps = caps_of(snap)
    _load, outside = counted(snap)
    peers_only, _none = counted(snap.evolve(running=(), seen=tuple(s for s in snap.seen if s.kind == PEER_USE)))
    beside_peers = counted(snap.evolve(running=()))[0]
    for w in plan.wait:
        if w.holder != "outside" or VRAM_WORDS not in w.reason:
            continue
        job = next(j for j in snap.queued if j.id == w.id)
        claimed = [c for c in job.claims if c.name in caps and c.count > 0]
        assert claimed and all(fits_devices(caps, peers_only, c) for c in claimed), (job, w)
        assert not all(fits_devices(caps, beside_peers, c) for c in claimed), (job, w)
        named = [
            f"{pool} {d} has {format_size(n)} in use outside qex"
            for (pool, d), n in outside.items()
            if n > 0 and any(c.name == pool for c in claimed)
        ]
        assert named and all(n in w.reason for n in named), (w.reason, named)


@SETTINGS
@given(vram_snapshots(), st.data())
def test_what_changes_nothing_changes_nothing(snap, data):
    caps = caps_of(snap)
    plain = snap.evolve(seen=(), running=tuple(r.evolve(used=()) for r in snap.running))
    noise = [
        Seen("gpu", 0, 0, OUTSIDE_USE, "pid 7 (idle) of bob"),
        Seen("void", 0, 40 * GB, OUTSIDE_USE, "x"),
        Seen("gpu", 99, 40 * GB, PEER_USE, "bob"),
    ]
    within = []
    for r in snap.running:
        given = per_device(caps, r.assigned)
        uses = tuple(DeviceUse(pool, (d,), data.draw(st.integers(0, n))) for (pool, d), n in sorted(given.items()))
        within.append(r.evolve(used=uses))
    quiet = plain.evolve(seen=tuple(noise), running=tuple(within))
    assert admit(quiet) == admit(plain)
