"""Where a job's output goes: the supervisor reads the pipes and writes the files.

``[logs] max_bytes`` (L, per stream) is enforced while the job writes, on disk,
with no buffer in memory that grows with L or with the output:

* until the file reaches L nothing is removed;
* at L the file is *cut*: the head (the first L/4 bytes) stays, a marker line
  goes over the bytes after it, and the rest of the file, up to L, is a *window*
  kept as a ring (``qex.supervisor.logcut``): each new byte overwrites the oldest,
  in place (no copy, no truncation, the same page-cache pages). The newlines of
  what goes in are counted as it goes in (the bytes are in this process's buffer),
  so what it overwrites is counted without being read back;
* when the job ends the window is unrolled into order after a marker with the
  exact count, the setting to change, and whether the tail starts in the middle
  of a line (one new file, renamed over the log).

So the file never holds more than L bytes (plus the longer final marker), it
keeps the first and the last bytes of the output (a single enormous line keeps
its end), and a job never fails because of the limit.

The limit is about what stays on disk: it never cuts what the job's own
follower streams. A sink with a *tee* (the write end of the FIFO ``qex run``
reads, ``qex.supervisor.pipes``) writes every byte there too, whatever the
file keeps, in the kernel (``take``: ``tee(2)`` into the FIFO, then ``splice``
of the same bytes into the file until the cut; after it ``readv`` into the
buffer, where they are counted, and ``pwrite`` into the ring). While the FIFO
is full (``held``) the watch loop takes no more of the job's pipe: the job
waits for its follower as for a pipe. Without ``tee``, ``write`` copies what
the loop read, and what the FIFO does not take at once waits in ``pending``
(``flush_tee``).

A reader of the file while it is cut (``qex logs``, ``--follow``) reads
``<stream>.log.cut`` (``qex.supervisor.logcut``: the format), a fixed-size
record the supervisor rewrites in place (one ``pwrite``) at the cut, after each
write into the ring (the window's end) and at the end. ``Follower``
(``qex.supervisor.logread``) maps its position in the whole output onto the
file with it, checks that the writer did not overwrite what it read, and counts
what went by when it could not keep up (``gaps``: its caller says so, outside
the data).
"""

import errno
import posix as os  # the system calls only: the minimal watcher (qex.supervisor.watch) imports

#                     this module, and the `os` module would cost it 170 kB (see docs/design.md)
from qex.supervisor import logcut
from qex.supervisor.logcut import CutState, cut_path, read_cut

MIN_LIMIT = 4096  # below this the head, the marker and a tail do not fit
CHECK_EVERY = 64 << 10  # a growing log looks at the free space at least every 64 KiB it writes
LEASE = 1 << 20  # how far ahead of its writes the writer reserves the ring (at most; readers trust less by as much)
# What ``Sink.handover`` gives the process an exec starts, in order (-: a count of lines no one read, once).
HANDED = (
    "path label setting failed room fd size limit bytes - cut_fd state changed cut tee tee_path pending held".split()
)


