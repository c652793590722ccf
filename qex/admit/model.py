"""The types that go into ``admit`` and the plan that comes out.

Units everywhere: cpu in integer millicores, memory and device sizes in integer
bytes. Every class is immutable (assigning an attribute raises
``FrozenInstanceError``), compares and hashes by value, and prints like a call;
collections are tuples.

Plain classes with ``__slots__`` and hand-written ``__init__``: building attrs
classes at import (and importing attrs) cost every ``qex`` command ~25 ms.
"""

from __future__ import annotations

from qex.base.states import DEPENDENCY_ENDED

# Job states a dependency can be in that count as ended ("missing" = no such job).
FINAL_STATES = DEPENDENCY_ENDED

_SETATTR = object.__setattr__.__get__  # _SETATTR(obj)(name, value) sets past the frozen guard


class FrozenInstanceError(AttributeError):
    """An attribute of an admission value was assigned or deleted."""


class Value:
    """Base of the frozen value classes: equality, hash, repr and copy by the
    fields, which are the ``__slots__`` in ``__init__`` order."""

    __slots__ = ()

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __ne__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() != other._values()

    def __hash__(self):
        return hash((self.__class__.__name__,) + self._values())

    def __repr__(self):
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{self.__class__.__name__}({fields})"

    def __reduce__(self):
        return self.__class__, self._values()

    def __setattr__(self, name, value):
        raise FrozenInstanceError(f"{self.__class__.__name__}.{name} cannot be assigned")

    def __delattr__(self, name):
        raise FrozenInstanceError(f"{self.__class__.__name__}.{name} cannot be deleted")


def evolve(value: Value, **changes: object) -> Value:
    """A copy of ``value`` with some fields changed (like ``attrs.evolve``)."""
    fields = {name: getattr(value, name) for name in value.__slots__}
    unknown = set(changes) - set(fields)
    if unknown:
        raise TypeError(f"{value.__class__.__name__} has no field {', '.join(sorted(unknown))}")
    fields.update(changes)
    return value.__class__(**fields)


class Claim(Value):
    """One entry of a job's claim map besides cpu/mem.

    ``count`` is units (plain pool, lock) or a number of devices (indexed pool);
    ``size`` is bytes per device on an indexed pool, None = whole devices.
    """

    __slots__ = ("name", "count", "size")

    def __init__(self, name: str, count: int, size: int | None = None):
        s = _SETATTR(self)
        s("name", name)
        s("count", count)
        s("size", size)

    def __eq__(self, other):  # by hand: claims are part of the admit memo key
        if other.__class__ is not Claim:
            return NotImplemented
        return self.name == other.name and self.count == other.count and self.size == other.size

    def __hash__(self):
        return hash(("Claim", self.name, self.count, self.size))


class PoolSpec(Value):
    """A declared pool: ``total`` units (plain) or ``devices`` capacities (indexed).

    A name that no PoolSpec declares is a lock: one unit, local to this queue.
    """

    __slots__ = ("name", "total", "devices")

    def __init__(self, name: str, total: int | None = None, devices: tuple[int, ...] = ()):
        s = _SETATTR(self)
        s("name", name)
        s("total", total)
        s("devices", devices)


class DeviceUse(Value):
    """What one holder holds on one indexed pool: sorted device indices, and
    bytes per device (None = the whole device, whatever its capacity)."""

    __slots__ = ("pool", "devices", "size")

    def __init__(self, pool: str, devices: tuple[int, ...], size: int | None):
        s = _SETATTR(self)
        s("pool", pool)
        s("devices", devices)
        s("size", size)


class Running(Value):
    """A job of this queue that holds capacity (state starting or running).
    ``used``: what the driver reports its processes use, one device each
    (``DeviceUse.size`` the bytes); on a device where that is more than it was
    given, the use counts (``resources.own_holder``)."""

    __slots__ = ("id", "cpu", "mem", "claims", "assigned", "used")

    def __init__(
        self,
        id: str,
        cpu: int,
        mem: int,
        claims: tuple[Claim, ...] = (),
        assigned: tuple[DeviceUse, ...] = (),
        used: tuple[DeviceUse, ...] = (),
    ):
        s = _SETATTR(self)
        s("id", id)
        s("cpu", cpu)
        s("mem", mem)
        s("claims", claims)
        s("assigned", assigned)
        s("used", used)


