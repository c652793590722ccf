"""qex wait and qex status (and the output follower that run and submit use)."""

from __future__ import annotations

import sys
import time

from qex.base import outcome, say
from qex.cli.common import context, err, out, print_json, reading_context
from qex.store import layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from argparse import Namespace

    from qex.cli.interrupt import Interrupts
    from qex.cli.stream import Files, Pipes
    from qex.config.context import Context
    from qex.store.records import Status
    from qex.supervisor.pipes import Ends


class AttemptNotes:
    """Say on stderr, once per attempt, why an attempt ended out of memory (the claim was too small)."""

    def __init__(self):
        self.seen: dict[str, int] = {}

    def __call__(self, rec: Status) -> None:
        attempts, job_id = rec.attempts, rec.id
        for a in attempts[self.seen.get(job_id, 0) :]:
            if a.state == "oom" and a.error:
                say.notice(f"{job_id[:8]}: {a.error}")
        self.seen[job_id] = len(attempts)


def wait_and_print(ctx: Context, job_id: str, limit: float | None, print_record: bool = True) -> int:
    from qex.cli.interrupt import Interrupts, left
    from qex.control.waiting import WaitLimit, await_final  # (the one wait: qex.api's too)

    with Interrupts():  # (a signal leaves the job: qex.cli.interrupt)
        try:
            rec = await_final(ctx, [job_id], limit, on_record=AttemptNotes())[job_id]
        except KeyboardInterrupt:
            return left()
        except WaitLimit:
            say.notice("the wait reached its limit; the job continues")
            return outcome.WAIT_LIMIT
    if print_record:
        print_json(rec)
    return outcome.exit_code(rec)


def follow(
    ctx: Context,
    job_id: str,
    limit: float | None,
    ints: Interrupts | None = None,
    ends: Ends | None = None,
    sinks: tuple | None = None,
) -> int:
    """Stream the job's output as it is written; return the job's exit code. ``ints``:
    the signal handlers the caller installed (``qex run``'s: it owns its job); without
    them a signal leaves the job (``qex.cli.interrupt``).

    ``ends``: the FIFOs this process made for the job before it could start
    (``qex.supervisor.pipes.make``): every byte, and (``qex run``) our stdin to the
    job's (``qex.cli.stream.Pipes``). Without them (another caller's job, one that
    runs already) the log files, saying on stderr what their limit cut before this
    reader got to it (``stream.Files``). Our stdout or stderr closed by its reader
    (``qex run ... | head``) is a SIGPIPE to the owner (its job is stopped, as a
    pipe's writer would be), and leaves the job to a waiter (122). ``sinks``: the two
    files that take its stdout and stderr instead of ours (``stream.Held``)."""
    from qex.cli import stream

    if ends is not None:
        streams = stream.Pipes(ends, sinks)
    else:
        out, err_ = (sys.stdout, sys.stderr) if sinks is None else (stream.as_text(f) for f in sinks)
        streams = stream.Files(
            [
                (ctx.store.path(job_id, layout.STDOUT), "stdout", out),
                (ctx.store.path(job_id, layout.STDERR), "stderr", err_),
            ]
        )
    try:
        if ints is None:
            from qex.cli.interrupt import Interrupts

            with Interrupts() as mine:
                return _follow(ctx, job_id, limit, streams, mine)
        return _follow(ctx, job_id, limit, streams, ints)
    finally:
        streams.close()


def _follow(ctx: Context, job_id: str, limit: float | None, streams: Pipes | Files, ints: Interrupts) -> int:
    import signal

    from qex.cli.stream import Broken
    from qex.control.waiting import WaitLimit, await_final  # (the one wait: qex.api's too)

    notes = AttemptNotes()

    def on_record(rec: Status) -> None:
        notes(rec)
        streams.note(rec)

    def broken() -> None:
        if not ints.owner:
            raise Broken
        if ints.signum is None:
            ints.signum = signal.SIGPIPE  # acted on by the next round, as a signal is

    streams.on_broken = broken
    try:
        rec = await_final(
            ctx,
            [job_id],
            limit,
            on_tick=lambda: ints.act(ctx),
            on_record=on_record,
            idle=lambda seconds: streams.idle(seconds, ints),
        )[job_id]
        said = streams.finish()
    except (KeyboardInterrupt, Broken):
        return ints.ended(job_id)
    except WaitLimit:
        say.notice("the wait reached its limit; the job continues")
        return outcome.WAIT_LIMIT
    for line in said:
        say.notice(line)
    return outcome.exit_code(rec)


def join(ctx: Context, job_id: str, ints: Interrupts) -> int:
    """A deduplicated ``qex run``: wait for the job that holds the key and return its
    code, printing none of its output (its own follower, the earlier tick, prints it:
    a ``>> log`` gets each line once). A signal ends this wait only (122)."""
    from qex.control.waiting import await_final  # (the one wait: qex.api's too)

    try:
        rec = await_final(ctx, [job_id], None, on_tick=lambda: ints.act(ctx), on_record=AttemptNotes())[job_id]
    except KeyboardInterrupt:
        return ints.ended(job_id)
    return outcome.exit_code(rec)


def _limit(args):
    text = getattr(args, "timeout", None)
    if text is None:
        return None
    from qex.base.units import parse_duration

    return parse_duration(text, "--timeout")


