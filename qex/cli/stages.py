"""qex pipeline, qex rerun, and qex submit --each-line: several jobs, one handle.

stdout carries the group id (or the new job id) and nothing else; each job's
id and name go to stderr. ``--id-file`` gets one line per handle, ``ID NAME``,
the group first.
"""

from __future__ import annotations

from qex.base import say
from qex.cli.common import context, out, write_id_file

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from argparse import Namespace


def _report(group_id: str, group_name: str, jobs: list[tuple[str, str]], args) -> None:
    import sys

    if not getattr(args, "quiet", False) and not args.json:
        sys.stderr.write("".join(f"{job_id}  {name}\n" for name, job_id in jobs))
        sys.stderr.flush()
    if args.id_file:
        write_id_file(args.id_file, [f"{group_id} {group_name}"] + [f"{j} {n}" for n, j in jobs])


def cmd_pipeline(args: Namespace) -> int:
    from qex.jobs import pipeline

    ctx = context()
    group_id, name, jobs, result, built = pipeline.submit(ctx, args.file)
    _warn(built)
    from qex.supervisor import become

    become.finish_pass(ctx, result)
    _report(group_id, name, jobs, args)
    if args.json:
        _print_group(group_id, name, jobs)
        return 0
    if not args.quiet:
        say.notice(f"pipeline {name}: {len(jobs)} stage{'s' if len(jobs) != 1 else ''} queued as group {group_id[:8]}")
    out(group_id)
    return 0


def _print_group(group_id: str, name: str, jobs: list[tuple[str, str]]) -> None:
    """``qex schema group``: what pipeline --json and submit --each-line --json print."""
    from qex.cli.common import print_json

    print_json({"group": group_id, "name": name, "jobs": [{"id": j, "name": n} for n, j in jobs]})


def cmd_rerun(args: Namespace) -> int:
    from qex.base.errors import SpecError
    from qex.control import rerun
    from qex.jobs.resolve import resolve

    ctx = context()
    target = resolve(ctx.store, args.id)
    if target.is_group:
        from qex.jobs.groups import stage_names

        raise SpecError(
            f"{args.id} is a group; rerun takes one job: give one of its jobs "
            f"({stage_names(ctx.store, target.members)}), or submit the pipeline again"
        )
    new_id, result, warnings = rerun.submit(ctx, target.job)
    for warning in warnings:
        say.warning(warning)
    from qex.supervisor import become

    become.finish_pass(ctx, result)
    if args.id_file:
        write_id_file(args.id_file, [new_id])
    if args.json:
        from qex.cli.common import print_json

        print_json({"id": new_id, "rerun_of": target.job})
        return 0
    say.notice(f"rerun of {target.job[:8]}")
    out(new_id)
    return 0


def cmd_each_line(args: Namespace) -> int:
    """qex submit --each-line: validate every line, then queue every job in one lock hold."""
    from qex.jobs import fanout, groups
    from qex.jobs.options import request_from_args

    ctx = context()
    group_id, name, lines, built = fanout.prepare(ctx, args, request_from_args)
    _warn(built)
    ids, result = groups.submit(ctx, built, group_id, name, "each-line")
    from qex.supervisor import become

    become.finish_pass(ctx, result, leaving=True)  # (--wait is refused here)
    jobs = [(b.record.name, b.spec.id) for b in built]
    _report(group_id, name, jobs, args)
    if args.json:
        _print_group(group_id, name, jobs)
        return 0
    skipped = []
    if lines.empty:
        skipped.append(f"{lines.empty} empty line{'s' if lines.empty != 1 else ''}")
    if lines.comments:
        skipped.append(f"{lines.comments} comment line{'s' if lines.comments != 1 else ''}")
    say.notice(
        f"{len(built)} job{'s' if len(built) != 1 else ''} queued as group {name} ({group_id[:8]})"
        + (f"; {' and '.join(skipped)} gave no job" if skipped else "")
    )
    if not args.quiet:
        out(group_id)
    return 0


def _warn(built) -> None:
    seen = []
    for b in built:
        for warning in b.warnings:
            if warning not in seen:
                seen.append(warning)
    for warning in seen:
        say.warning(warning)
