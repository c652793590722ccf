"""One exit code that means one thing: a record's code for the job commands."""

from __future__ import annotations

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from typing import Protocol

    class Ended(Protocol):
        """What the code is made of: a job's record (``qex.store.records.Status``)."""

        seq: int
        state: str
        exit_code: int | None
        signal: str | None
        supervisor_lost: bool


JOB_CODES = {"oom": 99, "expired": 123, "killed": 125, "timeout": 125, "cancelled": 125, "skipped": 126}
NOT_STOPPED = 100
REFUSED = 121
INTERRUPTED = 122
WAIT_LIMIT = 124
NO_SUCH_JOB = 127


def exit_code(rec: Ended) -> int:
    """The exit code of the contract for a job record (100 while it has not stopped)."""
    return code_of(rec.state, rec.exit_code, rec.signal, rec.supervisor_lost)


def code_of(state: str | None, code: int | None, signal: str | None, supervisor_lost: bool) -> int:
    """``exit_code`` from the fields it reads (a row of ``qex list``: a dict)."""
    if state == "completed":
        return 0
    if state in JOB_CODES:
        return JOB_CODES[state]
    if state != "failed":
        return NOT_STOPPED
    if supervisor_lost:
        return 125  # qex ended it: its supervisor was lost and what was left of it was stopped
    if code is not None:
        return code if code <= 96 else 97
    if signal:
        return 98
    return REFUSED  # it never ran (the program could not be started)


def group_exit_code(records: list[Ended]) -> int:
    """0 if every job succeeded, else the code of the first (submission order) that did not."""
    for rec in sorted(records, key=lambda r: r.seq):
        code = exit_code(rec)
        if code != 0:
            return code
    return 0