def cmd_wait(args: Namespace) -> int:
    from qex.cli.interrupt import Interrupts, left
    from qex.cli.progress import Progress
    from qex.control.waiting import WaitLimit, await_final  # (the one wait: qex.api's too)
    from qex.jobs.resolve import resolve_jobs

    ctx = context()
    job_ids = resolve_jobs(ctx.store, args.ids)
    live = Progress(len(job_ids), wanted=not args.quiet and len(job_ids) > 1)  # (a terminal's live line)
    with Interrupts():  # (a signal leaves the jobs: qex.cli.interrupt)
        try:
            done = await_final(
                ctx,
                job_ids,
                _limit(args),
                first=args.next,
                on_record=live.watch(None if args.quiet else _wait_notes()),
                on_tick=live.tick,
            )
        except KeyboardInterrupt:
            live.close()
            return left(len(job_ids))
        except WaitLimit:
            live.close()
            if not args.quiet:
                say.notice("the wait reached its limit; the jobs continue")
            return outcome.WAIT_LIMIT
        finally:
            live.close()
    records = [done[j] for j in job_ids if j in done]
    if args.json:
        print_json(records)  # always an array, whatever the number of ids (as status --json and list --json)
    elif not args.quiet:
        for rec in records:
            out(f"{rec.id}  {rec.state}  exit {outcome.exit_code(rec)}")
    if args.next:
        first = min(records, key=lambda r: r.ended_at or 0)
        return outcome.exit_code(first)
    return outcome.group_exit_code(records)


def _wait_notes():
    """What `qex wait` says on stderr as records change: an attempt that ended out
    of memory, and a job that waits for a pause (the queue, or a lock a person holds)."""
    from qex.queue.pause_view import WaitNotes

    attempts, pauses = AttemptNotes(), WaitNotes(err)

    def note(rec: Status) -> None:
        attempts(rec)
        pauses(rec)

    return note


def cmd_status(args: Namespace) -> int:
    from qex.jobs.resolve import resolve

    if args.word:
        _word_alone(args)
    ctx = reading_context()
    target = resolve(ctx.store, args.id)
    if args.follow:
        if target.is_group:
            from qex.base.errors import SpecError

            raise SpecError(f"--follow reads one job; {args.id} is a group of {len(target.members)}")
        return follow(ctx, target.job, _limit(args))
    if args.wait:
        from qex.cli.interrupt import Interrupts, left
        from qex.control.waiting import WaitLimit, await_final

        with Interrupts():  # (a signal leaves the job: qex.cli.interrupt)
            try:
                await_final(ctx, target.members, _limit(args))
            except KeyboardInterrupt:
                return left(len(target.members))
            except WaitLimit:
                return outcome.WAIT_LIMIT
    from qex.store.index import on_slurm

    index = ctx.store.read_index_jobs()
    if any(on_slurm(index.get(j, {})) for j in target.members):
        from qex.queue import slurmsync

        slurmsync.refresh(ctx, target.members)  # (one squeue call for what Slurm still holds)
        index = ctx.store.read_index_jobs()
    records = [ctx.store.read_live(j, index) for j in target.members]
    if args.word:
        from qex.base.states import workflow_word

        out(workflow_word([rec.state for rec in records]))
        return 0
    if args.show_env:
        from qex.control.actions import check_owner

        for rec in records:  # refuse before printing anything
            check_owner(ctx, rec.id, rec.uid, rec.owner, "read the environment of", changes=False)
    if not args.quiet:
        _print_status(ctx, args, target, records, index)
    if args.quiet or args.wait:
        return outcome.group_exit_code(records) if target.is_group else outcome.exit_code(records[0])
    return 0


def _print_status(ctx: Context, args: Namespace, target, records: list[Status], index: dict) -> None:
    """The records of `qex status` as asked: JSON, a group's summary, or each in words."""
    if args.json:  # always an array: one record for a job, a group's in submission order
        if args.show_env:
            records = [{**rec.asdict(), "env": dict(ctx.store.read_spec(rec.id).env)} for rec in records]
        print_json(records)
    elif target.is_group and not (args.all or args.show_env):
        from qex.cli.render import group_summary

        out(group_summary(records, target.group, target.group_name, time.time()))
    else:
        from qex.cli.render import describe
        from qex.jobs.stuck import stuck_words

        now = time.time()
        for i, rec in enumerate(records):
            if i:
                out()
            out(describe(rec, stuck_words(ctx, rec, index, now)))
            if args.show_env:
                _show_env(ctx, rec)


def _word_alone(args: Namespace) -> None:
    """--word prints its word and nothing else: refuse what would add to it or wait."""
    others = [
        o
        for o, on in (
            ("--json", args.json),
            ("--wait", args.wait),
            ("--follow", args.follow),
            ("--quiet", args.quiet),
            ("--all", args.all),
            ("--show-env", args.show_env),
            ("--timeout", args.timeout is not None),
        )
        if on
    ]
    if others:
        from qex.base.errors import UsageError

        raise UsageError(f"--word prints one word alone and never waits; drop {', '.join(others)}")


def _show_env(ctx: Context, rec: Status) -> None:
    from qex.control.actions import check_owner

    check_owner(ctx, rec.id, rec.uid, rec.owner, "read the environment of", changes=False)
    spec = ctx.store.read_spec(rec.id)
    out("environment:")
    for key in sorted(spec.env):
        out(f"  {key}={spec.env[key]}")
