"""Each command's options, declared once (``qex.cli.parser.build`` adds ``args_NAME`` for
the command NAME): the parser, the help and the completions all come from here."""

from __future__ import annotations

import argparse


def add_claims(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("claims")
    g.add_argument("--cpu", metavar="N", help="cores: a number, or guess|half (half the budget), full|max")
    g.add_argument("--mem", metavar="SIZE", help="memory: 512MB, 2GB, 1.5GiB, or guess|half|full|max")
    g.add_argument(
        "--gpu", metavar="N", type=_int("--gpu"), help="whole devices of the pool gpu (or N devices with --vram each)"
    )
    g.add_argument("--vram", metavar="SIZE", help="memory on each GPU device (the pool gpu)")
    g.add_argument("--claim", metavar="NAME=N[:SIZE]", action="append", default=[], help="units of a pool (repeatable)")
    g.add_argument(
        "--lock",
        metavar="NAME",
        action="append",
        default=[],
        help="one unit of NAME; an undeclared name is a lock (repeatable)",
    )


def add_job_options(p: argparse.ArgumentParser) -> None:
    add_claims(p)
    g = p.add_argument_group("job")
    g.add_argument("--name", help="a name: letters, digits, - _ . (at most 128)")
    g.add_argument("--tag", action="append", default=[], help="a tag (repeatable)")
    g.add_argument("--priority", type=_int("--priority"), default=None, help="higher first (default 0)")
    g.add_argument("--timeout", metavar="T", help="stop the job after T (90s, 30m, 4h, 7d)")
    g.add_argument("--max-queue-time", metavar="T", help="give up if not started after T (state expired, 123)")
    g.add_argument("--retries", type=_int("--retries"), default=None, help="retry failed attempts N times")
    g.add_argument(
        "--oom-retries",
        type=_int("--oom-retries"),
        default=None,
        help="retry an out-of-memory kill with double memory N times (default 1)",
    )
    g.add_argument(
        "--dedupe-key",
        metavar="KEY",
        help="while a job of yours with KEY is queued or running, print its id instead of queueing another",
    )
    g.add_argument(
        "--dedupe-window", metavar="T", help="with --dedupe-key: also give a job with KEY that completed within T"
    )
    g.add_argument("--needs", metavar="ID,...", action="append", default=[], help="run only if these succeed")
    g.add_argument(
        "--after", metavar="ID,...", action="append", default=[], help="run after these end, whatever their result"
    )
    g.add_argument("--env", metavar="K=V", action="append", default=[], help="set a variable for the job (repeatable)")
    g.add_argument(
        "--env-capture",
        choices=("all", "minimal", "none"),
        default=None,
        help="which of your environment the job gets (default all)",
    )
    g.add_argument("--cwd", metavar="DIR", help="run in DIR (default: here)")
    add_manners(g)
    g.add_argument(
        "--stdin",
        metavar="FILE|-",
        help="the job's standard input: FILE (opened when it starts), or - (a copy of this "
        "command's stdin, at most 64MiB); default: /dev/null for submit, "
        "this command's stdin for run",
    )
    g.add_argument("--job", metavar="FILE", help="a job file (TOML, YAML or JSON)")
    g.add_argument("--id-file", metavar="FILE", help="write the id here (fsynced before any wait)")


def add_manners(g: argparse._ArgumentGroup) -> None:
    """How the job behaves on a shared box: niceness, I/O class, oom_score_adj (``[politeness]``)."""
    g.add_argument(
        "--nice",
        type=_int("--nice"),
        default=None,
        help="the job's niceness, absolute, -20 to 19 (default [politeness] nice, 10)",
    )
    g.add_argument(
        "--io-class",
        metavar="CLASS",
        default=None,
        help="the job's I/O class: best-effort (its lowest priority), idle or none (default [politeness] io_class)",
    )
    g.add_argument(
        "--oom-score-adj",
        metavar="N",
        type=_int("--oom-score-adj"),
        default=None,
        help="the job's oom_score_adj, -1000 to 1000 (default [politeness] oom_score_adj, 500)",
    )


def _int(option):
    def parse(text: str) -> int:
        from qex.base.errors import SpecError

        try:
            return int(text)
        except ValueError:
            raise SpecError(f"{option}: {text!r} is not a whole number") from None

    parse.__name__ = "whole number"
    return parse


def _state_list(known, noun: str = "state"):
    """``--state running,queued``: each word one of ``known``; a list, appended (``cmd_list`` joins them)."""

    def parse(text: str) -> list[str]:
        from qex.base.errors import UsageError

        words = [w.strip() for w in text.split(",") if w.strip()]
        bad = [w for w in words if w not in known]
        if bad or not words:
            raise UsageError(
                f"--state: {', '.join(map(repr, bad)) or 'nothing'} is no {noun}; the {noun}s are {', '.join(known)}"
            )
        return words

    parse.__name__ = "state list"
    parse.known = known  # (the completions offer them)
    return parse


def args_submit(c: argparse.ArgumentParser) -> None:
    add_job_options(c)
    g = c.add_argument_group("output")
    g.add_argument(
        "--json",
        action="store_true",
        help='print {"id": ..., "deduplicated": false} (qex schema submit); '
        "with --each-line: the group (qex schema group)",
    )
    g.add_argument("--wait", action="store_true", help="wait for the end; stdout carries the record")
    g.add_argument("-f", "--follow", action="store_true", help="stream the output; return the job's code")
    g.add_argument("--wait-timeout", metavar="T", help="stop waiting after T (124)")
    g.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print nothing on success; no notice on stderr (warnings and errors stay)",
    )
    g = c.add_argument_group("fan-out (qex help each-line)")
    g.add_argument("--each-line", metavar="FILE|-", help="one job per line of FILE (- = stdin), the line where {} is")
    g.add_argument(
        "--max-jobs",
        metavar="N",
        type=_int("--max-jobs"),
        default=None,
        help="with --each-line: refuse more than N jobs (default 1000)",
    )
    c.add_argument("argv", nargs=argparse.REMAINDER, help="-- COMMAND...")


