"""A job's manners as submitted: its niceness, I/O class and oom_score_adj, from its
options (``--nice``, ``--io-class``, ``--oom-score-adj``, a job file's keys) or
``[politeness]``, checked, and what it will get when its user may not give it what it
asks (``qex.linux.manners.effective``: a sentence each, on stderr at submission)."""

from __future__ import annotations

from qex.base import numbers
from qex.base.errors import SpecError
from qex.config.keys import IO_CLASSES

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context


def resolve(ctx: Context, nice: int | None, io_class: str | None, oom: int | None) -> tuple[int, str, int, list[str]]:
    """(niceness, I/O class, oom_score_adj, sentences) of a job that asks for these (None: the config's)."""
    config = ctx.config
    nice = config.nice if nice is None else _bounded(nice, "--nice", -20, 19)
    oom = config.oom_score_adj if oom is None else _bounded(oom, "--oom-score-adj", -1000, 1000)
    io_class = config.io_class if io_class is None else io_class
    if io_class not in IO_CLASSES:
        raise SpecError(
            f"--io-class: {numbers.shown(io_class)} is not an I/O class; use one of {', '.join(IO_CLASSES)}"
        )
    from qex.linux import manners

    nice, oom, said = manners.effective(nice, oom)
    return nice, io_class, oom, said


def _bounded(value: object, option: str, least: int, most: int) -> int:
    if not numbers.ok(value, most, least, whole=True):
        raise SpecError(f"{option}: {numbers.shown(value)} is not a whole number from {least} to {most}")
    return value
