"""The admission pass: lock -> load -> reconcile -> admit -> commit -> launch.

Every command that changes the queue, every supervisor at the end of its job,
and the waker run ``run_pass``. The lock is held for the load, the decisions
and the writes only; supervisors are forked after it is released.
"""

import os
import stat
import time

from qex.base.errors import QexError
from qex.store import fs
from qex.store.lock import hold, is_held
from qex.store.records import FINAL, HOLDING
from qex.store.state import Index, Store, live_reason

_CRASH = "QEX_CRASH_AT" in os.environ  # crash points for tests (qex.base.faults); off in normal use


class Context:
    """What one process knows while it works on one state directory.

    Plain classes here and below: the submit path imports this module, and
    building attrs classes at import costs every command milliseconds."""

    __slots__ = ("store", "config", "uid", "user", "cores", "mem_total")

    def __init__(self, store: Store, config, uid: int, user: str, cores: int, mem_total: int):
        self.store, self.config, self.uid, self.user = store, config, uid, user
        self.cores, self.mem_total = cores, mem_total

    @classmethod
    def load(cls, config=None) -> "Context":
        from qex.base import machine
        from qex.base import paths
        from qex.config.file import load_config

        store = Store(paths.state_dir())
        store.ensure()
        try:
            store.repair_after_reboot()  # (a reader without the lock reads repaired records too)
        except QexError:
            pass  # a command that only reads still answers; the next pass that can write repairs
        return cls(store=store, config=config or load_config(), uid=os.getuid(),
                   user=paths.user_name(), cores=machine.cores(), mem_total=machine.mem_total())

    def reload_config(self) -> None:
        """Read the config again; a config broken meanwhile keeps the one in force."""
        from qex.config.file import load_config
        from qex.base.errors import QexError

        try:
            self.config = load_config()
        except QexError as exc:
            import sys

            print(f"qex: keeping the config in force: {exc}", file=sys.stderr)

    def budget(self) -> tuple[int, int]:
        return self.config.resolve_budget(self.cores, self.mem_total)


class Launch:
    """A job this process admitted and must start: its liveness lock is held.
    ``peer_fd``: this job's liveness lock in the peer directory (qex.users.peers)."""

    __slots__ = ("job_id", "alive_fd", "peer_fd", "peer_lock", "fresh", "follows", "attempt", "spec", "meter")

    def __init__(self, job_id: str, alive_fd: int, peer_fd: int = -1, peer_lock: str | None = None):
        self.job_id, self.alive_fd, self.peer_fd, self.peer_lock = job_id, alive_fd, peer_fd, peer_lock
        self.fresh = False  # admitted by a pass just before (qex.supervisor.run._start reads it without the lock)
        self.follows = False  # admitted by the pass of the supervisor whose job just ended, which starts it
        self.attempt = 1  # the attempt the pass starts
        self.spec = self.meter = None  # read and made before the commit's byte (qex.supervisor.run.prepare_early)

    def __repr__(self) -> str:
        return f"Launch({self.job_id!r}, alive_fd={self.alive_fd}, peer_fd={self.peer_fd})"


