"""Jobs from Python: ``qex.submit``, ``qex.Job``, ``qex.Queue``, ``qex.JobFailed``.

A submission is ``qex submit``'s: the keywords become the options of its command
line (``options``), ``qex.jobs.request`` makes the Request and ``qex.jobs.submit``
checks and writes it. A refusal is the command line's error, its ``code`` the exit
code ``qex submit`` would give (``qex.base.errors.error_exit_code``).
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from types import SimpleNamespace

from qex.base.errors import QexError, SpecError, error_exit_code

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from qex.config.context import Context
    from qex.store.records import Status

# The keywords of qex.submit (and of an Executor's calls), each the option of `qex submit` it is.
KEYWORDS = (
    "cpu",
    "mem",
    "gpu",
    "vram",
    "claims",
    "locks",
    "name",
    "tags",
    "needs",
    "after",
    "dedupe_key",
    "timeout",
    "retries",
    "priority",
    "env",
    "cwd",
)


class JobFailed(QexError):
    """A job (or an Executor's call) that did not succeed: ``state``, ``code`` (its
    ``qex wait`` code), ``job`` (its id) and ``traceback`` (the call's, where one was raised)."""

    kind = "ended"

    def __init__(self, job_id: str, state: str, code: int, traceback: str = "", why: str = ""):
        what = f"job {job_id[:8]} ended {state} (exit {code})" + (f": {why}" if why else "")
        super().__init__(what + (f"\n{traceback.rstrip()}" if traceback else ""), exit_code=code)
        self.job, self.state, self.traceback = job_id, state, traceback


@contextmanager
def as_command(verb: str) -> Iterator[None]:
    """A QexError raised inside carries the exit code of ``qex VERB`` (``error_exit_code``)."""
    try:
        yield
    except QexError as exc:
        exc.exit_code = error_exit_code([verb], exc)
        raise


class Queue:
    """A state directory and its config: the environment's (``QEX_STATE_DIR``,
    ``QEX_CONFIG``, else the defaults), or the ones given."""

    def __init__(self, state_dir: str | None = None, config: str | None = None):
        self.state_dir = os.path.abspath(state_dir) if state_dir else None
        self.config = os.path.abspath(config) if config else None
        self._ctx: Context | None = None
        import threading

        # One pass at a time from this process (a submission, a stop, the Executor's watcher's nudge):
        # the state lock is a flock, and this process's threads share one store.
        self.lock = threading.RLock()

    @property
    def ctx(self) -> Context:
        if self._ctx is None:
            with as_command("submit"):
                self._ctx = _load(self.state_dir, self.config)
        return self._ctx

    def submit(self, command: list[str] | str, **options: object) -> Job:
        return submit(command, queue=self, **options)

    def job(self, job_id: str) -> Job:
        return Job(job_id, queue=self)

    def __repr__(self) -> str:
        return f"qex.Queue(state_dir={self.ctx.store.root!r})"


def _load(state_dir: str | None, config: str | None) -> Context:
    ctx = _context(state_dir, config)
    ctx.forks = False  # a pass admits and forks in a fresh qex process, never in this program (qex.supervisor.starter)
    return ctx


def _context(state_dir: str | None, config: str | None) -> Context:
    from qex.config.context import Context

    if state_dir is None and config is None:
        return Context.load()
    from qex.base import machine, paths
    from qex.config.file import load_config
    from qex.store.state import Store

    store = Store(state_dir or paths.state_dir())
    store.ensure()
    try:
        store.repair_after_reboot()
    except QexError:
        pass
    return Context(
        store=store,
        config=load_config(config),
        uid=os.getuid(),
        user=paths.user_name(),
        cores=machine.cores(),
        mem_total=machine.mem_total(),
    )


_DEFAULT: list[Queue] = []


def default_queue(queue: Queue | None) -> Queue:
    if queue is not None:
        return queue
    if not _DEFAULT:
        _DEFAULT.append(Queue())
    return _DEFAULT[0]


def options(command: list[str], given: dict) -> SimpleNamespace:
    """The parsed command line of ``qex submit`` that these keywords are (``qex.jobs.request``)."""
    unknown = sorted(set(given) - set(KEYWORDS))
    if unknown:
        raise SpecError(f"{unknown[0]!r} is not an option of qex.submit; the options are: {', '.join(KEYWORDS)}")
    claims = given.get("claims") or ()
    if isinstance(claims, dict):
        claims = [f"{k}={v}" for k, v in claims.items()]
    env = given.get("env") or ()
    if isinstance(env, dict):
        env = [f"{k}={v}" for k, v in env.items()]
    return SimpleNamespace(
        argv=["--", *command],
        job=None,
        cpu=_text(given.get("cpu")),
        mem=_text(given.get("mem")),
        gpu=given.get("gpu"),
        vram=_text(given.get("vram")),
        name=given.get("name"),
        priority=given.get("priority"),
        timeout=_text(given.get("timeout")),
        retries=given.get("retries"),
        cwd=given.get("cwd"),
        dedupe_key=given.get("dedupe_key"),
        claim=_words(claims),
        lock=_words(given.get("locks")),
        tag=_words(given.get("tags")),
        env=_words(env),
        needs=_ids(given.get("needs")),
        after=_ids(given.get("after")),
    )


def _text(value):
    return None if value is None else str(value)


def _words(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _ids(value) -> list[str]:
    """``needs``/``after``: ids, names, Jobs or Futures (``qex.jobs.resolve`` reads each word)."""
    if value is None:
        return []
    if isinstance(value, (str, Job)) or hasattr(value, "job"):
        value = [value]
    out = []
    for v in value:
        v = getattr(v, "job", v)
        out.append(v.id if isinstance(v, Job) else str(v))
    return out


def submit(command: list[str] | str, *, queue: Queue | None = None, **given: object) -> Job:
    """Submit a command (a list of words, or a string run by ``sh -c``) as ``qex submit`` does."""
    if isinstance(command, str):
        command = ["sh", "-c", command]
    q = default_queue(queue)
    with as_command("submit"):
        if not isinstance(command, (list, tuple)):
            raise SpecError(f"the command must be a list of strings or one string, not {type(command).__name__}")
        with q.lock:
            ids = submit_built(q.ctx, options(list(command), given))
    return Job(ids[0], queue=q)


def submit_built(
    ctx: Context, args: SimpleNamespace, prepare: Callable[[str], None] | None = None, payloads: object = None
) -> list[str]:
    """``qex submit``'s path below the command line: request, build, dedupe, write, pass.
    ``prepare(job_dir)``: what else each job's directory holds before a pass can start it."""
    from qex.jobs.options import request_from_args
    from qex.jobs.submit import build, submit_many
    from qex.supervisor import become

    req = request_from_args(args, ctx)
    built = build(ctx, req)
    for warning in built.warnings:
        sys.stderr.write(f"qex: warning: {warning}\n")
    checker = None
    if req.dedupe_key is not None:
        from qex.jobs.dedupe import checker_for

        checker = checker_for(ctx, req)
    ids, result = submit_many(ctx, [built], on_locked=checker, prepare=prepare)
    become.finish_pass(ctx, result)
    return ids


class Job:
    """A job, attached by its id (or a prefix, or a name: ``qex.jobs.resolve``) from any process."""

    def __init__(self, job_id: str, *, queue: Queue | None = None):
        self.queue = default_queue(queue)
        from qex.jobs.resolve import resolve

        with as_command("status"):
            target = resolve(self.queue.ctx.store, str(job_id))
            if target.is_group:
                raise SpecError(
                    f"{job_id} is a group of {len(target.members)} jobs; qex.Job attaches to one "
                    "of them (qex list --group shows them)"
                )
        self.id: str = target.job

    def __repr__(self) -> str:
        return f"qex.Job({self.id!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Job) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    @property
    def record(self) -> dict:
        """The job's record, as ``qex status --json ID`` prints it (a dict of JSON values)."""
        return self._live().asdict()

    @property
    def state(self) -> str:
        return self._live().state

    def _live(self) -> Status:
        store = self.queue.ctx.store
        with as_command("status"):
            return store.read_live(self.id, store.read_index_jobs())

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the job to end; its exit code as ``qex wait`` gives it (124: ``timeout`` passed)."""
        from qex.base import outcome
        from qex.control.waiting import WaitLimit, await_final

        with as_command("wait"), interrupted([self.id]):
            try:
                rec = await_final(self.queue.ctx, [self.id], timeout)[self.id]
            except WaitLimit:
                return outcome.WAIT_LIMIT
        return outcome.exit_code(rec)

    def logs(self, stream: str = "stdout") -> str:
        """What the job wrote on ``stream`` ("stdout" or "stderr") so far (as ``qex logs``)."""
        from qex.control.actions import check_owner
        from qex.store import layout

        names = {"stdout": layout.STDOUT, "stderr": layout.STDERR}
        if stream not in names:
            raise SpecError(f'stream: {stream!r} is not a stream; use "stdout" or "stderr"')
        ctx = self.queue.ctx
        with as_command("logs"):
            rec = ctx.store.read_status(self.id)
            check_owner(ctx, rec.id, rec.uid, rec.owner, "read the logs of", changes=False)
        try:
            with open(ctx.store.path(self.id, names[stream]), "rb") as fh:
                return fh.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def kill(self) -> str:
        """Stop the job, queued or running (``qex kill``); returns the state it reached."""
        return self._stop("kill")

    def cancel(self) -> bool:
        """Cancel the job if it still waits (``qex cancel``): True; False if it runs or has ended."""
        return self._stop("cancel") == "cancelled"

    def _stop(self, verb: str) -> str:
        from qex.control.actions import CANCEL, KILL, stop_jobs

        with as_command(verb), self.queue.lock:
            answer = stop_jobs(self.queue.ctx, [self.id], KILL if verb == "kill" else CANCEL)
        what = answer.get(self.id, "")
        return what[6:] if what.startswith("ended:") else what


@contextmanager
def interrupted(ids: list[str], group: str | None = None) -> Iterator[None]:
    """Ctrl-C while waiting: the wait stops, the jobs go on; say how to stop them."""
    try:
        yield
    except KeyboardInterrupt:
        what = group[:8] if group else " ".join(i[:8] for i in ids[:10]) + (" ..." if len(ids) > 10 else "")
        sys.stderr.write(
            f"qex: stopped waiting; the job{'s' if len(ids) != 1 else ''} go{'es' if len(ids) == 1 else ''}"
            f" on: qex kill {what} stops {'it' if len(ids) == 1 else 'them'}\n"
        )
        sys.stderr.flush()
        raise
