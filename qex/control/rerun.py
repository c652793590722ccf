"""qex rerun ID: the same job again, under a new id.

"The same" is the job's spec as it was queued: its command, its working
directory and its environment (from spec.json, never from the shell that
types the rerun), and the user's own words for everything else (claims,
timeout, tags, dependencies, ...), checked again as a new submission would
be. Never the old dedupe key (a rerun is asked for on purpose), never the old
group (the group is the handle of what was submitted together).
"""

from __future__ import annotations

from qex.base.errors import SpecError

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.jobs.submit import Request
    from qex.queue.context import PassResult
    from qex.store.records import NewSpec

DROPPED = ("dedupe_key", "dedupe_window", "group", "group_name", "rerun_of")


def request_of(ctx: Context, job_id: str) -> tuple[Request, NewSpec]:
    """The Request that repeats job ``job_id``."""
    import os

    from qex.control.actions import check_owner
    from qex.jobs.submit import Request
    from qex.store import layout

    rec = ctx.store.read_status_dict(job_id)
    check_owner(ctx, rec, "rerun")
    spec = ctx.store.read_spec(job_id)
    known = set(Request.field_names())
    words = {k: v for k, v in (spec.request or {}).items() if k in known and k not in DROPPED}
    req = Request(**{**words, "command": list(spec.command)})
    req.cwd = spec.cwd
    for option in ("needs", "after"):
        for dep in getattr(req, option):
            if not os.path.exists(ctx.store.path(dep, layout.STATUS)):
                raise SpecError(f"cannot rerun {job_id[:8]}: the job it {'needs' if option == 'needs' else 'runs after'}"
                                f", {dep[:8]}, no longer exists (cleaned); submit it again with qex submit")
    req.rerun_of = job_id
    return req, spec


def submit(ctx: Context, job_id: str) -> tuple[str, PassResult, list[str]]:
    """Queue the rerun; returns (new id, PassResult, warnings)."""
    from qex.jobs.submit import build, submit_many

    req, old = request_of(ctx, job_id)
    built = build(ctx, req)
    built.spec.env = dict(old.env)          # the environment it ran with, not the caller's
    built.spec.nice, built.spec.hints = old.nice, old.hints
    ids, result = submit_many(ctx, [built])
    return ids[0], result, built.warnings