class Txn:
    """The changes of one lock hold, applied to the index as they are made."""

    def __init__(self, store: Store, idx: Index):
        self.store, self.idx = store, idx
        self.next_deadline: float | None = None  # the plan's earliest --max-queue-time deadline
        self.records: dict[str, dict] = {}
        self.changes: list[tuple[dict, str | None, str]] = []
        self.windowed = False  # decided by the head of the queue: the index file is not saved (_admit_head)
        # (fd, name) of the peer lock of a supervisor whose job this hold ends: the first job of
        # its user that this hold starts is that supervisor's next job and keeps it (apply_plan)
        self.peer_reuse: tuple[int, str] | None = None
        self.settle_first = False  # the commit waits for this process's background syncs (specs, job dirs)

    def record(self, job_id: str) -> dict:
        rec = self.records.get(job_id)
        if rec is None:
            entry = self.idx.jobs.get(job_id)
            kept = self.idx.records.get(job_id)  # this process's last commit wrote it, and nobody's since
            try:
                rec = dict(kept) if kept is not None else self.store.read_status_dict(job_id)
            except QexError:
                if entry is None:
                    raise
                rec = self._rebuilt(job_id, entry)
            if entry is not None and rec.get("state") == "queued" and entry.get("reason") is not None:
                rec = live_reason(rec, entry)  # the words of the last pass (see set_reason_locked)
            self.records[job_id] = rec
        return rec

    def _rebuilt(self, job_id: str, entry: dict) -> dict:
        """A damaged status.json of an active job, rebuilt from its index entry and spec.

        One damaged file must never stop the pass that would record another
        job's end or start the next one; the job itself goes on.
        """
        from qex.store.records import status_defaults

        try:
            spec = self.store.read_spec(job_id)
            command, cwd = list(spec.command), spec.cwd
        except QexError:
            command, cwd = [], ""
        pools = {k: {"count": c, "size": z} for k, (c, z) in entry["pools"].items()}
        return {**status_defaults(), "id": job_id, "seq": entry["seq"], "state": entry["state"],
                "name": entry["name"], "owner": entry["owner"], "uid": entry["uid"], "command": command,
                "cwd": cwd, "group": entry.get("group"), "group_name": entry.get("group_name"),
                "priority": entry["priority"], "submitted_at": entry.get("submitted_at", 0.0),
                "claims": {"cpu": entry["cpu"] / 1000, "mem": entry["mem"], "pools": pools},
                "assigned": [{"pool": p, "devices": d, "size": z} for p, d, z in entry["assigned"]],
                "needs": entry["needs"], "after": entry["after"], "dedupe_key": entry.get("dedupe_key"),
                "pid": entry.get("pid"), "supervisor_pid": entry.get("supervisor_pid"),
                "error": "its status.json was damaged; qex rebuilt it from the queue's index"}

    def put(self, rec: dict, previous: str | None, change: str = "state") -> None:
        self.records[rec["id"]] = rec
        self.changes.append((rec, previous, change))
        self.store._index_put(self.idx, rec)

    def update(self, job_id: str, change: str = "state", **fields) -> dict:
        old = self.record(job_id)
        rec = {**old, **fields}
        self.put(rec, old["state"], change)
        return rec

    def commit(self, save_index: bool = True, applied=None) -> list[dict]:
        if self.settle_first:
            fs.settle()  # what the journal will point at is durable first (qex.jobs.submit.submit_many)
        return self.store.commit_locked(self.idx, self.changes, False if self.windowed else save_index, applied)



class PassResult:
    """What a pass decided that the caller acts on after the lock is released."""

    __slots__ = ("value", "launches", "queued_mine", "running_mine", "next_deadline")

    def __init__(self, value=None, launches=None, queued_mine: bool = False, running_mine: bool = False,
                 next_deadline: float | None = None):
        self.value, self.launches = value, launches if launches is not None else []
        self.queued_mine, self.running_mine, self.next_deadline = queued_mine, running_mine, next_deadline


