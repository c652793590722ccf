"""`qex submit CMD...` parsed without argparse (qex.cli.fastpath) means what
the parser of qex.cli.parser makes of it, and every other line goes to the parser."""

import subprocess
import sys

import pytest

from qex.base.errors import QexError
from qex.cli import fastpath, parser

LINES = [
    ["submit", "true"],
    ["submit", "--", "true"],
    ["submit", "--"],
    ["submit", ""],
    ["submit", "--", "--"],
    ["submit", "ls", "-la", "--cpu", "2"],
    ["submit", "true", "--", "x"],
    ["submit", "true", "-h"],
    ["submit", "python", "train.py", "--json", "--wait"],
    ["submit", "--", "sh", "-c", "echo $X"],
    ["submit", "-"],
    ["submit", "--cpu", "2", "true"],
    ["submit", "--json", "--", "true"],
    ["submit", "-h"],
    ["submit", "--each-line", "f", "--", "echo", "{}"],
    ["submit"],
    ["run", "true"],
    ["status", "x"],
]


def by_the_parser(argv):
    built = parser.build(only=argv[0])
    try:
        return vars(built.parse_args(parser.join_dash_values(built, argv)))
    except (QexError, SystemExit):
        return "refused"


@pytest.mark.parametrize("argv", LINES, ids=lambda a: " ".join(a) or "-")
def test_the_fast_path_means_what_the_parser_means_or_stays_out(argv):
    fast = fastpath.plain_submit(argv)
    if fast is None:
        assert argv[0] != "submit" or len(argv) < 2 or (argv[1].startswith("-") and argv[1] != "--")
        return
    assert vars(fast) == by_the_parser(argv)


def test_the_fast_paths_submit_defaults_are_the_parsers_defaults():
    assert {**fastpath.SUBMIT_DEFAULTS, "argv": ["x"]} == by_the_parser(["submit", "x"]), (
        "an option of qex submit changed: update qex/cli/fastpath.py SUBMIT_DEFAULTS"
    )
    assert fastpath.RUNS == parser.COMMANDS["submit"][1]


def test_each_fast_path_submission_gets_its_own_tag_list():
    a, b = fastpath.plain_submit(["submit", "x"]), fastpath.plain_submit(["submit", "y"])
    a.tag.append("t")
    assert b.tag == [] and fastpath.SUBMIT_DEFAULTS["tag"] == []


def test_a_plain_submission_imports_no_argparse(q):
    code = (
        "import sys; from qex.cli import run; code = run(['submit', '--', 'true']); "
        "sys.stderr.write(repr(sorted(m for m in ('argparse', 'gettext', 'locale') if m in sys.modules)) + '\\n')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=q.env, cwd=q.root, timeout=60
    )
    assert proc.stderr.strip().splitlines()[-1] == "[]", proc.stderr
    q.wait_state(proc.stdout.strip(), "completed")
    # and a line with an option still goes through argparse, with its own error sentence
    bad = q.run("submit", "--cpu", "-1", "--", "true")
    assert bad.returncode == 121 and bad.stderr.startswith("qex: --cpu"), bad.stderr
    rec = q.wait_state(q.submit("sh", "-c", "exit 3"), "failed")
    assert rec["command"] == ["sh", "-c", "exit 3"] and rec["exit_code"] == 3


def test_a_bad_submit_line_gives_121_by_either_path(q):
    """The fast path hands every line with an option to the parser; the parser's refusal
    and the fast path's own (no command) reach one mapping (qex.cli.error_exit_code)."""
    for argv, words in (
        (["submit", "--"], "no command"),
        (["submit", "--bogus", "--", "true"], "unrecognized"),
        (["submit", "-x"], "unrecognized"),
        (["submit", "--cpu"], "expected one argument"),
    ):
        proc = q.run(*argv)
        assert proc.returncode == 121 and words in proc.stderr, (argv, proc.returncode, proc.stderr)


@pytest.mark.parametrize(
    "argv,table",
    [
        (["submit", "x"], True),
        (["run"], True),
        (["pipeline"], True),
        (["rerun"], True),
        (["wait"], True),
        (["status", "x", "--quiet"], True),
        (["status", "x", "--qu"], True),
        (["status", "--wait", "x"], True),
        (["status", "x", "--fol"], True),
        (["status", "x", "-q"], True),
        (["status", "-f", "x"], True),
        (["status", "x"], False),
        (["status", "x", "--json"], False),
        (["status", "x", "--"], False),
        (["list"], False),
        (["logs", "x", "--follow"], False),
        ([], False),
    ],
)
def test_job_commands_exit_121_on_bad_input_others_2_or_1_and_all_127_for_no_such_job(argv, table):
    from qex.base.errors import AmbiguousId, ConfigError, NoSuchJob, SpecError, UsageError
    from qex.cli import error_exit_code, reports_a_job

    assert reports_a_job(argv) is table
    assert error_exit_code(argv, UsageError("x")) == (121 if table else 2)
    assert error_exit_code(argv, AmbiguousId("x")) == (121 if table else 2)
    assert error_exit_code(argv, ConfigError("x")) == (121 if table else 1)
    assert error_exit_code(argv, SpecError("--last: 'abc' is not a whole number")) == (121 if table else 2)
    assert error_exit_code(argv, NoSuchJob("x")) == 127
