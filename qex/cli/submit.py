"""qex submit and qex run."""

from __future__ import annotations

from qex.base import say
from qex.base.errors import SpecError
from qex.cli.common import context, err, out, print_json, write_id_file

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from argparse import Namespace
    from types import SimpleNamespace

    from qex.config.context import Context


def _submit_one(args, ctx: Context, leaving: bool = False, follow: bool = False, forward: bool = False):
    """Submit the job of the command line. ``follow``: this process streams its output
    (the pipes are made before the commit); ``forward``: and gives it our stdin (qex run).
    Returns (id, PassResult, the dedupe hit or None, the pipes' ends or None)."""
    from qex.jobs.options import request_from_args
    from qex.jobs.submit import build, submit_many
    from qex.supervisor import become

    req = request_from_args(args, ctx)
    built = build(ctx, req)
    for warning in built.warnings:
        say.warning(warning)
    checker = None
    if req.dedupe_key is not None:
        from qex.jobs.dedupe import checker_for

        checker = checker_for(ctx, req)
    ends: list = []
    prepare = None
    if follow:
        from qex.jobs.slurmjobs import on_slurm

        follow = not on_slurm(ctx)  # (a node never opens this machine's FIFOs: the log files are followed)
    if req.stdin is not None or follow:
        prepare = _preparer(req.stdin, follow, forward and req.stdin is None, ends)
    ids, result = submit_many(ctx, [built], on_locked=checker, early=become.early(leaving), prepare=prepare)
    hit = checker.hit if checker is not None else None
    if hit is not None and ends:  # (another caller's job: its directory is not the one they were made in)
        ends.pop().close(remove=False)
    return ids[0], result, hit, (ends[0] if ends else None)


def _preparer(stdin: str | None, follow: bool, forward: bool, ends: list):
    """``submit_many``'s ``prepare``: the job's input, and the pipes this process follows it by."""
    import sys

    from qex.supervisor import pipes

    def prepare(job_dir: str) -> None:
        if stdin is not None:
            pipes.give_input(job_dir, stdin, sys.stdin.buffer)
        if follow:
            try:
                ends.append(pipes.make(job_dir, forward))
            except OSError as exc:
                say.warning(
                    f"cannot make the pipes to follow the job in {job_dir} ({exc.strerror or exc}); "
                    "following its log files instead" + ("; its stdin is /dev/null" if forward else "")
                )

    return prepare


def _say_what_happened(ctx: Context, job_id: str, hit, quiet: bool = False) -> None:
    """On stderr: the job that holds the key, or the pause the new job waits for.
    ``quiet``: only a warning (a key held by a job that looks stuck, ``describe``)."""
    if hit is not None:
        from qex.jobs.dedupe import describe

        if not quiet or hit.stuck:
            say.notice(describe(hit))
        return
    if quiet:
        return
    from qex.queue.pause_view import submission_note

    note = submission_note(ctx, job_id)
    if note:
        say.notice(note)


def cmd_submit(args: Namespace | SimpleNamespace) -> int:
    from qex.linux.cgroup import warm

    warm()  # the first cgroup move's wait runs beside this submission (qex.linux.cgroup.warm)

    if args.each_line is not None or args.max_jobs is not None:
        if args.each_line is None:
            raise SpecError("--max-jobs goes with --each-line (one job per line); remove it")
        from qex.cli.stages import cmd_each_line

        return cmd_each_line(args)
    if args.wait and args.follow:
        raise SpecError("--wait and --follow cannot go together; pick one")
    ctx = context()
    wait_limit = _wait_limit(args)
    leaving = not (args.wait or args.follow)  # it answers with the id and exits
    job_id, result, hit, ends = _submit_one(args, ctx, leaving, follow=args.follow)
    from qex.supervisor import become

    become.finish_pass(ctx, result, leaving=leaving)
    _say_what_happened(ctx, job_id, hit, args.quiet)
    if args.id_file:
        write_id_file(args.id_file, [job_id])
    if leaving:
        if args.json:
            print_json({"id": job_id, "deduplicated": hit is not None})
        elif not args.quiet:
            out(job_id)
        return 0
    if not args.quiet:  # (--json: stderr carries JSON only, qex.base.say)
        say.notice(f"job {job_id}") if say.as_json() else err(job_id)
    from qex.cli import wait as waiting

    if args.follow:
        return waiting.follow(ctx, job_id, wait_limit, ends=ends)
    return waiting.wait_and_print(ctx, job_id, wait_limit, print_record=not args.quiet)


def _wait_limit(args):
    if getattr(args, "wait_timeout", None) is None:
        return None
    from qex.base.units import parse_duration

    return parse_duration(args.wait_timeout, "--wait-timeout")


def cmd_run(args: Namespace) -> int:
    from qex.cli import wait as waiting
    from qex.cli.interrupt import Interrupts

    if args.each_line is not None:
        raise SpecError(
            "qex run streams one job and cannot take --each-line; "
            "use qex submit --each-line FILE -- CMD {}, then qex wait GROUP"
        )
    held = None
    if args.output == "on-failure":  # (chronic's manners: a crontab mails only a failure)
        from qex.cli.stream import Held

        held = Held()
    quiet = args.quiet or held is not None
    ctx = context()
    # qex run owns its job: a signal stops it, even one that comes while it is submitted
    # (qex.cli.interrupt). The forked supervisors set their own handlers (detach_stdio).
    with Interrupts(owner=True) as ints:
        job_id, result, hit, ends = _submit_one(args, ctx, follow=True, forward=True)
        from qex.supervisor import become

        become.finish_pass(ctx, result)
        _say_what_happened(ctx, job_id, hit, quiet)
        if args.id_file:
            write_id_file(args.id_file, [job_id])
        try:
            sinks = held.files if held is not None else None
            joined = False
            if hit is not None:  # another caller's job: a signal stops only this wait (122)
                from qex.supervisor.pipes import followed

                ints.owner = False
                joined = followed(ctx.store.job_dir(job_id))
                if not quiet:
                    say.notice(
                        f"joining job {job_id}: "
                        + (
                            f"its output goes to the qex run that started it (qex logs {job_id[:8]})"
                            if joined
                            else "following its output"
                        )
                        + "; Ctrl-C stops only this wait, the job continues"
                    )
                if joined:  # its own follower prints its output: not twice into a `>> log`
                    code = waiting.join(ctx, job_id, ints)
                    if held is not None and code != 0:
                        err(_verdict(ctx, job_id, code, joined=True))
                    return code
            else:
                ints.job_id = job_id
                if not quiet:
                    say.notice(f"job {job_id}")
            code = waiting.follow(ctx, job_id, None, ints, ends=ends, sinks=sinks)
            if held is not None and code != 0:
                held.release(_verdict(ctx, job_id, code))
            return code
        finally:
            if held is not None:
                held.close()


def _verdict(ctx: Context, job_id: str, code: int, joined: bool = False) -> str:
    """``--output on-failure``: the one line before the held output of a job that did not succeed."""
    from qex.base.units import format_duration, safe_text

    try:
        rec = ctx.store.read_status(job_id)
    except Exception:
        rec = None
    state = safe_text(rec.state if rec else "unknown")
    took = ""
    if rec and rec.started_at and rec.ended_at:
        took = f" after {format_duration(max(0.0, rec.ended_at - rec.started_at))}"
    command = safe_text(" ".join(rec.command if rec else ()), 160)
    what = f"qex: job {job_id[:8]} {state}{took}, exit {code}: {command}"
    if joined:
        what += f" (joined by its dedupe key: its output went to the run that started it; qex logs {job_id[:8]})"
    else:
        what += "; its output follows"
    return what
