"""The sentences of reasons and health. Stable words: no timestamps, so a
caller can skip rewriting a reason that did not change. Holders are named
(job ids shortened to 8 characters, peer owners) with amounts."""

from __future__ import annotations

from qex.base.units import format_cores, format_size

from .model import Dep, Queued
from .resources import AVAIL, CPU, INDEXED, LOCK, MEM, Fit, Holder, Ledger, Machine, device_free

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from .model import Claim

_LIST_LIMIT = 4


def cores(milli: int) -> str:
    """1000 → "1 core", 1500 → "1.5 cores", 250 → "0.25 cores" (the number as
    ``qex.base.units.format_cores`` writes it everywhere)."""
    return f"{format_cores(milli)} {'core' if milli == 1000 else 'cores'}"


def size(n: int) -> str:
    """Bytes as ``qex.base.units.format_size`` writes them everywhere: 512MB, 1.3GB, 100B."""
    return format_size(n)


def short(job_id: str) -> str:
    return job_id[:8]


def label(job: Queued) -> str:
    """A job as a person reads it: its name, else its id prefix."""
    return job.name or short(job.id)


def listing(items: list[str]) -> str:
    """ "a, b, c and 2 more" — at most a few items, in the given order."""
    head = ", ".join(items[:_LIST_LIMIT])
    more = len(items) - _LIST_LIMIT
    return f"{head} and {more} more" if more > 0 else head


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# ---- what a job needs -------------------------------------------------------


def _claim_of(job: Queued, name: str):
    return next(c for c in job.claims if c.name == name)


def _need_device(m: Machine, led: Ledger | None, job: Queued, name: str) -> str:
    c = _claim_of(job, name)
    what = (
        f"{plural(c.count, 'whole ' + name + ' device')}"
        if c.size is None
        else (f"{plural(c.count, name + ' device')} with {size(c.size)} free")
    )
    if led is None:
        return what
    free = device_free(m, led, name)
    if c.size is None:
        idle = sum(1 for cap, f in zip(m.caps(name), free) if f == cap)
        return f"{what} ({idle} of {len(free)} entirely free)"
    room = sum(1 for f in free if f >= max(c.size, 1))
    return f"{what} ({room} of {len(free)} have that much free)"


def _need_units(m: Machine, led: Ledger | None, job: Queued, name: str) -> str:
    c = _claim_of(job, name)
    if m.kind(name) == LOCK:
        return f"lock {name}"
    if led is None:
        return f"{c.count} {name}"
    free = max(m.total(name) - led.unit_load(name).total, 0)
    return f"{c.count} {name} ({free} of {m.total(name)} free)"


def _need(m: Machine, led: Ledger | None, job: Queued, dim: str) -> str:
    if dim == CPU:
        free = f" ({cores(max(m.cpu - led.cpu.total, 0))} of {cores(m.cpu)} free)" if led else ""
        return cores(job.cpu) + free
    if dim == MEM:
        free = f" ({size(max(m.mem - led.mem.total, 0))} of {size(m.mem)} free)" if led else ""
        return f"{size(job.mem)} of memory{free}"
    if dim == AVAIL:
        left = (m.mem_available or 0) - (led.started_mem if led else 0)
        return f"{size(job.mem)} of available memory ({size(max(left, 0))} available)"
    if m.kind(dim) == INDEXED:
        return _need_device(m, led, job, dim)
    return _need_units(m, led, job, dim)


def needs(m: Machine, led: Ledger | None, job: Queued, dims: tuple[str, ...]) -> str:
    """What the job needs in ``dims``, with what is free when ``led`` is given."""
    parts = [_need(m, led, job, d) for d in dims]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


# ---- who holds it -----------------------------------------------------------


def own_jobs(holders: tuple[Holder, ...]) -> str:
    ids = [short(h.who) for h in holders if not h.peer]
    return ("this queue's job " if len(ids) == 1 else "this queue's jobs ") + listing(ids)


def _peer_part(m: Machine, h: Holder, dim: str) -> list[str]:
    if dim == CPU:
        return [cores(h.cpu)]
    if dim == MEM:
        return [size(h.mem)]
    parts = [f"{n} {name}" for name, n in h.units if name == dim]
    for use in h.assigned:
        if use.pool == dim:
            devs = ", ".join(str(i) for i in use.devices)
            parts.append(f"{dim} {devs}" if use.size is None else f"{size(use.size)} on {dim} {devs}")
    return parts


def _outside(h: Holder):
    """What uses the VRAM an outside holder holds (None: another holder). (The old pass
    of the property tests hands its own holders, which have no ``outside``.)"""
    return getattr(h, "outside", None)