def run_pass(ctx: Context, mutate=None, save_index=True, early=None) -> PassResult:
    """One pass; ``mutate(txn)`` makes the command's own change in the same hold.
    ``save_index``: see ``Store.commit_locked`` (a supervisor's pass saves it lazily).
    ``early``: None, or ``leaving`` as ``after_pass`` takes it: the supervisors of
    what the pass admits are then forked before its commit (``_fork_early``)."""
    with ctx.store.lock() as held:
        idx = ctx.store.load_index_locked(save_replayed=False)  # the commit saves it
        txn = Txn(ctx.store, idx)
        value = mutate(txn) if mutate is not None else None
        from qex.users import peers

        with peers.admission(ctx, any(e["state"] == "queued" for e in idx.jobs.values())) as turn:
            from qex.store.state import LAZY

            # A supervisor's pass may decide by the head of the queue, unless its
            # commit is to save the index file (which must have every job's words).
            launches = admit_locked(ctx, txn, window=save_index == LAZY and not idx.save_due())
            from qex.hooks.markers import mark_locked

            mark_locked(ctx, txn)  # before the commit: a job final on disk always has its marker
            gate = -1
            if early is not None and launches:
                gate = _fork_early(ctx, launches, (held.fd, -1 if turn.fd is None else turn.fd), early)
                launches = []
            try:
                # the gate opens once the commit is durable, before the index file is saved
                txn.commit(save_index, applied=(lambda: _open_gate(gate)) if gate >= 0 else None)
            finally:
                _close_quietly(gate)  # without its byte (the commit failed): they leave, nothing started
            holding = _publish_locked(ctx, idx)
    jobs, uid = idx.jobs, ctx.uid
    if holding is not None:  # (a kept view: no walk of a long queue)
        queued_mine = any(jobs[q.id]["uid"] == uid for q in idx.view.jobs)
        running_mine = any(jobs[j]["uid"] == uid for j in holding)
    else:
        mine = [e["state"] for e in jobs.values() if e["uid"] == uid]
        queued_mine, running_mine = "queued" in mine, any(s in HOLDING for s in mine)
    return PassResult(value, launches, queued_mine, running_mine, txn.next_deadline)


def _publish_locked(ctx: Context, idx: Index):
    """Tell the other queues what this user's jobs hold now (qex.users.peers); a
    failure never fails the pass (qex info says it). Returns the ids of the
    index's starting and running jobs when the index has a queue view (a
    supervisor's, kept across its passes), else None."""
    from qex.users import peers

    holding = None
    if idx.view is not None:
        from qex.queue import queueview

        holding = sorted(queueview.view_of(idx, _queued_of).holding)
    try:
        peers.publish_locked(ctx, idx, holding)
    except Exception:  # a hostile or broken peer directory must never stop this queue
        pass
    return holding


def _fork_early(ctx: Context, launches: list[Launch], locks: tuple[int, int], leaving: bool) -> int:
    """Fork the supervisors of a pass before its commit, under the lock; return the
    write end of their gate.

    A supervisor imports its code while the commit waits for its fsyncs, then
    reads the gate: one byte once the commit is written, or nothing (end of
    file) when the pass failed or died before. Only after the byte does it go on
    to start its job; without it, it leaves, and its liveness lock with it (a job
    the journal has as 'starting' is requeued by the next pass). It closes its
    copies of the state and admission locks (``locks``) at once, so that it
    never holds them after the passing process lets them go.
    """
    import qex.supervisor.run  # noqa: F401 (here, not in the child: a just-forked process imports it
    #                            in ~2.4 ms, every page it touches a copy, against ~0.7 ms here)
    read_end, gate = os.pipe2(os.O_CLOEXEC)
    try:
        child = launch_all(ctx, launches, (*locks, gate), leaving)
    except BaseException:
        os.close(read_end)
        os.close(gate)
        raise
    if child is None:
        os.close(read_end)
        return gate
    try:
        if _CRASH:
            fs._hit("engine.early_gate")
        from qex.supervisor.run import main_loop, prepare_early

        prepare_early(ctx, child)  # while the commit waits for its fsyncs
        if os.read(read_end, 1) != b"g":
            if child.meter is not None:
                child.meter.discard()  # (the cgroup it made for a job that never starts)
            os._exit(0)
        os.close(read_end)
    except BaseException:
        os._exit(70)
    main_loop(ctx, child)  # never returns: it ends in os._exit
    os._exit(70)


def _open_gate(gate: int) -> None:
    """Committed: the supervisors ``_fork_early`` forked may start their jobs. One that
    died meanwhile (EPIPE when none is left to read) started nothing: its job, left
    'starting' with no liveness lock, is requeued by the next pass (the waker's, at
    the latest), and this command still answers with the id it committed."""
    try:
        os.write(gate, b"g")
    except OSError:
        pass