def args_export(c: argparse.ArgumentParser) -> None:
    c.add_argument("target", choices=("slurm",), help="the scheduler: slurm (qex help slurm)")
    c.add_argument("file", metavar="FILE", help="a job file or a pipeline file (TOML, YAML or JSON)")
    c.add_argument(
        "--each-line", metavar="FILE", help="a job file's command with {} for each line of FILE: one job array"
    )
    c.add_argument(
        "--max-jobs",
        metavar="N",
        type=_int("--max-jobs"),
        default=None,
        help="with --each-line: refuse more than N jobs (default 1000)",
    )


def args_pipeline(c: argparse.ArgumentParser) -> None:
    c.add_argument("file", metavar="FILE", help="a pipeline file (TOML, YAML or JSON; qex help job-file)")
    c.add_argument("--id-file", metavar="FILE", help="write the group and each stage here, one 'ID NAME' a line")
    c.add_argument("--json", action="store_true", help="print the group and its jobs (qex schema group)")
    c.add_argument("-q", "--quiet", action="store_true", help="no notice on stderr: only the group id, on stdout")


def args_rerun(c: argparse.ArgumentParser) -> None:
    c.add_argument("id", metavar="ID")
    c.add_argument("--id-file", metavar="FILE", help="write the new id here")
    c.add_argument("--json", action="store_true", help="print the new id and the old (qex schema rerun)")


def args_run(c: argparse.ArgumentParser) -> None:
    add_job_options(c)
    c.add_argument("--each-line", metavar="FILE", help=argparse.SUPPRESS)  # refused with a sentence
    c.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no notice on stderr (the id, a deduplicated submission); warnings and errors stay",
    )
    c.add_argument(
        "--output",
        choices=("all", "on-failure"),
        default="all",
        help="on-failure: hold the job's output and print it, after a one-line verdict on stderr, "
        "only when the job did not succeed (as chronic does; for cron); the exit code is the same",
    )
    c.add_argument("argv", nargs=argparse.REMAINDER, help="-- COMMAND...")


def args_wait(c: argparse.ArgumentParser) -> None:
    c.add_argument("ids", nargs="+", metavar="ID")
    c.add_argument("--next", action="store_true", help="return when the first of them ends")
    c.add_argument("--timeout", metavar="T", help="stop waiting after T (124)")
    c.add_argument("-q", "--quiet", action="store_true", help="print nothing; the exit code says it")
    c.add_argument(
        "--json", action="store_true", help="print the records: an array, whatever the number of ids (qex schema wait)"
    )


def args_status(c: argparse.ArgumentParser) -> None:
    c.add_argument("id", metavar="ID")
    c.add_argument("--wait", action="store_true", help="wait for the end; print the record")
    c.add_argument("-f", "--follow", action="store_true", help="stream the output until the end; return its code")
    c.add_argument("-q", "--quiet", action="store_true", help="print nothing; the exit code says it (100: not stopped)")
    c.add_argument(
        "--json",
        action="store_true",
        help="print the records: an array, one for a job, a group's in submission order (qex schema list)",
    )
    c.add_argument("--all", action="store_true", help="a group: every record in words, not the summary")
    c.add_argument(
        "--word",
        action="store_true",
        help="print one word and exit 0: running (queued or running), "
        "success (completed) or failed (any other end; a group: once none is active, unless all "
        "completed): the status command of a workflow manager (qex help workflows)",
    )
    c.add_argument(
        "--show-env",
        action="store_true",
        help="also print the job's environment (your jobs only; --json: each record's env)",
    )
    c.add_argument("--timeout", metavar="T", help="with --wait/--follow: stop waiting after T (124)")


