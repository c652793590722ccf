"""The types that go into ``admit`` and the plan that comes out.

Units everywhere: cpu in integer millicores, memory and device sizes in integer
bytes. Every class is a frozen ``Plain`` record with slots (``qex.base.plain``):
assigning an attribute raises its ``FrozenInstanceError``; a value compares and
hashes by value, prints like a call, and ``value.evolve(...)`` copies it with
changes; collections are tuples. The classes a pass makes one of per job (a
``Wait`` for each of 10,000 queued jobs) write their own positional
``__init__``, whose defaults are the fields'.
"""

from __future__ import annotations

from qex.base.plain import Plain, setter
from qex.base.states import DEPENDENCY_ENDED

# Job states a dependency can be in that count as ended ("missing" = no such job).
FINAL_STATES = DEPENDENCY_ENDED


class Claim(Plain, frozen=True, slots=True):
    """One entry of a job's claim map besides cpu/mem.

    ``count`` is units (plain pool, lock) or a number of devices (indexed pool);
    ``size`` is bytes per device on an indexed pool, None = whole devices.
    """

    name: str
    count: int
    size: int | None = None

    def __init__(self, name: str, count: int, size: int | None):
        put = setter(self)
        put("name", name)
        put("count", count)
        put("size", size)

    def __eq__(self, other):  # by hand: claims are part of the admit memo key
        if other.__class__ is not Claim:
            return NotImplemented
        return self.name == other.name and self.count == other.count and self.size == other.size

    def __hash__(self):
        return hash(("Claim", self.name, self.count, self.size))


class PoolSpec(Plain, frozen=True, slots=True):
    """A declared pool: ``total`` units (plain) or ``devices`` capacities (indexed).

    A name that no PoolSpec declares is a lock: one unit, local to this queue.
    """

    name: str
    total: int | None = None
    devices: tuple[int, ...] = ()


class DeviceUse(Plain, frozen=True, slots=True):
    """What one holder holds on one indexed pool: sorted device indices, and
    bytes per device (None = the whole device, whatever its capacity)."""

    pool: str
    devices: tuple[int, ...]
    size: int | None

    def __init__(self, pool: str, devices: tuple[int, ...], size: int | None):
        put = setter(self)
        put("pool", pool)
        put("devices", devices)
        put("size", size)


class Running(Plain, frozen=True, slots=True):
    """A job of this queue that holds capacity (state starting or running).
    ``used``: what the driver reports its processes use, one device each
    (``DeviceUse.size`` the bytes); on a device where that is more than it was
    given, the use counts (``resources.own_holder``)."""

    id: str
    cpu: int
    mem: int
    claims: tuple[Claim, ...] = ()
    assigned: tuple[DeviceUse, ...] = ()
    used: tuple[DeviceUse, ...] = ()

    def __init__(
        self,
        id: str,
        cpu: int,
        mem: int,
        claims: tuple[Claim, ...],
        assigned: tuple[DeviceUse, ...],
        used: tuple[DeviceUse, ...],
    ):
        put = setter(self)
        put("id", id)
        put("cpu", cpu)
        put("mem", mem)
        put("claims", claims)
        put("assigned", assigned)
        put("used", used)


OUTSIDE_USE, PEER_USE = "outside", "peer"


class Seen(Plain, frozen=True, slots=True):
    """VRAM the driver reports on ``device`` of the indexed pool ``pool`` that
    no running job of this queue holds: ``used`` bytes, ``kind`` OUTSIDE_USE (a
    process of no running qex job, of any user: a job's left-over process too)
    or PEER_USE (a process of another queue's job, which counts beyond what
    that queue's claims hold on the device); ``who`` names it in words ("pid 42
    (python) of bob", "bob")."""

    pool: str
    device: int
    used: int
    kind: str = OUTSIDE_USE
    who: str = ""

    def __init__(self, pool: str, device: int, used: int, kind: str, who: str):
        put = setter(self)
        put("pool", pool)
        put("device", device)
        put("used", used)
        put("kind", kind)
        put("who", who)


class PeerHold(Plain, frozen=True, slots=True):
    """What another queue (another user) holds, from its peer record.
    Locks are never shared with peers, so ``units`` name plain pools only."""

    owner: str
    cpu: int = 0
    mem: int = 0
    units: tuple[tuple[str, int], ...] = ()
    assigned: tuple[DeviceUse, ...] = ()


class Dep(Plain, frozen=True, slots=True):
    """The state of a job that a queued job depends on; ``root`` names the
    first failed job of the chain when this one was skipped."""

    id: str
    state: str
    root: str | None = None

    def __init__(self, id: str, state: str, root: str | None):
        put = setter(self)
        put("id", id)
        put("state", state)
        put("root", root)