OUTSIDE_USE, PEER_USE = "outside", "peer"


class Seen(Value):
    """VRAM the driver reports on ``device`` of the indexed pool ``pool`` that
    no running job of this queue holds: ``used`` bytes, ``kind`` OUTSIDE_USE (a
    process of no running qex job, of any user: a job's left-over process too)
    or PEER_USE (a process of another queue's job, which counts beyond what
    that queue's claims hold on the device); ``who`` names it in words ("pid 42
    (python) of bob", "bob")."""

    __slots__ = ("pool", "device", "used", "kind", "who")

    def __init__(self, pool: str, device: int, used: int, kind: str = OUTSIDE_USE, who: str = ""):
        s = _SETATTR(self)
        s("pool", pool)
        s("device", device)
        s("used", used)
        s("kind", kind)
        s("who", who)


class PeerHold(Value):
    """What another queue (another user) holds, from its peer record.
    Locks are never shared with peers, so ``units`` name plain pools only."""

    __slots__ = ("owner", "cpu", "mem", "units", "assigned")

    def __init__(
        self,
        owner: str,
        cpu: int = 0,
        mem: int = 0,
        units: tuple[tuple[str, int], ...] = (),
        assigned: tuple[DeviceUse, ...] = (),
    ):
        s = _SETATTR(self)
        s("owner", owner)
        s("cpu", cpu)
        s("mem", mem)
        s("units", units)
        s("assigned", assigned)


class Dep(Value):
    """The state of a job that a queued job depends on; ``root`` names the
    first failed job of the chain when this one was skipped."""

    __slots__ = ("id", "state", "root")

    def __init__(self, id: str, state: str, root: str | None = None):
        s = _SETATTR(self)
        s("id", id)
        s("state", state)
        s("root", root)


class Queued(Value):
    """A job waiting in this queue. ``deadline`` is absolute (already extended
    by pause time); ``passed_by`` counts later jobs that started past it while
    it was the own-blocked front job; ``retry`` marks a job requeued for
    another attempt (a queue pause does not hold it: it already ran)."""

    __slots__ = (
        "id",
        "seq",
        "priority",
        "cpu",
        "mem",
        "claims",
        "needs",
        "after",
        "deadline",
        "passed_by",
        "name",
        "retry",
    )

    def __init__(
        self,
        id: str,
        seq: int,
        priority: int = 0,
        cpu: int = 1000,
        mem: int = 0,
        claims: tuple[Claim, ...] = (),
        needs: tuple[str, ...] = (),
        after: tuple[str, ...] = (),
        deadline: float | None = None,
        passed_by: int = 0,
        name: str = "",
        retry: bool = False,
    ):
        s = _SETATTR(self)
        s("id", id)
        s("seq", seq)
        s("priority", priority)
        s("cpu", cpu)
        s("mem", mem)
        s("claims", claims)
        s("needs", needs)
        s("after", after)
        s("deadline", deadline)
        s("passed_by", passed_by)
        s("name", name)
        s("retry", retry)


class Pause(Value):
    """Queue pause, and locks (or pools) that a person holds, each with words."""

    __slots__ = ("queue", "queue_reason", "locks")

    def __init__(self, queue: bool = False, queue_reason: str = "", locks: tuple[tuple[str, str], ...] = ()):
        s = _SETATTR(self)
        s("queue", queue)
        s("queue_reason", queue_reason)
        s("locks", locks)


NO_PAUSE = Pause()


