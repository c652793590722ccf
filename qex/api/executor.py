"""``qex.Executor``: a ``concurrent.futures.Executor`` whose calls are qex jobs.

Each call is one job (``qex.api.calls``: pickled into its directory, run by this
interpreter); ``map`` submits its calls as one group. A watcher thread reads the
records of the calls not yet done (no lock, as ``qex wait`` does) and completes
their futures; the job outlives this program, as every qex job does. It forks
nothing: a call that waits with nothing to start it has a fresh qex process pass
(``qex.control.waiting.nudge``, ``qex.supervisor.become.kick``).
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time

from qex.api import calls
from qex.api.jobs import KEYWORDS, Job, as_command, default_queue, interrupted, options
from qex.base.errors import SpecError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from qex.api.jobs import Queue
    from qex.store.records import Status

POLL_FIRST, POLL_MAX, NUDGE_EVERY = 0.005, 0.1, 1.0


class Future(cf.Future):
    """A call's future; ``job`` is its ``qex.Job``."""

    def __init__(self, job: Job, watcher: _Watcher):
        super().__init__()
        self.job, self._watcher = job, watcher

    def cancel(self) -> bool:
        """Cancel the call's job if it still waits (True); once it runs, False."""
        if not self._watcher.take([self]):  # (its job ended: the watcher completes it)
            return super().cancel()
        if not self.job.cancel():
            self._watcher.add([self])
            return False
        return super().cancel()

    def running(self) -> bool:
        from qex.base.states import HOLDING

        return not self.done() and self.job.state in HOLDING

    def result(self, timeout: float | None = None) -> object:
        with interrupted([self.job.id]):
            return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        with interrupted([self.job.id]):
            return super().exception(timeout)


class _Watcher:
    """One thread per queue: completes the futures whose jobs ended."""

    def __init__(self, queue: Queue):
        self.queue = queue
        self.pending: dict[str, Future] = {}
        self.lock = threading.Condition()
        self.thread: threading.Thread | None = None

    def add(self, futures: list[Future]) -> None:
        with self.lock:
            for f in futures:
                self.pending[f.job.id] = f
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="qex-executor-watcher", daemon=True)
                self.thread.start()
            self.lock.notify_all()

    def take(self, futures: list[Future]) -> list[Future]:
        """Those of ``futures`` this watcher will no longer complete (a cancel decides them)."""
        with self.lock:
            return [f for f in futures if self.pending.pop(f.job.id, None) is not None]

    def _run(self) -> None:
        from qex.base.states import FINAL

        ctx, delay, nudged = self.queue.ctx, POLL_FIRST, time.monotonic()
        while True:
            with self.lock:
                if not self.pending:
                    self.lock.wait(timeout=5.0)
                    if not self.pending:
                        self.thread = None
                        return
                    delay = POLL_FIRST
                todo = list(self.pending.items())
            ended = 0
            active = ctx.store.read_index_jobs() if len(todo) > 4 else {}  # one file, not a record per call
            for job_id, future in todo:
                if job_id in active and active[job_id].get("state") not in FINAL:
                    continue
                try:
                    rec = ctx.store.read_status(job_id)
                except Exception:
                    continue
                if rec.state in FINAL and self.take([future]):
                    ended += 1
                    self._finish(ctx, future, rec)
            now = time.monotonic()
            if now - nudged >= NUDGE_EVERY:
                nudged = now
                self._nudge(ctx)
            delay = POLL_FIRST if ended else min(POLL_MAX, delay * 1.5)
            time.sleep(delay)

    def _nudge(self, ctx) -> None:
        from qex.control.waiting import nudge

        with self.lock:
            ids = list(self.pending)
        try:
            with self.queue.lock:
                nudge(ctx, ids)
        except Exception:
            pass  # (the next look tries again; a pass that cannot run now is no failure of the call)

    @staticmethod
    def _finish(ctx, future: Future, rec: Status) -> None:
        if future.done():
            return
        ok, value = calls.answer(ctx, rec)
        try:
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)
        except cf.InvalidStateError:
            pass  # (cancelled meanwhile)


_WATCHERS: dict[Queue, _Watcher] = {}


def _watcher_of(queue: Queue) -> _Watcher:
    w = _WATCHERS.get(queue)
    if w is None:
        w = _WATCHERS[queue] = _Watcher(queue)
    return w


