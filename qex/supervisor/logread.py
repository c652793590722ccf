"""The reader's side of a job's log files: ``Follower`` reads the whole output of one
stream as the supervisor writes it (``qex.supervisor.logs.Sink``), across the cuts
of ``[logs] max_bytes``, with the cut record (``<stream>.log.cut``) that
``qex.supervisor.logs`` describes. Used by ``qex logs --follow``, ``status
--follow``, a late ``qex run`` and ``qex logs``: never by the supervisor, which
writes.
"""

import os

from qex.supervisor.logs import COPY_CHUNK, CutState, read_cut


class Follower:
    """Reads the whole output of one stream as it is written, across the cuts.

    ``pos`` is a position in the whole output (as if nothing were left out).
    ``read()`` returns the bytes that follow it. Where output went that this
    reader never saw, it puts one marker line in what it returns, or, given a
    list ``gaps`` (a follower: ``qex logs --follow``), adds ``(position, bytes)``
    there and leaves the data as the job wrote it.
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
                data, pos, gap = self._read(before)
            except FileNotFoundError:
                return b""
            after = read_cut(self.path)
            if _same(before, after):
                if gap is not None:
                    self.gaps.append(gap)
                self.pos = pos
                if data:
                    self.last = data[-1:]
                return data
            _pause()
        return b""  # the file is being rewritten; the next call reads it

    def _read(self, cut: "CutState | None") -> tuple[bytes, int, "tuple[int, int] | None"]:
        fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if cut is None:
                data = _read_from(fd, self.pos)
                return data, self.pos + len(data), None
            parts, pos, gap = [], self.pos, None
            if pos < cut.head:
                parts.append(os.pread(fd, cut.head - pos, pos))
                pos = cut.head
            if pos < cut.base:
                if self.gaps is not None:
                    gap = (pos, cut.base - pos)
                elif pos == cut.head:  # exactly at the cut: the file's own marker says it
                    parts.append(os.pread(fd, cut.marker, cut.head))
                else:
                    lead = b"" if (parts and parts[-1].endswith(b"\n")) or (not parts and self.last == b"\n") else b"\n"
                    parts.append(
                        lead
                        + (
                            f"[qex] ---- {cut.base - pos} bytes went by here while you "
                            "followed: they passed [logs] max_bytes ----\n"
                        ).encode()
                    )
                pos = cut.base
            at = cut.head + cut.marker + (pos - cut.base)
            tail = _read_from(fd, at)
            parts.append(tail)
            return b"".join(parts), pos + len(tail), gap
        finally:
            os.close(fd)


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return bool(a) and bool(b) and a.gen == b.gen and not b.moving


def _read_from(fd: int, at: int) -> bytes:
    chunks = []
    while True:
        chunk = os.pread(fd, COPY_CHUNK, at)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        at += len(chunk)


def _pause() -> None:
    import time

    time.sleep(0.005)
