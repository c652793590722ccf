"""What `qex info` shows: the budget, what is held and by whom, the pools,
the peers, one queue-health line, the pauses, and the stop hook in force and
whose it is. Gathered read-only (no record changes)."""

from __future__ import annotations

import os

from qex.base.states import HOLDING
from qex.base.units import format_cores, format_duration, format_size, safe_text

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.admit import Snapshot
    from qex.config.context import Context
    from qex.config.keys import PoolDef
    from qex.store.index import Index


def gather(ctx: Context) -> dict:
    import time

    from qex.base import machine
    from qex.users import peer_scan, shared

    with ctx.store.lock():
        idx = ctx.store.load_index_locked()
        health, since, snap = decide(ctx, idx, time.time())
    scan = peer_scan.scan(ctx)
    cpu_budget, mem_budget = ctx.budget()
    running = [(j, e) for j, e in idx.jobs.items() if e["state"] in HOLDING]
    queued = [(j, e) for j, e in idx.jobs.items() if e["state"] == "queued"]
    mem = machine.meminfo()
    return {
        "machine": {"cores": ctx.cores, "mem_total": ctx.mem_total, "mem_available": mem.get("MemAvailable")},
        "budget": _budget(ctx, cpu_budget, mem_budget),
        "defaults": _defaults(ctx, cpu_budget, mem_budget),
        "held": _held(running),
        "pools": [pool_use(p, running, snap) for p in ctx.config.pools],
        "peers": [_peer(p) for p in snap.peers],
        "peer_dir": _peer_dir(ctx, scan),
        "memory": _memory(),
        "queue": {
            "running": len(running),
            "queued": len(queued),
            "health": health,
            "since": since,
            "state_dir": ctx.store.root,
            "sharing": shared.describe(ctx.store),
        },
        "pauses": _pauses(ctx, idx),
        "shared": shared.members_summary(ctx.store),
        "hooks": _hooks(ctx),
        "manners": {
            "nice": ctx.config.nice,
            "io_class": ctx.config.io_class,
            "oom_score_adj": ctx.config.oom_score_adj,
        },
        "pressure": _pressure(ctx),
        "damaged": damaged(ctx, idx),
    }


def _budget(ctx: Context, cpu_budget: int, mem_budget: int) -> dict:
    """The budget (cores, bytes), whether the config sets it above the machine, the reserve and the mode."""
    return {
        "cpu": cpu_budget / 1000,
        "mem": mem_budget,
        "cpu_above_machine": cpu_budget > ctx.cores * 1000,
        "mem_above_machine": mem_budget > ctx.mem_total,
        "reserve_mem": ctx.reserve(),
        "mode": ctx.config.mode,
    }


def _held(running: list[tuple[str, dict]]) -> dict:
    """What this queue's holding jobs (``running``: (id, entry)) hold in all, and each of them in start order."""
    return {
        "cpu": sum(e["cpu"] for _, e in running) / 1000,
        "mem": sum(e["mem"] for _, e in running),
        "jobs": [
            {
                "id": j,
                "name": e["name"],
                "owner": e["owner"],
                "cpu": e["cpu"] / 1000,
                "mem": e["mem"],
                "assigned": e["assigned"],
            }
            for j, e in sorted(running, key=lambda x: x[1]["seq"])
        ],
    }


def _peer(p) -> dict:
    """One other queue as the snapshot counts it (``snap.peers``): what it claims and the devices it holds."""
    return {
        "owner": p.owner,
        "cpu": p.cpu / 1000,
        "mem": p.mem,
        "units": dict(p.units),
        "assigned": [[a.pool, list(a.devices), a.size] for a in p.assigned],
    }


def _peer_dir(ctx: Context, scan) -> dict:
    """The peer directory as ``scan`` read it: its problems, what each record holds, the files ignored and why."""
    from qex.users import peer_publish

    return {
        "path": scan.dir,
        "problem": scan.problem,
        "note": scan.note,
        "publish_problem": peer_publish.publish_check(ctx),
        "records": [
            {
                "file": p.file,
                "owner": p.owner,
                "state_dir": p.state_dir,
                "format": p.format,
                "cpu": p.cpu / 1000,
                "mem": p.mem,
                "units": dict(p.units),
                "assigned": [[u[0], list(u[1]), u[2]] for u in p.assigned],
                "jobs": p.jobs,
                "stale_jobs": p.stale_jobs,
            }
            for p in scan.peers
        ],
        "ignored": [{"file": i.file, "reason": i.reason} for i in scan.ignored],
    }


