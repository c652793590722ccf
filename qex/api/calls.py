"""How a Python call travels: pickled with cloudpickle into its job's directory
(``call.pickle``), run by ``qex.api.runner``, its answer read back (``result.pickle``).

The one module of the caller's side that imports ``cloudpickle`` (lambdas,
closures and functions of ``__main__`` or a notebook cell travel by value).
"""

from __future__ import annotations

import os
import pickle
import sys

from qex.base.errors import SpecError
from qex.store.layout import CALL, RESULT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from qex.config.context import Context
    from qex.store.records import Status


def label(fn: Callable) -> str:
    """The name a call's job gets: its function's (``qex.base.units.safe_name``)."""
    from qex.base.units import safe_name

    return safe_name(getattr(fn, "__name__", None) or type(fn).__name__).rstrip("-.") or "call"


def command(ctx: Context, name: str) -> list[str]:
    """The job's command: this interpreter runs the call (``qex.api.runner``)."""
    return [sys.executable, "-m", "qex.api.runner", ctx.store.jobs, name]


def pack(ctx: Context, fn: Callable, args: tuple, kwargs: dict) -> bytes:
    """The call as its job reads it; refused (121) past ``[python] max_input``."""
    import cloudpickle

    try:
        body = cloudpickle.dumps((fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise SpecError(
            f"the call of {label(fn)} cannot be pickled ({type(exc).__name__}: {exc}); "
            "pass what it needs as plain values (or a path to them)"
        ) from None
    data = pickle.dumps({"path": list(sys.path), "call": body}, protocol=pickle.HIGHEST_PROTOCOL)
    limit = ctx.config.python_max_input
    if len(data) > limit:
        from qex.base.units import format_size

        raise SpecError(
            f"the call of {label(fn)} is {format_size(len(data))} pickled (its function and arguments), "
            f"more than [python] max_input ({format_size(limit)}) in the config ({ctx.config.path}); "
            "pass a path to the data instead, or raise max_input"
        )
    return data


def writer(calls: dict[str, bytes]) -> Callable[[str], None]:
    """``submit_many``'s ``prepare``: the call of each job into its directory."""

    def prepare(job_dir: str) -> None:
        data = calls.get(os.path.basename(job_dir))
        if data is not None:
            write(job_dir, data)

    return prepare


def write(job_dir: str, data: bytes) -> None:
    fd = os.open(os.path.join(job_dir, CALL), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def answer(ctx: Context, rec: Status) -> tuple[bool, object]:
    """(True, the value returned) or (False, the exception to raise) for a call's final record."""
    from qex.api.jobs import JobFailed
    from qex.base import outcome

    job_id, state, code = rec.id, rec.state, outcome.exit_code(rec)
    why = rec.error or ""
    try:
        with open(ctx.store.path(job_id, RESULT), "rb") as fh:
            result = pickle.load(fh)
    except (OSError, EOFError, pickle.UnpicklingError):
        result = None
    if result is None:
        return False, JobFailed(
            job_id,
            state,
            code,
            _stderr_tail(ctx, job_id),
            why=why or "the call left no result; its stderr ends as below",
        )
    if result.get("ok") and state == "completed":
        try:
            return True, pickle.loads(result["value"])
        except Exception as exc:
            return False, JobFailed(job_id, state, code, why=f"its value cannot be read here ({exc!r})")
    tb = result.get("traceback") or ""
    if result.get("exc") is not None and state == "failed":
        try:
            exc = pickle.loads(result["exc"])
        except Exception:
            exc = None
        if isinstance(exc, BaseException):
            exc.add_note(f"qex: raised in job {job_id[:8]}; its traceback:\n{tb.rstrip()}")
            return False, exc
    return False, JobFailed(job_id, state, code, tb, why)


def _stderr_tail(ctx: Context, job_id: str, most: int = 2000) -> str:
    """The end of a job's stderr (a call that could not start: no qex or cloudpickle there)."""
    from qex.store.layout import STDERR

    try:
        with open(ctx.store.path(job_id, STDERR), "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - most))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""
