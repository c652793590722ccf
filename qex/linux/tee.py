"""``tee(2)``: the bytes at the front of one pipe, duplicated into another without
being copied (the second pipe gets references to the same pages) and without
being taken from the first. The ``os`` module has ``splice`` but no ``tee``.

A followed job's supervisor (``qex.supervisor.logs.Sink.take``) tees the job's
pipe into its follower's FIFO, then splices the same bytes into the log: no
byte passes through the process. Bound through ``_ctypes`` (``qex.linux.libc``,
as prctl is): the minimal watcher imports it only
for a followed job, whose throughput it is for. ``posix`` only at the top (the
minimal watcher imports this module; see ``qex.supervisor.watch``).
"""

import posix

SPLICE_F_NONBLOCK = 2

_TEE: list = []  # libc's tee, looked up once per process (False where there is none)


def tee(src: int, dst: int, n: int) -> int:
    """Duplicate up to ``n`` bytes from the front of the pipe ``src`` into the pipe
    ``dst``, never waiting; the count (0: ``src`` is empty and has no writer any more).
    Raises OSError as ``os`` calls do: BlockingIOError where ``src`` is empty or ``dst``
    is full, BrokenPipeError where ``dst`` has no reader, OSError(ENOSYS) where this
    system has no tee (the caller copies instead)."""
    if not _TEE:
        _TEE.append(_bind())
    call = _TEE[0]
    if not call:
        raise OSError(38, "tee is not available here")  # (38: ENOSYS)
    done = call(src, dst, n, SPLICE_F_NONBLOCK)
    if done < 0:
        from qex.linux import libc

        code = libc.errno()
        raise OSError(code, posix.strerror(code))
    return done


def has_room(fd: int) -> bool:
    """Whether the pipe ``fd`` can take more now."""
    import select  # (loaded already in the minimal watcher: qex.supervisor.watch)

    poll = select.poll()
    poll.register(fd, select.POLLOUT)
    return bool(poll.poll(0))


def _bind() -> object:
    from qex.linux import libc

    return libc.function("tee", "long", ("int", "int", "ulong", "uint"))