def _other_user(h: Holder) -> bool:
    return h.peer and _outside(h) is None


def peer_amounts(m: Machine, holders: tuple[Holder, ...], dims: tuple[str, ...]) -> str:
    """ "alice holds 3 cores, 4GB; bob holds gpu 1" for the peers among holders."""
    out = []
    for h in (h for h in holders if _other_user(h)):
        parts = [p for d in dims for p in _peer_part(m, h, d)]
        out.append(f"{h.who} holds {', '.join(parts)}")
    return "; ".join(out)


def outside_amounts(holders: tuple[Holder, ...], dims: tuple[str, ...]) -> str:
    """ "gpu 0 has 70GB in use outside qex (pid 4242 (python) of bob)" for the VRAM
    used outside qex among holders, device by device."""
    out = []
    for h in (h for h in holders if _outside(h) is not None):
        for use in h.assigned:
            if use.pool in dims:
                devs = ", ".join(str(i) for i in use.devices)
                what = listing(list(h.outside)) if h.outside else "a process qex cannot name"
                out.append(f"{use.pool} {devs} has {size(use.size or 0)} in use outside qex ({what})")
    return "; ".join(out)


def held_by(m: Machine, holders: tuple[Holder, ...], dims: tuple[str, ...]) -> str:
    own = any(not h.peer for h in holders)
    peers = any(_other_user(h) for h in holders)
    text = own_jobs(holders) if own else ""
    if peers:
        text += (" and by another user: " if own else "another user: ") + peer_amounts(m, holders, dims)
    if any(_outside(h) is not None for h in holders):
        text += ("; and " if text else "") + outside_amounts(holders, dims)
    return text or "nobody it can name"


# ---- reasons ----------------------------------------------------------------

PEER_WORDS = "this job cannot fit while another user holds capacity"
OUTSIDE_WORDS = "this job cannot fit while memory outside qex is in use"


def own_wait(m: Machine, led: Ledger, job: Queued, f: Fit, holders: tuple[Holder, ...]) -> str:
    dims = f.budget + f.pools
    return f"waits for {needs(m, led, job, dims)}: held by {held_by(m, holders, dims)}"


def peer_wait(m: Machine, job: Queued, f: Fit, holders: tuple[Holder, ...]) -> str:
    dims = tuple(d for d in f.budget if d != AVAIL) + f.pools
    return f"{PEER_WORDS} ({peer_amounts(m, holders, dims)}): it needs {needs(m, None, job, dims)}"


RESERVE_WORDS = "this job cannot fit beside the memory reserve"


def outside_wait(job: Queued, available: int, reserve: int = 0) -> str:
    kept = f" after the reserve of {size(reserve)}, [system] reserve_mem" if reserve > 0 else ""
    return f"{OUTSIDE_WORDS} (needs {size(job.mem)}, {size(max(available, 0))} available{kept})"


def reserve_wait(job: Queued, available: int, reserve: int) -> str:
    """The job would fit in the available memory but for the reserve kept for the machine."""
    return (
        f"{RESERVE_WORDS} (needs {size(job.mem)}, {size(max(available, 0))} available after the "
        f"{size(reserve)} that [system] reserve_mem keeps for the machine): it starts when more "
        "memory is free, or with a smaller claim or reserve"
    )


VRAM_OUTSIDE_WORDS = "this job cannot fit while VRAM outside qex is in use"


def vram_outside_wait(m: Machine, job: Queued | None, pools: tuple[str, ...], holders: tuple[Holder, ...]) -> str:
    """A claim on ``pools`` that the VRAM used outside qex leaves no room for
    (``job`` None: an all-or-nothing claim, the one device of a pool)."""
    need = needs(m, None, job, pools) if job is not None else ", ".join(whole_thing(m, n) for n in pools)
    return f"{VRAM_OUTSIDE_WORDS} ({outside_amounts(holders, pools)}): it needs {need}"


def whole_thing(m: Machine, name: str) -> str:
    return f"lock {name}" if m.kind(name) == LOCK else f"all of {name}"


def lock_wait(m: Machine, names: tuple[str, ...], holders: tuple[Holder, ...]) -> str:
    things = ", ".join(whole_thing(m, n) for n in names)
    if any(not h.peer for h in holders):
        return f"waits for {things}: held by {held_by(m, holders, names)}"
    return f"{PEER_WORDS} ({peer_amounts(m, holders, names)}): it needs {things}"


def also_locks(m: Machine, names: tuple[str, ...], holders: tuple[Holder, ...]) -> str:
    if not names:
        return ""
    return f"; it also waits for {', '.join(whole_thing(m, n) for n in names)}: held by {held_by(m, holders, names)}"


