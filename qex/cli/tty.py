"""What qex draws on a terminal, decided once: colour, and a live line or screen.

Colour only on a terminal, never in a pipe or a file; never when ``NO_COLOR`` is
set to anything (https://no-color.org) or ``TERM`` is ``dumb`` (or unset). A live
line (``qex wait``'s progress) or a full screen (``qex top``) only on a terminal
that can move its cursor: not ``TERM=dumb``. ``qex top`` (curses) and every
coloured line take their colours from ``TONE`` here, by the kind of a state.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from typing import TextIO

# The kind of each state, for its colour: good, bad, active, waiting, or quiet (gave up without running).
TONE = {
    "completed": "good",
    "running": "active",
    "starting": "active",
    "queued": "waiting",
    "failed": "bad",
    "oom": "bad",
    "timeout": "bad",
    "killed": "bad",
    "expired": "quiet",
    "cancelled": "quiet",
    "skipped": "quiet",
}
# ANSI SGR of each kind (the terminal's own palette: 32 green, 31 red, 33 yellow, 36 cyan, 2 dim).
SGR = {"good": "32", "bad": "31", "active": "36", "waiting": "33", "quiet": "2", "bold": "1"}


def can_move(stream: TextIO) -> bool:
    """A terminal whose cursor qex may move: a live line, a full screen."""
    try:
        if not stream.isatty():
            return False
    except (AttributeError, ValueError, OSError):
        return False
    return os.environ.get("TERM", "") not in ("", "dumb")


def colour_on(stream: TextIO) -> bool:
    """Colour for this stream: a terminal that can take it, and no NO_COLOR."""
    return not os.environ.get("NO_COLOR") and can_move(stream)


def paint(text: str, kind: str | None, on: bool) -> str:
    """``text`` in the colour of ``kind`` (a key of ``SGR``) when ``on``; else as it is."""
    if not on or kind is None or kind not in SGR or not text:
        return text
    return f"\x1b[{SGR[kind]}m{text}\x1b[0m"


def width(stream: TextIO, fallback: int = 80) -> int:
    """The terminal's columns (``fallback`` when it has none)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns or fallback
    except (AttributeError, ValueError, OSError):
        return fallback
