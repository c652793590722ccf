"""When qex's writes become durable, and what a failed write says.

The fsyncs a pass leaves until its state lock is let go (``sync_at_release``),
the files it replaced, freed then (``free_later``, ``free_replaced``), the
fsyncs a supervisor defers to ``settle`` (``defer_syncs``), the syncer thread
(``sync_in_background``), and ``syncfs``. ``qex.store.fs`` writes the files and
names these for its callers (``fs.settle``, ``fs.syncfs``...).
"""

from __future__ import annotations

import errno
import os

from qex.base.errors import StoreError

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

# Files a rename replaced while the state lock is held, kept open so that the
# kernel frees them when this process lets the lock go, not under it
# (``free_later``, ``free_replaced``). Freeing a replaced file (its blocks, its
# inode) was half the time of a status.json write: ~50 us of each, and more for
# a large index, twice or thrice in every pass of a drain.
_REPLACED: list[int] | None = None
# Journals appended to by a lazy commit: (fd, path), fsynced once the lock is
# let go and before the pass returns (``sync_at_release``; docs/design.md).
_UNSYNCED: list[tuple[int, str]] = []


def free_later() -> None:
    """From now until ``free_replaced``, files that ``fs.write_atomic`` replaces are
    freed then (the state lock is taken: ``Store._held``)."""
    global _REPLACED
    free_replaced()  # (any a forked child inherited: its copies)
    _REPLACED = []


def sync_at_release(fd: int, path: str) -> None:
    """Take ``fd`` (the journal, just appended to): fsync it once the state lock is
    let go (``free_replaced``), or now if no state lock is held."""
    _UNSYNCED.append((fd, path))
    if _REPLACED is None:
        _sync_unsynced()


def free_replaced() -> None:
    """The lock is let go: fsync the journal appends left for now (``sync_at_release``),
    then let the kernel free the files replaced since ``free_later``. A process that
    defers them (``defer_syncs``) leaves both to ``settle`` and ``free_deferred``."""
    global _REPLACED
    replaced, _REPLACED = _REPLACED, None
    if _DEFER:
        _start_writes(_UNSYNCED)
        _DEFERRED_SYNCS.extend(_UNSYNCED)
        del _UNSYNCED[:]
        _DEFERRED_FREES.extend(replaced or ())
        return
    try:
        _sync_unsynced()
    finally:
        _close_all(replaced or ())


