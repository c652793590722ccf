"""qex pause and qex resume: parse, call ``qex.queue.pause`` under the lock, print.

The pause list (``qex pause`` alone) goes to stdout; what a command did goes
to stderr.
"""

from __future__ import annotations

import os
import time

from qex.base import say
from qex.base.errors import UsageError
from qex.base.states import HOLDING
from qex.cli.common import context, out, print_json
from qex.store import layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from argparse import Namespace

    from qex.config.context import Context

DRAIN_POLL, NUDGE_EVERY = 0.1, 1.0
MAX_REASON = 500


def cmd_pause(args: Namespace) -> int:
    ctx = context()
    if args.what is None:
        if args.name or args.reason is not None or args.duration is not None or args.drain:
            raise UsageError(
                "say what to pause: qex pause queue [...] or qex pause lock NAME [...]; "
                "qex pause alone shows the pauses"
            )
        return _show(ctx, args.json)
    kind, name = _target(args.what, args.name, "pause")
    secs = _for(args.duration)
    reason = _reason(args.reason)
    from qex.queue import engine, pause, pause_view

    if kind == "queue":
        pause.check_may_pause_queue(ctx)
    now = time.time()
    until = now + secs if secs is not None else None
    result = engine.run_pass(ctx, lambda txn: pause.pause_locked(ctx, txn, kind, name, reason, until, now))
    from qex.supervisor import become

    become.finish_pass(ctx, result)
    p, made = result.value
    jobs = _index_jobs(ctx)
    if args.json:
        item = next(
            (i for i in pause_view.listing(ctx.store, jobs, time.time()) if i["kind"] == kind and i["name"] == name),
            None,
        )
        print_json({"pause": item, "made": made})
    _tell_paused(ctx, p, made, jobs)
    if args.drain:
        return _drain(ctx, p)
    return 0


def cmd_resume(args: Namespace) -> int:
    from qex.queue import engine, pause, pause_view

    ctx = context()
    kind, name = _target(args.what or "queue", args.name, "resume")
    now = time.time()
    result = engine.run_pass(ctx, lambda txn: pause.resume_locked(ctx, txn, kind, name, now))
    from qex.supervisor import become

    become.finish_pass(ctx, result)
    p = result.value
    what = "the queue" if kind == "queue" else f"lock {name}"
    if p is None:
        others = [pause_view.render(i, now) for i in pause_view.listing(ctx.store, _index_jobs(ctx), now)]
        from qex.cli import print_error

        print_error(
            f"{what} is not paused; nothing to resume"
            + (f" (paused: {'; '.join(others)})" if others else " (nothing is paused)"),
            1,
            "not_paused",
            args.json,
        )
        return 1
    if args.json:  # qex schema resume
        print_json(
            {
                "kind": kind,
                "name": name,
                "paused_by": None if p.broken else p.user,
                "paused_secs": now - p.since if p.since else None,
            }
        )
        return 0
    from qex.base.units import format_duration, safe_text

    took = f" for {format_duration(now - p.since)}" if p.since else ""
    by = "" if p.broken else f" by {safe_text(p.user)}"
    say.notice(
        f"{what} is resumed (it was paused{by}{took})"
        + ("; queued jobs may start now" if kind == "queue" else "; a job may take it now")
    )
    return 0


# ---- reading the command line --------------------------------------------------


def _target(what: str, name, verb: str) -> tuple[str, str | None]:
    from qex.base.units import safe_text
    from qex.queue.pause import valid_name

    if what == "queue":
        if name is not None:
            raise UsageError(f"qex {verb} queue takes no name; to {verb} a lock: qex {verb} lock {safe_text(name, 60)}")
        return "queue", None
    if what == "lock":
        if name is None:
            raise UsageError(f"qex {verb} lock needs the name of the lock or pool, e.g. qex {verb} lock gpu0")
        if not valid_name(name):
            from qex.base.names import RULE

            raise UsageError(f"qex {verb} lock: {safe_text(name, 60)!r} is not a lock or pool name; {RULE}")
        return "lock", name
    raise UsageError(f"qex {verb}: {safe_text(what, 60)!r} is not something to {verb}; give queue or lock NAME")


def _for(text) -> float | None:
    if text is None:
        return None
    from qex.base.errors import SpecError
    from qex.base.units import parse_duration, safe_text

    try:
        secs = parse_duration(text, "--for")
    except SpecError as exc:
        raise UsageError(str(exc)) from None
    if secs <= 0:
        raise UsageError(
            f"--for: {safe_text(text, 60)!r} is not longer than zero: a pause for 0 would end before "
            "it began; give e.g. --for 30m, or no --for to pause until qex resume"
        )
    return secs