def decide(ctx: Context, idx: Index, now: float) -> tuple[str, float | None, Snapshot]:
    """The queue's health line, since when it has held, and the snapshot it was decided on,
    as a pass would decide now; nothing is written. ``idx``: the index loaded under the
    lock (``qex info``), or a reader's copy read without it (``qex top``: ``qex.queue.look``)."""
    from qex import admit as A
    from qex.queue import engine
    from qex.queue.txn import Txn

    txn = Txn(ctx.store, idx)
    snap = engine.snapshot(ctx, txn, now)
    plan = A.admit(snap)
    return plan.health, _health_since(txn, plan, idx), snap


def _pressure(ctx: Context) -> dict:
    """The machine's memory pressure now (PSI some avg10, a percentage; None where the
    kernel gives none) and ``[system] max_pressure`` (None: off)."""
    from qex.base import machine

    try:
        now = machine.memory_pressure()
    except (OSError, ValueError):
        now = None
    return {"some_avg10": now, "max": ctx.config.max_pressure}


def _hooks(ctx: Context) -> dict | None:
    """The stop hook in force and whose it is: the config file it came from,
    that file's owner, and the user it runs as; None when there is none."""
    from qex.config import trust

    config = ctx.config
    if not config.hook_on_stop:
        return None
    return {
        "on_stop": list(config.hook_on_stop),
        "states": list(config.hook_states),
        "timeout": config.hook_timeout,
        "config": config.path,
        "owner": trust.owner_name(config.path),
        "run_as": ctx.user,
    }


def damaged(ctx: Context, idx: Index) -> list[dict]:
    """The records a pass cannot use, each with the sentence that names its file: the jobs
    it leaves out (neither their index entry nor their record can be used: ``idx.damaged``),
    and the active jobs whose status.json fails its check (a pass goes on with their index
    entry, and writes their record again from it when it changes the job)."""
    from qex.base.errors import BrokenRecord, QexError
    from qex.store import layout

    found = dict(idx.damaged)
    for job_id in idx.jobs:
        try:
            ctx.store.read_status_data(job_id)  # (checked: what a reader would meet)
        except BrokenRecord as exc:
            found[job_id] = str(exc)
        except QexError:
            pass
    return [
        {"id": job_id, "file": ctx.store.path(job_id, layout.STATUS), "problem": why}
        for job_id, why in sorted(found.items())
    ]


def _pauses(ctx: Context, idx) -> list[dict]:
    from qex.queue import pause_view

    return pause_view.listing(ctx.store, idx.jobs, __import__("time").time())


def _health_since(txn, plan, idx) -> float | None:
    """Since when the health line has held: the blocked_since of the job it is
    about (the front or stuck job), else the start of the longest-running job."""
    about = next((w.id for w in plan.wait if w.holder in ("own", "device", "peer", "outside", "oversized")), None)
    if about is None and plan.wait:
        about = plan.wait[0].id
    if about is not None:
        try:
            return txn.record(about).blocked_since
        except Exception:
            return None
    starts = []
    for job_id, e in idx.jobs.items():
        if e["state"] in HOLDING:
            try:
                starts.append(txn.record(job_id).started_at)
            except Exception:
                pass
    starts = [t for t in starts if t]
    return min(starts) if starts else None


def _memory() -> dict:
    from qex.linux import cgroup

    found = cgroup.describe()
    if found.get("per_job_cgroup") or not cgroup.scope_candidate():
        return _sampled(found)
    from qex.linux import scope

    return _sampled(scope.describe(found))


def _sampled(found: dict) -> dict:
    """Without a cgroup per job: peaks sampled from /proc (qex.linux.rss), and how to get one."""
    if not found.get("per_job_cgroup"):
        from qex.linux.rss import EVERY

        found["peak_from"], found["sample_period"] = "proc-sample", EVERY
        if "remedy" not in found and found.get("kind") == "v2":
            from qex.linux import scope

            found["remedy"] = scope.remedy(os.geteuid() == 0)
    return found


WHOLE = 4096  # (safe_text's bound for the memory line: a path or a reason is printed whole)


def _memory_lines(mem: dict) -> list[str]:
    """How each job's memory is measured (whole words: a path is never cut, ``WHOLE``)."""
    if mem.get("per_job_cgroup") and mem.get("kind") == "systemd-scope":
        return [
            f"memory    a systemd scope per job (the {mem['manager']} manager, qex-<id>-<attempt>.scope "
            f"in {safe_text(mem['parent'], WHOLE)}): whole-tree peaks, exact OOM evidence"
        ]
    if mem.get("per_job_cgroup"):
        return [
            f"memory    a cgroup per job ({mem['kind']}, inside {safe_text(mem['parent'], WHOLE)}): "
            "whole-tree peaks, exact OOM evidence"
        ]
    if not mem:
        return []
    lines = [
        f"memory    no cgroup per job ({safe_text(mem.get('why_not', ''), WHOLE)}): whole-tree peaks sampled from "
        f"/proc every {mem.get('sample_period', 0):g}s, OOM evidence "
        + ("from the machine's oom_kill counter" if mem.get("oom_evidence") else "unavailable")
    ]
    if mem.get("remedy"):
        lines.append(f"          for one: {safe_text(mem['remedy'], WHOLE)}")
    return lines


