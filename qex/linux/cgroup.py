"""A memory cgroup per job: the true peak of its process tree and exact OOM attribution.

Where the machine allows it, the supervisor makes ``qex-<job id>-<attempt>`` INSIDE the
memory cgroup it runs in itself (never elsewhere: a job never leaves the
limits of the container, slice or test cgroup its caller lives under). The job
is born inside it: the supervisor (single-threaded) moves itself in just
before it spawns the job and back to its own cgroup right after (``join``,
``leave``), so every page of the job is counted there.

- cgroup v1, memory controller (needs the right to ``mkdir`` there: root, as on
  CI): peak from ``memory.max_usage_in_bytes``, OOM kills from the ``oom_kill``
  line of ``memory.oom_control`` (Linux 4.13+).
- cgroup v2 with a delegated subtree whose ``cgroup.subtree_control`` enables
  ``memory`` (v2 forbids enabling it in a cgroup that holds processes, so a
  shell's leaf scope cannot): peak from ``memory.peak`` (5.19+), OOM kills
  from the ``oom_kill`` line of ``memory.events``.

Anything else gives ``None``: on cgroup v2 under systemd the job's cgroup is then a
leaf of a systemd scope (``qex.linux.scope``, ``scope_candidate``); elsewhere the
supervisor samples the job's tree from /proc (``qex.linux.rss``) and takes the
machine's ``oom_kill`` counter. ``QEX_CGROUP=off`` forces that.

The path of a job's cgroup is written in its ``jobs/<id>/pid`` file, on the
supervisor's intent line before the spawn and on the job's pid line after it
(``note``), so that whoever finds the job ended without its supervisor
(reconcile) or removes its record (``qex clean``) can stop what is in it and
remove it. (Supervisors before this kept it in a file ``jobs/<id>/cgroup`` of
its own, made and removed per job; ``recorded`` still reads that.)
"""

from __future__ import annotations

import os
import time

from qex.linux.cgroup_where import here, mount_points
from qex.linux.whose import cgroup_job as job_of  # a job's cgroup name: its rule is qex.linux.whose's
from qex.linux.whose import cgroup_name as name_of

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.store.state import Store

SWEEP_UNKNOWN_AFTER = 60.0  # an empty qex-* cgroup of no job we know is removed after this


# ---- one job's cgroup ------------------------------------------------------------


class JobCgroup:
    """A memory cgroup made for one job (see the module doc)."""

    def __init__(self, kind: str, path: str, scoped: bool = False, home: str = ""):
        self.kind, self.path, self.home = kind, path, home or os.path.dirname(path)  # home: leave() goes there
        self.scoped = scoped  # in a systemd scope (qex.linux.scope): systemd makes and removes the scope

    @property
    def procs(self) -> str:
        return os.path.join(self.path, "cgroup.procs")

    def join(self) -> None:
        """The supervisor, just before it spawns the job: move this process in, so
        that the job is born inside. Raises OSError if it cannot: the job is then
        started without a cgroup (``qex.supervisor.memory.Meter.enter``)."""
        _move_here(self.kind, self.path)

    def leave(self) -> None:
        """The supervisor, right after the spawn: back to the cgroup it came from
        (the job's parent: ``create`` makes it inside ours; a scope's: its leaf). Raises OSError."""
        _move_here(self.kind, self.home)

    def members(self) -> list[int]:
        try:
            with open(self.procs) as fh:
                return [int(w) for w in fh.read().split()]
        except (OSError, ValueError):
            return []

    def peak(self) -> int | None:
        name = "memory.max_usage_in_bytes" if self.kind == "v1" else "memory.peak"
        try:
            with open(os.path.join(self.path, name)) as fh:
                return int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def oom_kills(self) -> int | None:
        """OOM kills of processes in this cgroup so far, or None if the kernel does not say."""
        name = "memory.oom_control" if self.kind == "v1" else "memory.events"
        return read_counter(os.path.join(self.path, name), "oom_kill")

    def remove(self) -> bool:
        return remove_dir(self.path)

    def kill(self) -> None:
        """SIGKILL every process in it (all of them the job's: see ``stop_and_remove``)."""
        _kill_all(self)


def _move_here(kind: str, path: str) -> None:
    """Move the calling thread into the cgroup at ``path`` (one write).

    On cgroup v1 it writes ``0`` (the writer) to ``tasks``: the kernel moves one
    thread, the caller, and for that takes no global lock (Linux 6.0+). A write to
    ``cgroup.procs`` moves a whole process and takes the global
    ``cgroup_threadgroup_rwsem``, whose first writer after a quiet while waits an
    RCU grace period: 8-20 ms measured here, against 0.3 ms for the thread's move.
    The supervisor is single-threaded, and a child is born in the cgroup of the
    thread that spawns it, so the job's whole tree is inside either way. cgroup v2
    moves threads only within a threaded subtree: there, ``cgroup.procs``."""
    if kind == "v1":
        target, what = os.path.join(path, "tasks"), b"0"
    else:
        target, what = os.path.join(path, "cgroup.procs"), str(os.getpid()).encode()
    fd = os.open(target, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, what)
    finally:
        os.close(fd)


