"""Crash points for the crash-consistency tests (tests/crash/); off in normal use.

``QEX_CRASH_AT=<point>:<n>[,<point>:<n>...]`` makes a qex process SIGKILL
itself the n-th time it reaches ``<point>``, so a test can stop a pass between
any two of its writes. A forked child (supervisor, waker) keeps its parent's
counts. Each instrumented module reads the variable once at import::

    _CRASH = "QEX_CRASH_AT" in os.environ   # one dict lookup; False in normal use
    ...
    if _CRASH:
        faults.hit("commit.after_journal")

and imports this module only when it is set. The points (docs/reliability.md):

    fs.after_write        a temp file written, before its fsync   (qex/store/fs.py)
    fs.after_fsync        fsynced, before the rename
    fs.after_rename       renamed into place, before the directory fsync
    journal.torn          half of an append written, then death   (qex/store/journal.py)
    commit.after_journal  the events appended, no status.json yet (qex/store/commit.py)
    commit.after_status   after each status.json of a commit
    history.torn          part of a history append written, then death (qex/store/history.py)
    history.after_append  the history lines of a commit appended, before index.json
    commit.before_index   every status.json written (and any rotation), before index.json
    commit.after_index    the commit done, the lock still held
    supervisor.before_spawn  the pid file's intent line written, before the spawn
    supervisor.after_spawn   the job spawned, before its pid line and running record
    supervisor.before_final  the job ended, before its final record
    supervisor.after_final   the final record and pass committed, before the next forks
    engine.before_fork    before each supervisor fork of a pass   (qex/queue/engine.py)
    engine.early_gate     a supervisor forked before its pass's commit, first thing (before the gate)
"""

import os
import signal

POINTS = (
    "fs.after_write",
    "fs.after_fsync",
    "fs.after_rename",
    "journal.torn",
    "commit.after_journal",
    "commit.after_status",
    "history.torn",
    "history.after_append",
    "commit.before_index",
    "commit.after_index",
    "supervisor.before_spawn",
    "supervisor.after_spawn",
    "supervisor.before_final",
    "supervisor.after_final",
    "engine.before_fork",
    "engine.early_gate",
)


def _parse(text: str) -> dict[str, int]:
    armed = {}
    for item in text.split(","):
        point, _, n = item.strip().partition(":")
        if point:
            try:
                armed[point] = max(1, int(n or 1))
            except ValueError:
                armed[point] = 1
    return armed


_armed = _parse(os.environ.get("QEX_CRASH_AT", ""))
_counts: dict[str, int] = {}


def due(point: str) -> bool:
    """Count one arrival at ``point``; True on the armed n-th one."""
    if point not in _armed:
        return False
    _counts[point] = _counts.get(point, 0) + 1
    return _counts[point] == _armed[point]


def die() -> None:
    """Die as SIGKILL would: no cleanup, no flush, no exception handler."""
    os.kill(os.getpid(), signal.SIGKILL)
    os._exit(137)  # not reached


def hit(point: str) -> None:
    if due(point):
        die()
