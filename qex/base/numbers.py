"""Every number qex reads back from a file: one check, and the bounds it holds them to.

A state directory that several users share is written by each of them, and
any one of them can put ``1e308``, ``NaN``, ``-2``, ``"1"`` or ``true`` where
a number belongs. Read as it is, such a value ends a command in a traceback
far from the file (``int(1e308 * 1000)`` is an OverflowError), or lets a pass
admit more than the budget holds (a claim of -2 cores frees two). So every
number read from a job record, the active index, a journal event, a peer
record, a pause file, learn.json or a pid file goes through ``number`` (or
``ok``): an int or a float (never a bool, which JSON's ``true`` becomes),
finite, from ``least`` (0 unless said) to one of the bounds below. Each
caller decides what a failed number costs (a record or an index entry is left
out of the pass and named, a peer record is ignored, a pause file holds as a
damaged one, a learned value is passed over); none of them checks a number
itself (``tests/test_rules.py`` holds them to it).

The bounds are what no machine reaches, not what this one has: a number above
one is damage, never a big job. What qex accepts from a person (``--cpu``,
``--mem``, ``--retries``, the config) is bounded by the same names, so that
what qex writes, it reads back.
"""

from __future__ import annotations

CORES = 1 << 20  # cores: a claim, a budget, a peer's job
MILLICORES = CORES * 1000  # the same in millicores (the index, admission)
BYTES = 1 << 62  # memory and sizes, in bytes
COUNT = 1 << 20  # units of a pool, retries, config counts, a record's format
DEVICE = 4095  # the highest device index of an indexed pool (4096 devices)
SEQ = 1 << 62  # sequence numbers, journal offsets, counters, attempts
INODE = (1 << 64) - 1  # an inode number (64 bits on every Linux file system)
PRIORITY = 1 << 62  # a priority, from -PRIORITY to PRIORITY
TIME = 32503680000.0  # a time, seconds since 1970: up to the year 3000
DURATION = 1e15  # a duration in seconds (timeouts, queue limits, time paused)
DEADLINE = TIME + 2 * DURATION  # a --max-queue-time deadline: a time plus a limit plus the time paused
PID = 1 << 22  # a process id (Linux's pid_max is at most 2**22)
UID = (1 << 32) - 2  # a user id ((uid_t) -1 is nobody)
EXIT = 255  # an exit status


class BadNumber(ValueError):
    """A value that is not a number within its bounds; the message says what it is."""


def ok(value: object, most: float, least: float = 0, whole: bool = False) -> bool:
    """Whether ``value`` is an int (or, unless ``whole``, a float) from ``least`` to
    ``most``. A bool is no number; NaN and the infinities fail every bound."""
    kind = type(value)
    return (kind is int or (kind is float and not whole)) and least <= value <= most


def all_ok(data: dict, bounds: tuple) -> bool:
    """Whether every number of ``data`` that ``bounds`` names, ((key, least, most, whole), ...),
    is ``ok``; a missing one or None passes. ``ok`` in one frame, for the fast look at each
    entry of an index a pass loads (a thousand entries: under half a millisecond)."""
    get = data.get
    for key, least, most, whole in bounds:
        value = get(key)
        if value is None:
            continue
        kind = type(value)
        if not ((kind is int or (kind is float and not whole)) and least <= value <= most):
            return False
    return True


def number(value: object, most: float, least: float = 0, whole: bool = False) -> int | float:
    """``value`` if ``ok``; else BadNumber, whose message says what it is and what was wanted."""
    if ok(value, most, least, whole):
        return value
    raise BadNumber(f"{shown(value)} is not a {'whole ' if whole else ''}number from {shown(least)} to {shown(most)}")


def optional(value: object, most: float, least: float = 0, whole: bool = False) -> int | float | None:
    """``number``, or None for None."""
    return None if value is None else number(value, most, least, whole)


def shown(value: object) -> str:
    """A value in a message, short whatever it is (a 400-digit int, NaN, a string)."""
    kind = type(value)
    if kind is bool or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if kind is int:
        return str(value) if value.bit_length() <= 64 else f"a whole number of {value.bit_length()} bits"
    if kind is float:
        return repr(value) if value == value else "NaN"  # (repr says nan: JSON and Python say NaN)
    if kind is str:
        return f"the text {value[:20]!r}" + ("..." if len(value) > 20 else "")
    return f"a JSON {'object' if kind is dict else 'array' if kind is list else kind.__name__}"