def read_counter(path: str, key: str) -> int | None:
    """The value of ``key N`` in a flat-keyed file (memory.events, /proc/vmstat)."""
    try:
        with open(path, "rb") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) == 2 and parts[0] == key.encode():
                    return int(parts[1])
    except (OSError, ValueError):
        return None
    return None


def enclosing_limit(mem_total: int = 0) -> tuple[int, str] | None:
    """(bytes, directory) of the smallest memory limit on this process's memory cgroup
    or one above it (v1 ``memory.limit_in_bytes``, v2 ``memory.max``), when there is
    one below ``mem_total`` (the machine's memory; 0: any limit); None otherwise.
    What an OOM kill of a job that stayed within its claim ran into."""
    where = None if disabled() else here()
    if where is None:
        return None
    kind, path = where
    name = "memory.limit_in_bytes" if kind == "v1" else "memory.max"
    points = [p.rstrip("/") for p in mount_points()]
    best = None
    while True:
        try:
            with open(os.path.join(path, name), "rb") as fh:
                text = fh.read(64).strip()
            limit = None if text == b"max" else int(text)
        except (OSError, ValueError):
            limit = None
        if limit is not None and (not mem_total or limit < mem_total) and (best is None or limit < best[0]):
            best = (limit, path)
        if path.rstrip("/") in points or os.path.dirname(path) == path:
            return best
        path = os.path.dirname(path)


def machine_oom_kills() -> int | None:
    """The machine's count of OOM kills since boot (Linux 4.13+), or None."""
    return read_counter("/proc/vmstat", "oom_kill")


def disabled() -> bool:
    return os.environ.get("QEX_CGROUP", "").strip().lower() in ("off", "0", "no", "none")


def warm() -> None:
    """On cgroup v2, start the kernel's wait before the first cgroup move now, in a
    throwaway child.

    There the supervisor's move into the job's cgroup for the spawn
    (``JobCgroup.join``) moves a whole process, and the first such move after a
    quiet while costs an RCU grace period (the kernel's cgroup_threadgroup_rwsem
    leaves its fast mode): 10-30 ms, then ~10 us for the moves that follow. A
    submission calls this first: a child of it moves itself to the cgroup it is
    already in (a move that changes nothing, so it needs no right the job's own
    move does not need) and exits, while the submission does its work; by the
    time the supervisor moves, the wait is over or under way. The child closes
    every descriptor first: a caller reading the submission's output to its end
    never waits for it. Unreaped: a command exits before it would matter.

    On cgroup v1 it does nothing: the supervisor moves only its one thread
    there, which takes no global lock (``_move_here``)."""
    if disabled():
        return
    where = here()
    if where is None or where[0] != "v2":
        return
    procs = os.path.join(where[1], "cgroup.procs")
    if not os.access(procs, os.W_OK):
        return
    try:
        pid = os.fork()
    except OSError:
        return
    if pid == 0:
        code = 1
        try:
            os.closerange(0, 1 << 16)
            fd = os.open(procs, os.O_WRONLY | os.O_CLOEXEC)
            os.write(fd, b"0")  # 0: the writer itself
            code = 0
        except BaseException:
            pass
        os._exit(code)


def create(job_id: str, attempt: int = 1) -> tuple[JobCgroup | None, str]:
    """Make the cgroup of this attempt inside ours. Returns (cgroup, "") or (None, why not)."""
    if disabled():
        return None, "QEX_CGROUP=off"
    where = here()
    if where is None:
        return None, "no memory cgroup controller is mounted for this process"
    kind, parent = where
    path = os.path.join(parent, name_of(job_id, attempt))
    if kind == "v2" and not _v2_memory_delegated(parent):
        return None, (
            f"cgroup v2: {parent} does not enable the memory controller for its children (cgroup.subtree_control)"
        )
    try:
        os.mkdir(path)
    except OSError as exc:
        return None, f"cannot make {path}: {exc.strerror}"
    cg = JobCgroup(kind, path)
    if (kind, parent) not in _ACCOUNTED:  # the same for every cgroup made here: looked at once per process
        if cg.oom_kills() is None and cg.peak() is None:
            cg.remove()
            return None, f"{path} has no memory accounting files"
        _ACCOUNTED.add((kind, parent))
    return cg, ""


_ACCOUNTED: set = set()  # (kind, parent) whose cgroups have been seen to have accounting files


def describe() -> dict:
    """For ``qex info``, without making anything: would a job started from here
    get its own memory cgroup, and what would an OOM verdict rest on?"""
    where = None if disabled() else here()
    machine = machine_oom_kills() is not None
    fallback = "machine-counter" if machine else None
    if disabled():
        return {"per_job_cgroup": False, "why_not": "QEX_CGROUP=off", "oom_evidence": fallback}
    if where is None:
        return {"per_job_cgroup": False, "why_not": "no memory cgroup controller", "oom_evidence": fallback}
    kind, parent = where
    if kind == "v2" and not _v2_memory_delegated(parent):
        why = f"cgroup v2: {parent} does not delegate the memory controller to its children"
    elif not os.access(parent, os.W_OK):
        why = f"{parent} is not writable by this user"
    else:
        return {"per_job_cgroup": True, "kind": kind, "parent": parent, "oom_evidence": "cgroup"}
    return {"per_job_cgroup": False, "kind": kind, "parent": parent, "why_not": why, "oom_evidence": fallback}


