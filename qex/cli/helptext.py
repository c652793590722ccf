"""qex help TOPIC (qex completions SHELL: qex.cli.completion)."""

from __future__ import annotations

from qex.base.errors import UsageError
from qex.cli.common import out
from qex.cli.help_agents import AGENTS
from qex.cli.help_cron import CRON
from qex.cli.help_python import PYTHON
from qex.cli.help_resources import RESOURCES
from qex.cli.help_slurm import SLURM
from qex.cli.help_workflows import WORKFLOWS

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from argparse import Namespace

BANNER = """\
qex: a daemonless job queue for one shared machine.

  ID=$(qex submit --cpu 2 --mem 4GB -- ./build.sh)   queue a job; stdout is its id
  qex wait "$ID"                                     wait; its exit code is the job's
  qex run -- pytest -x                               submit, stream the output, return its code

Every command: qex --help.  For scripts and agents: qex help agents.
"""

CONFIG_KEYS = "{CONFIG_KEYS}"  # in a topic: the key lines of the config, made from its table of keys

TOPICS = {
    "agents": AGENTS,
    "exit-codes": """\
Exit codes of submit --wait/--follow, run, wait, status --wait|--follow|--quiet:

  0-96  the job's own exit code
  97    the job exited with 97-255 (the record holds the code)
  98    a signal that qex did not send ended the job
  99    the kernel stopped the job for memory (state oom)
  100   the job has not stopped (status --quiet without a wait)
  121   qex could not do what was asked; no job ran
  122   your wait was interrupted (Ctrl-C, SIGTERM, SIGHUP); the job continues
  123   the job gave up in the queue (--max-queue-time, state expired)
  124   your wait reached its own limit; the job continues
  125   something stopped the job: kill, cancel, --timeout, a signal to qex run
  126   a job it needed did not succeed (state skipped)
  127   no job or group with that id (from qex; the shell also returns 127
        when it finds no command: qex not on the PATH, as in a crontab's
        bare PATH -- its stderr says "not found")

On these commands a bad command line (an unknown option, a missing argument,
an ambiguous id or name) is 121, never 2: 2 is a job's own code there.
Other commands: 0 success, 1 failure, 2 bad command line, 127 no such job.

Ctrl-C, SIGTERM or SIGHUP while a command waits:
  qex run owns its job: a job still queued is cancelled (it never runs), a
    running one is killed with every process it started; run then returns
    125 (a second Ctrl-C stops waiting at once).
  submit --wait|--follow, status --wait|--follow and wait stop waiting and
    leave the job alone: 122, and they say so on stderr.

A command waits for the state directory's lock: after 2 s it says on stderr
who holds it (pid, user, command), and after --lock-timeout SECONDS (any
command; default QEX_LOCK_TIMEOUT, else 60) it gives up with 121, nothing
done. A job's supervisor and the waker wait as long as it takes.
A group wait returns 0 if every job succeeded, else the code of the first
job (in submission order) that did not.
""",
    "states": """\
queued -> starting -> running -> completed | failed | killed | timeout | oom
queued -> expired | cancelled | skipped (without running)

  queued     waits; `blocked_reason` says for what and who holds it
  starting   admitted; its supervisor is starting it
  running    its supervisor holds it (liveness is a held lock, not a pid)
  completed  exit code 0
  failed     a non-zero code, a signal, or its supervisor was lost (error says so)
  killed     qex kill, or a signal to its qex run (or its supervisor got SIGTERM)
  timeout    --timeout passed
  oom        the kernel stopped it for memory (oom_evidence says how qex knows);
             retried with a doubled claim while --oom-retries allows
  expired    --max-queue-time passed before it started
  cancelled  qex cancel, qex kill, or a signal to its qex run, while it was queued
  skipped    a job it --needs did not succeed
""",
    "resources": RESOURCES,
    "cron": CRON,
    "python": PYTHON,
    "slurm": SLURM,
    "workflows": WORKFLOWS,
    "config": """\
The config file: $QEX_CONFIG, else $XDG_CONFIG_HOME/qex.toml, else
~/.config/qex.toml. Missing = the defaults. A file that cannot be read, a
FIFO, a directory, an unknown key or a bad value is an error that names the
file, the key and the remedy -- never the defaults in silence. So is a file
that anyone but you or root could change, as ssh refuses such a key file
(its stop hook runs as you): another user's file, or one that its group or
every user may write, or a directory above it that is not sticky (a group
that is its owner's own private group does not count). The refusal says
what to chmod. `qex info` shows the stop hook in force and whose file it is.

{CONFIG_KEYS}

`qex config show` prints every value in force and where it came from.

The output limit ([logs] max_bytes, read when a job starts) is enforced while
the job writes: the file keeps the first quarter of the limit, one marker line
that says how many bytes and lines went and which setting to change, and the
newest output; it never holds more than the limit plus the marker, and a job
never fails because of it. `qex status` and `qex logs` say how much went
(`logs_dropped` in the record). The limit is about the file only: qex run and
submit --follow get every byte. `qex logs --follow` reads on across the cut;
what the limit cut before it could read it is said on stderr, never in the
data, and it then exits 1.

The stop hook ([hooks], read when a job ends): on_stop runs, with no shell, in
the job's record directory, once for each job that reaches a state in
on_stop_states (default: completed, failed, killed, timeout, oom, expired),
after the record is on disk and after the next job is started. It gets
QEX_JOB_ID, QEX_JOB_NAME, QEX_STATE, QEX_EXIT_CODE, QEX_SIGNAL,
QEX_ELAPSED_SECS, QEX_CWD, QEX_JOB_DIR, QEX_ATTEMPTS, QEX_MAX_RSS, QEX_TAGS
(empty when there is no value), its own process group, TERM then KILL at
`timeout`, and at most 1MB of output in hook.log: `qex logs ID --hook` shows
it with the verdict. It never runs twice for a job (hook.ran is made first).
""",
    "events": """\
qex events: one line per change of state of any job, as it happens

  qex events                        new events from now on, in words
  qex events --json --since start   everything the journal holds, then follow
  qex events --json --since S:N     resume after the last line you read
  qex events --count N              stop after N job lines   (--timeout T: after T)

Every line carries a position, `stream` and `seq`. Keep the last one you read
and give it back with --since STREAM:SEQ: you lose nothing and see nothing
twice, as long as the journal still holds the next event.

The lines (--json; `qex schema event` gives the schema; ignore a kind you do
not know):
  stream  the first line: the position the output starts after (stream null:
          nothing has happened yet; resume with --since start)
  job     one change of one job: id, name, state, previous (null on a job's
          first line), change (state; reason: the blocked_reason or another
          field changed; vram: its VRAM went above its claim, vram_over),
          job (the whole record, as qex status --json)
  gap     events you cannot have: missed (how many, or null when it cannot be
          counted: a position from another stream), next_seq, reason

Each event is written by the process that made the change, under the queue's
lock, so none is missed: a job that runs `true` shows queued -> starting ->
running -> completed. The journal (journal.jsonl in the state directory)
rotates by size (QEX_JOURNAL_MAX_BYTES, default 8MB; one old file is kept). A
reader takes no lock, follows the file with inotify (a short poll where there
is none), and ends at --count, at --timeout, or when the reader of its output
goes away (| head -1). Exit code 0 in each case.
""",
    "pause": """\
Pause and resume: a pause is a file in <state>/pause/, so it survives every
process and a reboot.

  qex pause queue [--reason TEXT] [--for T] [--drain]
      nothing new starts; running jobs go on, and so do their retries.
      Submissions still succeed (0) and wait. --for ends it by itself (no
      command needed); --drain then waits until nothing runs.
  qex pause lock NAME [--reason TEXT] [--for T] [--drain]
      you hold the lock (or pool) NAME: now if no job holds it, else as soon
      as its holder ends; no job gets it meanwhile. --drain waits until it
      is yours.
  qex resume [queue | lock NAME]  1 when that is not paused
  qex pause [--json]              what is paused, by whom (user, pid of the
                                  shell that paused), until when

Ctrl-C during --drain stops only the wait (exit 1); the pause stays. A bad
target or --for is a bad command line (exit 2).

Every waiting job's reason names the pause (qex list, status, info, wait).
A queue pause stops the --max-queue-time clock of every queued job (the
record's queue_pause_secs); a lock pause does not. A pause already in force
is kept as it is: a second `qex pause queue` keeps the first's end and
reason. A pause for 0 is refused. A pause file that cannot be read holds
what its name says (queue.json the queue, lock-NAME.json the lock) and the
reason says so; `qex resume` removes it. In a state directory shared with
others only its owner (or root) pauses the whole queue; anyone may hold a
lock, and a pause is ended by the person who made it, the owner or root.
""",
    "dedupe": """\
qex submit --dedupe-key KEY ... (also qex run, and dedupe_key in a job file)

While a job of yours with KEY is queued, starting or running, a submission
with the same KEY starts nothing: it prints that job's id on stdout (exit 0)
and says on stderr which job holds the key (--json: {"id": ..., "deduplicated":
true}). The test and the submission are one step under the queue lock: N
submissions at the same instant give one job. The key is free the moment its
job ends, or when its record is cleaned.

  --dedupe-window T   also give a job with KEY that completed (exit 0) within
                      T; a job that failed never holds its key.

A job with KEY that has waited longer than [system] stuck_after (default 1h)
while none of your jobs ran looks stuck (qex status says so too): the
submission still gives its id, and says on stderr that it looks stuck, what
to look at (qex status) and how to let the key go (qex cancel). A claim no
machine this size could hold is refused at submission, so a typo in a
crontab never makes such a job.

`qex run` with a key held by another job follows that job's output and returns
its code; Ctrl-C then stops only your wait (122), never the job. A key is
yours: another user's job with the same key in a shared state directory does
not count. A pipeline stage and a fan-out take no key; `qex rerun` never
keeps it.
""",
    "job-file": """\
qex submit --job FILE (TOML, YAML or JSON by extension). Unknown keys are errors.

  command = ["python", "train.py"]     # or a string, split like a shell would (no shell runs)
  name = "train"
  cwd = "/data/run1"
  tags = ["exp1"]
  priority = 5
  timeout = "4h"
  max_queue_time = "1h"
  retries = 1
  needs = ["prep"]
  dedupe_key = "build:/data/run1"     # see: qex help dedupe
  env_capture = "minimal"
  [env]
  SEED = "1"
  [resources]
  cpu = 4
  mem = "16GB"
  gpu = 1
  vram = "20GB"
  locks = ["dataset"]
  [resources.claims]
  net = 1
  tpu = { count = 2, size = "8GB" }

Options given on the command line win over the file. `qex schema job` gives the schema.
`needs`/`after` name jobs as --needs does: ids, prefixes, a group, or a name (the
queued or running job of that name, else the newest ended one).

Pipelines: `qex pipeline FILE` takes the same tables as a list of stages, each
with a required `name`; `needs`/`after` name other stages of the file, in any order:

  name = "train-run"                   # the group's name (default: the file's stem)
  [[jobs]]
  name = "prep"
  command = ["./prep.sh"]
  [[jobs]]
  name = "train"
  command = ["python", "train.py"]
  needs = ["prep"]                     # runs only if prep completed, else it is skipped (126)
  [jobs.resources]
  cpu = 4
  mem = "16GB"
  [[jobs]]
  name = "cleanup"
  command = ["./cleanup.sh"]
  after = ["train"]                    # runs when train has ended, whatever its result

Every stage is checked before the first is queued (a cycle, an unknown or a
duplicate name, a bad claim: an error and no job); then all are queued at once
as one group, a stage after what it names. The group id goes to stdout, each
stage's id and name to stderr; --id-file FILE gets 'ID NAME' lines, the group
first. The group id (or its name) works wherever a job id does: qex wait G
(0 only if every stage succeeded, else the code of the first in submission
order that did not), status G --json (an array), kill G (stops the running
stages, takes out the queued ones), cancel G, clean G, list --group G, and
--needs G. `qex schema pipeline` gives the schema; `qex rerun ID` submits one
job's spec again under a new id.
""",
    "watch": """\
Watching the queue (and what ran)

  qex top                 live: budget bars, pools and devices, the jobs that run, wait
                          (and why) and ended; read every second, no lock, starts nothing
  qex top --once          one plain frame, for a pipe or a script
  qex wait G              on a terminal, one live line: ended/total, running, waiting,
                          the time so far, an estimate of the rest (erased at the end)
  qex status G            a group in a few lines: each state's count, the jobs that did
                          not succeed (with codes), the running ones, CPU time, peak; --all
  qex list --last 20 --since 2h --state failed,killed --name 'train-*'
  qex list --format id,state,exit,started,elapsed,cpu,peak [--json]

qex top's keys: up/down move, k kill, c cancel (each asks y/n), l the job's
output, / filter, ? help, q quit. Bars: # this queue, = other queues, . free.
ELAPSED: queued, the time in the queue so far; running, since its start;
ended, from its start to its end. list --json adds submitted, started, ended
(ISO 8601, local time and offset) beside the epoch fields, and elapsed (s).
Colour only on a terminal, never with NO_COLOR set; TERM=dumb gets no colour,
no live line, and from qex top one plain frame. A pipe gets what it always did.
""",
    "each-line": """qex submit --each-line FILE|- [options] -- COMMAND ... {} ...

One job per line of FILE (- reads stdin), all in one group:

  G=$(qex submit --each-line inputs.txt --cpu 2 --mem 4GB -- ./process {})
  qex wait "$G"                      # 0 only if every job succeeded
  qex list --group "$G"

  - {} becomes the line, as exactly one argument, wherever it appears: a whole
    argument, inside one (--in={}), or the program itself; {{}} is a literal {}.
    No shell ever runs the line: quotes, ; and $ reach the job verbatim.
  - each line is stripped of surrounding whitespace (and CRLF's CR); empty lines
    and lines that start with # give no job and are counted on stderr; the last
    line counts without its newline.
  - all or nothing: a command with no {}, an unreadable path or a directory, a
    line that is not UTF-8 (the error names it), no usable line, more jobs than
    --max-jobs N (default 1000), input over 64MiB, or an option that means one
    job (--dedupe-key, --dedupe-window, --json, --wait, --follow, --job): an
    error, no job at all.
  - every other option applies to every job; --name names the group (default:
    the file's stem, "stdin" for -).
  - jobs are named prog-007-line-text (program, zero-padded position, the line
    in safe form); stdout carries the group id, stderr each job's id and name.
  - every job keeps the template command (`template` in its record): the
    learner measures them as one task.
  - all N jobs are written in one lock hold and one pass; qex run refuses
    --each-line.
""",
}


def print_help() -> None:
    """qex --help and qex help: the parser's help, then every topic of qex help, once,
    wrapped between words (the parser's formatter and width)."""
    from qex.cli.parser import build

    parser = build()
    parser.print_help()
    formatter = parser._get_formatter()
    out("\n" + formatter._fill_text("Topics (qex help TOPIC): " + ", ".join(sorted(TOPICS)), formatter._width, ""))


def cmd_help(args: Namespace) -> int:
    if not args.topic:
        print_help()
        return 0
    text = TOPICS.get(args.topic)
    if text is None:
        from qex.cli.parser import COMMANDS, build

        if args.topic in COMMANDS:
            build(only=args.topic).parse_args([args.topic, "--help"])
            return 0
        raise UsageError(f"no help topic {args.topic!r}; the topics are: {', '.join(sorted(TOPICS))}")
    if CONFIG_KEYS in text:
        from qex.config.show import help_lines

        text = text.replace(CONFIG_KEYS, "\n".join(help_lines()))
    out(text.rstrip())
    return 0