def args_list(c: argparse.ArgumentParser) -> None:
    from qex.base.states import STATES

    c.description = (
        f"{c.description}. ELAPSED counts: queued, the time in the queue so far; running, since "
        "it started; ended, from its start to its end. STARTED and ENDED are local clock times."
    )
    c.add_argument(
        "--state",
        action="append",
        default=[],
        type=_state_list(STATES + ("active", "final")),
        metavar="S[,S...]",
        help=f"only these states (a comma list, repeatable): {', '.join(STATES)}, active, final",
    )
    c.add_argument("--group", metavar="G")
    c.add_argument("--tag", action="append", default=[])
    c.add_argument("--cwd", metavar="DIR")
    c.add_argument("--name", metavar="NAME", help="only jobs of this name (or a shell pattern: 'train-*')")
    c.add_argument(
        "--since",
        metavar="T",
        help="only jobs active since T: still queued or running, or ended "
        "after it (1h, 2d, or an ISO time: 2025-03-21T14:00)",
    )
    c.add_argument("--last", type=_int("--last"), metavar="N", help="only the newest N (after the other filters)")
    c.add_argument(
        "--format",
        metavar="FIELDS",
        help="the columns, e.g. id,state,elapsed,peak; the fields: "
        "id, name, state, owner, exit, submitted, started, ended, "
        "elapsed, cpu, peak, claims, group, tags, reason",
    )
    c.add_argument(
        "--json",
        action="store_true",
        help="a JSON array (qex schema list): each record with ISO 8601 times (submitted, "
        "started, ended) and elapsed; with --format, those fields",
    )


def args_logs(c: argparse.ArgumentParser) -> None:
    c.description = (
        f"{c.description}. A selection, in this order: --lines, --grep (with -F, -C, --max-count), "
        "--head, --tail. A terminal gets at most the last 1000 lines of a stream given no selection "
        "(it says so); a pipe gets everything. The log keeps no time per line: qex events --json has "
        "the job's times."
    )
    c.add_argument("id", metavar="ID")
    c.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="print the output as it comes until the job ends (takes --grep and -F only)",
    )
    c.add_argument("--head", type=_int("--head"), metavar="N", help="the first N lines (of those chosen)")
    c.add_argument("--tail", type=_int("--tail"), metavar="N", help="the last N lines (of those chosen)")
    c.add_argument("--lines", metavar="A:B", help="lines A to B of the log, from 1 (10:20, 10:, :20, 7)")
    c.add_argument("--grep", metavar="RE", help="only the lines that match (with --follow too)")
    c.add_argument("-F", "--fixed", action="store_true", help="--grep's text is plain text, not a regular expression")
    c.add_argument(
        "-C",
        "--context",
        type=_int("--context"),
        metavar="N",
        help="with --grep: N lines before and after each match too, -- between groups apart",
    )
    c.add_argument("--max-count", type=_int("--max-count"), metavar="N", help="with --grep: the first N matches")
    c.add_argument(
        "-n",
        "--line-numbers",
        action="store_true",
        help="each line's number in the log before it (N: a line, N- a context line)",
    )
    c.add_argument(
        "--json",
        action="store_true",
        help="one object per line: stream, line, text, context (qex schema logs); stdout's lines, then stderr's",
    )
    s = c.add_mutually_exclusive_group()
    s.add_argument("--stdout", action="store_true", help="the job's stdout only")
    s.add_argument(
        "--stderr",
        action="store_true",
        help="the job's stderr only, written to stdout (pipe it); without either: both, each to its own",
    )
    s.add_argument("--hook", action="store_true", help="the output of the stop hook, and its verdict")


def args_events(c: argparse.ArgumentParser) -> None:
    c.add_argument("--json", action="store_true", help="one JSON object per line (qex schema event)")
    c.add_argument(
        "--since",
        metavar="STREAM:SEQ|start|now",
        help="resume after a position (the stream and seq of the last line you read), "
        "from everything the journal holds (start), or only new events (now, the default)",
    )
    c.add_argument("--count", type=_int("--count"), metavar="N", help="stop after N job lines")
    c.add_argument("--timeout", metavar="T", help="stop after T (90s, 30m, ...)")


def args_kill(c: argparse.ArgumentParser) -> None:
    _stop_args(c, "kill")


def args_cancel(c: argparse.ArgumentParser) -> None:
    _stop_args(c, "cancel")


