"""The cut record of a log (``<stream>.log.cut``) and the arithmetic of the window it describes.

Written by the supervisor (``qex.supervisor.logs.Sink``), read by every reader of a log
(``qex.supervisor.logread.Follower``). A log that passed ``[logs] max_bytes`` (L) is

    [head: the first L/4 bytes][marker line][window: a ring of ``cap`` bytes]

and the output byte at position ``p`` (of the whole output, as if nothing were left out)
is at ``head + marker + (p - origin) mod cap`` in the file: the supervisor overwrites the
oldest bytes in place (no copy, no truncation). The window holds the output in
``[start, end)``, ``start = max(origin, end - cap + 1)``: the one slot more holds the byte
before the window (whether the window starts mid-line). When the job ends the window is
unrolled into order once (``cap`` 0: ``head + marker + (p - origin)``), with the counted
marker. A reader checks what it read against ``reserve``: the writer may be writing any
position below it, which overwrites positions below ``reserve - cap``; it says so (a new
``reserve``, one ``pwrite`` of this fixed-size record) before it writes past it.

Format 2 (``qexcut2``): gen moving final head marker origin cap end reserve dropped_bytes
dropped_lines lines mid_line head_nl, then a CRC-32 of the line. ``gen`` changes when the
layout does (the cut, an unroll); ``moving``: the layout is being changed (read again);
``dropped_*``: what is left out before ``origin`` (after the unroll: in all); ``lines``: the
newlines in ``[origin, end)``; ``mid_line``: the byte before ``origin`` is not a newline;
``head_nl``: the head ends with one. Format 1 (``qexcut1``, a qex before the ring, whose
window slid in order to the end of the file) still reads: ``cap`` 0 and ``end`` -1 (to
the end of the file).

``posix`` and builtins only: the minimal watcher (``qex.supervisor.watch``) imports this.
"""

import posix as os

CUT_RECORD = 256  # bytes of the .cut record
COPY_CHUNK = 1 << 20
SLICE = 1 << 16  # newlines are counted in pieces of this size (a larger bytes object is an mmap and page faults)


def _crc32(data: bytes) -> int:
    """binascii's crc32, imported at the first use: binascii and the libz it loads are
    memory of its own that a minimal watcher whose logs are never cut need not hold
    (issue 10's 3 MiB). The first call rebinds this name to the C function."""
    global _crc32
    from binascii import crc32 as _crc32

    return _crc32(data)


class CutState:
    """The cut record: how the file maps onto the whole output."""

    __slots__ = (
        "gen",
        "moving",
        "final",
        "head",
        "marker",
        "origin",
        "cap",
        "end",
        "reserve",
        "dropped_bytes",
        "dropped_lines",
        "lines",
        "mid_line",
        "head_nl",
    )
    FIELDS = __slots__

    def __init__(self, **fields):
        for name in self.FIELDS:
            setattr(self, name, fields.get(name, 0))
        self.moving, self.final = bool(self.moving), bool(self.final)
        self.mid_line, self.head_nl = bool(self.mid_line), bool(fields.get("head_nl", True))

    def encode(self) -> bytes:
        fields = ("qexcut2 " + " ".join(str(int(getattr(self, n))) for n in self.FIELDS)).encode()
        line = fields + b" %08x" % _crc32(fields)
        return line.ljust(CUT_RECORD - 1) + b"\n"

    @classmethod
    def decode(cls, data: bytes) -> "CutState | None":
        """None for a record that is absent, torn or damaged (the caller retries)."""
        fields, _, crc = data.rstrip().rpartition(b" ")
        try:
            if int(crc, 16) != _crc32(fields):
                return None
            n = [int(x) for x in fields.split()[1:]]
            if fields.startswith(b"qexcut2 ") and len(n) == len(cls.FIELDS):
                return cls(**dict(zip(cls.FIELDS, n)))
            if fields.startswith(b"qexcut1 ") and len(n) == 10:  # gen moving final head marker base bytes lines mid nl
                return cls(
                    gen=n[0],
                    moving=n[1],
                    final=n[2],
                    head=n[3],
                    marker=n[4],
                    origin=n[5],
                    cap=0,
                    end=-1,
                    reserve=-1,
                    dropped_bytes=n[6],
                    dropped_lines=n[7],
                    lines=-1,
                    mid_line=n[8],
                    head_nl=n[9],
                )
        except (ValueError, IndexError):
            pass
        return None