def pool_use(pool: PoolDef, running: list[tuple[str, dict]], snap: Snapshot) -> dict:
    """A pool of the config: who holds what of it (``running``: this queue's (id, entry) that
    hold; ``snap.peers``: the other queues), and what is free (each device of an indexed pool)."""
    holders = []
    for job_id, e in running:
        for name, (count, size) in e["pools"].items():
            if name == pool.name:
                devices = next((a[1] for a in e["assigned"] if a[0] == name), [])
                holders.append({"id": job_id, "name": e["name"], "count": count, "size": size, "devices": devices})
    out = {"name": pool.name, "holders": holders}
    if pool.count is not None:
        used = sum(h["count"] for h in holders) + sum(dict(p.units).get(pool.name, 0) for p in snap.peers)
        out.update(kind="plain", total=pool.count, free=pool.count - used)
        return out
    used = [0] * len(pool.devices)
    for job_id, e in running:
        for name, devs, size in e["assigned"]:
            if name == pool.name:
                for d in devs:
                    if d < len(used):
                        used[d] += size if size is not None else pool.devices[d]
    for p in snap.peers:
        for a in p.assigned:
            if a.pool == pool.name:
                for d in a.devices:
                    if d < len(used):
                        used[d] += a.size if a.size is not None else pool.devices[d]
    out.update(
        kind="indexed",
        env=", ".join(pool.variables),
        devices=[{"index": i, "capacity": cap, "free": max(0, cap - used[i])} for i, cap in enumerate(pool.devices)],
    )
    return out


