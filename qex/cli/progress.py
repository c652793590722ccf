"""The live line of a wait for several jobs (``qex wait G``), on a terminal only.

One line on stderr, redrawn in place at most four times a second: how many of
the jobs have ended (and how many of those failed), how many run and wait, the
time since the wait began, and an estimate of the rest from the durations of
the jobs that ended. It is erased at the end, and before anything else qex
writes on stderr meanwhile (a note, a lock's holder), so that no line is ever
half overwritten. On a pipe, a file or ``TERM=dumb`` there is no line at all
(``qex.cli.tty``): what a script reads is what it read before.
"""

from __future__ import annotations

import os
import sys
import time

from qex.base.states import FINAL, FINAL_RAN, HOLDING
from qex.base.units import format_duration
from qex.cli import tty

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

    from qex.store.records import Status

EVERY = 0.25  # seconds between two drawings of the line
ERASE = "\r\x1b[K"


class Progress:
    """The live line; inert (every method a no-op) off a terminal or when not ``wanted``."""

    def __init__(self, total: int, wanted: bool = True, stream=None):
        self.stream = sys.stderr if stream is None else stream
        self.on = wanted and tty.can_move(self.stream)
        self.colour = tty.colour_on(self.stream)
        self.total, self.began, self.drawn_at = total, time.monotonic(), 0.0
        self.jobs: dict[str, Status] = {}  # id -> its last record read
        self.shown = False
        self.pid = os.getpid()  # (a supervisor forked by a pass of the wait has stderr on its log: no line there)
        self._saved = None
        if self.on:  # whatever else writes on stderr meanwhile erases the line first
            self._saved, sys.stderr = sys.stderr, _Above(sys.stderr, self)

    def watch(self, notes: Callable[[Status], None] | None) -> Callable[[Status], None] | None:
        """The ``on_record`` of ``await_final``: note each record read, then ``notes``."""
        if not self.on:
            return notes

        def seen(rec: Status) -> None:
            self.jobs[rec.id] = rec
            if notes is not None:
                notes(rec)

        return seen

    def tick(self) -> None:
        now = time.monotonic()
        if self.on and now - self.drawn_at >= EVERY:
            self.drawn_at = now
            self._write(ERASE + self.line(time.time()))
            self.shown = True

    def erase(self) -> None:
        if self.shown:
            self.shown = False
            self._write(ERASE)

    def close(self) -> None:
        """Erase the line and give stderr back (at the end, an interruption or an error)."""
        self.erase()
        if self._saved is not None:
            sys.stderr, self._saved = self._saved, None
        self.on = False

    def line(self, now: float) -> str:
        """The words of the line, cut to the terminal's width (a line that wraps cannot be erased)."""
        states = [j.state for j in self.jobs.values()]
        ended = sum(s in FINAL for s in states)
        failed = sum(s in FINAL and s != "completed" for s in states)
        running = sum(s in HOLDING for s in states)
        bad = f"{failed} did not succeed" if failed else ""
        rest = self.estimate(now)
        tail = (
            f", {running} running, {self.total - ended - running} waiting; "
            f"{format_duration(time.monotonic() - self.began)}"
            + (f", about {format_duration(rest)} left" if rest is not None else "")
        )
        words = f"qex: {ended}/{self.total} ended" + (f" ({bad})" if bad else "") + tail
        cut = max(10, tty.width(self.stream) - 1)
        if len(words) > cut:
            return words[:cut]
        return words.replace(bad, tty.paint(bad, "bad", self.colour)) if bad else words

    def estimate(self, now: float) -> float | None:
        """Seconds until the last job ends: the work left (each waiting job the mean
        duration of those that ended, each running one what it lacks of it) over
        the jobs running at once; None until a job has run to its end."""
        runs = [
            j.ended_at - j.started_at
            for j in self.jobs.values()
            if j.state in FINAL_RAN and j.started_at and j.ended_at
        ]
        if not runs:
            return None
        mean = sum(runs) / len(runs)
        running = [j for j in self.jobs.values() if j.state in HOLDING]
        waiting = self.total - len(running) - sum(j.state in FINAL for j in self.jobs.values())
        work = waiting * mean + sum(max(0.0, mean - (now - (j.started_at or now))) for j in running)
        return work / max(1, len(running))

    def _write(self, text: str) -> None:
        if os.getpid() != self.pid:
            return
        try:
            self.stream.write(text)  # (the terminal's stderr itself, never the wrapper: _Above)
            self.stream.flush()
        except (OSError, ValueError):
            self.on = self.shown = False  # the terminal went away


class _Above:
    """stderr while the line is shown: a write erases the line first; the next tick draws it again."""

    def __init__(self, stream, progress: Progress):
        self._stream, self._progress = stream, progress

    def write(self, text: str) -> int:
        self._progress.erase()
        return self._stream.write(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)