def scope_candidate() -> bool:
    """Whether a systemd scope may be the job's cgroup (``qex.linux.scope``): cgroup v2 with
    per-job cgroups on, outside the root cgroup (there ``create`` makes them itself)."""
    where = None if disabled() else here()
    return (
        where is not None and where[0] == "v2" and where[1].rstrip("/") not in [p.rstrip("/") for p in mount_points()]
    )


def _v2_memory_delegated(parent: str) -> bool:
    try:
        with open(os.path.join(parent, "cgroup.subtree_control")) as fh:
            return "memory" in fh.read().split()
    except OSError:
        return False


def remove_dir(path: str, wait: float = 0.0) -> bool:
    """rmdir a cgroup (gone already counts as removed); retry up to ``wait`` seconds
    while processes are still leaving it."""
    deadline = time.monotonic() + wait
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)


# ---- the job directory's note, reconcile and clean -------------------------------


def note(cg: JobCgroup | None) -> str:
    """What the job's pid file says of its cgroup, after its pids (``recorded`` reads it)."""
    return "" if cg is None else f" {cg.kind} {cg.path}"


def recorded(job_dir: str, job_id: str) -> JobCgroup | None:
    """The cgroup the job's supervisor made, if its note is there and sane: on the
    line of the job's pid file (``- <pid> <start> <kind> <path>`` or ``<pid> <start>
    <kind> <path>``), or in the file ``cgroup`` an older supervisor wrote."""
    from qex.store import fs, layout

    try:
        kind, _, path = fs.read_bytes(os.path.join(job_dir, layout.CGROUP), 4096).decode().strip().partition(" ")
    except (OSError, UnicodeDecodeError):
        from qex.linux import pidfile

        noted = pidfile.cgroup_note(os.path.join(job_dir, layout.PID))
        if noted is None:
            return None
        kind, path = noted
    if kind not in ("v1", "v2") or job_of(os.path.basename(path)) != job_id:
        return None
    if not any(path.startswith(point.rstrip("/") + "/") for point in mount_points()):
        return None
    return JobCgroup(kind, path)


def forget(job_dir: str) -> None:
    from qex.store import layout

    try:
        os.unlink(os.path.join(job_dir, layout.CGROUP))
    except OSError:
        pass


def stop_and_remove(job_dir: str, job_id: str, kill: bool, wait: float = 0.0) -> bool:
    """Remove the job's cgroup (after SIGKILLing what is left in it when ``kill``, then
    waiting up to ``wait`` seconds for them to leave it).

    Every process in ``qex-<id>`` is provably the job's: the supervisor made the
    cgroup for it, and only the job and its descendants are in it.
    """
    cg = recorded(job_dir, job_id)
    if cg is None:
        return True
    if kill:
        _kill_all(cg)
    done = cg.remove() if not kill else remove_dir(cg.path, wait=wait)
    if done:
        forget(job_dir)
    return done


def _kill_all(cg: JobCgroup) -> None:
    kill_file = os.path.join(cg.path, "cgroup.kill")
    if cg.kind == "v2" and os.path.exists(kill_file):
        try:
            with open(kill_file, "w") as fh:
                fh.write("1")
            return
        except OSError:
            pass
    for pid in cg.members():
        try:
            os.kill(pid, 9)  # SIGKILL (the signal module costs a submission its enum import)
        except OSError:
            pass


def sweep(store: Store, active: set[str], now: float | None = None, known: set[str] = frozenset()) -> list[str]:
    """Remove the empty ``qex-<id>-<n>`` cgroups beside ours whose job is not running.

    Cheap by design: one listdir of our own memory cgroup, called only when a
    pass finds a lost supervisor and by ``qex clean``. A cgroup of a job this
    store knows is removed at once; one of an id it does not know (another
    state directory's, or a record cleaned before) only once it is older than
    a minute (so a job being started by another queue is never touched).
    rmdir removes only an empty cgroup, never one with a process in it.
    """
    where = None if disabled() else here()
    if where is None:
        return []
    parent = where[1]
    now = time.time() if now is None else now
    removed = []
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    for name in names:
        job_id = job_of(name)
        if job_id is None or job_id in active:
            continue
        path = os.path.join(parent, name)
        if job_id not in known and not os.path.isdir(store.job_dir(job_id)):
            try:
                if now - os.stat(path).st_ctime < SWEEP_UNKNOWN_AFTER:
                    continue
            except OSError:
                continue
        if remove_dir(path):
            removed.append(name)
            note = recorded(store.job_dir(job_id), job_id)
            if note is not None and note.path == path:
                forget(store.job_dir(job_id))
    return removed
