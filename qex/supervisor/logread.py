"""The reader's side of a job's log files: ``Follower`` reads the whole output of one
stream as the supervisor writes it (``qex.supervisor.logs.Sink``), across the cut
of ``[logs] max_bytes``, with the cut record (``<stream>.log.cut``) whose format
``qex.supervisor.logcut`` describes. Used by ``qex logs --follow``, ``status
--follow``, a late ``qex run`` and ``qex logs``: never by the supervisor, which
writes.
"""

import os

from qex.supervisor.logcut import COPY_CHUNK, CutState, pieces, read_cut, start


class Follower:
    """Reads the whole output of one stream as it is written, across the cut.

    ``pos`` is a position in the whole output (as if nothing were left out).
    ``read()`` returns the bytes that follow it, in order (a window kept as a ring
    is read from its oldest byte on). Where output went that this reader never saw,
    it puts one marker line in what it returns, or, given a list ``gaps`` (a
    follower: ``qex logs --follow``), adds ``(position, bytes)`` there and leaves
    the data as the job wrote it.
    """

    def __init__(self, path: str, gaps: list | None = None):
        self.path = path
        self.pos = 0
        self.last = b"\n"
        self.gaps = gaps

    def read(self) -> bytes:
        for _ in range(20):
            before = read_cut(self.path)
            if before is False or (before and before.moving):
                _pause()
                continue
            try:
                got = self._read(before)
            except FileNotFoundError:
                return b""
            after = read_cut(self.path)
            if _same(before, after):
                data, pos, gap = self._assemble(before, after, *got)
                if gap is not None:
                    self.gaps.append(gap)
                self.pos = pos
                if data:
                    self.last = data[-1:]
                return data
            _pause()
        return b""  # the file is being rewritten; the next call reads it

    def _read(self, cut: "CutState | None") -> tuple[bytes, int, bytes, bytes]:
        """(the head from ``pos``, where the window's part starts, that part, the file's marker)."""
        fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if cut is None:
                return b"", self.pos, _pread(fd, None, self.pos), b""
            head = _pread(fd, cut.head - self.pos, self.pos) if self.pos < cut.head else b""
            pos = max(self.pos, cut.head)
            first = max(pos, start(cut, cut.end))
            marker = _pread(fd, cut.marker, cut.head) if pos == cut.head < first else b""
            if cut.end < 0:  # (format 1: the window is the rest of the file, in order)
                tail = _pread(fd, None, cut.head + cut.marker + first - cut.origin)
            else:
                tail = b"".join(_pread(fd, n, at) for at, n in pieces(cut, first, cut.end))
            return head, first, tail, marker
        finally:
            os.close(fd)

    def _assemble(self, cut, after, head: bytes, first: int, tail: bytes, marker: bytes) -> tuple:
        """What ``read`` returns, its new position and the gap, once ``after`` (the record read
        after the data) said which of the window's bytes the writer may have overwritten."""
        if cut is None:
            return tail, self.pos + len(tail), None
        trusted = start(after, after.reserve) if after.cap else after.origin
        if first < trusted:  # (the writer was overwriting them while this read)
            lost = min(trusted - first, len(tail))
            first, tail = first + lost, tail[lost:]
        parts, pos, gap = [head], max(self.pos, cut.head), None
        if pos < first:
            if self.gaps is not None:
                gap = (pos, first - pos)
            elif pos == cut.head and marker:  # exactly at the cut: the file's own marker says it
                parts.append(marker)
            else:
                lead = b"" if (head or self.last).endswith(b"\n") else b"\n"
                parts.append(
                    lead
                    + (
                        f"[qex] ---- {first - pos} bytes went by here while you followed: they passed "
                        "[logs] max_bytes ----\n"
                    ).encode()
                )
        parts.append(tail)
        return b"".join(parts), first + len(tail), gap


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return bool(a) and bool(b) and a.gen == b.gen and not b.moving


def _pread(fd: int, n: int | None, at: int) -> bytes:
    """``n`` bytes of the file from ``at`` (None: to its end), fewer where it ends first."""
    chunks = []
    while n is None or n > 0:
        chunk = os.pread(fd, COPY_CHUNK if n is None else min(n, COPY_CHUNK), at)
        if not chunk:
            break
        chunks.append(chunk)
        at += len(chunk)
        if n is not None:
            n -= len(chunk)
    return b"".join(chunks)


def _pause() -> None:
    import time

    time.sleep(0.005)
