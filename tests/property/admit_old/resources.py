"""Claim arithmetic: who holds what, whether a job fits, which devices it gets.

Pure functions over frozen values. A *dimension* of a fit is "cpu", "mem",
"avail" (the machine's available memory), or the name of a claimed pool/lock.
"""

from __future__ import annotations

from attrs import evolve, frozen

from qex.admit.model import Claim, DeviceUse, PeerHold, Running, Snapshot

LOCK, PLAIN, INDEXED = "lock", "plain", "indexed"
CPU, MEM, AVAIL = "cpu", "mem", "avail"


def get(pairs: tuple, name: str, default=None):
    """The value for ``name`` in a tuple of (name, value) pairs."""
    for key, value in pairs:
        if key == name:
            return value
    return default


def put(pairs: tuple, name: str, value) -> tuple:
    """``pairs`` with ``name`` set to ``value``, kept sorted by name."""
    rest = tuple(p for p in pairs if p[0] != name)
    return tuple(sorted(rest + ((name, value),), key=lambda p: p[0]))


@frozen
class Machine:
    """What does not change during a pass: the budget and the declared pools."""

    cpu: int
    mem: int
    mem_available: int | None
    plain: tuple[tuple[str, int], ...] = ()
    indexed: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def kind(self, name: str) -> str:
        if get(self.indexed, name) is not None:
            return INDEXED
        return PLAIN if get(self.plain, name) is not None else LOCK

    def total(self, name: str) -> int:
        """Units of a plain pool; a lock has one."""
        return get(self.plain, name, 1)

    def caps(self, name: str) -> tuple[int, ...]:
        return get(self.indexed, name, ())


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
    )


@frozen
class Holder:
    """One holder of capacity: a job of this queue (who = job id) or another
    user's queue (peer, who = owner). ``units`` = plain pools and locks."""

    who: str
    peer: bool = False
    cpu: int = 0
    mem: int = 0
    units: tuple[tuple[str, int], ...] = ()
    assigned: tuple[DeviceUse, ...] = ()
    started: bool = False

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
    """A running job of this queue. Its claims on indexed pools count through
    ``assigned`` (a claim without an assignment cannot say which device)."""
    return Holder(job.id, False, job.cpu, job.mem, _units_of(m, job.claims), _indexed_only(m, job.assigned))


def started_holder(m: Machine, job, assigned: tuple[DeviceUse, ...]) -> Holder:
    """A queued job started in this pass."""
    return Holder(job.id, False, job.cpu, job.mem, _units_of(m, job.claims), assigned, started=True)


def _use_key(u: DeviceUse):
    return (u.pool, u.devices, -1 if u.size is None else u.size)


def peer_holders(m: Machine, peers: tuple[PeerHold, ...]) -> tuple[Holder, ...]:
    """One holder per owner, sorted. Peers hold plain pools (never locks: a
    name this queue does not declare is ignored) and indexed pools."""
    merged: dict[str, Holder] = {}
    for p in peers:
        h = merged.get(p.owner, Holder(p.owner, True))
        units = h.units
        for name, n in p.units:
            if m.kind(name) == PLAIN and n > 0:
                units = put(units, name, get(units, name, 0) + n)
        assigned = tuple(sorted(h.assigned + _indexed_only(m, p.assigned), key=_use_key))
        merged[p.owner] = evolve(h, cpu=h.cpu + p.cpu, mem=h.mem + p.mem, units=units, assigned=assigned)
    return tuple(merged[k] for k in sorted(merged))


@frozen
class Load:
    """An amount held, split between this queue and peers."""

    own: int = 0
    peer: int = 0

    @property
    def total(self) -> int:
        return self.own + self.peer

    def add(self, amount: int, peer: bool) -> "Load":
        return evolve(self, peer=self.peer + amount) if peer else evolve(self, own=self.own + amount)


@frozen
class Ledger:
    """What is held right now: sums per dimension, per device, and the holders."""

    cpu: Load = Load()
    mem: Load = Load()
    units: tuple[tuple[str, Load], ...] = ()
    devices: tuple[tuple[str, tuple[Load, ...]], ...] = ()
    holders: tuple[Holder, ...] = ()
    started_mem: int = 0

    def device_loads(self, m: Machine, pool: str) -> tuple[Load, ...]:
        return led_loads(m, self.devices, pool)

    def unit_load(self, name: str) -> Load:
        return get(self.units, name, Load())

    def own_holds_anything(self) -> bool:
        return any(not h.peer for h in self.holders)


def led_loads(m: Machine, devices: tuple, pool: str) -> tuple[Load, ...]:
    """The per-device loads of ``pool`` in a ledger's ``devices`` pairs."""
    return get(devices, pool) or tuple(Load() for _ in m.caps(pool))


def _add_use(m: Machine, loads: tuple[Load, ...], use: DeviceUse, peer: bool) -> tuple[Load, ...]:
    caps = m.caps(use.pool)
    out = list(loads)
    for i in use.devices:
        if 0 <= i < len(caps):
            out[i] = out[i].add(caps[i] if use.size is None else use.size, peer)
    return tuple(out)


def hold(m: Machine, led: Ledger, h: Holder) -> Ledger:
    """``led`` with ``h`` added."""
    units = led.units
    for name, n in h.units:
        units = put(units, name, get(units, name, Load()).add(n, h.peer))
    devices = led.devices
    for use in h.assigned:
        devices = put(devices, use.pool, _add_use(m, led_loads(m, devices, use.pool), use, h.peer))
    return Ledger(
        led.cpu.add(h.cpu, h.peer),
        led.mem.add(h.mem, h.peer),
        units,
        devices,
        led.holders + (h,),
        led.started_mem + (h.mem if h.started else 0),
    )


def ledger_of(m: Machine, holders) -> Ledger:
    led = Ledger()
    for h in holders:
        led = hold(m, led, h)
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


@frozen
class Fit:
    """The dimensions that do not fit (empty = it fits) and the devices chosen."""

    budget: tuple[str, ...] = ()
    pools: tuple[str, ...] = ()
    assigned: tuple[DeviceUse, ...] = ()

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
    ``budget=False`` skips the cpu/mem budget (an oversized job run alone)."""
    short, assigned = [], []
    for claim in claims:
        if claim.count <= 0:
            continue
        got = take(m, led, claim)
        if got is None:
            short.append(claim.name)
            continue
        assigned.extend(got.assigned)
        led = hold(m, led, got)
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


def holders_of(led: Ledger, dims) -> tuple[Holder, ...]:
    """The holders (own first, then peers; each sorted) that hold any of ``dims``."""
    found = [h for h in led.holders if h.who and any(h.holds(d) for d in dims)]
    own = sorted((h for h in found if not h.peer), key=lambda h: h.who)
    peers = sorted((h for h in found if h.peer), key=lambda h: h.who)
    return tuple(own) + tuple(peers)