def person_wait(m: Machine, name: str, words: str) -> str:
    thing = f"lock {name}" if m.kind(name) == LOCK else f"pool {name}"
    return f"waits for {thing}, which a person holds: {words or f'paused (qex resume lock {name} ends it)'}"


def front_wait(front_label: str) -> str:
    return f"held for job {front_label} at the front of the queue, which waits for capacity that this queue's jobs hold"


def pressure_wait(pressure: tuple[float, float], how: str = "waits") -> str:
    now, most = pressure
    return (
        f"{how} while the machine is under memory pressure: {now:g}% (PSI some avg10, the share of the "
        f"last 10 s some task waited for memory) is above [system] max_pressure {most:g}%"
    )


def pause_wait(reason: str) -> str:
    return reason or "the queue is paused"


def _over_budget(m: Machine, job: Queued) -> str:
    parts = []
    if job.cpu > m.cpu:
        parts.append(f"needs {cores(job.cpu)}, the budget is {cores(m.cpu)}")
    if job.mem > m.mem:
        parts.append(f"needs {size(job.mem)} of memory, the budget is {size(m.mem)}")
    return "; ".join(parts)


def oversized_wait(m: Machine, job: Queued, policy: str) -> str:
    return (
        f"this job is larger than the budget ({_over_budget(m, job)}) and [queue] oversized is "
        f'"{policy}": it will not start; give it a smaller claim, raise [budget], '
        'or set [queue] oversized = "run-when-idle"'
    )


def _never_claim(m: Machine, c) -> str:
    if m.kind(c.name) == LOCK:
        return f"it claims {c.count} units of lock {c.name}, which has one"
    if m.kind(c.name) != INDEXED:
        return f"it claims {c.count} {c.name} and the pool has {m.total(c.name)}"
    caps = m.caps(c.name)
    if c.size is None:
        return f"it claims {plural(c.count, 'whole ' + c.name + ' device')} and the pool has {len(caps)}"
    if c.count == 1:
        return f"it claims {size(c.size)} on one {c.name} device and the largest holds {size(max(caps))}"
    big = sum(1 for cap in caps if cap >= c.size)
    return (
        f"it claims {size(c.size)} on each of {c.count} {c.name} devices and "
        f"{big} of its {len(caps)} devices hold that much"
    )


def never_wait(m: Machine, claim: Claim) -> str:
    return f"this job can never start: {_never_claim(m, claim)}; give it a smaller claim or declare a larger [[pool]] {claim.name}"


def idle_own_wait(m: Machine, job: Queued, holders: tuple[Holder, ...]) -> str:
    return (
        f"this job is larger than the budget ({_over_budget(m, job)}) and runs alone when nothing "
        f"else holds capacity: waits for {own_jobs(holders)} to end"
    )


def idle_peer_wait(m: Machine, job: Queued, holders: tuple[Holder, ...], dims: tuple[str, ...]) -> str:
    return (
        f"{PEER_WORDS} ({peer_amounts(m, holders, dims)}): it is larger than the budget "
        f"({_over_budget(m, job)}) and runs alone when nothing else holds capacity"
    )


def dep_wait(dep: Dep, needed: bool) -> str:
    if needed:
        return f"waits for job {short(dep.id)} to complete: it needs it (now {dep.state})"
    return f"waits for job {short(dep.id)} to end: it runs after it (now {dep.state})"


def _state_words(state: str) -> str:
    return "no such job" if state == "missing" else state


def skipped(dep: Dep, root: str, root_dep: Dep | None) -> str:
    if root == dep.id:
        how = _state_words(dep.state)
    elif root_dep is not None and root_dep.state != "skipped":
        how = _state_words(root_dep.state)
    else:
        how = f"via {short(dep.id)}, skipped"
    return f"a job it needs did not succeed: {short(root)} ({how})"


_REMEDY = {
    "capacity": "give it a smaller claim, run it on a quieter machine, or give it a longer --max-queue-time",
    "dependency": "give it a --max-queue-time that covers the whole pipeline",
    "lock": "give it a --max-queue-time that covers the holder's run",
    "pause": "ask the person to resume it, or give it a longer --max-queue-time",
    "pressure": "give it a longer --max-queue-time, or raise [system] max_pressure",
}


def expired(cause: str, waited: str) -> str:
    what = f"last reason: {waited}" if waited else "capacity became free only after its limit"
    return f"it did not start within its --max-queue-time ({what}); {_REMEDY.get(cause, _REMEDY['capacity'])}"