class Queued(Plain, frozen=True, slots=True):
    """A job waiting in this queue. ``deadline`` is absolute (already extended
    by pause time); ``passed_by`` counts later jobs that started past it while
    it was the own-blocked front job; ``retry`` marks a job requeued for
    another attempt (a queue pause does not hold it: it already ran)."""

    id: str
    seq: int
    priority: int = 0
    cpu: int = 1000
    mem: int = 0
    claims: tuple[Claim, ...] = ()
    needs: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    deadline: float | None = None
    passed_by: int = 0
    name: str = ""
    retry: bool = False

    def __init__(
        self,
        id: str,
        seq: int,
        priority: int,
        cpu: int,
        mem: int,
        claims: tuple[Claim, ...],
        needs: tuple[str, ...],
        after: tuple[str, ...],
        deadline: float | None,
        passed_by: int,
        name: str,
        retry: bool,
    ):
        put = setter(self)
        put("id", id)
        put("seq", seq)
        put("priority", priority)
        put("cpu", cpu)
        put("mem", mem)
        put("claims", claims)
        put("needs", needs)
        put("after", after)
        put("deadline", deadline)
        put("passed_by", passed_by)
        put("name", name)
        put("retry", retry)


class Pause(Plain, frozen=True, slots=True):
    """Queue pause, and locks (or pools) that a person holds, each with words."""

    queue: bool = False
    queue_reason: str = ""
    locks: tuple[tuple[str, str], ...] = ()


NO_PAUSE = Pause()


class Snapshot(Plain, frozen=True, slots=True):
    """Everything ``admit`` may look at. ``mem_available`` is the machine's
    available memory minus the reserve; None = unknown (no check).
    ``mem_reserve`` is that reserve (``[system] reserve_mem``), for the words of
    a job that waits on it. ``seen``: VRAM used on the devices of indexed pools
    beside this queue's running jobs (what the driver reported, when a pass
    asked it: ``qex.queue.gpuseen``). ``pressure``: (the machine's memory pressure, ``[system]
    max_pressure``) when the first is above the second (no job starts), else None."""

    now: float
    cpu_budget: int
    mem_budget: int
    mem_available: int | None
    oversized: str
    max_bypass: int
    pools: tuple[PoolSpec, ...]
    running: tuple[Running, ...]
    peers: tuple[PeerHold, ...]
    queued: tuple[Queued, ...]
    deps: tuple[Dep, ...] = ()
    pause: Pause = NO_PAUSE
    mem_reserve: int = 0
    seen: tuple[Seen, ...] = ()
    pressure: tuple[float, float] | None = None


class Start(Plain, frozen=True, slots=True):
    """Start this job with these device assignments (forced = oversized, alone)."""

    id: str
    assigned: tuple[DeviceUse, ...] = ()
    forced: bool = False

    def __init__(self, id: str, assigned: tuple[DeviceUse, ...], forced: bool):
        put = setter(self)
        put("id", id)
        put("assigned", assigned)
        put("forced", forced)


class Wait(Plain, frozen=True, slots=True):
    """Leave this job queued. ``holder`` says who holds what it needs:
    own | peer | outside | oversized | lock | person | pause | dependency |
    front | device | pressure. ``front`` is the front job's id when holder is "front"."""

    id: str
    reason: str
    holder: str
    front: str | None = None

    def __init__(self, id: str, reason: str, holder: str, front: str | None):
        put = setter(self)
        put("id", id)
        put("reason", reason)
        put("holder", holder)
        put("front", front)


class Skip(Plain, frozen=True, slots=True):
    """A job it needs did not succeed; ``root`` is the first failed job."""

    id: str
    root: str
    reason: str

    def __init__(self, id: str, root: str, reason: str):
        put = setter(self)
        put("id", id)
        put("root", root)
        put("reason", reason)


class Expire(Plain, frozen=True, slots=True):
    """It did not start within its --max-queue-time. ``cause``: capacity |
    dependency | lock | pause; ``reason`` names what it waited for and a remedy."""

    id: str
    cause: str
    reason: str

    def __init__(self, id: str, cause: str, reason: str):
        put = setter(self)
        put("id", id)
        put("cause", cause)
        put("reason", reason)


class Plan(Plain, frozen=True, slots=True):
    """The decisions of one pass, in queue order within each tuple."""

    start: tuple[Start, ...]
    wait: tuple[Wait, ...]
    skip: tuple[Skip, ...]
    expire: tuple[Expire, ...]
    passed: tuple[tuple[str, int], ...]
    health: str
    next_deadline: float | None