def after_pass(ctx: Context, result: PassResult, close_in_child=(), leaving: bool = False) -> Launch | None:
    """Fork the supervisors of a pass and make sure a waker exists if work waits.
    ``leaving``: the caller exits as soon as it has answered (see ``launch_all``).

    Returns a Launch only in a forked supervisor process (the caller must then
    become that supervisor and never return up its stack).
    """
    child = launch_all(ctx, result.launches, close_in_child, leaving)
    if child is not None:
        return child
    from qex.hooks.markers import start_pending

    start_pending(ctx, close_in_child)  # after the launches: a hook never holds the queue
    if result.queued_mine or result.running_mine:
        from qex.queue import waker

        return waker.ensure(ctx, close_in_child, result.next_deadline)
    return None


# ---- reconcile: one rule per case -------------------------------------------

def reconcile_locked(ctx: Context, txn: Txn, now: float) -> None:
    """Jobs whose supervisor is gone: requeue what never ran, fail what did."""
    lost = False
    idx = txn.idx
    if idx.view is not None:  # (kept by a supervisor: no walk of a long queue)
        from qex.queue import queueview

        holding = sorted(queueview.view_of(idx, _queued_of).holding)
    else:
        holding = [job_id for job_id, entry in idx.jobs.items() if entry["state"] in HOLDING]
    for job_id in holding:
        entry = idx.jobs[job_id]
        alive = ctx.store.path(job_id, "alive.lock")
        try:
            if is_held(alive):
                continue
        except OSError:
            continue  # cannot look (another user's private directory): assume alive
        pid_path = ctx.store.path(job_id, "pid")
        launched = _read_pid_file(pid_path)
        if _runs_out_of_reach(ctx, job_id, entry, launched):
            continue  # another user's job still runs: only its owner's pass can stop it
        lost = True
        try:
            rec = txn.record(job_id)
        except Exception:
            txn.idx.drop(job_id)
            continue
        if rec["state"] in FINAL:
            txn.store._index_put(txn.idx, rec)
            continue
        intent = _spawn_intent(pid_path) if launched is None else None
        # A pid file that says neither (empty, or cut short): its supervisor was killed
        # while it wrote it (each write truncates it first), around the spawn. The
        # job may have run: it is never started again.
        spawning = intent is not None or (launched is None and os.path.lexists(pid_path))
        if launched is None and entry["state"] == "starting" and not spawning:
            _release_cgroup(ctx, job_id)
            txn.update(job_id, state="queued", assigned=[], forced=False,
                       blocked_reason="requeued: the qex process that was starting it died before it ran")
            continue
        stopped = "the job's processes were stopped"
        if spawning and not _has_cgroup(ctx, job_id):  # no pid, no cgroup: nothing to stop it by
            stopped = "it may have started, and if it did it was not stopped (it had no memory cgroup)"
        _stop_orphan(launched)
        _release_cgroup(ctx, job_id)  # with only an intent, the job's cgroup is all that holds it
        attempt = rec.get("attempt", 1)
        error = (f"its supervisor (pid {rec.get('supervisor_pid') or intent or '?'}) was lost; "
                 f"{stopped} and the result is unknown")
        attempts = list(rec.get("attempts") or []) + [{
            "number": attempt, "state": "failed", "claims": rec.get("claims"),
            "started_at": rec.get("started_at"), "ended_at": now, "error": error}]
        txn.update(job_id, state="failed", ended_at=now, error=error, attempts=attempts, supervisor_lost=True)
    if lost:
        _sweep_cgroups(ctx, txn)


def _release_cgroup(ctx: Context, job_id: str) -> None:
    """Stop what is left in a lost job's memory cgroup and remove it (qex.linux.cgroup)."""
    from qex.linux import cgroup

    try:
        cgroup.stop_and_remove(ctx.store.job_dir(job_id), job_id, kill=True)
    except OSError:
        pass


