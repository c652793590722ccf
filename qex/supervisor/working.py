"""The supervisor's working record, and how an attempt ended: records, as everywhere
qex reads and writes a job (docs/design.md, "Records").

``Working`` is the job's record as the supervisor last read or wrote it, and what it
knows that the record does not say yet: a job spawned whose 'running' is not recorded
yet (``starting.RUNNING_AFTER``), the attempt's ``Outcome`` (``ending.classify``, or a
start that failed), or that the job is no longer this process's to run. A long job's
supervisor hands the record's JSON to the watcher it execs into (``slim``); the full
qex after it loads it again (``handoff``)."""

from __future__ import annotations

from qex.base.plain import Plain
from qex.store.records import LogsDropped, Status, Usage


class Outcome(Plain, frozen=True):
    """How an attempt ended, as its supervisor saw it, or why it never started; the final
    pass may change its words and state (``memory.settle``: a kill wins over OOM)."""

    state: str  # completed, failed, oom, killed or timeout
    ended_at: float  # when it ended, seconds since the epoch
    started_at: float | None = None  # when it started; null: it never did
    exit_code: int | None = None  # its exit code; null when a signal ended it or it never ran
    signal: str | None = None  # the signal that ended it
    error: str | None = None  # what went wrong, in words
    oom_evidence: str | None = None  # why it is oom (see Attempt.oom_evidence)
    vram_over: str | None = None  # its VRAM above what it was given, in words
    usage: Usage | None = None  # what it used; null: it never ran (the record keeps its own)
    logs_dropped: LogsDropped | None = None  # what the output limit left out; null: it never ran

    def recorded(self) -> dict:
        """The fields the job's record takes from it, its state aside (what was not
        measured, the record keeps)."""
        fields = {n: getattr(self, n) for n in self._fields if n != "state"}
        for name in ("usage", "logs_dropped"):
            if fields[name] is None:
                del fields[name]
        return fields


class Working(Plain, frozen=True):
    """The job's record as the supervisor last read or wrote it, and what it has not
    recorded yet."""

    rec: Status
    unrecorded: bool = False  # spawned; 'running' (rec's pid, start) not recorded yet
    outcome: Outcome | None = None  # how the attempt ended: the final pass records it
    abandon: bool = False  # no longer this process's job: it stops it and records nothing
