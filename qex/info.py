"""What `qex info` shows: the budget, what is held and by whom, the pools,
the peers, and one queue-health line. Gathered read-only (no record changes)."""

from qex.units import format_cores, format_size, safe_text


def gather(ctx) -> dict:
    from qex import admit as A
    from qex import engine, machine

    with ctx.store.lock():
        idx = ctx.store.load_index_locked()
        txn = engine.Txn(ctx.store, idx)
        snap = engine.snapshot(ctx, txn, __import__("time").time())
    plan = A.admit(snap)
    cpu_budget, mem_budget = ctx.budget()
    running = [(j, e) for j, e in idx.jobs.items() if e["state"] in ("starting", "running")]
    queued = [(j, e) for j, e in idx.jobs.items() if e["state"] == "queued"]
    mem = machine.meminfo()
    return {
        "machine": {"cores": ctx.cores, "mem_total": ctx.mem_total, "mem_available": mem.get("MemAvailable")},
        "budget": {"cpu": cpu_budget / 1000, "mem": mem_budget,
                   "cpu_above_machine": cpu_budget > ctx.cores * 1000, "mem_above_machine": mem_budget > ctx.mem_total,
                   "reserve_mem": ctx.config.reserve_mem, "mode": ctx.config.mode},
        "held": {"cpu": sum(e["cpu"] for _, e in running) / 1000, "mem": sum(e["mem"] for _, e in running),
                 "jobs": [{"id": j, "name": e["name"], "owner": e["owner"], "cpu": e["cpu"] / 1000, "mem": e["mem"],
                           "assigned": e["assigned"]} for j, e in sorted(running, key=lambda x: x[1]["seq"])]},
        "pools": [_pool(p, running, snap) for p in ctx.config.pools],
        "peers": [{"owner": p.owner, "cpu": p.cpu / 1000, "mem": p.mem, "units": dict(p.units),
                   "assigned": [[a.pool, list(a.devices), a.size] for a in p.assigned]} for p in snap.peers],
        "memory": _memory(),
        "queue": {"running": len(running), "queued": len(queued), "health": plan.health,
                  "state_dir": ctx.store.root},
        "pauses": _pauses(ctx, idx),
    }


def _pauses(ctx, idx) -> list[dict]:
    from qex import pause

    return pause.listing(ctx.store, idx.jobs, __import__("time").time())


def _memory() -> dict:
    from qex.supervisor import cgroup

    return cgroup.describe()


def _pool(pool, running, snap) -> dict:
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
    out.update(kind="indexed", env=pool.env,
               devices=[{"index": i, "capacity": cap, "free": max(0, cap - used[i])} for i, cap in enumerate(pool.devices)])
    return out


def render(info: dict) -> str:
    b, h, m = info["budget"], info["held"], info["machine"]
    lines = [
        f"machine   {m['cores']} cores, {format_size(m['mem_total'])} memory"
        + (f" ({format_size(m['mem_available'])} available)" if m.get("mem_available") is not None else ""),
        f"budget    {format_cores(round(b['cpu'] * 1000))} cores, {format_size(b['mem'])} "
        f"(mode {b['mode']}, reserve {format_size(b['reserve_mem'])})"
        + (" — above the machine, as written in the config" if b["cpu_above_machine"] or b["mem_above_machine"] else ""),
        f"held      {format_cores(round(h['cpu'] * 1000))} cores, {format_size(h['mem'])} by {len(h['jobs'])} job(s) of this queue",
    ]
    for j in h["jobs"]:
        lines.append(f"          {j['id'][:8]} {safe_text(j['name'], 30)}: {format_cores(round(j['cpu'] * 1000))} cores, "
                     f"{format_size(j['mem'])}")
    for p in info["pools"]:
        if p["kind"] == "plain":
            lines.append(f"pool      {safe_text(p['name'])}: {p['free']} of {p['total']} free")
        else:
            devs = ", ".join(f"{d['index']}: {format_size(d['free'])} of {format_size(d['capacity'])} free"
                             for d in p["devices"])
            lines.append(f"pool      {safe_text(p['name'])} ({p['env']}): {devs}")
        for holder in p["holders"]:
            lines.append(f"          held by {holder['id'][:8]} {safe_text(holder['name'], 30)}"
                         + (f" on {','.join(map(str, holder['devices']))}" if holder["devices"] else f" ({holder['count']})"))
    if info["peers"]:
        for p in info["peers"]:
            lines.append(f"peer      {safe_text(p['owner'])}: {format_cores(round(p['cpu'] * 1000))} cores, {format_size(p['mem'])}")
    else:
        lines.append("peers     none")
    mem = info.get("memory") or {}
    if mem.get("per_job_cgroup"):
        lines.append(f"memory    a cgroup per job ({mem['kind']}, inside {safe_text(mem['parent'], 120)}): "
                     "whole-tree peaks, exact OOM evidence")
    elif mem:
        lines.append(f"memory    no cgroup per job ({safe_text(mem.get('why_not', ''), 120)}): OOM evidence "
                     + ("from the machine's oom_kill counter" if mem.get("oom_evidence") else "unavailable"))
    q = info["queue"]
    lines.append(f"queue     {q['running']} running, {q['queued']} queued — {q['health']}")
    if info.get("pauses"):
        from qex.pause import render as pause_line

        now = __import__("time").time()
        lines += [f"pause     {pause_line(p, now)}" for p in info["pauses"]]
    return "\n".join(lines)
