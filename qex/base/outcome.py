"""One exit code that means one thing: a record's code for the job commands."""

JOB_CODES = {"oom": 99, "expired": 123, "killed": 125, "timeout": 125, "cancelled": 125, "skipped": 126}
NOT_STOPPED = 100
REFUSED = 121
INTERRUPTED = 122
WAIT_LIMIT = 124
NO_SUCH_JOB = 127


def exit_code(rec: dict) -> int:
    """The exit code of the contract for a job record (100 while it has not stopped)."""
    state = rec.get("state")
    if state == "completed":
        return 0
    if state in JOB_CODES:
        return JOB_CODES[state]
    if state != "failed":
        return NOT_STOPPED
    code = rec.get("exit_code")
    if rec.get("supervisor_lost"):
        return 125  # qex ended it: its supervisor was lost and what was left of it was stopped
    if code is not None:
        return code if code <= 96 else 97
    if rec.get("signal"):
        return 98
    return REFUSED  # it never ran (the program could not be started)


def group_exit_code(records: list[dict]) -> int:
    """0 if every job succeeded, else the code of the first (submission order) that did not."""
    for rec in sorted(records, key=lambda r: r.get("seq", 0)):
        code = exit_code(rec)
        if code != 0:
            return code
    return 0
