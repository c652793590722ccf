"""Small helpers shared by the command modules: output, id files, the context."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def print_json(obj: object) -> None:
    """``obj`` as one line of JSON; a record (``qex.base.plain.Plain``) as its dict."""
    import json

    from qex.base.plain import json_value

    sys.stdout.write(json.dumps(json_value(obj), indent=None, sort_keys=True) + "\n")


def context() -> Context:
    from qex.config.context import Context

    return Context.load()


def reading_context() -> Context:
    """The context of a command that only reads (list, status, info, logs): it also
    makes sure a live waker will start this user's queued work (a waker can be
    SIGKILLed; then any qex command of the user's revives it)."""
    from qex.supervisor.become import revive_waker

    ctx = context()
    revive_waker(ctx)
    return ctx


def write_id_file(path: str, lines: list[str]) -> None:
    """Write and fsync the id file before any wait begins."""
    from qex.base.errors import RefusedError

    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, ("\n".join(lines) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise RefusedError(f"--id-file: cannot write {path}: {exc.strerror}") from None
