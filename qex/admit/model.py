"""The types that go into ``admit`` and the plan that comes out.

Units everywhere: cpu in integer millicores, memory and device sizes in integer
bytes. Every class is frozen; collections are tuples.
"""

from __future__ import annotations

from attrs import frozen

# Job states a dependency can be in. "missing" = no such job (counts as final).
FINAL_STATES = frozenset(
    {"completed", "failed", "killed", "timeout", "oom", "expired", "cancelled", "skipped", "missing"}
)


@frozen
class Claim:
    """One entry of a job's claim map besides cpu/mem.

    ``count`` is units (plain pool, lock) or a number of devices (indexed pool);
    ``size`` is bytes per device on an indexed pool, None = whole devices.
    """

    name: str
    count: int
    size: int | None = None


@frozen
class PoolSpec:
    """A declared pool: ``total`` units (plain) or ``devices`` capacities (indexed).

    A name that no PoolSpec declares is a lock: one unit, local to this queue.
    """

    name: str
    total: int | None = None
    devices: tuple[int, ...] = ()


@frozen
class DeviceUse:
    """What one holder holds on one indexed pool: sorted device indices, and
    bytes per device (None = the whole device, whatever its capacity)."""

    pool: str
    devices: tuple[int, ...]
    size: int | None


@frozen
class Running:
    """A job of this queue that holds capacity (state starting or running)."""

    id: str
    cpu: int
    mem: int
    claims: tuple[Claim, ...] = ()
    assigned: tuple[DeviceUse, ...] = ()


@frozen
class PeerHold:
    """What another queue (another user) holds, from its peer record.
    Locks are never shared with peers, so ``units`` name plain pools only."""

    owner: str
    cpu: int = 0
    mem: int = 0
    units: tuple[tuple[str, int], ...] = ()
    assigned: tuple[DeviceUse, ...] = ()


@frozen
class Dep:
    """The state of a job that a queued job depends on; ``root`` names the
    first failed job of the chain when this one was skipped."""

    id: str
    state: str
    root: str | None = None


@frozen
class Queued:
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


@frozen
class Pause:
    """Queue pause, and locks (or pools) that a person holds, each with words."""

    queue: bool = False
    queue_reason: str = ""
    locks: tuple[tuple[str, str], ...] = ()


@frozen
class Snapshot:
    """Everything ``admit`` may look at. ``mem_available`` is the machine's
    available memory minus the reserve; None = unknown (no check)."""

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
    pause: Pause = Pause()


@frozen
class Start:
    """Start this job with these device assignments (forced = oversized, alone)."""

    id: str
    assigned: tuple[DeviceUse, ...] = ()
    forced: bool = False


@frozen
class Wait:
    """Leave this job queued. ``holder`` says who holds what it needs:
    own | peer | outside | oversized | lock | person | pause | dependency |
    front | device. ``front`` is the front job's id when holder is "front"."""

    id: str
    reason: str
    holder: str
    front: str | None = None


@frozen
class Skip:
    """A job it needs did not succeed; ``root`` is the first failed job."""

    id: str
    root: str
    reason: str


@frozen
class Expire:
    """It did not start within its --max-queue-time. ``cause``: capacity |
    dependency | lock | pause; ``reason`` names what it waited for and a remedy."""

    id: str
    cause: str
    reason: str


@frozen
class Plan:
    """The decisions of one pass, in queue order within each tuple."""

    start: tuple[Start, ...]
    wait: tuple[Wait, ...]
    skip: tuple[Skip, ...]
    expire: tuple[Expire, ...]
    passed: tuple[tuple[str, int], ...]
    health: str
    next_deadline: float | None