def _close_all(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _sync_unsynced() -> None:
    failure = _fsync_all(_UNSYNCED)
    del _UNSYNCED[:]
    if failure is not None:
        raise StoreError(describe_write_failure(*failure))


def _fsync_all(unsynced, sync=None) -> tuple[str, OSError] | None:
    """fsync (or ``sync``: ``syncfs_fd``) and close each (fd, path); the first failure, or None."""
    failure = None
    sync = sync or os.fsync
    for fd, path in reversed(unsynced):
        try:
            sync(fd)
        except OSError as exc:
            failure = failure or (path, exc)
        finally:
            os.close(fd)
    return failure


# ---- deferred syncs: a supervisor goes on before its commit is made durable ----
#
# A supervisor's pass at the end of its job commits the job's end and the start
# of its next job. A supervisor (``qex.supervisor.run.main_loop``) ``defer_syncs``:
# the journal's fsync is not made when the lock is let go but by ``settle``, at
# the points where something depends on the commit being durable: right before
# a job is spawned (a job must never run on a start a power cut could lose),
# before a fork or an exec, before the process exits, and right after a commit
# that no spawn follows (a job recorded running). Meanwhile the supervisor
# prepares the spawn. A failed fsync is raised there (StoreError), and again at
# every later ``settle``: nothing committed after it is durable either. The
# files the pass replaced are freed once the job is spawned (``free_deferred``):
# freeing one can wait for a discard of its blocks, which no job waits for.
#
# A thread of the supervisor's own made these fsyncs before (the design until
# this version): its wake-ups and the Python it ran fought the supervisor's
# main thread for the GIL: timed function by function over a 1000-job drain, a
# pass took 2.9-3.0 ms instead of 2.3, and a job 5.6-5.8 ms of CPU instead of 4.7.

_DEFER = False
_DEFERRED_SYNCS: list[tuple[int, str]] = []  # (fd, path) of journal appends, fsynced by ``settle``
_DEFERRED_FREES: list[int] = []  # replaced files, closed by ``free_deferred`` (or ``settle(frees=True)``)
_SYNC_FAILURE: tuple[str, OSError] | None = None  # the first deferred fsync that failed
_SYNCER = None


def defer_syncs(on: bool = True) -> None:
    """From now on this process's journal fsyncs at a lock's release wait for ``settle``,
    and its frees for ``free_deferred``. A forked child starts without."""
    global _DEFER
    _DEFER = on


def sync_in_background(items: list[tuple[int, str]]) -> None:
    """fsync and close each (fd, path) in a thread of this process's own; ``settle``
    waits for them (a submission makes its job's spec durable while its pass admits)."""
    _syncer().submit(items)


def syncfs_in_background(path: str) -> None:
    """``syncfs`` (see there) of the file system of ``path`` in the same thread, after
    what it was handed before; ``settle`` waits for it. A bulk submission flushes its
    job directories while its pass takes the lock, loads the index and admits: a
    fan-out of 1000 lines spent ~55 ms in the flush, then ~70 ms admitting."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise StoreError(describe_write_failure(path, exc)) from None
    _syncer().submit([(fd, path)], whole_fs=True)


def settle(frees: bool = False) -> None:
    """Make every deferred fsync now, and wait for the background ones (``frees``: and
    free every deferred file: before a fork or an exec, which would copy or lose the
    descriptors); StoreError if an fsync failed, now or before."""
    global _SYNC_FAILURE
    if _DEFERRED_SYNCS:
        pending = _DEFERRED_SYNCS[:]
        del _DEFERRED_SYNCS[:]
        failure = _fsync_all(pending)  # (each closed, even after an earlier failure)
        _SYNC_FAILURE = _SYNC_FAILURE or failure
    if frees:
        free_deferred()
    if _SYNCER is not None:
        _SYNCER.wait()
    if _SYNC_FAILURE is not None:
        raise StoreError(describe_write_failure(*_SYNC_FAILURE))


def free_deferred() -> None:
    """Let the kernel free the files replaced under the lock (``defer_syncs``)."""
    if _DEFERRED_FREES:
        frees = _DEFERRED_FREES[:]
        del _DEFERRED_FREES[:]
        _close_all(frees)


# A deferred journal fsync is made right before the next spawn (``settle``), ~0.5 ms
# after the lock is let go. The release has the kernel start writing the journal's
# new bytes at once (``sync_file_range`` with ``SYNC_FILE_RANGE_WRITE``: it starts
# the write and does not wait for it): the fsync then mostly waits for a write
# already under way. Measured here, an fsync made 0.5 ms after its append waited
# 0.12 ms instead of 0.21, and the fsyncs of a drain took half the CPU. Not under
# the lock: there it cost the hold ~0.07 ms, and a congested disk can make the
# call itself wait. It makes nothing durable by itself; the fsync still does, and
# decides. The call is looked up (ctypes) at the first release that defers an
# append: after a supervisor's first job has started, never before.
_SYNC_FILE_RANGE = None  # libc's sync_file_range (None: not looked up yet; False: not to be had)


def _start_writes(unsynced) -> None:
    """Start the write of each deferred append (the note above)."""
    global _SYNC_FILE_RANGE
    if not unsynced:
        return
    if _SYNC_FILE_RANGE is None:
        _SYNC_FILE_RANGE = _sync_file_range()
    if _SYNC_FILE_RANGE:
        for fd, _path in unsynced:
            _SYNC_FILE_RANGE(fd, 0, 0, 2)


def _sync_file_range():
    import ctypes  # (loaded already: a commit's exchange of a status file uses it)

    return libc_call("sync_file_range", [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint])


def libc_call(name: str, argtypes: list | None = None) -> Callable[..., int] | bool:
    """The C library's function ``name`` (through ctypes: calls the os module lacks), or False."""
    try:
        import ctypes

        call = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError, ImportError):
        return False
    if argtypes is not None:
        call.argtypes = argtypes
    return call


