"""qex submit --each-line FILE|- -- CMD ... {} ...: one job per line, one group.

Rules (all checked before the first job is made; any failure makes no job):

- the command must hold ``{}`` somewhere (in any argument, also inside one
  and in the program position); each ``{}`` becomes the line, as part of that
  one argument, never split and never given to a shell; ``{{}}`` is a
  literal ``{}``;
- the input is a path (a regular file or a pipe; not a directory) or ``-``
  (stdin), at most 64 MiB, UTF-8 in every line (an error names the line);
- each line is stripped of surrounding whitespace (and so of a CR); an empty
  line or one that starts with ``#`` gives no job (counted on stderr); the
  last line counts without its newline;
- at most ``--max-jobs`` jobs (default 1000), at least one;
- the options that mean one job (``--dedupe-key``, ``--dedupe-window``,
  ``--json``, ``--wait``, ``--follow``, ``--job``, ``--stdin``) are refused; every other option applies to every job.

Jobs are named ``prog-007-line-text`` (the program's name, the job's
zero-padded position, the line in safe form); the group is named after the
file's stem (``--name`` names the group instead). Every job keeps the
template command (``template``), the key the learner measures them under.
"""

from __future__ import annotations

import os
import stat

from qex.base import units
from qex.base.errors import SpecError
from qex.base.plain import Plain

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from argparse import Namespace
    from collections.abc import Callable

    from qex.config.context import Context
    from qex.jobs.request import Request
    from qex.jobs.submit import Built

MAX_INPUT = 64 << 20
DEFAULT_MAX_JOBS = 1000
ONE_JOB = (
    ("dedupe_key", "--dedupe-key"),
    ("dedupe_window", "--dedupe-window"),
    ("wait", "--wait"),
    ("follow", "--follow"),
    ("job", "--job"),
    ("stdin", "--stdin"),
)
HOLE = None  # the place of {} in a parsed argument


class Lines(Plain, frozen=True):
    """The usable lines of an input: (line number, text), and what gave no job."""

    items: tuple[tuple[int, str], ...]
    empty: int = 0
    comments: int = 0


# ---- the template (pure) ----------------------------------------------------


def parse_template(argv: list[str]) -> list[list]:
    """Each argument as parts: strings and HOLE where the line goes."""
    parsed, holes = [], 0
    for arg in argv:
        parts, text, i = [], [], 0
        while i < len(arg):
            if arg.startswith("{{}}", i):
                text.append("{}")
                i += 4
            elif arg.startswith("{}", i):
                parts.append("".join(text))
                parts.append(HOLE)
                text, holes, i = [], holes + 1, i + 2
            else:
                text.append(arg[i])
                i += 1
        parts.append("".join(text))
        parsed.append([p for p in parts if p != ""])
    if not holes:
        raise SpecError(
            "--each-line: the command has no {} for the line; put {} where each line goes, "
            "e.g. qex submit --each-line inputs.txt -- ./process {}  ({{}} is a literal {})"
        )
    return parsed


def fill(template: list[list], line: str) -> list[str]:
    """The command of one line: each HOLE becomes the line, inside its own argument."""
    return ["".join(line if p is HOLE else p for p in parts) for parts in template]


def split_lines(data: bytes, source: str) -> Lines:
    """The usable lines of ``data``; a non-UTF-8 line or a NUL is an error naming the line."""
    raw = data.split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()  # the newline that ends the last line is no line of its own
    items, empty, comments = [], 0, 0
    for number, chunk in enumerate(raw, 1):
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecError(
                f"--each-line {source}: line {number} is not UTF-8 (byte {exc.start + 1} of the line); "
                "fix or remove that line; no job was submitted"
            ) from None
        if number == 1:
            text = text.removeprefix("\ufeff")
        text = text.strip()
        if not text:
            empty += 1
        elif text.startswith("#"):
            comments += 1
        elif "\0" in text:
            raise SpecError(
                f"--each-line {source}: line {number} holds a NUL byte, which no argument can carry; "
                "no job was submitted"
            )
        else:
            items.append((number, text))
    return Lines(tuple(items), empty, comments)


def job_name(program: str, position: int, width: int, line: str) -> str:
    """``prog-007-line-text`` in the safe form, at most 128 characters."""
    prog = units.safe_name(os.path.basename(program.rstrip("/")) or program)
    name = units.safe_name(f"{prog}-{position:0{width}d}-{line}")[:128].rstrip("-.")
    return name or f"job-{position:0{width}d}"


