"""What qex says on stderr besides the error that ends a command: a warning (something
to look at: the job was queued all the same) or a notice (what happened, for a person).

The one place that prints them. For a person: ``qex: warning: SENTENCE`` and
``qex: SENTENCE``. When the command was given ``--json`` (``qex.cli`` calls ``json_on``
once it has parsed the command line), one JSON object per line instead,
``{"level": "warning"|"notice", "message": SENTENCE}`` (``qex schema message``), so
that under ``--json`` every line on stderr is JSON: a message, or the error object
(``{"error", "code", "kind", ...}``) that ends a failed command. A process forked from
the command (a supervisor, the waker) speaks to its log in words again: the switch
holds in the process that set it only.
"""

from __future__ import annotations

import os
import sys

LEVELS = ("warning", "notice")
_json_pid = [0]  # the pid that asked for JSON (0: none)


def json_on() -> None:
    _json_pid[0] = os.getpid()


def as_json() -> bool:
    return _json_pid[0] == os.getpid()


def warning(sentence: str) -> None:
    _put(sentence, "warning")


def notice(sentence: str) -> None:
    _put(sentence, "notice")


def _put(sentence: str, level: str) -> None:
    if as_json():
        import json

        text = json.dumps({"level": level, "message": sentence}, sort_keys=True)
    else:
        text = f"qex: warning: {sentence}" if level == "warning" else f"qex: {sentence}"
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass  # no stderr to say it on: what it says is not worth failing for
