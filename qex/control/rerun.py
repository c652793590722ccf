"""qex rerun ID: the same job again, under a new id.

"The same" is the job's spec as it was queued: its command, its working
directory and its environment (from spec.json, never from the shell that
types the rerun), and the user's own words for everything else (claims,
timeout, tags, dependencies, ...), checked again as a new submission would
be, with a copy of what it read from its directory to run (a Python call's
``call.pickle``: ``layout.RUN_FILES``) and its input again. Never the old
dedupe key (a rerun is asked for on purpose), never the old group (the group
is the handle of what was submitted together).
"""

from __future__ import annotations

from qex.base.errors import SpecError

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.jobs.request import Request
    from qex.queue.context import PassResult
    from qex.store.records import Spec

DROPPED = ("dedupe_key", "dedupe_window", "group", "group_name", "rerun_of")


def request_of(ctx: Context, job_id: str) -> tuple[Request, Spec]:
    """The Request that repeats job ``job_id``."""
    import os

    from qex.control.actions import check_owner
    from qex.jobs.request import Request
    from qex.store import layout

    rec = ctx.store.read_status(job_id)
    check_owner(ctx, rec.id, rec.uid, rec.owner, "rerun")
    spec = ctx.store.read_spec(job_id)
    known = set(Request.field_names())
    words = {k: v for k, v in (spec.request or {}).items() if k in known and k not in DROPPED}
    req = Request(**{**words, "command": list(spec.command)})
    req.cwd = spec.cwd
    for option in ("needs", "after"):
        for dep in getattr(req, option):
            if not os.path.exists(ctx.store.path(dep, layout.STATUS)):
                raise SpecError(
                    f"cannot rerun {job_id[:8]}: the job it {'needs' if option == 'needs' else 'runs after'}"
                    f", {dep[:8]}, no longer exists (cleaned); submit it again with qex submit"
                )
    req.rerun_of = job_id
    return req, spec


def submit(ctx: Context, job_id: str) -> tuple[str, PassResult, list[str]]:
    """Queue the rerun; returns (new id, PassResult, warnings)."""
    from qex.jobs.submit import build, submit_many

    req, old = request_of(ctx, job_id)
    built = build(ctx, req)
    built.spec.env = dict(old.env)  # the environment it ran with, not the caller's
    built.spec.hints = old.hints  # (its niceness and the rest: the words it was asked with, as a new submission)
    steps = [step for step in (_files_again(ctx, job_id), _input_again(ctx, job_id, req.stdin)) if step]
    ids, result = submit_many(ctx, [built], prepare=lambda job_dir: [step(job_dir) for step in steps])
    return ids[0], result, built.warnings


def _files_again(ctx: Context, job_id: str):
    """A copy of what the job read from its directory to run (``layout.RUN_FILES``: a
    Python call's ``call.pickle``), those it has."""
    import os

    from qex.store import layout

    found = [name for name in layout.RUN_FILES if os.path.exists(ctx.store.path(job_id, name))]
    if not found:
        return None

    def prepare(job_dir: str) -> None:
        for name in found:
            source = ctx.store.path(job_id, name)
            try:
                with open(source, "rb") as fh:
                    data = fh.read()
            except OSError as exc:
                raise SpecError(
                    f"cannot rerun {job_id[:8]}: its {name} ({source}) cannot be read: {exc.strerror}"
                ) from None
            fd = os.open(
                os.path.join(job_dir, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
            )
            with open(fd, "wb") as out:
                out.write(data)

    return prepare


def _input_again(ctx: Context, job_id: str, stdin: str | None):
    """The same input: ``--stdin FILE`` that file again, ``--stdin -`` the copy the
    job was given (a ``qex run``'s own stdin was never kept: /dev/null)."""
    if stdin is None:
        return None
    import os

    from qex.store import layout
    from qex.supervisor import pipes

    if stdin != "-":
        return lambda job_dir: pipes.give_input(job_dir, stdin)
    copy = ctx.store.path(job_id, layout.STDIN)

    def prepare(job_dir: str) -> None:
        try:
            fd = os.open(copy, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise SpecError(
                f"cannot rerun {job_id[:8]}: the copy of its stdin ({copy}) cannot be read: {exc.strerror}"
            ) from None
        try:
            with open(fd, "rb", closefd=False) as stream:
                pipes.give_input(job_dir, "-", stream)
        finally:
            os.close(fd)

    return prepare