def lease(cap: int) -> int:
    """How far ``reserve`` goes past a write: a reader of the running job's window misses at
    most this much of its oldest bytes, and the writer says a new reserve once per lease."""
    return min(cap // 16, LEASE)


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
        self.totals: tuple | None = None  # (dropped bytes, dropped lines) once the end counted them
        previous = read_cut(path) if self.size else None  # (a file never written was never cut)
        if previous:  # an earlier attempt cut this file: go on from where it stopped
            self._adopt(previous)

    def _adopt(self, previous: CutState) -> None:
        """Go on from the cut of an earlier attempt: a window it left unrolled (its
        supervisor died) is unrolled first, trusting only what its ``reserve`` spared."""
        self.state = previous
        if previous.cap and not self.failed:
            try:
                self._finalize(previous.reserve)
            except OSError as exc:
                self.failed = f"cannot go on with {self.path}: {exc.strerror or exc}"
            self.totals = None  # (this attempt's output counts too)
        self.state.moving = self.state.final = False
        if self.limit is not None:
            self.limit = max(self.limit, previous.head + previous.marker + MIN_LIMIT // 2)

    # ---- across an exec (qex.supervisor.handoff): the fds stay open -----------
    def handover(self) -> tuple:
        """What the process this one execs into needs to go on writing this log."""
        state = self.state.encode() if self.state else None
        return tuple(state if n == "state" else getattr(self, n) if n != "-" else 0 for n in HANDED)

    @classmethod
    def resume(cls, handed: tuple) -> "Sink":
        """The Sink ``handover`` described, in the process that inherited its fds."""
        self = cls.__new__(cls)
        self.cut, self.tee, self.tee_path, self.pending, self.held = None, -1, "", b"", False  # (an older qex's: fewer)
        for name, value in zip(HANDED, handed):
            if name != "-":
                setattr(self, name, value)
        self.state = CutState.decode(self.state) if self.state else None
        self.totals = None
        return self

    # ---- the counts the record shows ----------------------------------------
    @property
    def dropped_bytes(self) -> int:
        if self.totals is not None:
            return self.totals[0]
        return self.state.dropped_bytes if self.state else 0

    @property
    def dropped_lines(self) -> int:
        if self.totals is not None:
            return self.totals[1]
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
        try:
            self._append(memoryview(data)[:n])
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
        """Move the next ``n`` bytes of ``pipe`` into the log: by ``splice`` (in the kernel)
        until the cut; after it through ``buffer``, so that their newlines are counted while
        they are at hand (``_ring_put``), never read back. What the log cannot take (it
        stopped) is read and dropped: the FIFO has it already, and the pipe must be at the
        next byte."""
        if not self.failed and self.state is None:
            k = n if self.limit is None else min(n, self.limit - self.size)
            if k > 0 and self._grow(k):
                try:
                    while k > 0:
                        got = os.splice(pipe, self.fd, k, None, self.size)
                        if not got:
                            break
                        self.size += got
                        k -= got
                        n -= got
                except OSError as exc:  # a full disk stops the log, never the job
                    self.failed = exc.strerror or str(exc)
        view = memoryview(buffer)
        while n > 0:
            got = os.readv(pipe, [view[:n]])
            if not got:
                break
            if not self.failed:
                try:
                    self._append(view[:got])
                except OSError as exc:
                    self.failed = exc.strerror or str(exc)
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

    # ---- the file: growing, the cut, the ring ------------------------------------
    def _grow(self, n: int) -> bool:
        """Whether the file may grow by ``n`` bytes (the free space, looked at every CHECK_EVERY)."""
        if n > self.room and not self._look(n):
            return False
        self.room -= n
        return True

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

    def _append(self, view: memoryview) -> None:
        """Write ``view`` after what the log holds, the limit applied. Raises OSError."""
        while view:
            s = self.state
            if s is not None and self.limit is not None:
                if not s.cap:
                    self._to_ring()
                    continue
                self._ring_put(view)
                return
            if s is not None and s.end >= 0:  # (cut by an earlier attempt, no limit now: it grows in order)
                s.end, s.gen = -1, s.gen + 1
                self._put_cut()
            k = len(view) if self.limit is None else min(len(view), self.limit - self.size)
            if k <= 0:
                self._cut()
                continue
            if not self._grow(k):
                return
            logcut.write_all(self.fd, view[:k], self.size)
            self.size += k
            view = view[k:]

    def _cut(self) -> None:
        """The file reached the limit: the head stays, the marker goes over the bytes after
        it (counted), and the rest of the file is the window (``_to_ring``)."""
        head = self.limit // 4
        head_nl = os.pread(self.fd, 1, head - 1) == b"\n"
        marker = self._live_marker(head_nl)
        s = CutState(head=head, marker=len(marker), origin=head + len(marker), end=self.size, head_nl=head_nl)
        s.dropped_bytes = len(marker)
        s.dropped_lines, last = logcut.lines_in(self.fd, [(head, len(marker))])
        s.mid_line = last != b"\n"
        s.gen, s.moving = 1, True
        self.state = s
        self._put_cut()
        logcut.write_all(self.fd, marker, head)
        self.changed = True
        self._to_ring()

    def _to_ring(self) -> None:
        """The window, in order after the marker, becomes a ring of the rest of the limit; a
        window longer than that (a retry under a smaller limit) loses its oldest bytes
        first, counted (one copy)."""
        s = self.state
        at = s.head + s.marker
        cap = self.limit - at
        if s.end < 0:  # (format 1: the window is the rest of the file)
            s.end = s.origin + self.size - at
        held = s.end - s.origin
        s.gen += 1
        s.moving = True
        self._put_cut()
        if held > cap:
            drop = held - cap
            gone, last = logcut.lines_in(self.fd, [(at, drop)])
            s.dropped_bytes += drop
            s.dropped_lines += gone
            s.mid_line = last != b"\n"
            logcut.copy_between(self.fd, self.fd, at + drop, at, cap)
            os.ftruncate(self.fd, at + cap)
            s.origin += drop
            held = cap
            self.changed = True
        self.size = at + held
        s.lines = logcut.lines_in(self.fd, [(at, held)])[0]
        s.cap, s.reserve = cap, s.end
        s.gen += 1
        s.moving = False
        self._put_cut()

    def _ring_put(self, view: memoryview) -> None:
        """Write ``view`` at the end of the window, over its oldest bytes, and count its
        newlines (hot: the caller has just read them). The record says ``reserve`` before
        the writes pass it, and the new end after them."""
        s = self.state
        n = len(view)
        lines = logcut.newlines(view)
        if s.end + n > s.reserve:
            s.reserve = s.end + n + lease(s.cap)  # (ahead: not one more record per write)
            self._put_cut()
        done = 0
        for at, k in logcut.pieces(s, s.end, s.end + n):
            if at + k > self.size and not self._grow(at + k - self.size):
                return  # (a window that is not full yet grows the file)
            logcut.write_all(self.fd, view[done : done + k], at)
            self.size = max(self.size, at + k)
            done += k
        s.end += n
        s.lines += lines
        if logcut.start(s, s.end) > s.origin:
            self.changed = True  # (bytes were overwritten: the end unrolls the window)
        self._put_cut()

    def _live_marker(self, head_nl: bool) -> bytes:
        text = (
            f"[qex] ---- more of {self.label or 'this output'} is being left out here: it passed "
            f"{self.setting or '[logs] max_bytes'}; the count is written when the job ends ----\n"
        )
        return (b"" if head_nl else b"\n") + text.encode()

    def _final_marker(self, dropped: int, lines: int, mid_line: bool, head_nl: bool) -> bytes:
        from qex.base.units import format_size

        what = self.label or "the output"
        text = (
            f"[qex] ---- {dropped} bytes ({format_size(dropped)}) and {lines} "
            f"line(s) of {what} are not in this file: they passed {self.setting or '[logs] max_bytes'}"
            f"{'; the text below starts in the middle of a line' if mid_line else ''} ----\n"
        )
        return (b"" if head_nl else b"\n") + text.encode()

    def _put_cut(self) -> None:
        if self.cut_fd is None:
            self.cut = self.cut or cut_path(self.path)  # (imports the layout: only after an upgrade)
            self.cut_fd = os.open(self.cut, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        os.pwrite(self.cut_fd, self.state.encode(), 0)

    # ---- the end --------------------------------------------------------------
    def close(self) -> None:
        """Unroll the window after the counted marker (if the file was cut) and close."""
        s = self.state
        try:
            if s is not None and not self.failed:
                if self.changed:
                    self._finalize(s.end)
                elif self.cut_fd is not None:
                    s.final = True
                    self._put_cut()
            elif s is not None:  # (the log stopped: the counts of what it holds, as well as they go)
                self.totals = self._totals(s.reserve)[1:3]
        except OSError as exc:
            self.failed = exc.strerror or str(exc)
        finally:
            os.close(self.fd)
            if self.cut_fd is not None:
                os.close(self.cut_fd)
            self.drop_tee(cut=True)

    def _totals(self, upto: int) -> tuple:
        """(where the window starts, bytes and lines left out in all, whether the window
        starts mid-line, its newlines) once the writer wrote up to ``upto``."""
        s = self.state
        if s.end < 0:  # (format 1: the window is the rest of the file, in order)
            s.end = s.origin + self.size - s.head - s.marker
        first = min(logcut.start(s, upto), s.end)
        if first == s.origin:
            return first, s.dropped_bytes, s.dropped_lines, s.mid_line, s.lines
        window = logcut.lines_in(self.fd, logcut.pieces(s, first, s.end))[0]
        mid = os.pread(self.fd, 1, logcut.place(s, first - 1)) != b"\n"
        return first, s.dropped_bytes + first - s.origin, s.dropped_lines + s.lines - window, mid, window

    def _finalize(self, upto: int) -> None:
        """Write head, counted marker and window in order to a new file and rename it over
        the log (readers see the live file or the new one); it is the log from then on."""
        s = self.state
        first, dropped, dropped_lines, mid, window = self._totals(upto)
        self.totals = (dropped, dropped_lines)
        marker = self._final_marker(dropped, dropped_lines, mid, s.head_nl)
        directory, _, base = self.path.rpartition("/")
        tmp = f"{directory}/.{base}.final"
        out = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            logcut.copy_between(self.fd, out, 0, 0, s.head)
            logcut.write_all(out, marker, s.head)
            at = s.head + len(marker)
            for src, n in logcut.pieces(s, first, s.end):
                logcut.copy_between(self.fd, out, src, at, n)
                at += n
            s.gen += 1
            s.moving = True
            self._put_cut()
            os.rename(tmp, self.path)
        except BaseException:
            os.close(out)
            raise
        os.close(self.fd)
        self.fd, self.size = out, at
        s.origin, s.cap, s.reserve, s.marker, s.lines = first, 0, s.end, len(marker), window
        s.dropped_bytes, s.dropped_lines, s.mid_line = dropped, dropped_lines, mid
        s.gen += 1
        s.moving = False
        s.final = True
        self._put_cut()