def _defaults(ctx: Context, cpu_budget: int, mem_budget: int) -> dict:
    """What a job that claims nothing claims, and how many such jobs the budget runs at once."""
    cpu = ctx.config.default_cpu_millicores(ctx.cores, ctx.mem_total)
    mem = ctx.config.default_mem_bytes(ctx.cores, ctx.mem_total)
    fit = min(cpu_budget // cpu if cpu > 0 else 0, mem_budget // mem if mem > 0 else cpu_budget // max(cpu, 1))
    return {"cpu": cpu / 1000, "mem": mem, "fit": int(fit)}


def render(info: dict) -> str:
    b, h, m = info["budget"], info["held"], info["machine"]
    lines = [
        f"machine   {m['cores']} cores, {format_size(m['mem_total'])} memory"
        + (f" ({format_size(m['mem_available'])} available)" if m.get("mem_available") is not None else ""),
        f"budget    {format_cores(round(b['cpu'] * 1000))} cores, {format_size(b['mem'])} "
        f"(mode {b['mode']}, reserve {format_size(b['reserve_mem'])})"
        + (
            " — above the machine, as written in the config" if b["cpu_above_machine"] or b["mem_above_machine"] else ""
        ),
        f"held      {format_cores(round(h['cpu'] * 1000))} cores, {format_size(h['mem'])} by {len(h['jobs'])} job(s) of this queue",
    ]
    d = info.get("defaults")
    if d:
        lines.insert(
            2,
            f"defaults  {format_cores(round(d['cpu'] * 1000))} cores, {format_size(d['mem'])} for a job "
            f"that claims none ([defaults] cpu, mem; memory: or what qex learned): {d['fit']} such "
            "job(s) at once in the budget",
        )
    for j in h["jobs"]:
        lines.append(
            f"          {j['id'][:8]} {safe_text(j['name'], 30)}: {format_cores(round(j['cpu'] * 1000))} cores, "
            f"{format_size(j['mem'])}"
        )
    lines.extend(_pool_lines(info["pools"]))
    lines.extend(_peer_lines(info))
    if info.get("hooks"):
        lines.append(_hook_line(info["hooks"]))
    lines.extend(_manner_lines(info))
    mem = info.get("memory") or {}
    lines.extend(_memory_lines(mem))
    q = info["queue"]
    if q.get("sharing"):
        lines.append(f"state     {safe_text(q['state_dir'], 300)}: {q['sharing']}")
    lines.extend(_member_lines(info.get("shared")))
    since = ""
    if q.get("since"):
        import time

        since = (
            f", since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(q['since']))} "
            f"({format_duration(max(0.0, time.time() - q['since']))} ago)"
        )
    lines.append(f"queue     {q['running']} running, {q['queued']} queued — {q['health']}{since}")
    if info.get("pauses"):
        from qex.queue.pause_view import render as pause_line

        now = __import__("time").time()
        lines += [f"pause     {pause_line(p, now)}" for p in info["pauses"]]
    from qex.base.text import plain

    lines += [f"damaged   {plain(d['problem'] or d['file'], 600)}" for d in info.get("damaged") or ()]
    return "\n".join(lines)


def _pool_lines(pools: list[dict]) -> list[str]:
    """Each pool (what is free of it, per device where it has devices), then the jobs that hold it."""
    lines = []
    for p in pools:
        if p["kind"] == "plain":
            lines.append(f"pool      {safe_text(p['name'])}: {p['free']} of {p['total']} free")
        else:
            devs = ", ".join(
                f"{d['index']}: {format_size(d['free'])} of {format_size(d['capacity'])} free" for d in p["devices"]
            )
            lines.append(f"pool      {safe_text(p['name'])} ({p['env']}): {devs}")
        for holder in p["holders"]:
            lines.append(
                f"          held by {holder['id'][:8]} {safe_text(holder['name'], 30)}"
                + (f" on {','.join(map(str, holder['devices']))}" if holder["devices"] else f" ({holder['count']})")
            )
    return lines


def _manner_lines(info: dict) -> list[str]:
    """Every job's manners ([politeness]) and the memory pressure ([system] max_pressure)."""
    from qex.linux.manners import words

    lines, m, p = [], info.get("manners"), info.get("pressure") or {}
    if m:
        lines.append(
            f"manners   every job: {words(m['nice'], m['io_class'], m['oom_score_adj'])} ([politeness]; "
            "a job's --nice, --io-class, --oom-score-adj win)"
        )
    if p.get("max") is not None or p.get("some_avg10") is not None:
        now = "unknown" if p.get("some_avg10") is None else f"{p['some_avg10']:g}%"
        limit = "off" if p.get("max") is None else f"{p['max']:g}%"
        lines.append(f"pressure  memory {now} (PSI some avg10); no job starts above [system] max_pressure: {limit}")
    return lines


def _hook_line(h: dict) -> str:
    command = " ".join(safe_text(a, 120) for a in h["on_stop"])
    return (
        f'hooks     on_stop "{safe_text(command, 200)}" from {safe_text(h["config"], 200)} '
        f"(owner {safe_text(h['owner'] or '?')}), run as you ({safe_text(h['run_as'])})"
    )


def _amounts(p: dict) -> str:
    parts = [f"{format_cores(round(p['cpu'] * 1000))} cores", format_size(p["mem"])]
    parts += [f"{n} {safe_text(name)}" for name, n in sorted(p.get("units", {}).items())]
    for pool, devs, size in p.get("assigned", []):
        where = f"{safe_text(pool)} {','.join(str(d) for d in devs)}"
        parts.append(where if size is None else f"{format_size(size)} on {where}")
    return ", ".join(parts)


def _peer_lines(info: dict) -> list[str]:
    """The peers (what each holds), then the records not counted, each with its reason."""
    d = info["peer_dir"]
    lines = []
    for p in d["records"]:
        jobs = f"{p['jobs']} job{'s' if p['jobs'] != 1 else ''}"
        stale = f" (and {p['stale_jobs']} whose lock nobody holds: not counted)" if p["stale_jobs"] else ""
        lines.append(
            f"peer      {safe_text(p['owner'])} ({safe_text(p['state_dir'], 120)}): {_amounts(p)} held by {jobs}{stale}"
        )
    if not d["records"]:
        lines.append(f"peers     none (peer directory {safe_text(d['path'], 200)})")
    for problem in (d["problem"], d["publish_problem"]):
        if problem:
            lines.append(f"peers     problem: {problem}")
    if d["note"]:
        lines.append(f"peers     note: {d['note']}")
    for i in d["ignored"]:
        lines.append(f"ignored   {safe_text(i['file'], 80)}: {i['reason']}")
    return lines


def _member_lines(shared: dict | None) -> list[str]:
    """The other members of a shared directory, and what of it was passed by."""
    if not shared:
        return []
    lines = []
    for m in shared["members"]:
        words = f"{m['queued']} queued, {m['running']} running"
        if m["queued"]:
            words += (
                "; a qex of theirs is running"
                if m["qex_running"]
                else "; no qex of theirs is running: their queued jobs hold nothing"
            )
        lines.append(f"member    {safe_text(m['user'], 40)}: {words}")
    lines += [f"ignored   {safe_text(why, 300)}" for why in shared["ignored"]]
    return lines