class Executor(cf.Executor):
    """Runs each call as a qex job with these claims (the keywords of ``qex.submit``)."""

    def __init__(self, *, queue: Queue | None = None, **claims):
        self._queue = default_queue(queue)
        unknown = sorted(set(claims) - set(KEYWORDS))
        if unknown:
            raise SpecError(f"{unknown[0]!r} is not an option of qex.Executor; the options are: {', '.join(KEYWORDS)}")
        self._claims = dict(claims)
        self._watcher = _watcher_of(self._queue)
        self._futures: list[Future] = []
        self._shut = False

    def options(self, **claims: object) -> Executor:
        """An executor whose calls have these claims too (``ex`` stays as it was)."""
        return Executor(queue=self._queue, **{**self._claims, **claims})

    def submit(self, fn: Callable, /, *args: object, **kwargs: object) -> Future:
        self._check_open()
        ctx = self._queue.ctx
        name = self._claims.get("name") or calls.label(fn)
        with as_command("submit"):
            data = calls.pack(ctx, fn, args, kwargs)
            with self._queue.lock:
                ids = _submit(ctx, options(calls.command(ctx, name), {**self._claims, "name": name}), data)
        return self._track([ids[0]])[0]

    def map(self, fn: Callable, *iterables: Iterable, timeout: float | None = None, chunksize: int = 1) -> Iterator:
        """The calls of ``fn`` over ``iterables`` as one group; their results in order."""
        self._check_open()
        end = None if timeout is None else time.monotonic() + timeout
        items = list(zip(*iterables))
        if not items:
            return iter(())
        ctx = self._queue.ctx
        name = self._claims.get("name") or calls.label(fn)
        with as_command("submit"):
            if self._claims.get("dedupe_key") is not None:  # (as qex submit --each-line refuses it)
                raise SpecError(
                    "dedupe_key means one job and cannot go with map (which makes one job per "
                    "call); use submit, or leave it out"
                )
            packed = [calls.pack(ctx, fn, args, {}) for args in items]
            with self._queue.lock:
                group_id, ids = _submit_group(ctx, self._claims, name, packed)
        futures = self._track(ids)
        return _results(futures, group_id, end)

    def _track(self, ids: list[str]) -> list[Future]:
        futures = [Future(_attached(job_id, self._queue), self._watcher) for job_id in ids]
        self._futures += futures
        self._watcher.add(futures)
        return futures

    def _check_open(self) -> None:
        if self._shut:
            raise RuntimeError("cannot schedule new calls after shutdown")

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._shut = True
        if cancel_futures:
            waiting = self._watcher.take([f for f in self._futures if not f.done()])
            if waiting:
                from qex.control.actions import CANCEL, stop_jobs

                with self._queue.lock:
                    answer = stop_jobs(self._queue.ctx, [f.job.id for f in waiting], CANCEL)
                for f in waiting:
                    if answer.get(f.job.id) == "cancelled":
                        cf.Future.cancel(f)
                self._watcher.add([f for f in waiting if not f.cancelled()])
        if wait:
            pending = [f for f in self._futures if not f.done()]
            with interrupted([f.job.id for f in pending]):
                cf.wait(pending)


def _attached(job_id: str, queue: Queue) -> Job:
    job = Job.__new__(Job)  # (an id this process just made: nothing to resolve)
    job.queue, job.id = queue, job_id
    return job


def _results(futures: list[Future], group_id: str, end: float | None):
    ids = [f.job.id for f in futures]
    with interrupted(ids, group=group_id):
        for f in futures:
            yield f.result(None if end is None else max(0.0, end - time.monotonic()))


def _submit(ctx, args, data: bytes) -> list[str]:
    from qex.api.jobs import submit_built

    return submit_built(ctx, args, prepare=lambda job_dir: calls.write(job_dir, data))


def _submit_group(ctx, claims: dict, name: str, packed: list[bytes]) -> tuple[str, list[str]]:
    """Every call of a ``map`` built (the first as ``qex submit`` builds it, the others
    like it: ``build_like``) and queued with its group file in one lock hold."""
    from qex.base import units
    from qex.base.ids import new_id
    from qex.jobs import groups
    from qex.jobs.options import request_from_args
    from qex.jobs.submit import build, build_like
    from qex.supervisor import become

    group_id = new_id()
    width = max(3, len(str(len(packed))))
    req = request_from_args(options(calls.command(ctx, name), {**claims, "name": name}), ctx)
    req.group, req.group_name = group_id, units.check_name(name, "name")
    built, found = [], set()
    for i in range(1, len(packed) + 1):
        job_name = f"{name}-{i:0{width}d}"[:128]
        if built:
            built.append(build_like(built[0], list(built[0].spec.command), job_name, found))
        else:
            built.append(build(ctx, req.evolve(name=job_name), found=found))
    for warning in built[0].warnings:
        import sys

        sys.stderr.write(f"qex: warning: {warning}\n")
    data = dict(zip((b.spec.id for b in built), packed))
    ids, result = groups.submit(ctx, built, group_id, name, "python-map", prepare=calls.writer(data))
    become.finish_pass(ctx, result)
    return group_id, ids