class _Syncer:
    """One thread that fsyncs what ``sync_in_background`` hands it, one batch at a
    time, in order (a submission: its spec's fsyncs are disk waits while its pass
    runs; a supervisor's own fsyncs are not made here, see above)."""

    def __init__(self):
        import _thread  # (the C module: threading.py is not needed for one worker)

        self.busy = _thread.allocate_lock()  # held while a batch is in flight
        self.go = _thread.allocate_lock()  # released to hand the worker its batch
        self.go.acquire()
        self.batch: list | None = None
        self.whole_fs = False  # the batch is of file systems to flush (syncfs), not files
        self.failure: tuple[str, OSError] | None = None
        self.tid: int | None = None  # the worker's thread id (/proc/self/task/TID)
        _thread.start_new_thread(self._run, ())

    def submit(self, items: list, whole_fs: bool = False) -> None:
        self.busy.acquire()  # (the previous batch first: fsyncs stay in order)
        self.batch, self.whole_fs = items, whole_fs
        self.go.release()

    def wait(self) -> None:
        with self.busy:
            failure = self.failure  # (it stays: nothing this process commits from here on is durable)
        if failure is not None:
            raise StoreError(describe_write_failure(*failure))

    def _run(self) -> None:
        import _signal

        # Every signal for this process goes to its main thread, whose handlers answer it.
        _signal.pthread_sigmask(_signal.SIG_BLOCK, _signal.valid_signals())
        import _thread

        self.tid = _thread.get_native_id()
        while True:
            self.go.acquire()
            items, self.batch = self.batch, None
            try:
                failure = _fsync_all(items, syncfs_fd if self.whole_fs else None)
                if failure is not None and self.failure is None:
                    self.failure = failure
            finally:
                self.busy.release()


def _syncer() -> "_Syncer":
    global _SYNCER
    if _SYNCER is None:
        _SYNCER = _Syncer()
    return _SYNCER


def _after_fork_in_child() -> None:
    """A forked child has no syncer thread, and defers nothing until it says so. Its
    parent settles before it forks (a batch in flight would be the parent's)."""
    global _SYNCER, _DEFER, _SYNC_FAILURE
    _SYNCER, _DEFER, _SYNC_FAILURE = None, False, None
    del _DEFERRED_SYNCS[:], _DEFERRED_FREES[:]  # (the parent settles before it forks: none are left)


os.register_at_fork(after_in_child=_after_fork_in_child)


def forget_inherited() -> None:
    """A forked child that closed every descriptor it inherited (``qex.linux.proc.keep_only``):
    the replaced files and journal appends its parent holds (``free_later``) are not its
    own to close or sync, and their numbers will be its own files'."""
    global _REPLACED
    _REPLACED = None
    del _UNSYNCED[:]


def replacing(path: str, dir_fd: int | None = None) -> None:
    """Call just before a rename over ``path``: the file it replaces is freed
    with the others once the lock is let go (``free_later``)."""
    if _REPLACED is not None:
        try:  # (never through a link, never waiting on a FIFO planted there)
            _REPLACED.append(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd))
        except OSError:
            pass  # nothing there yet, or nothing to keep


def syncfs(path: str) -> None:
    """Make every write on the file system of ``path`` durable, in one call.

    A bulk write (a fan-out of a thousand jobs) writes its files without an
    fsync each (thousands of fsyncs take seconds) and calls this once before
    anything depends on them: the same guarantee at the cost of one flush.
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        syncfs_fd(fd)
    except OSError as exc:
        raise StoreError(describe_write_failure(path, exc)) from None
    finally:
        os.close(fd)


def syncfs_fd(fd: int) -> None:
    """``syncfs`` of the file system of ``fd``; OSError if it failed."""
    if _syncfs(fd) != 0:
        raise OSError(ctypes_errno(), "syncfs failed")


def _syncfs(fd: int) -> int:
    global _SYNCFS
    if _SYNCFS is None:
        _SYNCFS = libc_call("syncfs")
    if _SYNCFS is False:
        os.sync()
        return 0
    return _SYNCFS(fd)


_SYNCFS = None


def ctypes_errno() -> int:
    import ctypes

    return ctypes.get_errno() or errno.EIO


def describe_write_failure(path: str, exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return f"cannot write {path}: the disk is full; free some space (qex clean --auto removes old records)"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"cannot write {path}: {exc.strerror}; check the permissions of the state directory"
    return f"cannot write {path}: {exc.strerror or exc}"
