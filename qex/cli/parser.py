"""The command line, declared once: the parser, the help and the completions
all come from here, so they can never disagree."""

from __future__ import annotations

import argparse

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from typing import NoReturn

# name -> (one-line help, "module:function" that runs it)
COMMANDS: dict[str, tuple[str, str]] = {
    "submit": ("queue a job; print its id", "qex.cli.submit:cmd_submit"),
    "run": ("submit, stream the output, return the job's code", "qex.cli.submit:cmd_run"),
    "pipeline": ("submit the stages of a pipeline file; print the group id", "qex.cli.stages:cmd_pipeline"),
    "rerun": ("submit the same spec again under a new id; print it", "qex.cli.stages:cmd_rerun"),
    "wait": ("wait for jobs to end; return the code of the first that did not succeed", "qex.cli.wait:cmd_wait"),
    "status": ("show one job (or group)", "qex.cli.wait:cmd_status"),
    "list": ("list jobs", "qex.cli.show:cmd_list"),
    "logs": ("print a job's output", "qex.cli.logs:cmd_logs"),
    "kill": ("stop jobs: every process of a running one; a queued one is cancelled", "qex.cli.control:cmd_kill"),
    "cancel": ("take queued jobs out of the queue", "qex.cli.control:cmd_cancel"),
    "clean": ("remove the records of ended jobs that no queued or running job needs", "qex.cli.control:cmd_clean"),
    "info": ("budget, load, pools, peers, queue health", "qex.cli.show:cmd_info"),
    "top": ("a live view of the queue: what runs, waits and ended; k kill, c cancel, l log", "qex.cli.top:cmd_top"),
    "pause": ("pause the queue, or hold a lock for yourself; alone: show what is paused", "qex.cli.pause:cmd_pause"),
    "resume": ("end a pause of the queue or of a lock", "qex.cli.pause:cmd_resume"),
    "events": ("one line per change of any job, as it happens", "qex.cli.events:cmd_events"),
    "config": ("show the config in force; detect this machine's GPUs", "qex.cli.show:cmd_config"),
    "schema": ("print the JSON Schema of a record", "qex.cli.show:cmd_schema"),
    "help": ("help on a topic", "qex.cli.helptext:cmd_help"),
    "completions": ("shell completions generated from this parser", "qex.cli.completion:cmd_completions"),
    "version": ("print the version", "qex.cli.show:cmd_version"),
    "init": ("make a state directory several users share", "qex.cli.init:cmd_init"),
    "export": (
        "print a bash script that submits a job or pipeline file to Slurm with sbatch alone",
        "qex.cli.export:cmd_export",
    ),
}


class Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line, not a usage dump, on a bad command line."""

    def error(self, message: str) -> NoReturn:
        from qex.base.errors import UsageError

        raise UsageError(f"{message} (see {self.prog} --help)")

    def _get_formatter(self):
        # argparse asks shutil for the width each time it makes a formatter, and
        # it makes one for every add_argument: importing shutil (and bz2, lzma)
        # cost ~1.5 ms of every command. The same width, without shutil.
        return _Formatter(prog=self.prog, width=_help_width())


class _Formatter(argparse.HelpFormatter):
    """argparse's help, wrapped between words only: never "job-" at a line's end
    and "file" on the next (textwrap breaks at hyphens by default)."""

    def _split_lines(self, text, width):
        import textwrap

        return textwrap.wrap(
            self._whitespace_matcher.sub(" ", text).strip(), width, break_on_hyphens=False, break_long_words=False
        )

    def _fill_text(self, text, width, indent):
        import textwrap

        return textwrap.fill(
            self._whitespace_matcher.sub(" ", text).strip(),
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
            break_long_words=False,
        )


def _help_width() -> int:
    """What argparse takes: shutil.get_terminal_size().columns - 2."""
    import os
    import sys

    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return (columns or 80) - 2


def join_dash_values(parser: Parser, argv: list[str]) -> list[str]:
    """`--mem -5GB` reaches the option as its value (argparse would take it for
    an option), so that the value is refused with the option's own sentence."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    command = sub.choices.get(argv[0]) if sub and argv else None
    if command is None:
        return argv
    takes_value = {
        o
        for a in command._actions
        if a.nargs is None
        and a.option_strings
        and not isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction))
        for o in a.option_strings
    }
    out, i = [], 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return out + argv[i:]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if (
            word in takes_value
            and nxt
            and nxt.startswith("-")
            and nxt != "--"
            and nxt not in command._option_string_actions
        ):
            out.append(f"{word}={nxt}")
            i += 2
            continue
        out.append(word)
        i += 1
    return out


def build(only: str | None = None) -> Parser:
    """The parser of every command, or of ``only`` (one command's: what a call needs)."""
    from qex.cli import arguments

    p = Parser(prog="qex", description="A daemonless job queue for one shared machine.")
    p.add_argument("--version", action="store_true", help=argparse.SUPPRESS)
    add_global_options(p)  # (shown in qex --help; before the command, they are moved after it: qex.cli.run)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, (text, _) in COMMANDS.items():
        if only is not None and name != only:
            continue
        c = sub.add_parser(name, help=text, description=text)
        getattr(arguments, f"args_{name}")(c)
        add_global_options(c)
    return p


def add_global_options(p: argparse.ArgumentParser) -> None:
    """The options every command takes, after its name or before it (``qex.cli.run``
    moves them after it; ``qex.cli._call`` applies them)."""
    p.add_argument(
        "--lock-timeout",
        metavar="SECONDS",
        default=None,
        help="wait at most SECONDS for the state directory's lock, then give up (121); "
        "default: QEX_LOCK_TIMEOUT, else 60",
    )