def cut_path(path: str) -> str:
    """The cut record of the log at ``path``. Not in the minimal watcher, which imports
    nothing that imports ``os`` (the layout does): a ``Sink`` has its own, ``cut``."""
    from qex.store.layout import CUT

    return path + CUT


def read_cut(path: str) -> "CutState | None | bool":
    """The cut record of the log at ``path``: None if the file was never cut,
    False if the record cannot be read consistently right now."""
    try:
        fd = os.open(cut_path(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError:
        return False
    try:
        data = os.pread(fd, CUT_RECORD, 0)
    finally:
        os.close(fd)
    if not data:
        return None  # created, not written yet: the file is still whole
    return CutState.decode(data) or False


# ---- the window's arithmetic ----------------------------------------------------------------


def start(s: CutState, upto: int) -> int:
    """The first output position the window holds once the writer has written up to
    ``upto`` (``end``; a reader: ``reserve``, which the writer may be writing below)."""
    return s.origin if not s.cap else max(s.origin, upto - s.cap + 1)


def place(s: CutState, p: int) -> int:
    """Where the output byte at position ``p`` is in the file."""
    return s.head + s.marker + ((p - s.origin) % s.cap if s.cap else p - s.origin)


def pieces(s: CutState, a: int, b: int) -> list:
    """``(offset, length)`` in the file of the output ``[a, b)`` (at most two: the ring's wrap)."""
    out = []
    while a < b:
        at = place(s, a)
        n = b - a if not s.cap else min(b - a, s.head + s.marker + s.cap - at)
        out.append((at, n))
        a += n
    return out


# ---- counting and copying, in the file -----------------------------------------------------


def newlines(view: bytes | memoryview) -> int:
    """The newlines in ``view`` (bytes or a memoryview), exactly. ``bytes.count`` looks at
    each byte (2 GB/s here); ``replace`` jumps between newlines (``memchr``: 9 GB/s for
    random bytes, 4 for lines of 54 bytes, 1.5 for 19, 0.06 for 1). Three samples of 1 KiB
    choose: ``replace`` for lines of 64 bytes or more (4 KiB samples were a fifth of the
    count of random bytes). Pieces of 64 KiB: a larger object comes from mmap, and its
    page faults cost more than the count."""
    n = len(view)
    if n < SLICE:
        return bytes(view).count(b"\n")
    sparse = sum(bytes(view[a : a + 1024]).count(b"\n") for a in (0, n // 2, n - 1024)) <= 48
    count = 0
    for i in range(0, n, SLICE):
        piece = bytes(view[i : i + SLICE])
        count += len(piece) - len(piece.replace(b"\n", b"")) if sparse else piece.count(b"\n")
    return count


def lines_in(fd: int, ranges: list) -> tuple[int, bytes]:
    """The newlines in the file's ``(offset, length)`` ranges, and the last byte read."""
    count, last = 0, b""
    for at, n in ranges:
        end = at + n
        while at < end:
            chunk = os.pread(fd, min(COPY_CHUNK, end - at), at)
            if not chunk:
                break
            count += newlines(chunk)
            last = chunk[-1:]
            at += len(chunk)
    return count, last


def write_all(fd: int, data: bytes | memoryview, at: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, at)
        if not n:
            raise OSError(28, "the file took no more")
        at += n
        view = view[n:]


def copy_between(src_fd: int, dest_fd: int, src: int, dest: int, n: int) -> None:
    """Copy ``n`` bytes in the kernel (``copy_file_range``: no pass through this process),
    by ``pread`` and ``pwrite`` where it cannot (another file system, ranges that overlap)."""
    if src_fd == dest_fd and src == dest:
        return
    done = 0
    while done < n:
        try:
            moved = os.copy_file_range(src_fd, dest_fd, n - done, src + done, dest + done)
        except OSError:
            break
        if not moved:
            return  # (the end of the file)
        done += moved
    while done < n:
        chunk = os.pread(src_fd, min(COPY_CHUNK, n - done), src + done)
        if not chunk:
            break
        write_all(dest_fd, chunk, dest + done)
        done += len(chunk)
