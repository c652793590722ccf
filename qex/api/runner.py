"""The job's side of a Python call: ``python -m qex.api.runner JOBS_DIR [LABEL]``.

The submitting program's interpreter runs it, in that program's working directory
and environment (the job's). It reads ``call.pickle`` from its job's directory
(``JOBS_DIR/$QEX_JOB_ID``), takes the caller's ``sys.path``, runs the call and
writes ``result.pickle``: ``{"ok": True, "value": bytes}`` or ``{"ok": False,
"exc": bytes | None, "type", "message", "traceback"}`` (exit 1, the traceback on
stderr too). LABEL is what ``qex list`` shows of the call; it is not read.
"""

import os
import pickle
import sys

from qex.store.layout import CALL, RESULT


def main(argv: list[str]) -> int:
    job_dir = os.path.join(argv[1], os.environ.get("QEX_JOB_ID", ""))
    try:
        with open(os.path.join(job_dir, CALL), "rb") as fh:
            payload = pickle.load(fh)
    except OSError as exc:
        sys.stderr.write(
            f"qex: this job's call cannot be read ({exc}); a Python call runs from the "
            "call.pickle its program (or qex rerun) wrote into its job's directory\n"
        )
        return 1
    sys.path[:] = payload["path"]
    try:
        fn, args, kwargs = pickle.loads(payload["call"])
        value = fn(*args, **kwargs)
        import cloudpickle

        answer = {"ok": True, "value": cloudpickle.dumps(value)}
    except BaseException as exc:  # noqa: BLE001 (whatever the call raised goes back to its caller)
        answer = _failure(exc)
    _write(job_dir, answer)
    return 0 if answer["ok"] else 1


def _failure(exc: BaseException) -> dict:
    import traceback

    text = "".join(traceback.format_exception(exc))
    sys.stderr.write(text)
    try:
        import cloudpickle

        body = cloudpickle.dumps(exc)
    except Exception:
        body = None
    return {"ok": False, "exc": body, "type": type(exc).__qualname__, "message": str(exc), "traceback": text}


def _write(job_dir: str, answer: dict) -> None:
    path = os.path.join(job_dir, RESULT)
    temp = f"{path}.{os.getpid()}"
    with open(temp, "wb") as fh:
        pickle.dump(answer, fh, protocol=pickle.HIGHEST_PROTOCOL)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(temp, path)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