def _reason(text) -> str:
    if text is None:
        return ""
    if len(text) > MAX_REASON:
        raise UsageError(f"--reason: {len(text)} characters; at most {MAX_REASON}")
    return text


# ---- what happened ---------------------------------------------------------------


def _index_jobs(ctx: Context) -> dict:
    return ctx.store.read_index_jobs()


def _show(ctx: Context, as_json: bool) -> int:
    from qex.queue import pause_view

    now = time.time()
    items = pause_view.listing(ctx.store, _index_jobs(ctx), now)
    if as_json:
        print_json(items)
        return 0
    if not items:
        out("nothing is paused")
    for item in items:
        out(pause_view.render(item, now))
    return 0


def _tell_paused(ctx: Context, p, made: bool, jobs: dict) -> None:
    from qex.base.units import format_duration, safe_text
    from qex.queue import pause, pause_view

    now = time.time()
    if not made:
        item = next((i for i in pause_view.listing(ctx.store, jobs, now) if i["file"] == p.path), None)
        if item is None:  # ended (or resumed by another command) since we looked
            say.notice("already paused, and that pause has just ended; pause again to start a new one")
            return
        say.notice(
            f"already paused: {pause_view.render(item, now)}; that pause stays as it is (its end and its reason)"
        )
        return
    until = f" for {format_duration(p.until - p.since)}, until {pause.clock(p.until, now)}" if p.until else ""
    if p.kind == "queue":
        running = sum(1 for e in jobs.values() if e.get("state") in HOLDING)
        queued = sum(1 for e in jobs.values() if e.get("state") == "queued")
        say.notice(
            f"the queue is paused{until}: nothing new starts ({queued} queued); {running} running "
            "job(s) and their retries go on; qex resume queue ends it"
        )
        return
    name = safe_text(p.name)
    held = pause_view.holders(jobs, p.name)
    if held:
        say.notice(
            f"lock {name} is held by job {', '.join(j[:8] for j in held)}: it is yours as soon as that job "
            f"ends, and no job gets it meanwhile{until}; qex resume lock {name} gives it back"
        )
    else:
        say.notice(f"lock {name} is yours now{until}: no job gets it; qex resume lock {name} gives it back")


def _busy(jobs: dict, p) -> list[str]:
    from qex.queue import pause_view

    if p.kind == "lock":
        return pause_view.holders(jobs, p.name)
    return sorted(
        j
        for j, e in jobs.items()
        if e.get("state") in HOLDING or (e.get("state") == "queued" and e.get("attempt", 1) > 1)
    )


def _drain(ctx: Context, p) -> int:
    """Wait until nothing runs (a lock: until no job holds it). Ctrl-C stops the wait; the pause stays."""
    import signal

    what = "the queue" if p.kind == "queue" else f"lock {p.name}"
    old = signal.signal(signal.SIGTERM, _interrupt)
    announced, last_nudge = False, time.monotonic()
    try:
        while True:
            jobs = _index_jobs(ctx)
            busy = _busy(jobs, p)
            if not busy:
                break
            if not os.path.lexists(p.path) or not _still(ctx, p):
                say.notice(f"the pause of {what} ended before it drained")
                return 1
            if not announced:
                say.notice(
                    f"waiting for {len(busy)} job(s) to end: {', '.join(j[:8] for j in busy[:10])}"
                    + (" ..." if len(busy) > 10 else "")
                    + "; Ctrl-C stops waiting, the pause stays"
                )
                announced = True
            if time.monotonic() - last_nudge >= NUDGE_EVERY:
                last_nudge = time.monotonic()
                _nudge(ctx, busy)
            time.sleep(DRAIN_POLL)
    except KeyboardInterrupt:
        say.notice(f"stopped waiting; {what} stays paused")
        return 1
    finally:
        signal.signal(signal.SIGTERM, old)
    say.notice("drained: nothing runs" if p.kind == "queue" else f"drained: lock {p.name} is yours now")
    return 0


def _still(ctx: Context, p) -> bool:
    from qex.queue import pause

    now = time.time()
    return any(q.path == p.path and q.id == p.id for q in pause.in_force(ctx.store, now))


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _nudge(ctx: Context, busy: list[str]) -> None:
    """A job whose supervisor died holds nothing: a pass notices (no waker runs without queued work)."""
    from qex.queue import engine
    from qex.store.lock import is_held

    if any(not is_held(ctx.store.path(j, layout.ALIVE)) for j in busy):
        result = engine.run_pass(ctx)
        from qex.supervisor import become

        become.finish_pass(ctx, result)
