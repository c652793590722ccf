"""Claim arithmetic: who holds what, whether a job fits, which devices it gets.

Pure functions over plain values. A *dimension* of a fit is "cpu", "mem",
"avail" (the machine's available memory), or the name of a claimed pool/lock.

The pass's ``Ledger`` is mutable: ``Ledger.add`` records a holder in place
(the pass adds each job it starts), and ``fit`` works on a scratch copy when a
job takes several claims. Nothing here is shared between passes.
"""

from __future__ import annotations

from .model import OUTSIDE_USE, PEER_USE, Claim, DeviceUse, PeerHold, Running, Seen, Snapshot

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from typing import Iterable

    from .model import Queued

LOCK, PLAIN, INDEXED = "lock", "plain", "indexed"
CPU, MEM, AVAIL = "cpu", "mem", "avail"


def get(pairs: tuple[tuple[str, int], ...], name: str, default: int | None = None) -> int | None:
    """The value for ``name`` in a tuple of (name, value) pairs."""
    for key, value in pairs:
        if key == name:
            return value
    return default


def put(pairs: tuple[tuple[str, int], ...], name: str, value: int) -> tuple[tuple[str, int], ...]:
    """``pairs`` with ``name`` set to ``value``, kept sorted by name."""
    rest = tuple(p for p in pairs if p[0] != name)
    return tuple(sorted(rest + ((name, value),), key=lambda p: p[0]))


class Machine:
    """What does not change during a pass: the budget and the declared pools."""

    __slots__ = ("cpu", "mem", "mem_available", "plain", "indexed", "_plain", "_indexed", "mem_reserve")

    def __init__(
        self,
        cpu: int,
        mem: int,
        mem_available: int | None,
        plain: tuple[tuple[str, int], ...] = (),
        indexed: tuple[tuple[str, tuple[int, ...]], ...] = (),
        mem_reserve: int = 0,
    ):
        self.cpu = cpu
        self.mem = mem
        self.mem_available = mem_available
        self.mem_reserve = mem_reserve  # (already taken from mem_available: for the words only)
        self.plain = plain
        self.indexed = indexed
        self._plain = {}
        self._indexed = {}
        for name, total in plain:  # the first pair of a name wins, as with ``get``
            self._plain.setdefault(name, total)
        for name, caps in indexed:
            self._indexed.setdefault(name, caps)

    def kind(self, name: str) -> str:
        if name in self._indexed:
            return INDEXED
        return PLAIN if name in self._plain else LOCK

    def total(self, name: str) -> int:
        """Units of a plain pool; a lock has one."""
        return self._plain.get(name, 1)

    def caps(self, name: str) -> tuple[int, ...]:
        return self._indexed.get(name, ())


def machine_of(snap: Snapshot) -> Machine:
    """The Machine of a snapshot. A spec with devices is indexed, one with a
    total is plain, one with neither declares nothing (the name is a lock).
    The first spec of a name (in a fixed order) wins."""
    plain: dict[str, int] = {}
    indexed: dict[str, tuple[int, ...]] = {}
    specs = sorted(snap.pools, key=lambda s: (s.name, -1 if s.total is None else s.total, s.devices))
    for spec in specs:
        if spec.name in plain or spec.name in indexed:
            continue
        if spec.devices:
            indexed[spec.name] = tuple(spec.devices)
        elif spec.total is not None:
            plain[spec.name] = spec.total
    return Machine(
        snap.cpu_budget,
        snap.mem_budget,
        snap.mem_available,
        tuple(sorted(plain.items())),
        tuple(sorted(indexed.items())),
        snap.mem_reserve,
    )


class Holder:
    """One holder of capacity: a job of this queue (who = job id) or another
    user's queue (peer, who = owner). ``units`` = plain pools and locks.
    VRAM used outside qex on one device is a holder too (``outside``: the
    words naming what uses it; ``peer`` True: it is not this queue's).
    Never changed once made."""

    __slots__ = ("who", "peer", "cpu", "mem", "units", "assigned", "started", "outside")

    def __init__(
        self,
        who: str,
        peer: bool = False,
        cpu: int = 0,
        mem: int = 0,
        units: tuple[tuple[str, int], ...] = (),
        assigned: tuple[DeviceUse, ...] = (),
        started: bool = False,
        outside: tuple[str, ...] | None = None,
    ):
        self.who = who
        self.peer = peer
        self.cpu = cpu
        self.mem = mem
        self.units = units
        self.assigned = assigned
        self.started = started
        self.outside = outside

    @property
    def other_user(self) -> bool:
        """Another queue's (not this queue's, not outside qex)."""
        return self.peer and self.outside is None

    def holds(self, dim: str) -> bool:
        if dim == CPU:
            return self.cpu > 0
        if dim == MEM:
            return self.mem > 0
        if dim == AVAIL:
            return self.started and self.mem > 0
        return any(n == dim and u > 0 for n, u in self.units) or any(d.pool == dim for d in self.assigned)


