"""qex kill, cancel, clean."""

from __future__ import annotations

from qex.base import say
from qex.cli.common import context, out

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from argparse import Namespace

    from qex.config.context import Context


def cmd_kill(args: Namespace) -> int:
    from qex.control.actions import KILL, stop_jobs

    ctx = context()
    job_ids, in_group = _chosen(ctx, args, KILL)
    answer = stop_jobs(ctx, job_ids, KILL, wait=True)
    report = _Report(args)
    for job_id in job_ids:
        what = answer.get(job_id, "")
        if what.startswith("ended:"):
            report.add(
                job_id,
                "ended",
                what[6:],
                None if job_id in in_group else f"{job_id[:8]} has already ended ({what[6:]}); nothing to kill",
            )
        elif what == "signalled":
            report.add(job_id, "signalled", "running", None)
            report.note(f"{job_id[:8]} was signalled but has not ended yet")
        else:  # (a queued job leaves the queue: cancelled)
            report.add(job_id, "cancelled" if what == "cancelled" else "stopped", what, None)
            report.line(f"{job_id}  {what}")
    return report.finish()


def cmd_cancel(args: Namespace) -> int:
    from qex.control.actions import CANCEL, stop_jobs

    ctx = context()
    job_ids, in_group = _chosen(ctx, args, CANCEL)
    answer = stop_jobs(ctx, job_ids, CANCEL)
    report = _Report(args)
    for job_id in job_ids:
        what = answer[job_id]
        if what == "cancelled":
            report.add(job_id, "cancelled", "cancelled", None)
            report.line(f"{job_id}  cancelled")
        elif what == "running":
            if job_id in in_group:  # a group: its queued jobs are what cancel takes out
                report.add(job_id, "running", "running", None)
                report.note(f"{job_id[:8]} is running and goes on; qex kill stops it")
            else:
                report.add(job_id, "running", "running", f"{job_id[:8]} is already running; use qex kill {job_id[:8]}")
        else:  # a group's ended jobs are no fault
            report.add(
                job_id,
                "ended",
                what[6:],
                None if job_id in in_group else f"{job_id[:8]} has already ended ({what[6:]}); nothing to cancel",
            )
    return report.finish()


class _Report:
    """What kill and cancel did, job by job: lines on stdout and sentences on stderr, or
    under ``--json`` one object on stdout (``qex schema kill``) and, when a job named on
    the command line could not be stopped, the error object on stderr (exit 1 either way);
    a note (a job signalled that has not ended, a running job cancel leaves) is a message
    on stderr either way (``qex.base.say``)."""

    def __init__(self, args):
        self.json, self.jobs, self.faults = args.json, [], []

    def add(self, job_id: str, result: str, state: str | None, fault: str | None) -> None:
        self.jobs.append({"id": job_id, "result": result, "state": state})
        if fault is not None:
            self.faults.append((result, fault))
            if not self.json:  # (--json: the faults are one error object, at the end)
                say.notice(fault)

    def note(self, sentence: str) -> None:
        say.notice(sentence)  # (--json: a message object, qex.base.say)

    def line(self, text: str) -> None:
        if not self.json:
            out(text)

    def finish(self) -> int:
        if not self.json:
            return 1 if self.faults else 0
        from qex.cli import print_error
        from qex.cli.common import print_json

        print_json({"jobs": self.jobs})
        if self.faults:
            print_error("; ".join(f for _, f in self.faults), 1, self.faults[0][0], True)
        return 1 if self.faults else 0


def _chosen(ctx: Context, args, verb: str) -> tuple[list[str], set[str]]:
    """The jobs to stop: those the ids name, or the bulk selection (``select_active``),
    each of which is treated as a group's member (one that ended meanwhile is no fault)."""
    from qex.base.errors import UsageError

    states = None
    if args.state:
        from qex.base.states import ACTIVE

        states = {s for words in args.state for w in words for s in (ACTIVE if w == "active" else (w,))}
    selects = bool(args.tag or args.group is not None or states or args.name is not None or args.mine)
    if args.ids and selects:
        raise UsageError(f"give {verb} ids, or select with --tag, --group, --state, --name or --mine; not both")
    if not args.ids and not selects:
        raise UsageError(
            f"{verb} needs ids, or --tag T, --group G, --state S, --name N or --mine (see qex {verb} --help)"
        )
    if args.ids:
        return _targets(ctx, args.ids)
    from qex.control.actions import select_active

    job_ids = select_active(ctx, args.tag, args.group, states, args.name)
    return job_ids, set(job_ids)


