"""The text of `qex help cron` (its own module: helptext.py holds the short topics).
Each recipe is a line of the crontab that tests/e2e/test_cron.py runs under a real cron."""

CRON = """\
qex in a crontab: cron mails whatever a line prints, so qex prints nothing
unless a person must read it. (docs/cron.md says more.)

Mail only on failure (as chronic does):
  */10 * * * * qex run --output on-failure --name backup -- ./backup.sh
    the job's output is held (every byte, in a temporary file) and printed,
    after a one-line verdict on stderr, only when the job did not succeed;
    the exit code is the job's either way. A tick that finds the job of the
    same --dedupe-key still running joins it and prints nothing again.

Nightly, never two at once, nothing mailed:
  0 2 * * * flock -n ~/.nightly.lock qex submit --quiet --dedupe-key nightly --name nightly -- ./nightly.sh
    --dedupe-key: while a job of that key is queued or running, a submission
    starts nothing and exits 0; --quiet: no id, no "deduplicated" notice (a
    warning -- a job that looks stuck -- still says so). qex leaves no process
    holding the flock: the next tick takes it. A submitted job's failure
    reaches you through the stop hook:
      [hooks]
      on_stop = ["sh", "-c", "echo \\"$QEX_JOB_NAME $QEX_STATE (exit $QEX_EXIT_CODE): qex logs $QEX_JOB_ID\\" | mail -s \\"qex: $QEX_JOB_NAME $QEX_STATE\\" $(id -un)"]
      on_stop_states = ["failed", "killed", "timeout", "oom", "expired"]

A pipeline from cron:
  0 3 * * * qex wait --quiet "$(qex pipeline --quiet ~/nightly.toml)" || qex status nightly
    pipeline --quiet prints only the group id; wait --quiet prints nothing and
    returns the group's code; on a failure, the group's status is mailed.

Cron's environment is bare: qex needs no setup, but put it on the crontab's
PATH (PATH=/home/me/.local/bin:/usr/bin:/bin), or cron mails "qex: not found"
and the line's code is the shell's 127. Ended records past [store] max_age
(30 days) and max_records (10,000) are removed by qex itself, at most every
[store] prune_every (10 minutes), never one that queued or running work needs.
"""
