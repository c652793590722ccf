"""``qex submit CMD...`` without argparse: the command line an agent repeats most.

When the word after ``submit`` is the command itself or ``--``, no option of
qex follows (argparse hands everything after the first word to the command,
``-la`` included), so the line means the submit parser's defaults with
``argv``: the entry point takes it without importing argparse, gettext and
locale and building the parser (~3 ms of a ~40 ms submission). Every other
line, ``--help`` included, goes through the parser of ``qex.cli.parser``,
which stays the one declaration of the command line: tests/cli/test_cli_fast.py
holds ``SUBMIT_DEFAULTS`` to what it declares and compares both ways of
parsing over many lines.
"""

from types import SimpleNamespace

RUNS = "qex.cli.submit:cmd_submit"  # parser.COMMANDS["submit"][1]

SUBMIT_DEFAULTS = {
    "version": False,
    "command": "submit",
    "cpu": None,
    "mem": None,
    "gpu": None,
    "vram": None,
    "claim": [],
    "lock": [],
    "name": None,
    "tag": [],
    "priority": None,
    "timeout": None,
    "max_queue_time": None,
    "retries": None,
    "oom_retries": None,
    "dedupe_key": None,
    "dedupe_window": None,
    "needs": [],
    "after": [],
    "env": [],
    "env_capture": None,
    "cwd": None,
    "nice": None,
    "io_class": None,
    "oom_score_adj": None,
    "stdin": None,
    "job": None,
    "id_file": None,
    "json": False,
    "wait": False,
    "follow": False,
    "wait_timeout": None,
    "quiet": False,
    "each_line": None,
    "max_jobs": None,
    "lock_timeout": None,
}


def plain_submit(argv: list[str]) -> SimpleNamespace | None:
    """The parsed arguments of ``submit CMD...`` / ``submit -- CMD...``, or None
    when the line needs the parser."""
    if len(argv) < 2 or argv[0] != "submit" or (argv[1] != "--" and argv[1].startswith("-")):
        return None
    values = {k: (list(v) if isinstance(v, list) else v) for k, v in SUBMIT_DEFAULTS.items()}
    return SimpleNamespace(**values, argv=list(argv[1:]))
