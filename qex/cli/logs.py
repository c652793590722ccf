"""qex logs: a job's output, whole or a selection of its lines.

A selection reads the log as it is now, in this order: ``--lines A:B`` (the file's own
line numbers, from 1), then ``--grep RE`` (``-F``: RE is a fixed string; ``-C N``: N
lines of context around each match, ``--`` between groups apart, as grep; ``--max-count
N``: the first N matches), then ``--head N``, then ``--tail N``. ``-n`` puts each line's
number in the file before it (``N:``, a context line ``N-``). ``--json``: one object per
line on stdout (``qex schema logs``), stdout's lines, then stderr's. ``--follow`` takes
``--grep`` and ``-F`` only. A log file keeps no time per line, so there is no ``--since``:
``qex events --json`` has a job's times.

On a terminal, a stream given no selection shows its last ``CAP`` lines and says how to
see all; a pipe or a file gets everything.
"""

from __future__ import annotations

import sys

from qex.base import say
from qex.base.errors import SpecError, UsageError
from qex.cli.common import reading_context
from qex.store import layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from argparse import Namespace
    from typing import TextIO

    from qex.config.context import Context
    from qex.store.records import Status

CAP = 1000  # the lines of one stream a terminal gets with no selection


def cmd_logs(args: Namespace) -> int:
    from qex.jobs.resolve import resolve

    pick = Pick(args)
    ctx = reading_context()
    target = resolve(ctx.store, args.id)
    if target.is_group:
        from qex.jobs.groups import stage_names

        raise UsageError(
            f"{args.id} is a group; logs reads one job: give one of its jobs ({stage_names(ctx.store, target.members)})"
        )
    job_id = target.job
    rec = ctx.store.read_status(job_id)
    from qex.control.actions import check_owner

    check_owner(ctx, rec.id, rec.uid, rec.owner, "read the logs of", changes=False)
    if args.hook:
        if args.follow:
            raise UsageError("--hook reads the stop hook's output once; drop --follow")
        return _hook_log(ctx, rec, pick)
    # Both streams: each to its own. One stream asked for: on stdout, so that it can be piped.
    streams = [(layout.STDOUT, sys.stdout), (layout.STDERR, sys.stderr)]
    if args.stdout:
        streams = streams[:1]
    elif args.stderr:
        streams = [(layout.STDERR, sys.stdout)]
    if args.follow:
        return _follow(ctx, job_id, streams, pick.pattern)
    for name, stream in streams:
        pick.show(ctx.store.path(job_id, name), "stdout" if name == layout.STDOUT else "stderr", stream)
    from qex.cli.render import dropped_text

    dropped = dropped_text(rec.logs_dropped)
    if dropped:
        say.warning(dropped)
    return 0


class Pick:
    """What of a log the command line asks for, and how it is printed."""

    def __init__(self, args):
        self.pattern = _pattern(args)
        given = {"--head": args.head, "--tail": args.tail, "-C/--context": args.context, "--max-count": args.max_count}
        for option, value in given.items():
            if value is not None and value < 0:
                raise UsageError(
                    f"{option}: {value} is below 0; give a number of lines",
                    option=option.split("/")[-1],
                    value=str(value),
                )
        if self.pattern is None:
            for option in ("-C/--context", "--max-count"):
                if given[option] is not None:
                    raise UsageError(f"{option} goes with --grep RE (it counts around and up to matches); add --grep")
        self.head, self.tail, self.context, self.max_count = args.head, args.tail, args.context or 0, args.max_count
        self.lines = _range(args.lines) if args.lines is not None else None
        self.numbers, self.json = args.line_numbers, args.json
        self.chosen = any(v is not None for v in (self.lines, self.pattern, self.head, self.tail))
        if args.follow:
            for option, value in (
                ("--lines", args.lines),
                *given.items(),
                ("-n", args.line_numbers or None),
                ("--json", args.json or None),
            ):
                if value is not None:
                    raise UsageError(f"{option} reads the log as it is now; drop --follow (it takes --grep and -F)")

    def rows(self, data: bytes) -> list[tuple[int, bytes, bool]]:
        """(line number, the line with its newline, a context line) of what is chosen."""
        rows = [(n, line, False) for n, line in enumerate(_lines(data), 1)]
        if self.lines is not None:
            rows = rows[self.lines[0] - 1 : self.lines[1]]
        if self.pattern is not None:
            hits = [i for i, (_, line, _) in enumerate(rows) if self.pattern.search(line)]
            if self.max_count is not None:
                hits = hits[: self.max_count]
            near = {j for i in hits for j in range(i - self.context, i + self.context + 1)}
            matched = set(hits)
            rows = [(n, line, i not in matched) for i, (n, line, _) in enumerate(rows) if i in near]
        if self.head is not None:
            rows = rows[: self.head]
        if self.tail is not None:
            rows = rows[-self.tail :] if self.tail else []
        return rows

    def show(self, path: str, name: str, stream: TextIO) -> None:
        data = _read(path)
        if data is None:
            return
        rows = self.rows(data)
        if self.json:
            import json

            sys.stdout.write(
                "".join(
                    json.dumps(
                        {
                            "stream": name,
                            "line": n,
                            "text": line.rstrip(b"\n").decode("utf-8", "replace"),
                            "context": context,
                        }
                    )
                    + "\n"
                    for n, line, context in rows
                )
            )
            sys.stdout.flush()
            return
        if not self.chosen and len(rows) > CAP and _on_terminal(stream):
            say.notice(
                f"{name}: the last {CAP} of {len(rows)} lines (a terminal gets at most {CAP}); "
                f"--lines 1: shows them all, as a pipe does"
            )
            rows = rows[-CAP:]
        out, last = [], None
        for n, line, context in rows:
            if self.context and last is not None and n != last + 1:
                out.append(b"--\n")
            out.append(b"%d%s%s" % (n, b"-" if context else b":", line) if self.numbers else line)
            last = n
        stream.flush()
        stream.buffer.write(b"".join(out))
        stream.flush()