def _units_of(m: Machine, claims: tuple[Claim, ...]) -> tuple[tuple[str, int], ...]:
    return tuple((c.name, c.count) for c in claims if c.count > 0 and m.kind(c.name) != INDEXED)


def _indexed_only(m: Machine, uses: tuple[DeviceUse, ...]) -> tuple[DeviceUse, ...]:
    return tuple(u for u in uses if m.kind(u.pool) == INDEXED)


def own_holder(m: Machine, job: Running) -> Holder:
    """A running job of this queue. Its claims on indexed pools count only
    through ``assigned`` (a claim without an assignment cannot say which device);
    on a device where its processes use more than it was given (``used``), the
    larger counts: what it was given, and the rest (``over_claim``)."""
    assigned = _indexed_only(m, job.assigned)
    if job.used:
        assigned += over_claim(m, assigned, job.used)
    return Holder(job.id, False, job.cpu, job.mem, _units_of(m, job.claims), assigned)


def _per_device(m: Machine, uses) -> dict[tuple[str, int], int]:
    """Bytes per (pool, device) of a job's uses of indexed pools (a whole device: its capacity)."""
    out: dict[tuple[str, int], int] = {}
    for u in uses:
        caps = m.caps(u.pool)
        for d in u.devices:
            if 0 <= d < len(caps):
                out[(u.pool, d)] = out.get((u.pool, d), 0) + (caps[d] if u.size is None else max(u.size, 0))
    return out


def over_claim(m: Machine, assigned: tuple[DeviceUse, ...], used: tuple[DeviceUse, ...]) -> tuple[DeviceUse, ...]:
    """What a job uses beyond what it was given, one DeviceUse per device (none
    beyond a device's capacity)."""
    given = _per_device(m, assigned)
    out = []
    for (pool, d), n in sorted(_per_device(m, tuple(u for u in used if u.size is not None)).items()):
        extra = min(n, m.caps(pool)[d]) - given.get((pool, d), 0)
        if extra > 0:
            out.append(DeviceUse(pool, (d,), extra))
    return tuple(out)


def seen_holders(m: Machine, seen: tuple[Seen, ...], peers: tuple[Holder, ...]) -> tuple[Holder, ...]:
    """The holders of VRAM the driver reports beside this queue's running jobs:
    per device, another queue's use beyond what the peers' claims hold there (one
    holder named by the users), and the use outside qex (one holder per device,
    ``outside``: what uses it, in words). Only devices of declared indexed pools count."""
    peer_use: dict[tuple[str, int], list] = {}
    outside: dict[tuple[str, int], list] = {}
    for s in seen:
        caps = m.caps(s.pool)
        if m.kind(s.pool) != INDEXED or not 0 <= s.device < len(caps) or s.used <= 0:
            continue
        into = peer_use if s.kind == PEER_USE else outside if s.kind == OUTSIDE_USE else None
        if into is not None:
            into.setdefault((s.pool, s.device), []).append(s)
    out = []
    held = _per_device(m, tuple(u for h in peers for u in h.assigned))
    for (pool, d), found in sorted(peer_use.items()):
        extra = min(sum(s.used for s in found), m.caps(pool)[d]) - held.get((pool, d), 0)
        if extra > 0:
            who = ", ".join(sorted({s.who for s in found if s.who})) or "another user"
            out.append(Holder(who, True, assigned=(DeviceUse(pool, (d,), extra),)))
    for (pool, d), found in sorted(outside.items()):
        used = min(sum(s.used for s in found), m.caps(pool)[d])
        said = tuple(sorted(s.who for s in found))
        out.append(Holder(f"outside qex: {pool} {d}", True, assigned=(DeviceUse(pool, (d,), used),), outside=said))
    return tuple(out)


