"""The text of `qex help agents` (its own module; docs/agents.md and skills/qex/SKILL.md are the same text,
tests/e2e/test_json.py keeps them equal)."""

AGENTS = """\
qex for agents and scripts

Never parse the words qex prints for people: every command that reports or
changes something takes --json, and `qex schema KIND` describes what it prints
(every field has a description). Never poll `qex list` in a loop: wait for a
job with `qex wait`, or for many with one `qex events --json` stream.

Submit, keep the id, wait:
  ID=$(qex submit --cpu 2 --mem 4GB -- ./build.sh)   # stdout is the id, nothing else
  qex submit --json --id-file job.id -- ./build.sh    # {"id", "deduplicated"}; the id also
                                                     # in job.id, fsynced before any wait
  qex wait "$ID"; echo $?                            # one exit code that means one thing
  qex wait --json "$ID"                              # an array of records (qex schema wait)
  qex status --json "$ID"                            # an array too: one record for a job,
                                                     # a group's in order (qex schema list)
  qex run -- pytest -x                               # submit, stream the output, return its code

What submit takes (all optional; qex help resources, qex help job-file):
  --cpu N --mem 4GB --gpu N --vram 20GB --claim NAME=N --lock NAME    claims
  --name NAME --tag T --priority N --timeout 2h --max-queue-time 30m
  --needs ID,... (runs only if they succeed) --after ID,... (when they end)
  --retries N --env K=V --cwd DIR --job FILE (TOML, YAML or JSON)
  qex submit --each-line FILE -- CMD {}    one job a line: prints a group id
  qex pipeline FILE                        stages with needs/after: a group id
A group id (or name) works wherever a job id does: wait, status, kill, ...

Coming back to a session: submit again with the same --dedupe-key KEY and get
the id of the job that holds it (`"deduplicated": true`) instead of a second
job; --dedupe-window T also finds one that completed within T.

Many jobs from one stream:
  qex events --json --since start       # one object per line (qex schema event)
  ... --since STREAM:SEQ                # resume after the last line you read
Read "event" first and ignore a kind you do not know; a "job" line has the
whole record in "job"; a "gap" line says events were lost: look again with
qex status --json.

Why a job waits: its record's blocked_reason (words) and blocked_holder (one
stable word: own, peer, outside, oversized, lock, person, pause, dependency,
front, device, owner; `qex schema status` says what each means).

Errors are data: under --json a failure prints one JSON object on stderr,
  {"error": sentence, "code": exit code, "kind": word, "option": ..., "value": ...}
with the same exit code as without --json (qex schema error). Under --json every
other line on stderr is JSON too: {"level": "warning"|"notice", "message": ...}
(qex schema message), e.g. a bare --mem size, a pause the new job waits for, a
lock qex waits for. Tell them apart by the key "error". kind is stable:
usage, spec, refused, config, lock_timeout, no_such_job, ambiguous, store,
permission, broken_record, interrupted, ended, running, not_paused,
not_cleaned, error; option and value name the option at fault and the value
given, where one is.

Stopping and cleaning: qex kill --json, qex cancel --json print each job and
what was done to it (exit 1 when a job you named could not be); qex clean
--json prints what was removed, kept and refused. In bulk, instead of ids:
  qex kill --tag sweep-3 --json     # your queued and running jobs with that tag
  qex cancel --name 'train-*'       # also --group G, --state S, --mine (all yours)
Every option given must match; only your own jobs are ever selected; none
matched is 127, as an id that names nothing.

A job's output: qex logs ID --json prints one object per line (stream, line,
text, context; qex schema logs). Choose lines with --lines A:B, --head N,
--tail N, --grep RE (-F plain text, -C N context, --max-count N). The log
keeps no time per line: qex events --json has each change's time.

Schemas: qex schema KIND, KIND one of status event job pipeline submit group
rerun list wait logs kill cancel clean info config pause pauses resume version
init error message. Units are the records' everywhere: cores as numbers (0.5),
bytes as integers, times in seconds since the epoch, durations in seconds.

Exit codes (submit, run, pipeline, rerun, wait, status --wait|--follow|--quiet):
  0-96  the job's own code              121  qex could not do it; no job ran:
  97    the job exited 97-255                 read the error, fix, try again
  98    a signal ended it                122  your wait was interrupted; the job
  99    out of memory: raise --mem            goes on: wait again
  100   not stopped (status --quiet)     123  it expired in the queue
  124   your wait's limit; wait again    125  kill, cancel, --timeout stopped it
  126   a job it needed failed           127  no such job or group
Other commands: 0 success, 1 failure, 2 bad command line (a bad option or
value: fix the command), 127 no such job (kill/cancel: nothing selected).

Rules a script can rely on:
  - stdout of submit carries only the id (or JSON with --json); messages go to stderr.
  - 127 means "no job or group with that id" and nothing else; on submit, run,
    pipeline, rerun and wait a bad command line is 121, never 2 (a job's code).
  - an ID is a job id, a prefix of 4 or more characters, a name, a group id or
    a group's name. A name names the queued or running job of that name, else
    the newest ended one: `qex submit --name x ...; qex wait x` works however
    fast the job ends. Two active jobs of one name are ambiguous (listed).
  - a submission is either fully queued or absent, even if qex is killed mid-way.
  - the caller may vanish: a detached supervisor holds each job and records its end.
  - --max-queue-time T: a job that has not started after T ends expired (123).
  - qex run is a pipe: every byte of the job's stdout reaches your stdout and
    of its stderr your stderr, in order, whatever [logs] max_bytes keeps on
    disk; your stdin reaches the job until its end of file, as with ssh (give
    `< /dev/null` or --stdin FILE in a loop that reads its own stdin). Your
    stdout closed early (`qex run ... | head`) stops the job, as a pipe does.
  - qex submit gives a job /dev/null as stdin; --stdin FILE gives it FILE
    (opened when it starts), --stdin - a copy of your stdin (at most 64MiB).
  - what qex leaves running (a supervisor, the waker, the hook runner) holds
    none of your descriptors: `flock -n LOCK qex submit ...` frees LOCK when
    submit returns. ps calls them `qex: supervisor of ID`, `qex: waker ...`.
"""