def _lines(data: bytes) -> list[bytes]:
    """The lines of ``data`` (split at newlines only, as grep and wc count them), each
    with its newline; a last line without one as it is."""
    parts = data.split(b"\n")
    last = parts.pop()
    return [p + b"\n" for p in parts] + ([last] if last else [])


def _range(text: str) -> tuple[int, int]:
    """--lines A:B, A: (to the end), :B (from the first), A (that line alone); from 1."""
    first, colon, end = text.partition(":")
    try:
        a = int(first) if first.strip() else 1
        b = (int(end) if end.strip() else sys.maxsize) if colon else a
    except ValueError:
        a = b = 0
    if a < 1 or b < a:
        raise UsageError(
            f"--lines: {text!r} is not a range of lines A:B from line 1 (10:20, 10:, :20 or 7)",
            option="--lines",
            value=text,
        )
    return a, b


def _pattern(args):
    if not args.grep:
        if args.fixed:
            raise UsageError("-F/--fixed says how to read --grep's text; add --grep TEXT")
        return None
    import re

    text = re.escape(args.grep) if args.fixed else args.grep
    try:
        return re.compile(text.encode())
    except re.error as exc:
        raise SpecError(
            f"--grep: {args.grep!r} is not a regular expression ({exc}); -F takes it as plain text"
        ) from None


def _on_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _read(path: str) -> bytes | None:
    """The log as it is now (None: there is none; a file that cannot be read is said)."""
    import os

    from qex.store import fs
    from qex.supervisor.logread import Follower

    try:
        os.close(fs.open_regular(path))  # refuses a FIFO or a symlink planted there
        return Follower(path).read()  # consistent even while the output limit cuts the file
    except FileNotFoundError:
        return None
    except OSError as exc:
        say.warning(f"cannot read {path}: {exc.strerror or exc}")
        return None


def _follow(ctx: Context, job_id: str, streams: list, pattern) -> int:
    """--follow: each stream as it grows until the job ends (--grep: the lines that match).
    A reader that came after the output limit cut what it had not read says so: 1."""
    from qex.cli import stream
    from qex.control import waiting

    outs = [out if pattern is None else _Grep(out, pattern) for _, out in streams]
    files = stream.Files(
        [
            (ctx.store.path(job_id, name), "stdout" if name == layout.STDOUT else "stderr", o)
            for (name, _), o in zip(streams, outs)
        ]
    )
    try:
        waiting.await_final(ctx, [job_id], None, idle=files.idle)
    except KeyboardInterrupt:
        return 1 if files.skipped else 0
    files.finish()
    for o in outs:
        if isinstance(o, _Grep):
            o.close()
    return 1 if files.skipped else 0


class _Grep:
    """A stream for ``logs --follow --grep``: what is written to it goes on to
    ``stream`` a whole line at a time, the lines that match only (the last line, if
    it has no newline when the job ends, at ``close``). It is its own ``buffer``."""

    def __init__(self, stream, pattern):
        self.stream, self.pattern, self.held = stream, pattern, b""
        self.buffer = self

    def write(self, data: bytes) -> int:
        lines = (self.held + data).split(b"\n")
        self.held = lines.pop()
        self._out(b"".join(line + b"\n" for line in lines if self.pattern.search(line)))
        return len(data)

    def flush(self) -> None:
        self.stream.flush()

    def close(self) -> None:
        held, self.held = self.held, b""
        if held and self.pattern.search(held):
            self._out(held)

    def _out(self, data: bytes) -> None:
        if data:
            self.stream.buffer.write(data)
            self.stream.flush()


def _hook_log(ctx: Context, rec: Status, pick: Pick) -> int:
    """qex logs ID --hook: the hook's output on stdout (stream "hook"), the verdict on stderr."""
    from qex.hooks.runner import describe

    log, words = describe(ctx, rec)
    if log is not None:
        pick.show(log, "hook", sys.stdout)
    say.notice(words)
    return 0 if log is not None else 1