def _has_cgroup(ctx: Context, job_id: str) -> bool:
    from qex.linux import cgroup

    return cgroup.recorded(ctx.store.job_dir(job_id), job_id) is not None


def _sweep_cgroups(ctx: Context, txn: Txn) -> None:
    """Empty job cgroups whose job is not running (only when a supervisor was lost: cheap)."""
    from qex.linux import cgroup

    try:
        cgroup.sweep(ctx.store, {j for j, e in txn.idx.jobs.items() if e["state"] in HOLDING})
    except OSError:
        pass


def _runs_out_of_reach(ctx: Context, job_id: str, entry: dict, launched) -> bool:
    """Another user's job (a shared directory) whose processes provably still run: its
    pid line names it, or its cgroup (named on the intent line of a job in one, before
    its pid line is written) still has members."""
    if ctx.uid == 0 or entry.get("uid") in (None, ctx.uid):
        return False
    if launched is None:
        from qex.linux import cgroup

        cg = cgroup.recorded(ctx.store.job_dir(job_id), job_id)
        return cg is not None and bool(cg.members())
    from qex.base.machine import process_start_time

    pid, start = launched
    return start is not None and process_start_time(pid) == start


def _read_pid_file(path: str) -> tuple[int, int | None] | None:
    try:
        parts = fs.read_bytes(path, 64).split()
        return int(parts[0]), (int(parts[1]) if len(parts) > 1 else None)
    except (OSError, ValueError, IndexError):
        return None


def _spawn_intent(path: str) -> int | None:
    """The pid of the supervisor that wrote ``- <its pid> <its start>`` in the job's pid
    file just before it spawned the job (qex.supervisor.run._spawn): the job may have run.
    None: no such line."""
    try:
        parts = fs.read_bytes(path, 64).split()
        return int(parts[1]) if parts[0] == b"-" else None
    except (OSError, ValueError, IndexError):
        return None


def _stop_orphan(launched) -> None:
    """SIGKILL the job's process group, but only if its leader is provably the job."""
    if launched is None:
        return
    from qex.base.machine import process_start_time

    pid, start = launched
    if start is not None and process_start_time(pid) == start:
        import _signal as signal

        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


# ---- admission ---------------------------------------------------------------

def admit_locked(ctx: Context, txn: Txn, window: bool = False) -> list[Launch]:
    """Admit, and apply the plan. ``window``: the pass may decide by the head of
    the queue (``_admit_head``), leaving the reason words of the jobs past it as
    they are; its commit must then not save the index file (``Txn.windowed``)."""
    from qex import admit as A

    from qex.queue import pause

    now = time.time()
    reconcile_locked(ctx, txn, now)
    pause.settle_locked(ctx, txn, now)
    launches = []
    for _ in range(8):  # an expiry or a skip settles its dependents in the same hold
        if not any(e["state"] == "queued" for e in txn.idx.jobs.values()):
            break
        plan = _admit_head(ctx, txn, now) if window else None
        window = False  # (what an expiry or a skip settles is decided on the whole queue)
        if plan is None:
            plan = A.admit(snapshot(ctx, txn, now))
        launches += apply_plan(ctx, txn, plan, now)
        txn.next_deadline = plan.next_deadline
        if not (plan.expire or plan.skip):
            break
    return launches


# A queued job's admission view, kept while its index entry is the same object: a
# process that keeps its committed index (Store._cache) builds only what changed, so
# a pass behind a long queue does not rebuild a thousand views per job start. An
# entry is never changed in place but for its reason words, which the view lacks.
_QUEUED_MEMO: dict = {}