def started_holder(m: Machine, job: Queued, assigned: tuple[DeviceUse, ...]) -> Holder:
    """A queued job started in this pass."""
    units = _units_of(m, job.claims) if job.claims else ()
    return Holder(job.id, False, job.cpu, job.mem, units, assigned, started=True)


def _use_key(u: DeviceUse):
    return (u.pool, u.devices, -1 if u.size is None else u.size)


def peer_holders(m: Machine, peers: tuple[PeerHold, ...]) -> tuple[Holder, ...]:
    """One holder per owner, sorted. Peers hold plain pools (never locks: a
    name this queue does not declare is ignored) and indexed pools."""
    merged: dict[str, Holder] = {}
    for p in peers:
        h = merged.get(p.owner) or Holder(p.owner, True)
        units = h.units
        for name, n in p.units:
            if m.kind(name) == PLAIN and n > 0:
                units = put(units, name, get(units, name, 0) + n)
        assigned = tuple(sorted(h.assigned + _indexed_only(m, p.assigned), key=_use_key))
        merged[p.owner] = Holder(h.who, h.peer, h.cpu + p.cpu, h.mem + p.mem, units, assigned, h.started)
    return tuple(merged[k] for k in sorted(merged))


class Load:
    """An amount held, split between this queue and peers."""

    __slots__ = ("own", "peer")

    def __init__(self, own: int = 0, peer: int = 0):
        self.own = own
        self.peer = peer

    @property
    def total(self) -> int:
        return self.own + self.peer

    def add(self, amount: int, peer: bool) -> None:
        if peer:
            self.peer += amount
        else:
            self.own += amount

    def copy(self) -> "Load":
        return Load(self.own, self.peer)


class Ledger:
    """What is held right now: sums per dimension, per device, and the holders
    (in the order they were added)."""

    __slots__ = ("cpu", "mem", "units", "devices", "holders", "started_mem")

    def __init__(self):
        self.cpu = Load()
        self.mem = Load()
        self.units: dict[str, Load] = {}
        self.devices: dict[str, list[Load]] = {}
        self.holders: list[Holder] = []
        self.started_mem = 0

    def device_loads(self, m: Machine, pool: str) -> list[Load]:
        loads = self.devices.get(pool)
        return loads if loads else [Load() for _ in m.caps(pool)]

    def unit_load(self, name: str) -> Load:
        return self.units.get(name) or Load()

    def own_holds_anything(self) -> bool:
        return any(not h.peer for h in self.holders)

    def add(self, m: Machine, h: Holder) -> None:
        """Record ``h`` as a holder."""
        peer = h.peer
        for name, n in h.units:
            load = self.units.get(name)
            if load is None:
                load = self.units[name] = Load()
            load.add(n, peer)
        for use in h.assigned:
            self._add_use(m, use, peer)
        self.cpu.add(h.cpu, peer)
        self.mem.add(h.mem, peer)
        self.holders.append(h)
        if h.started:
            self.started_mem += h.mem

    def _add_use(self, m: Machine, use: DeviceUse, peer: bool) -> None:
        caps = m.caps(use.pool)
        loads = self.devices.get(use.pool)
        if not loads:
            loads = self.devices[use.pool] = [Load() for _ in caps]
        for i in use.devices:
            if 0 <= i < len(caps):
                loads[i].add(caps[i] if use.size is None else use.size, peer)

    def scratch(self) -> "Ledger":
        """A copy of the pool and device loads (not the holders nor the
        budget sums), for trying a job's claims one after the other."""
        led = Ledger()
        led.units = {name: load.copy() for name, load in self.units.items()}
        led.devices = {pool: [load.copy() for load in loads] for pool, loads in self.devices.items()}
        return led


def ledger_of(m: Machine, holders: Iterable[Holder]) -> Ledger:
    led = Ledger()
    for h in holders:
        led.add(m, h)
    return led


def device_free(m: Machine, led: Ledger, pool: str) -> tuple[int, ...]:
    return tuple(cap - load.total for cap, load in zip(m.caps(pool), led.device_loads(m, pool)))