class Snapshot(Value):
    """Everything ``admit`` may look at. ``mem_available`` is the machine's
    available memory minus the reserve; None = unknown (no check).
    ``mem_reserve`` is that reserve (``[system] reserve_mem``), for the words of
    a job that waits on it. ``seen``: VRAM used on the devices of indexed pools
    beside this queue's running jobs (what the driver reported, when a pass
    asked it: ``qex.queue.gpuseen``). ``pressure``: (the machine's memory pressure, ``[system]
    max_pressure``) when the first is above the second (no job starts), else None."""

    __slots__ = (
        "now",
        "cpu_budget",
        "mem_budget",
        "mem_available",
        "oversized",
        "max_bypass",
        "pools",
        "running",
        "peers",
        "queued",
        "deps",
        "pause",
        "mem_reserve",
        "seen",
        "pressure",
    )

    def __init__(
        self,
        now: float,
        cpu_budget: int,
        mem_budget: int,
        mem_available: int | None,
        oversized: str,
        max_bypass: int,
        pools: tuple[PoolSpec, ...],
        running: tuple[Running, ...],
        peers: tuple[PeerHold, ...],
        queued: tuple[Queued, ...],
        deps: tuple[Dep, ...] = (),
        pause: Pause = NO_PAUSE,
        mem_reserve: int = 0,
        seen: tuple[Seen, ...] = (),
        pressure: tuple[float, float] | None = None,
    ):
        s = _SETATTR(self)
        s("now", now)
        s("cpu_budget", cpu_budget)
        s("mem_budget", mem_budget)
        s("mem_available", mem_available)
        s("oversized", oversized)
        s("max_bypass", max_bypass)
        s("pools", pools)
        s("running", running)
        s("peers", peers)
        s("queued", queued)
        s("deps", deps)
        s("pause", pause)
        s("mem_reserve", mem_reserve)
        s("seen", seen)
        s("pressure", pressure)


class Start(Value):
    """Start this job with these device assignments (forced = oversized, alone)."""

    __slots__ = ("id", "assigned", "forced")

    def __init__(self, id: str, assigned: tuple[DeviceUse, ...] = (), forced: bool = False):
        s = _SETATTR(self)
        s("id", id)
        s("assigned", assigned)
        s("forced", forced)


class Wait(Value):
    """Leave this job queued. ``holder`` says who holds what it needs:
    own | peer | outside | oversized | lock | person | pause | dependency |
    front | device | pressure. ``front`` is the front job's id when holder is "front"."""

    __slots__ = ("id", "reason", "holder", "front")

    def __init__(self, id: str, reason: str, holder: str, front: str | None = None):
        s = _SETATTR(self)
        s("id", id)
        s("reason", reason)
        s("holder", holder)
        s("front", front)


class Skip(Value):
    """A job it needs did not succeed; ``root`` is the first failed job."""

    __slots__ = ("id", "root", "reason")

    def __init__(self, id: str, root: str, reason: str):
        s = _SETATTR(self)
        s("id", id)
        s("root", root)
        s("reason", reason)


class Expire(Value):
    """It did not start within its --max-queue-time. ``cause``: capacity |
    dependency | lock | pause; ``reason`` names what it waited for and a remedy."""

    __slots__ = ("id", "cause", "reason")

    def __init__(self, id: str, cause: str, reason: str):
        s = _SETATTR(self)
        s("id", id)
        s("cause", cause)
        s("reason", reason)


class Plan(Value):
    """The decisions of one pass, in queue order within each tuple."""

    __slots__ = ("start", "wait", "skip", "expire", "passed", "health", "next_deadline")

    def __init__(
        self,
        start: tuple[Start, ...],
        wait: tuple[Wait, ...],
        skip: tuple[Skip, ...],
        expire: tuple[Expire, ...],
        passed: tuple[tuple[str, int], ...],
        health: str,
        next_deadline: float | None,
    ):
        s = _SETATTR(self)
        s("start", start)
        s("wait", wait)
        s("skip", skip)
        s("expire", expire)
        s("passed", passed)
        s("health", health)
        s("next_deadline", next_deadline)