def _targets(ctx: Context, words: list[str]) -> tuple[list[str], set[str]]:
    """The jobs named by ``words`` in order, once each, and those that came from a group."""
    from qex.jobs.resolve import resolve

    job_ids, in_group = [], set()
    for t in (resolve(ctx.store, w) for w in words):
        for j in t.members:
            if j not in job_ids:
                job_ids.append(j)
            if t.is_group:
                in_group.add(j)
    return job_ids, in_group


def cmd_clean(args: Namespace) -> int:
    import time

    from qex.base.states import FINAL
    from qex.control.actions import clean_jobs
    from qex.jobs.resolve import resolve_jobs

    chosen = [bool(args.ids), bool(args.state), args.older_than is not None, args.auto, args.all]
    if sum(chosen) == 0:  # (a bad command line: 2, clean is outside the exit-code table)
        from qex.base.errors import UsageError

        raise UsageError("clean needs ids, --state, --older-than, --auto or --all")
    ctx = context()
    if args.ids:
        job_ids = resolve_jobs(ctx.store, args.ids)
    else:
        job_ids = _select(ctx, args, FINAL, time.time())
    from qex.jobs import groups

    touched = groups.of_jobs(ctx.store, job_ids) if args.ids else None
    removed, refused, kept = clean_jobs(ctx, job_ids)
    if removed or args.auto or args.all:
        groups.prune(ctx, touched)  # a group file goes with its last record (--all/--auto: any left over)
    swept = 0
    if args.auto or args.all:
        from qex.control.actions import sweep_unfinished_dirs

        swept = sweep_unfinished_dirs(ctx)
        if swept and not args.json:
            say.notice(f"removed {swept} job director{'y' if swept == 1 else 'ies'} that never got a record")
    for job_id, why in refused.items() if not args.json else ():  # (--json: all of it on stdout)
        say.notice(f"not cleaned {job_id[:8]}: {why}")
    for job_id, keep in kept.items() if not args.json else ():
        say.notice(f"kept {job_id[:8]}: {keep['why']}")
    if removed and not args.json:
        say.notice(f"removed {len(removed)} record(s)")
    failed = bool((refused or kept) and args.ids)
    if args.json:
        from qex.cli import print_error
        from qex.cli.common import print_json

        print_json(
            {
                "removed": removed,
                "kept": [{"id": j, "why": k["why"], "needed_by": k["needed_by"]} for j, k in kept.items()],
                "refused": [{"id": j, "why": why} for j, why in refused.items()],
                "unfinished_dirs_removed": swept,
            }
        )
        if failed:
            print_error(
                f"{len(refused) + len(kept)} of the jobs named were not cleaned (see refused and kept)",
                1,
                "not_cleaned",
                True,
            )
    # A job named on the command line that stays (active, another user's, still needed) is a failure.
    return 1 if failed else 0


def _select(ctx: Context, args, final_states, now: float) -> list[str]:
    from qex.base.units import parse_duration

    older = parse_duration(args.older_than, "--older-than") if args.older_than is not None else None
    states = set(args.state) if args.state else set(final_states)
    ended = []
    for job_id in ctx.store.job_ids():
        try:
            rec = ctx.store.read_status(job_id)
        except Exception:
            continue
        if rec.state not in states or rec.uid != ctx.uid and ctx.uid != 0:
            continue
        ended.append((rec.ended_at or rec.submitted_at or 0, job_id))
    ended.sort()
    if args.auto:  # the keep rule, as a supervisor's pruning applies it (qex.queue.prune)
        from qex.queue.prune import past_keep

        return past_keep(ended, now, ctx.config.store_max_age, ctx.config.store_max_records)
    return [j for t, j in ended if older is None or now - t >= older]
