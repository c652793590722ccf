"""A submission's Request from the options given: ``qex submit``'s parsed command line
(``qex.cli.submit``) and ``qex.submit``'s keywords (``qex.api``) alike.

``options`` has the attributes of the parsed command line (argparse's ``dest`` of
each option of ``qex submit``: ``argv``, ``cpu``, ``claim``, ``tag``, ``needs`` ...);
the values are then checked by ``qex.jobs.submit.build``, once, for both callers.
"""

from __future__ import annotations

from qex.jobs.request import Request

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from argparse import Namespace
    from types import SimpleNamespace

    from qex.config.context import Context

# (field of Request, option's attribute): the options copied as they are given
SCALARS = (
    ("cpu", "cpu"),
    ("mem", "mem"),
    ("gpu", "gpu"),
    ("vram", "vram"),
    ("name", "name"),
    ("priority", "priority"),
    ("timeout", "timeout"),
    ("max_queue_time", "max_queue_time"),
    ("retries", "retries"),
    ("oom_retries", "oom_retries"),
    ("cwd", "cwd"),
    ("nice", "nice"),
    ("io_class", "io_class"),
    ("oom_score_adj", "oom_score_adj"),
    ("env_capture", "env_capture"),
    ("dedupe_key", "dedupe_key"),
    ("dedupe_window", "dedupe_window"),
    ("stdin", "stdin"),
)


def command_after_dashes(argv: list[str]) -> list[str]:
    return argv[1:] if argv[:1] == ["--"] else argv


def request_from_args(args: Namespace | SimpleNamespace, ctx: Context) -> Request:
    """A Request from the options, on top of a job file when ``job`` is given."""

    req = Request(command=command_after_dashes(args.argv))
    if getattr(args, "job", None):
        _apply_job_file(req, args.job)
    for field_name, option in SCALARS:
        value = getattr(args, option, None)
        if value is not None:
            setattr(req, field_name, value)
    if command_after_dashes(args.argv):
        req.command = command_after_dashes(args.argv)
    req.claims += args.claim
    req.locks += args.lock
    req.tags += args.tag
    req.env += args.env
    req.needs += _split_ids(args.needs)
    req.after += _split_ids(args.after)
    if req.needs or req.after:
        from qex.jobs.resolve import resolve_dependencies

        req.needs = resolve_dependencies(ctx, req.needs, "--needs")
        req.after = resolve_dependencies(ctx, req.after, "--after")
    return req


def _split_ids(values: list[str]) -> list[str]:
    return [w for v in values for w in v.split(",") if w.strip()]


def _apply_job_file(req, path: str) -> None:
    from qex.jobs import jobfile

    jobfile.apply_to(req, jobfile.load(path), path)
