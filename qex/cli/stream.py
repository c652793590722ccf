"""What a follower copies while it waits for a job's end (``qex.cli.wait.follow``).

``Pipes``: the job's own follower (``qex run``, ``qex submit --follow``) reads
the FIFOs it made before the job could start (``qex.supervisor.pipes``): every
byte of the job's stdout to ours and of its stderr to ours, in order within
each stream, at the speed of a pipe, whatever ``[logs] max_bytes`` keeps on
disk (the supervisor waits for this reader rather than drop a byte). ``qex
run`` also copies its stdin to the job's, until its end of file.

``Files``: a follower that came later (``qex logs --follow``, ``status
--follow``, a ``qex run`` that joined another's job) reads the log files; where
the limit cut output it had not read yet, it says so on stderr (``gaps``),
never inside the data.
"""

from __future__ import annotations

import errno
import os
import select
import sys
import time

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import SimpleNamespace
    from typing import BinaryIO

    from qex.cli.interrupt import Interrupts
    from qex.store.records import Status
    from qex.supervisor.pipes import Ends

CHUNK = 1 << 20
QUICK, QUICK_EVERY = 0.5, 0.02  # seconds after output during which the wait looks at the record every 20 ms


class Broken(BrokenPipeError):
    """Our stdout or stderr was closed by its reader (EPIPE), or is gone (EIO: a hung-up terminal).
    Not caught, it ends the command as a closed pipe does (``qex.cli.run``: quietly)."""


class _Out:
    """One of the job's streams, from its FIFO to one of our descriptors: ``splice``
    (no copy through this process) where the kernel can, else read and write."""

    def __init__(self, src: int, stream):
        self.src, self.stream = src, stream
        try:
            stream.flush()
            self.dst = stream.fileno()
            self.splice = hasattr(os, "splice")
        except (OSError, ValueError, AttributeError):
            self.dst, self.splice = -1, False

    def pump(self) -> int:
        """Move what the FIFO has (one chunk); the bytes moved, 0 if it is empty now.
        Waits while our output's reader does not take more (as a pipe's writer does)."""
        while self.splice:
            try:
                n = os.splice(self.src, self.dst, CHUNK)
            except BlockingIOError:  # (the FIFO is empty, or, pipe to pipe, our output is full)
                if not _ready(self.src, select.POLLIN):
                    return 0
                _ready(self.dst, select.POLLOUT, None)
                continue
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.EIO):
                    raise Broken from None
                self.splice = False  # (a terminal, a file opened to append: read and write instead)
            else:
                return n
        try:
            data = os.read(self.src, CHUNK)
        except BlockingIOError:
            return 0
        self._write(data)
        return len(data)

    def _write(self, data: bytes) -> None:
        if self.dst < 0:
            return
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.dst, view) :]
            except BlockingIOError:  # (a stdout someone made non-blocking: wait until it takes more)
                _ready(self.dst, select.POLLOUT, None)
            except OSError:
                raise Broken from None


def _ready(fd: int, event: int, timeout: float | None = 0) -> bool:
    """Whether ``fd`` is ready for ``event`` (waiting up to ``timeout`` seconds; None: until it is)."""
    poll = select.poll()
    poll.register(fd, event)
    return bool(poll.poll(None if timeout is None else timeout * 1000))