def _queued_of(job_id: str, e: dict):
    """A queued job's admission view (kept while its entry is the same object)."""
    known = _QUEUED_MEMO.get(job_id)
    if known is not None and known[0] is e:
        return known[1]
    from qex import admit as A

    claims = tuple(A.Claim(name, c, s) for name, (c, s) in sorted(e["pools"].items()))
    q = A.Queued(job_id, e["seq"], e["priority"], e["cpu"], e["mem"], claims,
                 tuple(e["needs"]), tuple(e["after"]), e["deadline"],
                 e["passed_by"], e["name"], e.get("attempt", 1) > 1)
    _QUEUED_MEMO[job_id] = (e, q)
    return q


def _running_of(job_id: str, e: dict):
    from qex import admit as A

    claims = tuple(A.Claim(name, c, s) for name, (c, s) in sorted(e["pools"].items()))
    assigned = tuple(A.DeviceUse(p, tuple(d), s) for p, d, s in e["assigned"])
    return A.Running(job_id, e["cpu"], e["mem"], claims, assigned)


def snapshot(ctx: Context, txn: Txn, now: float, part=None):
    """What ``admit`` decides on: every queued job of the index, or ``part``:
    (the queued jobs to decide, the ids of the jobs starting or running) from
    the queue's view (``_admit_head``)."""
    from qex import admit as A
    from qex.users import peers
    from qex.queue import pause

    cpu_budget, mem_budget = ctx.budget()
    running, queued, dep_ids = [], [], set()
    memo = _QUEUED_MEMO
    if len(memo) > 2 * len(txn.idx.jobs) + 256:
        memo.clear()  # jobs long gone
    if part is not None:
        queued, holding = part
        jobs = txn.idx.jobs
        running = [_running_of(job_id, jobs[job_id]) for job_id in holding]
        for q in queued:
            if q.needs or q.after:
                dep_ids.update(q.needs, q.after)
    else:
        for job_id, e in txn.idx.jobs.items():
            state = e["state"]
            if state == "queued":
                known = memo.get(job_id)  # (``_queued_of`` inlined: this loop runs for every job)
                q = known[1] if known is not None and known[0] is e else _queued_of(job_id, e)
                queued.append(q)
                if q.needs or q.after:
                    dep_ids.update(q.needs, q.after)
            elif state in HOLDING:
                running.append(_running_of(job_id, e))
    from qex.base import machine

    avail = machine.meminfo().get("MemAvailable")
    deps = [_dep(txn, d) for d in sorted(dep_ids)]
    roots = sorted({d.root for d in deps if d.root and d.root not in dep_ids})
    deps += [_dep(txn, r) for r in roots]  # the first failed job of a chain, for the words
    return A.Snapshot(
        now=now, cpu_budget=cpu_budget, mem_budget=mem_budget,
        mem_available=None if avail is None else avail - ctx.config.reserve_mem,
        oversized=ctx.config.oversized, max_bypass=ctx.config.max_bypass,
        pools=tuple(A.PoolSpec(p.name, p.count, tuple(p.devices)) for p in ctx.config.pools),
        running=tuple(running), peers=tuple(peers.holdings(ctx)), queued=tuple(queued),
        deps=tuple(deps), pause=pause.current(ctx, now))


HEAD = 4  # the queued jobs a windowed pass decides one by one (the drain's front and the few behind it)


def _admit_head(ctx: Context, txn: Txn, now: float):
    """The plan of a pass decided by the head of a long queue (``qex.admit.window``),
    or None (decide on the whole queue).

    The head, and the first job of each shape past it, are admitted; when that
    says every later job waits as the first of its shape does, and each of them
    already names that holder (no event is due), the later jobs are left as they
    are: only their reason words would change (other jobs hold the cores now),
    and those are written by the next pass that saves the index file, which
    decides on the whole queue (``run_pass``)."""
    from qex.queue import queueview
    from qex.admit import order_key
    from qex.admit.window import admit_head

    view = queueview.view_of(txn.idx, _queued_of)
    part = view.head(HEAD)
    if part is None:
        return None
    head, reps, tail = part
    snap = snapshot(ctx, txn, now, (head + sorted(reps.values(), key=order_key), sorted(view.holding)))
    got = admit_head(snap, {sh: q.id for sh, q in reps.items()})
    if got is None:
        return None
    plan, waits = got
    if not view.tail_holds(head, tail, {sh: w.holder for sh, w in waits.items()}):
        return None
    txn.windowed = True
    return plan