def pick(m: Machine, led: Ledger, claim: Claim) -> tuple[int, ...] | None:
    """``claim.count`` distinct devices that can each take the claim, most free
    first, lowest index on a tie; returned sorted. A whole-device claim needs a
    device nobody holds any of. Capacities are never added across devices."""
    caps, loads = m.caps(claim.name), led.device_loads(m, claim.name)
    free = device_free(m, led, claim.name)
    if claim.size is None:
        ok = [i for i in range(len(caps)) if caps[i] > 0 and loads[i].total == 0]
    else:
        ok = [i for i in range(len(caps)) if free[i] >= max(claim.size, 1)]
    if len(ok) < claim.count:
        return None
    return tuple(sorted(sorted(ok, key=lambda i: (-free[i], i))[: claim.count]))


def take(m: Machine, led: Ledger, claim: Claim) -> Holder | None:
    """What ``claim`` would hold now (an anonymous holder), or None if it cannot."""
    if m.kind(claim.name) == INDEXED:
        devices = pick(m, led, claim)
        return None if devices is None else Holder("", assigned=(DeviceUse(claim.name, devices, claim.size),))
    if led.unit_load(claim.name).total + claim.count > m.total(claim.name):
        return None
    return Holder("", units=((claim.name, claim.count),))


class Fit:
    """The dimensions that do not fit (empty = it fits) and the devices chosen."""

    __slots__ = ("budget", "pools", "assigned")

    def __init__(self, budget: tuple[str, ...] = (), pools: tuple[str, ...] = (), assigned: tuple[DeviceUse, ...] = ()):
        self.budget = budget
        self.pools = pools
        self.assigned = assigned

    @property
    def ok(self) -> bool:
        return not self.budget and not self.pools


def budget_short(m: Machine, led: Ledger, cpu: int, mem: int, budget: bool = True) -> tuple[str, ...]:
    short = []
    if budget and led.cpu.total + cpu > m.cpu:
        short.append(CPU)
    if budget and led.mem.total + mem > m.mem:
        short.append(MEM)
    if m.mem_available is not None and mem > m.mem_available - led.started_mem:
        short.append(AVAIL)
    return tuple(short)


def fit(m: Machine, led: Ledger, cpu: int, mem: int, claims: tuple[Claim, ...], budget: bool = True) -> Fit:
    """Whether a job fits on top of ``led``; claims are taken one after the
    other (a later claim sees what an earlier one of the same job took).
    ``budget=False`` skips the cpu/mem budget (an oversized job run alone).
    A claim never holds cpu or memory, so the budget is checked on ``led``."""
    short, assigned = [], []
    scratch = None
    for claim in claims:
        if claim.count <= 0:
            continue
        got = take(m, scratch or led, claim)
        if got is None:
            short.append(claim.name)
            continue
        assigned.extend(got.assigned)
        if scratch is None:
            scratch = led.scratch()
        scratch.add(m, got)
    return Fit(budget_short(m, led, cpu, mem, budget), tuple(short), tuple(assigned))


def never_fits(m: Machine, claim: Claim) -> bool:
    """A claim that no state of the machine can satisfy."""
    if claim.count <= 0:
        return False
    if m.kind(claim.name) != INDEXED:
        return claim.count > m.total(claim.name)
    caps = m.caps(claim.name)
    if claim.size is None:
        return claim.count > sum(1 for c in caps if c > 0)
    return claim.count > sum(1 for c in caps if c >= max(claim.size, 1))


def is_whole(m: Machine, claim: Claim) -> bool:
    """An all-or-nothing claim: a lock, the whole of a one-unit plain pool, or
    the whole device of a one-device indexed pool. Such claims behave like
    locks for head-of-line: waiting only for one never parks the queue."""
    kind = m.kind(claim.name)
    if kind == LOCK:
        return True
    if kind == PLAIN:
        return m.total(claim.name) == 1
    caps = m.caps(claim.name)
    return len(caps) == 1 and (claim.size is None or claim.size >= caps[0])


def holders_of(led: Ledger, dims: tuple[str, ...]) -> tuple[Holder, ...]:
    """The holders (own first, then peers; each sorted) that hold any of ``dims``."""
    found = [h for h in led.holders if h.who and any(h.holds(d) for d in dims)]
    own = sorted((h for h in found if not h.peer), key=lambda h: h.who)
    peers = sorted((h for h in found if h.peer), key=lambda h: h.who)
    return tuple(own) + tuple(peers)
