"""Entry point: parse the command line, run one command, map errors to exit codes.

Only the parser of the command given is built, and only its module is
imported: every agent command pays start-up.
"""

from __future__ import annotations

import sys

# (the rule of exit codes lives below the command line: qex.api raises with the same codes)
from qex.base.errors import JOB_COMMANDS, error_exit_code, reports_a_job  # noqa: F401

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Iterable


def main(argv: Iterable[str] | None = None) -> None:
    code = run(sys.argv[1:] if argv is None else list(argv))
    _leave(code)


def _leave(code: int) -> None:
    """Flush and leave at once: the interpreter's own teardown (freeing every
    module and object) costs more than most commands and changes nothing."""
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a reader that went away (a closed pipe) is not our failure
    os._exit(code)


_parsed: list = []  # the parsed arguments of this command, once the parser took them (``wants_json``)


def run(argv: list[str]) -> int:
    from qex.base.errors import QexError

    _parsed.clear()
    try:
        argv = _command_first(argv)
        return _dispatch(argv)
    except QexError as exc:
        code = error_exit_code(argv, exc)
        print_error(str(exc), code, exc.kind, wants_json(argv), exc.option, exc.value)
        return code
    except KeyboardInterrupt:
        print_error("interrupted", 130, "interrupted", wants_json(argv))
        return 130
    except BrokenPipeError:
        _quiet_broken_pipe()
        return 0


def wants_json(argv: list[str]) -> bool:
    """Whether this command line asked for ``--json``: its parsed arguments say so; a
    line the parser refused, any ``--json`` (or an abbreviation argparse takes) before ``--``."""
    if _parsed:
        return bool(getattr(_parsed[-1], "json", False))
    for word in argv[1:]:
        if word == "--":
            return False
        if word.startswith("--js") and "--json".startswith(word):
            return True
    return False


def print_error(
    sentence: str, code: int, kind: str, as_json: bool = False, option: str | None = None, value: str | None = None
) -> None:
    """The one place an error that ends a command is printed: ``qex: SENTENCE`` on stderr,
    or under ``--json`` one JSON object on one line (``qex schema error``), the same exit
    code either way. ``option``/``value``: the option at fault and the value given; when
    not given, read from the sentence (``--mem: '-5GB' is not a size``, argparse's
    ``argument --state: invalid choice: 'x'``, ``unrecognized arguments: --bogus``)."""
    if not as_json:
        _say(f"qex: {sentence}")
        return
    import json

    if option is None:
        option, found = _option_in(sentence)
        value = value if value is not None else found
    _say(json.dumps({"error": sentence, "code": code, "kind": kind, "option": option, "value": value}, sort_keys=True))


def _option_in(sentence: str) -> tuple[str | None, str | None]:
    import re

    m = re.match(r"(?:argument )?(--[a-z][a-z0-9-]*)(?:/-\w)?(?:[=: ]|$)", sentence)
    if m is None:
        m = re.match(r"unrecognized arguments: (\S+)", sentence)
        return (m.group(1), None) if m else (None, None)
    quoted = re.search(r"'([^']*)'|\"([^\"]*)\"", sentence[m.end() :])
    return m.group(1), None if quoted is None else quoted.group(1) if quoted.group(1) is not None else quoted.group(2)


def _dispatch(argv: list[str]) -> int:
    if argv[:1] == ["__complete"]:  # the completions' values: no parser, no lock (qex.cli.completion)
        from qex.cli.completion import values

        return values(argv[1:])
    if argv[:1] == ["submit"]:
        from qex.cli.fastpath import RUNS, plain_submit

        args = plain_submit(argv)
        if args is not None:
            _parsed.append(args)
            return _call(RUNS, args)
    if not argv:
        from qex.cli.helptext import BANNER

        sys.stdout.write(BANNER)
        return 0
    if argv[0] in ("-h", "--help"):
        from qex.cli.helptext import print_help

        print_help()
        return 0
    from qex.cli import parser

    if argv[0] == "--version":
        argv = ["version"]
    name = argv[0]
    if name not in parser.COMMANDS:
        from qex.base.errors import UsageError

        raise UsageError(f"unknown command {name!r}; the commands are: {', '.join(parser.COMMANDS)}")
    built = parser.build(only=name)
    args = built.parse_args(parser.join_dash_values(built, argv))
    _parsed.append(args)
    return _call(parser.COMMANDS[name][1], args)


def _command_first(argv: list[str]) -> list[str]:
    """``qex --lock-timeout 5 submit ...`` is ``qex submit --lock-timeout 5 ...``: a global
    option (``parser.add_global_options``) may come before the command's name."""
    head = argv[0] if argv else ""
    if head != "--lock-timeout" and not head.startswith("--lock-timeout="):
        return argv
    words = 2 if head == "--lock-timeout" else 1
    if len(argv) > words:
        return [argv[words], *argv[:words], *argv[words + 1 :]]
    from qex.base.errors import UsageError

    raise UsageError(
        "--lock-timeout needs SECONDS and then a command, e.g. qex --lock-timeout 5 submit -- CMD (see qex --help)"
    )


def _call(target: str, args) -> int:
    """Run "module:function" with the parsed arguments."""
    import os

    if getattr(args, "json", False):  # every warning and notice on stderr a JSON line (qex.base.say)
        from qex.base import say

        say.json_on()

    if args.lock_timeout is not None or "QEX_LOCK_TIMEOUT" in os.environ:
        from qex.store import lock

        lock.set_timeout(args.lock_timeout)  # here: a bad value is refused even when the lock is free
    module, _, func = target.partition(":")
    import importlib

    return importlib.import_module(module).__dict__[func](args) or 0


def _say(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except OSError:
        pass


def _quiet_broken_pipe() -> None:
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