def _dep(txn: Txn, job_id: str):
    from qex import admit as A

    entry = txn.idx.jobs.get(job_id)
    if entry is not None:
        return A.Dep(job_id, entry["state"])
    try:
        rec = txn.record(job_id)
    except Exception:
        return A.Dep(job_id, "missing")
    return A.Dep(job_id, rec.get("state", "missing"), rec.get("skipped_root"))


def apply_plan(ctx: Context, txn: Txn, plan, now: float) -> list[Launch]:
    launches = []
    for start in plan.start:
        entry = txn.idx.jobs[start.id]
        if entry["uid"] != ctx.uid:
            _set_reasons(txn, [(start.id, "admitted: its owner's qex starts it (capacity reserved)", "reserved")],
                         now)
            continue
        try:
            fd = hold(ctx.store.path(start.id, "alive.lock"))
        except FileNotFoundError:  # its directory was removed by hand: it is no job any more
            txn.idx.drop(start.id)
            ctx.store.save_index_locked(txn.idx)
            continue
        if fd is None:
            continue
        if txn.peer_reuse is not None:  # the next job of the supervisor that runs this pass
            (peer_fd, peer_lock), txn.peer_reuse = txn.peer_reuse, None
        else:
            from qex.users import peers

            peer_fd, peer_lock = peers.hold_job_lock(ctx, start.id)
        assigned = [{"pool": a.pool, "devices": list(a.devices), "size": a.size} for a in start.assigned]
        started = txn.update(start.id, state="starting", assigned=assigned, forced=start.forced,
                             blocked_reason=None, blocked_holder=None, blocked_since=None, peer_lock=peer_lock)
        launch = Launch(start.id, fd, peer_fd, peer_lock)
        launch.attempt = started.get("attempt", 1)
        launches.append(launch)
    _set_reasons(txn, [(wait.id, wait.reason, wait.holder) for wait in plan.wait], now)
    for skip in plan.skip:
        txn.update(skip.id, state="skipped", ended_at=now, error=skip.reason,
                   skipped_root=skip.root, blocked_reason=None, blocked_holder=None)
    for exp in plan.expire:
        txn.update(exp.id, state="expired", ended_at=now, error=exp.reason,
                   blocked_reason=None, blocked_holder=None)
    for job_id, n in plan.passed:
        if job_id in txn.idx.jobs and txn.idx.jobs[job_id]["state"] == "queued":
            rec = txn.record(job_id)
            txn.update(job_id, change="reason", passed_by=rec.get("passed_by", 0) + n)
    return launches


def _set_reasons(txn: Txn, waits, now: float) -> None:
    """Give each waiting job (id, reason words, holder) its reason.

    A new kind of wait (another holder: capacity, a dependency, a pause, a peer...)
    is a change of the record, journaled like any other. New words for the same
    kind (other jobs hold the cores now, other amounts free) change only the
    job's index entry: behind a full budget every start would otherwise rewrite
    and journal the record of every waiting job. Readers take the words from
    the index (``live_reason``; ``Store.read_live``).
    """
    jobs, records, words_only = txn.idx.jobs, txn.records, False
    for job_id, reason, holder in waits:  # (a loop in one frame: behind a long queue it runs for every job)
        entry = jobs.get(job_id)
        if entry is None:
            continue
        old = entry.get("reason")
        if entry.get("holder") == holder:
            if old == reason:
                continue
            if old is not None and job_id not in records:
                entry["reason"] = reason  # no event, no record: only the index file changes
                words_only = True
                continue
        rec = txn.record(job_id)
        since = rec.get("blocked_since") if rec.get("blocked_reason") else None
        txn.update(job_id, change="reason", blocked_reason=reason, blocked_holder=holder,
                   blocked_since=since or now)
    if words_only:
        txn.idx.unsaved = True


