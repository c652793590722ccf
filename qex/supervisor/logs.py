"""Where a job's output goes: the supervisor reads the pipes and writes the files.

``[logs] max_bytes`` (L, per stream) is enforced while the job writes, on disk,
with no buffer in memory that grows with L or with the output:

* until the file reaches L nothing is removed;
* at L the file is *cut*: the head (the first L/4 bytes) stays, a marker line
  follows it, and after the marker comes a *window* holding the most recent
  output in order. When the window fills the file up to L again, it *slides*:
  its newest half is copied to its start and the file is truncated, and the
  bytes that went are counted (bytes and newlines);
* when the job ends the marker is rewritten with the exact count, the setting
  to change, and whether the tail starts in the middle of a line.

So the file never holds more than L bytes plus the marker, it keeps the first
and the last bytes of the output (a single enormous line keeps its end), and a
job never fails because of the limit.

The limit is about what stays on disk: it never cuts what the job's own
follower streams. A sink with a *tee* (the write end of the FIFO ``qex run``
reads, ``qex.supervisor.pipes``) writes every byte there too, whatever the
file keeps, in the kernel (``take``: ``tee(2)`` into the FIFO, then ``splice``
of the same bytes into the file). While the FIFO is full (``held``) the watch
loop takes no more of the job's pipe: the job waits for its follower as for a
pipe. Without ``tee``, ``write`` copies what the loop read, and what the FIFO
does not take at once waits in ``pending`` (``flush_tee``).

A reader that follows the file while it is cut (``qex logs --follow``) reads
``<stream>.log.cut``, a fixed-size record the supervisor rewrites in place
(one ``pwrite``) before and after each slide: where the head ends, how long
the marker is, which position of the whole output the window starts at, and a
generation. ``Follower`` (``qex.supervisor.logread``) maps its position in the
whole output onto the file with it, retries when a slide happened during its read, and counts what went
by when it could not keep up (``gaps``: its caller says so, outside the data).
"""

import binascii
import errno
import posix as os  # the system calls only: the minimal watcher (qex.supervisor.watch) imports

#                     this module, and the `os` module would cost it 170 kB (see docs/design.md)

MIN_LIMIT = 4096  # below this the head, the marker and a tail do not fit
CUT_RECORD = 256  # bytes of the .cut record
COPY_CHUNK = 1 << 20
CHECK_EVERY = 64 << 10  # a log looks at the free space at least every 64 KiB it writes


class CutState:
    """The cut record: how the file maps onto the whole output."""

    __slots__ = (
        "gen",
        "moving",
        "final",
        "head",
        "marker",
        "base",
        "dropped_bytes",
        "dropped_lines",
        "mid_line",
        "head_nl",
    )

    def __init__(
        self,
        gen=0,
        moving=False,
        final=False,
        head=0,
        marker=0,
        base=0,
        dropped_bytes=0,
        dropped_lines=0,
        mid_line=False,
        head_nl=True,
    ):
        self.gen, self.moving, self.final = gen, moving, final
        self.head, self.marker, self.base = head, marker, base
        self.dropped_bytes, self.dropped_lines = dropped_bytes, dropped_lines
        self.mid_line, self.head_nl = mid_line, head_nl

    def encode(self) -> bytes:
        fields = (
            f"qexcut1 {self.gen} {int(self.moving)} {int(self.final)} {self.head} {self.marker} "
            f"{self.base} {self.dropped_bytes} {self.dropped_lines} {int(self.mid_line)} "
            f"{int(self.head_nl)}"
        ).encode()
        line = fields + b" %08x" % binascii.crc32(fields)
        return line.ljust(CUT_RECORD - 1) + b"\n"

    @classmethod
    def decode(cls, data: bytes) -> "CutState | None":
        """None for a record that is absent, torn or damaged (the caller retries)."""
        fields, _, crc = data.rstrip().rpartition(b" ")
        try:
            if not fields.startswith(b"qexcut1 ") or int(crc, 16) != binascii.crc32(fields):
                return None
            n = [int(x) for x in fields.split()[1:]]
            return cls(n[0], bool(n[1]), bool(n[2]), n[3], n[4], n[5], n[6], n[7], bool(n[8]), bool(n[9]))
        except (ValueError, IndexError):
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