# ---- the input ----------------------------------------------------------------


def read_input(source: str) -> bytes:
    """At most 64 MiB from a path (file or pipe, not a directory) or from stdin ('-')."""
    if source == "-":
        import sys

        return _read_limited(sys.stdin.buffer.fileno(), "- (stdin)")
    try:
        fd = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise SpecError(
            f"--each-line: cannot read {units.safe_text(source)!r}: {exc.strerror}; "
            "give a readable file, or - for stdin"
        ) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise SpecError(
                f"--each-line: {units.safe_text(source)!r} is a directory; give a file with one "
                "input per line, or - for stdin"
            )
        return _read_limited(fd, units.safe_text(source))
    finally:
        os.close(fd)


def _read_limited(fd: int, shown: str) -> bytes:
    chunks, total = [], 0
    try:
        while total <= MAX_INPUT:
            chunk = os.read(fd, min(1 << 20, MAX_INPUT + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise SpecError(f"--each-line: cannot read {shown}: {exc.strerror}") from None
    if total > MAX_INPUT:
        raise SpecError(
            f"--each-line {shown}: the input is larger than 64MiB; split it into several fan-outs; no job was submitted"
        )
    return b"".join(chunks)


def group_name_for(source: str, name: str | None) -> str:
    if name is not None:
        return units.check_name(name, "--name")
    if source == "-":
        return "stdin"
    return units.safe_name(os.path.splitext(os.path.basename(source.rstrip("/")))[0])


# ---- the submission -----------------------------------------------------------


def check_options(args: Namespace) -> int:
    """Refuse the options that mean one job; returns --max-jobs."""
    for attr, option in ONE_JOB:
        if getattr(args, attr, None):
            raise SpecError(
                f"{option} means one job and cannot go with --each-line (which makes one job per "
                "line); remove it" + (", and wait with qex wait GROUP" if attr in ("wait", "follow") else "")
            )
    max_jobs = DEFAULT_MAX_JOBS if args.max_jobs is None else args.max_jobs
    if max_jobs < 1:
        raise SpecError(f"--max-jobs: {max_jobs} is not a number of jobs; give 1 or more (default 1000)")
    return max_jobs


def prepare(
    ctx: Context, args: Namespace, request_of: Callable[[Namespace, Context], Request]
) -> tuple[str, str, Lines, list[Built]]:
    """Everything checked, every job built; nothing written yet.
    ``request_of(args, ctx)``: the Request the command line gives (its command
    is the template; ``qex.jobs.request``), asked for once the options pass.

    Returns (group id, group name, lines, built jobs).
    """
    from qex.base.ids import new_id
    from qex.jobs.submit import build, build_like

    max_jobs = check_options(args)
    base = request_of(args, ctx)
    template = parse_template(base.command)
    source = args.each_line
    lines = split_lines(read_input(source), units.safe_text(source))
    if not lines.items:
        raise SpecError(
            f"--each-line {units.safe_text(source)}: no usable line ({lines.empty} empty, "
            f"{lines.comments} comments); give one input per line; no job was submitted"
        )
    if len(lines.items) > max_jobs:
        raise SpecError(
            f"--each-line {units.safe_text(source)}: {len(lines.items)} lines would make "
            f"{len(lines.items)} jobs, more than --max-jobs {max_jobs}; raise --max-jobs or split "
            "the input; no job was submitted"
        )
    group = group_name_for(source, base.name)
    group_id = new_id()
    width = max(3, len(str(len(lines.items))))
    built, found = [], set()
    for position, (number, line) in enumerate(lines.items, 1):
        command = fill(template, line)
        name = job_name(command[0], position, width, line)
        try:
            if built:  # the lines differ in their command and name only: the rest is the first's
                built.append(build_like(built[0], command, name, found))
            else:
                built.append(
                    build(
                        ctx,
                        base.evolve(
                            command=command,
                            name=name,
                            group=group_id,
                            group_name=group,
                            template=list(base.command),
                            origin="each-line",
                        ),
                        found=found,
                    )
                )
        except SpecError as exc:
            raise SpecError(f"--each-line line {number}: {exc}; no job was submitted") from None
    return group_id, group, lines, built