# ---- forking supervisors ------------------------------------------------------

def launch_all(ctx: Context, launches: list[Launch], close_in_child=(), leaving: bool = False) -> Launch | None:
    """Fork one supervisor per launch, in a session of its own.

    A double fork, so that no supervisor is the child of a process that lives on
    (a supervisor that starts other jobs, a waker, a command that waits): its
    end would leave a zombie there. ``leaving``: the caller exits as soon as it
    has answered (``qex submit`` without ``--wait``), so its supervisors are
    orphaned at once, as a double fork's are; a single fork then spares the
    second fork's copy of the process, 1-2 ms before the job's first instruction.

    In the parent: returns None once every supervisor is forked, and closes
    the liveness descriptors (each child keeps its own). In a supervisor:
    returns its Launch, and the caller becomes the supervisor from a flat loop
    (never from inside this stack, which would grow with every job).
    """
    try:
        if launches:
            fs.settle(frees=True)  # a supervisor starts its job on the strength of a durable commit
            import qex.supervisor.run  # noqa: F401 (imported once here, not in each just-forked child: _fork_early)
        forking = launches
    except QexError:
        forking = []  # not durable: their jobs, left 'starting' with no pid file, are requeued by the next pass
    for i, launch in enumerate(forking):
        if _CRASH:
            fs._hit("engine.before_fork")
        try:
            pid = os.fork()
        except OSError:
            break  # the job stays 'starting' with no pid: the next pass requeues it
        if pid == 0:
            try:
                os.setsid()
                if not leaving and os.fork() != 0:
                    os._exit(0)
                for other in launches:
                    if other is not launch:
                        os.close(other.alive_fd)
                        _close_quietly(other.peer_fd)
                for fd in close_in_child:
                    _close_quietly(fd)
                detach_stdio(ctx.store.path(launch.job_id, "supervisor.log"))
                launch.fresh = True  # admitted by the pass just before this fork (qex.supervisor.run._start)
                return launch
            except BaseException:
                os._exit(70)
        _reap_later(pid)
    for launch in launches:
        _close_quietly(launch.alive_fd)
        _close_quietly(launch.peer_fd)
    return None


def detach_stdio(log_path: str | None, signals: bool = True) -> None:
    """Leave the caller's terminal and pipes: stdin from /dev/null, output to a log.
    ``signals=False``: keep the signal handlers (a supervisor moving on to its next job)."""
    import _signal as signal  # the C module: signal.py builds enums, ~3 ms in a just-forked supervisor

    null = os.open(os.devnull, os.O_RDWR)
    out = null
    if log_path:
        try:
            out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
            st = os.fstat(out)
            if st.st_uid != os.getuid() or st.st_nlink != 1 or not stat.S_ISREG(st.st_mode):
                os.close(out)  # another user's file (a shared directory): never write into it
                out = null
        except OSError:
            out = null
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    for fd in {null, out}:
        if fd > 2:
            os.close(fd)
    if not signals:
        return
    signal.set_wakeup_fd(-1)  # a supervisor's wake-up pipe is not this process's
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


_UNREAPED: list[int] = []


def _reap_later(pid: int) -> None:
    """The first child of a double fork (it forks and exits at once): reaped later,
    not waited for. Waiting for it cost a submission a few milliseconds per fork
    (a supervisor, a waker); a command exits before it would matter, and a
    supervisor or a waker reaps its earlier ones at each new fork."""
    still = []
    for old in _UNREAPED:
        try:
            done, _ = os.waitpid(old, os.WNOHANG)
        except ChildProcessError:
            continue
        except InterruptedError:
            done = 0
        if not done:
            still.append(old)
    _UNREAPED[:] = still + [pid]


def _close_quietly(fd: int) -> None:
    if fd < 0:
        return
    try:
        os.close(fd)
    except OSError:
        pass