class Sink:
    """One output stream of a job, written to its log file as it arrives.

    ``limit`` is ``[logs] max_bytes`` (None: no limit). ``bytes`` counts what
    the job wrote; ``dropped_bytes``/``dropped_lines`` what the limit left out
    (over every attempt of the job, so that the record's ``logs_dropped`` is the
    state of the file). Lines are counted only where the file is cut (a count of
    every write's newlines was a third of a sink's time, and nothing read it).
    """

    def __init__(self, path: str, limit: int | None = None, label: str = "", setting: str = ""):
        from qex.store import fs

        self.path, self.label, self.setting = path, label, setting
        self.cut = cut_path(path)  # (made here, before the minimal watcher: see cut_path)
        self.failed: str | None = None
        self.room = 0  # bytes this log may write before it looks at the free space again
        try:  # never a symlink, a FIFO, nor another user's file (a shared directory): the log stops, not the job
            self.fd = fs.open_regular(path, os.O_RDWR | os.O_CREAT)
            st = os.fstat(self.fd)
            if st.st_uid != os.getuid() or st.st_nlink != 1:
                os.close(self.fd)
                raise PermissionError(errno.EPERM, "it is not this user's log file (replaced by another user?)")
            self.size = st.st_size
        except OSError as exc:
            self.fd = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
            self.failed = f"cannot open {path}: {exc.strerror or exc}"
            self.size = 0
        self.limit = None if limit is None else max(int(limit), MIN_LIMIT)
        self.bytes = 0
        self.cut_fd: int | None = None
        self.state: CutState | None = None
        self.changed = False
        self.tee, self.tee_path, self.pending = -1, "", b""
        self.held = False  # take() found the FIFO full: what waits for the follower is in the job's pipe
        previous = read_cut(path) if self.size else None  # (a file never written was never cut)
        if previous:  # an earlier attempt cut this file: go on from where it stopped
            self.state = previous
            self.state.moving = self.state.final = False
            if self.limit is not None:
                self.limit = max(self.limit, previous.head + previous.marker + MIN_LIMIT // 2)

    # ---- across an exec (qex.supervisor.handoff): the fds stay open -----------
    def handover(self) -> tuple:
        """What the process this one execs into needs to go on writing this log."""
        return (
            self.path,
            self.label,
            self.setting,
            self.failed,
            self.room,
            self.fd,
            self.size,
            self.limit,
            self.bytes,
            0,
            self.cut_fd,
            self.state.encode() if self.state else None,
            self.changed,
            self.cut,
            self.tee,
            self.tee_path,
            self.pending,
            self.held,
        )

    @classmethod
    def resume(cls, handed: tuple) -> "Sink":
        """The Sink ``handover`` described, in the process that inherited its fds."""
        self = cls.__new__(cls)
        (
            self.path,
            self.label,
            self.setting,
            self.failed,
            self.room,
            self.fd,
            self.size,
            self.limit,
            self.bytes,
            _,
            self.cut_fd,
            state,
            self.changed,
        ) = handed[:13]  # (_: a count of lines no one read)
        self.cut = handed[13] if len(handed) > 13 else None  # (None: handed over by a qex before this one)
        self.tee, self.tee_path, self.pending = handed[14:17] if len(handed) > 16 else (-1, "", b"")
        self.held = handed[17] if len(handed) > 17 else False
        self.state = CutState.decode(state) if state else None
        return self

    # ---- the counts the record shows ----------------------------------------
    @property
    def dropped_bytes(self) -> int:
        return self.state.dropped_bytes if self.state else 0

    @property
    def dropped_lines(self) -> int:
        return self.state.dropped_lines if self.state else 0

    # ---- writing ------------------------------------------------------------
    def write(self, data: bytes | bytearray, n: int | None = None) -> None:
        """Write ``data`` (bytes), or the first ``n`` bytes of the buffer ``data`` (the watch
        loop reads into one reused buffer: no allocation per read)."""
        if n is None:
            n = len(data)
        self.bytes += n
        if self.tee >= 0:
            self._tee(memoryview(data)[:n])
        if self.failed:
            return
        if n > self.room and not self._look(n):
            return
        self.room -= n
        try:
            self._write(memoryview(data)[:n])
        except OSError as exc:  # a full disk stops the log, never the job
            self.failed = exc.strerror or str(exc)

    def take(self, pipe: int, buffer: bytearray) -> "int | None":
        """Take what the job's ``pipe`` holds (at most ``len(buffer)`` bytes) into the FIFO
        and the log: in the kernel where there is a FIFO and ``tee``, else read into ``buffer``
        and written. The count; 0 at the pipe's end; None: the FIFO is full, nothing was
        taken (``held``). Raises BlockingIOError when the pipe is empty."""
        if self.tee >= 0 and not self.pending:
            from qex.linux.tee import has_room, tee

            try:
                n = tee(pipe, self.tee, len(buffer))
            except BlockingIOError:
                if has_room(self.tee):
                    raise  # (the job's pipe is empty)
                self.held = True
                return None
            except OSError as exc:
                if exc.errno != 38:  # (EPIPE: the follower is gone, nobody to tell; 38, ENOSYS: no tee here)
                    self.drop_tee(cut=False)
                return self._read(pipe, buffer)
            self.held = False
            if n:
                self.bytes += n
                self._log_from(pipe, n, buffer)
            return n
        return self._read(pipe, buffer)

    def _read(self, pipe: int, buffer: bytearray) -> int:
        n = os.readv(pipe, [buffer])
        if n:
            self.write(buffer, n)
        return n

    def _log_from(self, pipe: int, n: int, buffer: bytearray) -> None:
        """Move the next ``n`` bytes of ``pipe`` into the file (``splice``), the limit
        applied as ``_write`` does; what the log cannot take (stopped) is read and dropped:
        the FIFO has them already, and the pipe must be at the next byte."""
        moved = [0]  # (what went in before an error: the rest is dropped, no more)

        def move(i: int, k: int, at: int) -> int:
            got = os.splice(pipe, self.fd, k, None, at)
            moved[0] += got
            return got

        if not self.failed and (n <= self.room or self._look(n)):
            self.room -= n
            try:
                self._put(n, move)
            except OSError as exc:  # a full disk stops the log, never the job
                self.failed = exc.strerror or str(exc)
        n -= moved[0]
        view = memoryview(buffer)
        while n > 0:
            got = os.readv(pipe, [view[:n]])
            if not got:
                break
            n -= got

    # ---- the follower's FIFO (qex.supervisor.pipes) ------------------------------
    def attach(self, fd: int, path: str) -> None:
        """Write everything from now on to the FIFO ``fd`` (non-blocking) too."""
        self.tee, self.tee_path = fd, path

    def _tee(self, view: memoryview) -> None:
        if self.pending:  # (the watch loop reads nothing while some waits: never here)
            self.pending += bytes(view)
            return
        try:
            while view:
                view = view[os.write(self.tee, view) :]
        except BlockingIOError:
            self.pending = bytes(view)  # (a copy: the watch loop reuses its buffer)
        except OSError:
            self.drop_tee(cut=False)  # EPIPE: the follower is gone, nobody to tell

    def flush_tee(self) -> bool:
        """Give the FIFO what waits for it; True once nothing waits (or the follower is gone)."""
        self.held = False
        view = memoryview(self.pending)
        try:
            while view:
                view = view[os.write(self.tee, view) :]
        except BlockingIOError:
            self.pending = bytes(view)
            return False
        except OSError:
            self.drop_tee(cut=False)
            return True
        self.pending = b""
        return True

    def drop_tee(self, cut: bool) -> None:
        """Stop writing to the FIFO. ``cut``: its reader is there but did not take what
        waits (a stopped job's last output): the FIFO leaves the job's directory, which
        is how the follower learns that its copy is short (``pipes.Ends.cut``)."""
        if self.tee < 0:
            return
        if cut and (self.pending or self.held):
            try:
                st, mine = os.stat(self.tee_path, follow_symlinks=False), os.fstat(self.tee)
                if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
                    os.unlink(self.tee_path)
            except OSError:
                pass
        try:
            os.close(self.tee)
        except OSError:
            pass
        self.tee, self.pending, self.held = -1, b"", False

    def _look(self, want: int) -> bool:
        """Stop the log before the disk is so full that records cannot be written."""
        from qex.store.room import LOG_ROOM

        try:
            st = os.fstatvfs(self.fd)
        except OSError:
            self.room = CHECK_EVERY
            return True
        free = st.f_bavail * st.f_frsize
        if free - want < LOG_ROOM:
            self.failed = (
                f"the disk is nearly full (less than {LOG_ROOM >> 10} KiB free); qex stopped "
                "the log so that the job's record can still be written"
            )
            return False
        self.room = min(CHECK_EVERY, free - LOG_ROOM)
        return True

    def _write(self, view: memoryview) -> None:
        if self._put(len(view), lambda i, k, at: os.pwrite(self.fd, view[i : i + k], at)):
            raise OSError(0, "the file took no more")

    def _put(self, n: int, move) -> int:
        """Write ``n`` bytes, the limit applied (at the limit, a slide): ``move(i, k, at)``
        writes ``k`` of them from their ``i``-th at ``at`` in the file and returns how many
        it wrote. The count of those it did not write (0 but where the file took none)."""
        limit, done = self.limit, 0
        while done < n:
            room = n - done if limit is None else limit - self.size
            if room <= 0:
                self._slide()
                if self.limit - self.size <= 0:
                    raise OSError(0, "the limit leaves no room after the marker")
                continue
            moved = move(done, min(n - done, room), self.size)
            if not moved:
                break
            self.size += moved
            done += moved
        return n - done

    def _slide(self) -> None:
        """The file is full: keep the head and the newest half of the window."""
        s = self.state
        if s is None:
            head = self.limit // 4
            s = CutState(head=head, head_nl=os.pread(self.fd, 1, head - 1) == b"\n")
            marker = self._live_marker(s.head_nl)
            window_at = head  # the window is what follows the head in the uncut file
            base = head
        else:
            marker = None
            window_at = s.head + s.marker
            base = s.base
        dest = s.head + (len(marker) if marker is not None else s.marker)
        keep = max(0, min((self.limit - dest) // 2, self.size - dest))
        src = self.size - keep
        gone_lines, last = _count_newlines(self.fd, window_at, src)
        s.gen += 1
        s.moving = True
        self.state = s
        self._put_cut()
        _copy_between(self.fd, self.fd, src, dest, keep)  # (dest <= src)
        if marker is not None:
            os.pwrite(self.fd, marker, s.head)
            s.marker = len(marker)
        os.ftruncate(self.fd, dest + keep)
        self.size = dest + keep
        gone = src - window_at
        s.base = base + gone
        s.dropped_bytes += gone
        s.dropped_lines += gone_lines
        if gone:
            s.mid_line = last != b"\n"
        s.gen += 1
        s.moving = False
        self.changed = True
        self._put_cut()

    def _live_marker(self, head_nl: bool) -> bytes:
        text = (
            f"[qex] ---- more of {self.label or 'this output'} is being left out here: it passed "
            f"{self.setting or '[logs] max_bytes'}; the count is written when the job ends ----\n"
        )
        return (b"" if head_nl else b"\n") + text.encode()

    def _final_marker(self) -> bytes:
        from qex.base.units import format_size

        s = self.state
        what = self.label or "the output"
        text = (
            f"[qex] ---- {s.dropped_bytes} bytes ({format_size(s.dropped_bytes)}) and {s.dropped_lines} "
            f"line(s) of {what} are not in this file: they passed {self.setting or '[logs] max_bytes'}"
            f"{'; the text below starts in the middle of a line' if s.mid_line else ''} ----\n"
        )
        return (b"" if s.head_nl else b"\n") + text.encode()

    def _put_cut(self) -> None:
        if self.cut_fd is None:
            self.cut = self.cut or cut_path(self.path)  # (imports the layout: only after an upgrade)
            self.cut_fd = os.open(self.cut, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        os.pwrite(self.cut_fd, self.state.encode(), 0)

    # ---- the end --------------------------------------------------------------
    def close(self) -> None:
        """Write the counted marker (if the file was cut) and close."""
        try:
            if self.state is not None and self.changed and not self.failed:
                self._finalize()
        except OSError as exc:
            self.failed = exc.strerror or str(exc)
        finally:
            os.close(self.fd)
            if self.cut_fd is not None:
                os.close(self.cut_fd)
            self.drop_tee(cut=True)

    def _finalize(self) -> None:
        """Replace the live marker by the counted one, as one rename (readers see
        the old file or the new one)."""
        s = self.state
        marker = self._final_marker()
        from os.path import join, split

        directory, base = split(self.path)
        tmp = join(directory, f".{base}.final")
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            _copy_between(self.fd, out, 0, 0, s.head)
            _write_all(out, marker, s.head)
            _copy_between(self.fd, out, s.head + s.marker, s.head + len(marker), self.size - s.head - s.marker)
        finally:
            os.close(out)
        s.gen += 1
        s.moving = True
        self._put_cut()
        os.rename(tmp, self.path)
        s.marker = len(marker)
        s.gen += 1
        s.moving = False
        s.final = True
        self._put_cut()


def _write_all(fd: int, data, at: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, at)
        at += n
        view = view[n:]


def _copy_between(src_fd: int, dest_fd: int, src: int, dest: int, n: int) -> None:
    """Copy ``n`` bytes in the kernel (``copy_file_range``: no pass through this process),
    by ``pread`` and ``pwrite`` where it cannot (another file system, ranges that overlap)."""
    if src_fd == dest_fd and src == dest:
        return  # (a slide that keeps the whole window where it is)
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
        _write_all(dest_fd, chunk, dest + done)
        done += len(chunk)


def _count_newlines(fd: int, start: int, end: int) -> tuple[int, bytes]:
    """Newlines in [start, end) of the file, and its last byte."""
    count, last, at = 0, b"", start
    while at < end:
        chunk = os.pread(fd, min(COPY_CHUNK, end - at), at)
        if not chunk:
            break
        count += _newlines(chunk)
        last = chunk[-1:]
        at += len(chunk)
    return count, last


def _newlines(chunk: bytes) -> int:
    """``chunk.count(b"\\n")``: ``count`` looks at each byte (3 GB/s here), ``replace`` jumps
    between newlines (``memchr``: 9 GB/s for random bytes, 4 for lines of 54 bytes, 1.5 for
    19, 0.06 for 1). Three samples of 4 KiB choose: ``replace`` for lines of 64 bytes or more."""
    n, middle = len(chunk), len(chunk) // 2
    if n < 1 << 16 or sum(chunk.count(b"\n", at, at + 4096) for at in (0, middle, n - 4096)) > 192:
        return chunk.count(b"\n")
    return n - len(chunk.replace(b"\n", b""))