def _stop_args(c, verb: str) -> None:
    """kill and cancel: ids, or a bulk selection of the caller's own active jobs."""
    from qex.base.states import ACTIVE

    c.add_argument("ids", nargs="*", metavar="ID", help="jobs or groups (or select them with the options below)")
    g = c.add_argument_group(
        "select instead of ids: your own queued or running jobs that match every option given; none matched: 127"
    )
    g.add_argument("--tag", action="append", default=[], metavar="T", help="jobs with this tag (repeatable: all)")
    g.add_argument("--group", metavar="G", help="jobs of this group")
    g.add_argument(
        "--state",
        action="append",
        default=[],
        type=_state_list(ACTIVE + ("active",), "active state"),
        metavar="S[,S...]",
        help=f"jobs in these states: {', '.join(ACTIVE)}",
    )
    g.add_argument("--name", metavar="NAME", help="jobs of this name (or a shell pattern: 'train-*')")
    g.add_argument("--mine", action="store_true", help="every queued or running job of yours")
    c.add_argument("--json", action="store_true", help=f"print each job and what was done to it (qex schema {verb})")


def args_clean(c: argparse.ArgumentParser) -> None:
    from qex.base.states import FINAL

    c.add_argument("ids", nargs="*", metavar="ID")
    c.add_argument("--state", action="append", default=[], choices=FINAL)
    c.add_argument("--older-than", metavar="T")
    c.add_argument("--auto", action="store_true", help="apply [store] max_age and max_records")
    c.add_argument("--all", action="store_true", help="every ended job")
    c.add_argument(
        "--json",
        action="store_true",
        help="print what was removed, kept (still needed by queued or running work) and refused",
    )


def args_top(c: argparse.ArgumentParser) -> None:
    c.add_argument(
        "--once", action="store_true", help="print one plain frame (no escape codes) and leave: for a pipe or a script"
    )


def args_info(c: argparse.ArgumentParser) -> None:
    c.add_argument("--json", action="store_true", help="qex schema info")


def args_pause(c: argparse.ArgumentParser) -> None:
    c.add_argument("what", nargs="?", metavar="queue|lock", help="what to pause (none: show the pauses)")
    c.add_argument("name", nargs="?", metavar="NAME", help="the lock (or pool) to hold, after 'lock'")
    c.add_argument("--reason", metavar="TEXT", help="why: every waiting job's reason shows it")
    c.add_argument("--for", dest="duration", metavar="T", help="end by itself after T (90s, 30m, 4h)")
    c.add_argument("--drain", action="store_true", help="then wait until nothing runs (lock: until no job holds it)")
    c.add_argument(
        "--json",
        action="store_true",
        help="alone: the pauses (qex schema pauses); pausing: what was paused (qex schema pause)",
    )


def args_resume(c: argparse.ArgumentParser) -> None:
    c.add_argument("what", nargs="?", metavar="queue|lock", help="what to resume (default: queue)")
    c.add_argument("name", nargs="?", metavar="NAME", help="the lock, after 'lock'")
    c.add_argument("--json", action="store_true", help="print what was resumed (qex schema resume)")


def args_config(c: argparse.ArgumentParser) -> None:
    c.add_argument(
        "action",
        choices=("show", "detect"),
        help="show: the config in force; detect: this machine's GPUs as a [[pool]] block",
    )
    c.add_argument("--json", action="store_true", help="show: qex schema config")
    c.add_argument(
        "--write",
        action="store_true",
        help="detect: add the block to the config file (never changes a pool 'gpu' already there)",
    )
    c.add_argument("--uuid", action="store_true", help="detect: name each whole GPU by its UUID, not its index")


def args_schema(c: argparse.ArgumentParser) -> None:
    from qex.cli.schema import KINDS

    c.add_argument(
        "kind", choices=tuple(KINDS), metavar="KIND", help="; ".join(f"{k}: {what}" for k, what in KINDS.items())
    )


def args_help(c: argparse.ArgumentParser) -> None:
    c.add_argument("topic", nargs="?")


def args_completions(c: argparse.ArgumentParser) -> None:
    c.add_argument("shell", choices=("bash", "zsh", "fish"))


def args_version(c: argparse.ArgumentParser) -> None:
    c.add_argument("--json", action="store_true", help="qex schema version")


def args_init(c: argparse.ArgumentParser) -> None:
    c.add_argument(
        "--shared",
        metavar="DIR",
        required=True,
        help="the directory to make (or repair): setgid, group-writable where needed, private where secrets live",
    )
    c.add_argument("--group", metavar="G", help="the group that shares it (default: your primary group)")
    c.add_argument("--json", action="store_true", help="print what was made (qex schema init)")