class Pipes:
    """The job's output from its FIFOs to our stdout and stderr; with ``forward``
    (``qex run``), our stdin to the job's once it runs, until our end of file."""

    def __init__(self, ends: Ends, sinks: tuple | None = None):
        self.ends = ends
        out, err = sinks or (sys.stdout, sys.stderr)  # (``--output on-failure``: two files that hold it)
        self.outs = {ends.out: _Out(ends.out, out), ends.err: _Out(ends.err, err)}
        self.on_broken: Callable[[], None] | None = None  # our output lost its reader (qex.cli.wait._follow)
        self.running = False  # the job has started: its stdin has a reader
        self.input_open = ends.stdin >= 0
        self.waiting = b""  # of our input, what the job's stdin did not take yet
        self.last_out = -QUICK  # (time.monotonic) when output last came

    def note(self, rec: Status) -> None:
        """Each record the wait reads: the job's input starts when the job runs."""
        self.running = rec.state == "running"

    def idle(self, seconds: float, ints: Interrupts | None = None) -> None:
        """Copy for ``seconds`` (the wait's pause between two looks at the record), or
        until a signal waits for the wait's loop to act on it (``ints``). Within
        ``QUICK`` seconds of the last output, 20 ms without any ends the pause: the job
        may have ended, and its record is final a moment after its last byte (the wait's
        pause grows to 0.2 s, which each end of a ``qex run`` paid half of on average)."""
        end = time.monotonic() + seconds
        while True:
            now = time.monotonic()
            left = end - now
            if left <= 0 or _noted(ints):
                return
            quick = now - self.last_out < QUICK
            poll = select.poll()
            for fd in self.outs:
                poll.register(fd, select.POLLIN)
            reading = self._arm_input(poll)
            try:
                events = poll.poll(min(left, QUICK_EVERY) * 1000 if quick else left * 1000)
            except InterruptedError:
                continue
            if quick and not events:
                return
            for fd, mask in events:
                if fd in self.outs:
                    if self._pump(fd):
                        self.last_out = time.monotonic()
                elif fd == reading:
                    self._read_input()
                elif fd == self.ends.stdin:
                    self._give_input(mask)

    def finish(self) -> list[str]:
        """The job is final: copy what the FIFOs still hold; return what to say on stderr."""
        self._stop_input()
        for fd in list(self.outs):
            while fd in self.outs and self._pump(fd):
                pass
        from qex.store import layout

        said = []
        for name, label in ((layout.STDOUT_PIPE, "stdout"), (layout.STDERR_PIPE, "stderr")):
            if self.ends.cut(name):
                said.append(
                    f"the job was stopped while its {label} still waited for this reader: the end of "
                    "it is not shown here (qex logs ID shows what its log kept)"
                )
        self.ends.close()
        return said

    def close(self) -> None:
        self.ends.close()

    # ---- the output ---------------------------------------------------------------
    def _pump(self, fd: int) -> int:
        try:
            return self.outs[fd].pump()
        except Broken:
            del self.outs[fd]  # the supervisor's next write to this FIFO is EPIPE: the log only, from then on
            os.close(fd)
            if fd == self.ends.out:
                self.ends.out = -1
            else:
                self.ends.err = -1
            if self.on_broken is None:
                raise
            self.on_broken()
            return 0

    # ---- the input (qex run) -----------------------------------------------------------
    def _arm_input(self, poll) -> int:
        """Register our stdin (to read) or the job's (to write what waits); -1: neither."""
        if not self.input_open or not self.running:
            return -1
        if self.waiting:
            poll.register(self.ends.stdin, select.POLLOUT)
            return -1
        if not _may_read_stdin():
            return -1
        poll.register(0, select.POLLIN)
        return 0

    def _read_input(self) -> None:
        try:
            data = os.read(0, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._stop_input()  # our end of file: the job reads its end of file
            return
        self.waiting = data
        self._give_input(select.POLLOUT)

    def _give_input(self, mask: int) -> None:
        if mask & select.POLLERR:
            self._stop_input()  # nobody reads it any more (the job closed its stdin or ended)
            return
        view = memoryview(self.waiting)
        try:
            while view:
                view = view[os.write(self.ends.stdin, view) :]
        except BlockingIOError:
            self.waiting = bytes(view)
            return
        except OSError:
            self._stop_input()
            return
        self.waiting = b""

    def _stop_input(self) -> None:
        self.input_open, self.waiting = False, b""
        self.ends.close_stdin()


def _noted(ints: Interrupts | None) -> bool:
    """A signal came that the wait's loop has not acted on yet (``Interrupts.act``)."""
    return ints is not None and ints.signum is not None and ints.stop is None


def _may_read_stdin() -> bool:
    """Not while in the background on a terminal: a read there would stop this process (SIGTTIN)."""
    try:
        return not os.isatty(0) or os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return True


class Files:
    """A follower of the log files: every byte they still hold, in order; what the
    output limit cut before this reader got to it is counted in ``gaps`` and said."""

    def __init__(self, streams: list[tuple[str, str, object]]):
        from qex.supervisor.logread import Follower

        self.tails = []
        for path, label, stream in streams:
            gaps: list = []
            self.tails.append((Follower(path, gaps), label, stream, gaps))
        self.skipped = 0  # bytes of output this reader never saw
        self.on_broken: Callable[[], None] | None = None  # our output lost its reader (qex.cli.wait._follow)

    def note(self, rec: Status) -> None:
        pass

    def idle(self, seconds: float, ints: Interrupts | None = None) -> None:
        """Read what the files gain for ``seconds``: at once while output flows."""
        end, pause = time.monotonic() + seconds, 0.005
        while not _noted(ints):
            moved = self.pump()
            left = end - time.monotonic()
            if left <= 0:
                return
            if moved:
                pause = 0.005
                continue
            time.sleep(min(left, pause))
            pause = min(pause * 2, 0.2)

    def pump(self) -> bool:
        moved = False
        for tail in list(self.tails):
            follower, label, stream, gaps = tail
            try:
                data = follower.read()
            except OSError:
                continue
            if data:
                moved = True
                try:
                    stream.buffer.write(data)
                    stream.flush()
                except OSError:
                    self.tails.remove(tail)
                    if self.on_broken is None:
                        raise Broken from None
                    self.on_broken()
            while gaps:
                at, n = gaps.pop(0)
                self.skipped += n
                from qex.base.units import format_size

                _say(
                    f"qex: {n} bytes ({format_size(n)}) of the job's {label} after its first {at} are not shown: "
                    "the log had cut them ([logs] max_bytes) before this reader got to them"
                )
        return moved

    def finish(self) -> list[str]:
        self.pump()
        return []

    def close(self) -> None:
        pass


class Held:
    """``qex run --output on-failure``: the job's output held in two temporary files
    (every byte, as ``Pipes`` copies it) and given to our stdout and stderr only
    when the job did not succeed (``release``); thrown away when it did."""

    def __init__(self):
        import tempfile

        self.files = (tempfile.TemporaryFile(prefix="qex-out."), tempfile.TemporaryFile(prefix="qex-err."))

    def release(self, verdict: str) -> None:
        """The verdict on stderr, then what the job wrote: its stdout to ours, its stderr to ours."""
        _say(verdict)
        for held, stream in zip(self.files, (sys.stdout, sys.stderr)):
            held.flush()
            held.seek(0)
            try:
                stream.flush()
                while data := held.read(CHUNK):
                    stream.buffer.write(data)
                stream.flush()
            except (OSError, ValueError):
                raise Broken from None

    def close(self) -> None:
        for held in self.files:
            held.close()


def as_text(binary: BinaryIO) -> SimpleNamespace:
    """A binary file as ``Files`` writes to a stream (``stream.buffer``, ``flush``)."""
    from types import SimpleNamespace

    return SimpleNamespace(buffer=binary, flush=binary.flush)


def _say(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
