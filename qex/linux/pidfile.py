"""A job's pid file (``jobs/<id>/pid``; its name: ``qex.store.layout.PID``): what a later pass stops a lost job by.

One line, written by the job's supervisor (truncated first at each write):

    - <supervisor pid> <its start time> [<cgroup kind> <cgroup path>]   the intent, just before the spawn
    <job pid> <its start time> [<cgroup kind> <cgroup path>]            the job, once it runs

A start time (``/proc/<pid>/stat`` field 22) makes a pid provably the job's:
a reused pid has another. The cgroup, when the job has one, is all of the job
(``qex.linux.cgroup``). A file that says neither (empty, cut short) was being
written when its supervisor died, around the spawn: the job may have run.
This module is the one reader and writer of that format.
"""

import os

from qex.base import numbers

_READ = 4096


def write(path: str, pid: int | str, start: int | str | None, mode: int = 0o600, note: str = "") -> None:
    """``<pid> <start time>`` of the job, or the supervisor's intent (``pid`` is ``-``
    and ``start`` the supervisor's ``<pid> <start>``), then the job's cgroup if it has
    one (``note``: ``cgroup.note``). A start time that cannot be read is ``0`` when a
    note follows it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    try:
        if mode != 0o600:
            os.fchmod(fd, mode)  # other users' passes read it (a shared directory)
        os.write(fd, f"{pid} {start if start is not None else ('0' if note else '')}{note}\n".encode())
    finally:
        os.close(fd)


def _words(path: str, limit: int = 64) -> list[bytes]:
    """The words of a pid file of this user's (one link): a file anyone else made
    is never a reason to signal anything."""
    from qex.store import fs

    return fs.read_bytes(path, limit, owner=os.getuid()).split()


def launched(path: str) -> tuple[int, int | None] | None:
    """(job pid, its start time or None) from a job line; None for an intent line,
    an empty or cut file, or none."""
    try:
        parts = _words(path)
        return _pid(parts[0]), (numbers.number(int(parts[1]), numbers.SEQ) if len(parts) > 1 else None)
    except (OSError, ValueError, IndexError):
        return None


def intent(path: str) -> int | None:
    """The pid of the supervisor whose intent line is there (it was about to spawn
    the job: the job may have run); None: no such line."""
    try:
        parts = _words(path)
        return _pid(parts[1]) if parts[0] == b"-" else None
    except (OSError, ValueError, IndexError):
        return None


def _pid(word: bytes) -> int:
    """A process id of the file (``qex.base.numbers``: never 0 nor negative, which kill
    reads as a process group or every process); ValueError if it is none."""
    return numbers.number(int(word), numbers.PID, 1)


def cgroup_note(path: str) -> tuple[str, str] | None:
    """(kind, path) of the cgroup the line names, or None (no file, or no note)."""
    from qex.store import fs

    try:
        words = fs.read_bytes(path, _READ).decode().rstrip("\n").split(" ")
    except (OSError, UnicodeDecodeError):
        return None
    rest = words[3:] if words[0] == "-" else words[2:]
    return (rest[0], " ".join(rest[1:])) if len(rest) >= 2 else ("", "")
