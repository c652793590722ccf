"""The event stream: ``qex events`` reads the journal that every pass writes.

The journal (``qex.store.journal``) holds one JSON line per change of a job,
written under the state lock by the process that made the change, with a
stream id and a sequence number that grows by one per event. A reader here
takes no lock: it reads whole lines only (a line being appended is left for
the next read), follows the file with inotify (a short poll where inotify is
missing), and follows rotation (``journal.jsonl`` -> ``journal.1.jsonl``).

Where inotify delivers nothing (a state directory on NFS: another client's
writes never reach this kernel's inotify), the follower looks anyway every
``RECHECK`` seconds, and opens the journal again each time (``poll(fresh=True)``):
an NFS client revalidates a file's attributes and cached pages at its open
(close-to-open consistency), while an ``fstat`` or a ``stat`` of a path may
answer from its attribute cache for up to a minute.

A position is ``STREAM:SEQ``: the last event a reader has. Every line this
module emits carries one (``stream`` and ``seq``), so a reader that stops
anywhere can come back with ``--since STREAM:SEQ`` and lose nothing and see
nothing twice, as long as the journal still holds the next event. When it does
not -- rotated away, or the position is from another stream -- the reader gets
one ``gap`` line that counts the events it missed (``missed``), or says that
it cannot count them (``missed: null``), and goes on.
"""

import json
import os
import time

from qex.base.plain import Plain
from qex.base.states import STATES
from qex.store import layout
from qex.store.records import Status

KINDS = ("stream", "job", "gap")
CHANGES = ("state", "reason", "vram")  # a job line's ``change`` (vram: its VRAM above its claim)
POLL = 0.1  # without inotify
RECHECK = 0.25  # with inotify: look anyway this often, the file opened again (another NFS client's writes)


class Event(Plain, frozen=True):
    """One line of ``qex events --json``. Read ``event`` first and ignore a
    kind you do not know: a later qex may add one."""

    event: str  # stream | job | gap
    seq: int  # the position after this line (resume with --since STREAM:SEQ)
    stream: str | None  # the journal's stream id (None only before the first event ever)
    time: float  # seconds since the epoch
    id: str | None = None  # job: the job's id
    name: str | None = None  # job: the job's name
    state: str | None = None  # job: its state now
    previous: str | None = None  # job: its state before (null on its first line)
    change: str | None = None  # job: "state", "reason" (the blocked_reason or another field), "vram" (CHANGES)
    job: Status | None = None  # job: the whole record, as qex status --json prints it
    missed: int | None = None  # gap: events lost (null: cannot be counted)
    next_seq: int | None = None  # gap: the seq of the next event you get
    reason: str | None = None  # gap: what happened, in words


class BadSince(ValueError):
    pass


def parse_since(text: str | None) -> str | tuple[str, int]:
    """``start``, ``now``, or (stream, seq)."""
    if text is None or text in ("start", "now"):
        return text or "now"
    stream, sep, seq = text.rpartition(":")
    if not sep or not stream or not seq.isdigit():
        raise BadSince(text)
    return stream, int(seq)


# ---- reading lines -------------------------------------------------------------


def _quick(line: bytes) -> tuple[str | None, int]:
    """(stream, seq) of a journal line without parsing the whole record.

    The top-level keys are sorted, so "seq" and "stream" follow the "job"
    object: the last occurrence of each key is the top-level one (a JSON
    string value cannot hold a raw quote).
    """
    try:
        i = line.rindex(b',"seq":') + 7
        j = line.index(b",", i)
        k = line.rindex(b',"stream":"') + 11
        return line[k : line.index(b'"', k)].decode(), int(line[i:j])
    except ValueError:
        return None, -1


def _first_line(fd: int) -> bytes | None:
    """The first complete line of an open file."""
    data, at = b"", 0
    while b"\n" not in data:
        chunk = os.pread(fd, 65536, at)
        if not chunk:
            return None
        data += chunk
        at += len(chunk)
    return data[: data.index(b"\n")]


def _last_line(fd: int) -> tuple[bytes | None, int]:
    """The last complete line of an open file, and the offset just after it."""
    size = os.fstat(fd).st_size
    data, at = b"", size
    while at > 0:
        step = min(65536, at)
        at -= step
        data = os.pread(fd, step, at) + data
        end = data.rfind(b"\n")
        if end < 0:
            continue
        start = data.rfind(b"\n", 0, end)
        if start >= 0 or at == 0:
            return data[start + 1 : end], at + end + 1
    return None, 0


def _peek(path: str, which) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        line = which(fd)
        return line[0] if isinstance(line, tuple) else line
    finally:
        os.close(fd)


def _open_ino(path: str) -> tuple[int, int] | None:
    """A descriptor of ``path`` and its inode, or None (none there; or ESTALE on NFS: another
    machine replaced it as it was opened, and the next look opens it again), nothing left open."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return fd, os.fstat(fd).st_ino
    except OSError:
        os.close(fd)
        return None


class _File:
    """One journal file being read: its descriptor, inode and read offset."""

    def __init__(self, path: str, fd: int, ino: int, offset: int = 0):
        self.path, self.fd, self.ino, self.offset = path, fd, ino, offset

    @classmethod
    def open(cls, path: str, offset: int = 0) -> "_File | None":
        opened = _open_ino(path)
        return None if opened is None else cls(path, *opened, offset)

    def lines(self) -> list[bytes]:
        """The complete lines after the offset; a shrunk file is read again from 0."""
        size = os.fstat(self.fd).st_size
        if size < self.offset:
            self.offset = 0  # a failed append took back its bytes: re-read; seqs say what is new
        if size == self.offset:
            return []
        chunks, at = [], self.offset
        while at < size:
            chunk = os.pread(self.fd, min(1 << 20, size - at), at)
            if not chunk:
                break
            chunks.append(chunk)
            at += len(chunk)
        data = b"".join(chunks)
        end = data.rfind(b"\n") + 1
        self.offset += end
        return data[:end].splitlines()

    def reopened(self, path: str) -> bool:
        """Close the descriptor and open ``path`` again, keeping the offset (NFS: close-to-open,
        above; closed first, as the client reuses the open of a file still open, without asking
        the server); False, with no descriptor, if ``path`` is another file now (rotated) or none."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        opened = _open_ino(path)
        if opened is None:
            return False
        fd, ino = opened
        if ino != self.ino:
            os.close(fd)
            return False
        self.fd, self.path = fd, path
        return True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# ---- the reader ----------------------------------------------------------------


class Reader:
    """Events of one state directory from a position on, in order, each once."""

    def __init__(self, root: str, since="now"):
        self.root = root
        self.cur_path = os.path.join(root, layout.JOURNAL)
        self.rot_path = os.path.join(root, layout.JOURNAL_ROTATED)
        self.stream: str | None = None
        self.seq = 0
        self.file: _File | None = None
        self.pending: list[dict] = []
        self._begin(since)

    # -- where to start --
    def _begin(self, since) -> None:
        first_cur, first_rot = _peek(self.cur_path, _first_line), _peek(self.rot_path, _first_line)
        if since == "now":
            self.file = _File.open(self.cur_path)
            last = None
            if self.file is not None:
                last, self.file.offset = _last_line(self.file.fd)
            if last is None:
                last = _peek(self.rot_path, _last_line)
            if last is not None:
                self.stream, self.seq = _quick(last)
            else:
                self.stream, self.seq = _index_position(self.root)
        elif since == "start":
            oldest = first_rot if first_rot is not None else first_cur
            if oldest is not None:
                self.stream, first = _quick(oldest)
                self.seq = first - 1
            else:
                self.stream, self.seq = _index_position(self.root)
            self.file = _File.open(self.rot_path if first_rot is not None else self.cur_path)
        else:
            self._begin_at(*since, first_rot=first_rot, first_cur=first_cur)
        self.pending.insert(0, self._line("stream"))

    def _begin_at(self, stream: str, seq: int, first_rot, first_cur) -> None:
        self.stream, self.seq = stream, seq
        held = [
            (p, _quick(line))
            for p, line in ((self.rot_path, first_rot), (self.cur_path, first_cur))
            if line is not None
        ]
        # The newest file that starts at or before the next event: no loss.
        for path, (s, first) in reversed(held):
            if s == stream and first <= seq + 1:
                self.file = _File.open(path)
                return
        # The oldest file of this stream: the events before it are gone (a counted gap).
        for path, (s, first) in held:
            if s == stream:
                self.file = _File.open(path)
                return
        if held:  # only other streams: from the oldest event, with a gap that cannot be counted
            self.file = _File.open(held[0][0])
            return
        last_stream, last_seq = _index_position(self.root)
        if last_stream is not None and last_stream != stream:
            self.pending.append(
                self._gap(
                    None,
                    last_seq + 1,
                    last_stream,
                    f"the position {stream}:{seq} is from another stream (this journal "
                    f"is {last_stream}); what happened between cannot be counted",
                )
            )
            self.stream, self.seq = last_stream, last_seq
        elif last_stream == stream and last_seq < seq:
            self.pending.append(
                self._gap(
                    None,
                    last_seq + 1,
                    stream,
                    f"the position {stream}:{seq} is past the journal's last event "
                    f"({last_seq}); nothing after {last_seq} was missed",
                )
            )
            self.seq = last_seq

    # -- reading --
    def poll(self, fresh: bool = False) -> list[dict]:
        """Everything new since the last call (the stream line first, then job and gap lines).
        ``fresh``: open the journal again first (what inotify may not have said: NFS)."""
        out, self.pending = self.pending, []
        if self.file is None:
            if fresh:  # no journal yet: NFS keeps its "no such file" until the directory is looked at again
                _look_at(self.root)
            self._open_current(out)
            return out
        rotated = fresh and self.file.path == self.cur_path and not self.file.reopened(self.cur_path)
        if rotated and not self.file.reopened(self.rot_path):  # (its last appends, if it is the rotated file)
            self.file = None  # rotated twice since, or removed: from the current file (its gap, if any)
            self._open_current(out)
            return out
        out += self._take(self.file.lines())
        if self.file.path == self.rot_path:
            moved = True  # the rotated file never grows: go on to the current one
        else:
            try:
                moved = rotated or os.stat(self.cur_path).st_ino != self.file.ino
            except FileNotFoundError:
                moved = True
            if moved:  # rotated: what was appended to it is there once the rename is seen
                out += self._take(self.file.lines())
        if moved:
            self.file.close()
            self.file = None
            self._open_current(out)
        return out

    def _open_current(self, out: list) -> None:
        f = _File.open(self.cur_path)
        if f is None:
            return
        first = _first_line(f.fd)
        if first is not None:
            stream, seq = _quick(first)
            if stream == self.stream and seq > self.seq + 1:
                # Rotated more than once since we looked: the events between are in journal.1.
                between = _File.open(self.rot_path)
                if between is not None:
                    out += self._take(between.lines(), only_ours=True)
                    between.close()
        self.file = f
        out += self._take(f.lines())

    def _take(self, lines: list[bytes], only_ours: bool = False) -> list[dict]:
        out = []
        for line in lines:
            stream, seq = _quick(line)
            if stream is None:
                continue  # a damaged line: skipped, never fatal
            if stream == self.stream and seq <= self.seq:
                continue  # already given
            if stream != self.stream and only_ours:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") != "job":
                continue
            event.pop("commit", None)  # the journal's own bookkeeping (whole appends), not the event's
            if self.stream is None:
                self.stream = stream
            elif stream != self.stream:
                out.append(
                    self._gap(
                        None,
                        seq,
                        stream,
                        f"the journal began a new stream {stream} (its index was rebuilt) after "
                        f"{self.stream}:{self.seq}; what happened between cannot be counted",
                    )
                )
            elif seq > self.seq + 1:
                out.append(
                    self._gap(
                        seq - self.seq - 1,
                        seq,
                        stream,
                        f"the journal no longer holds events {self.seq + 1} to {seq - 1} "
                        f"(rotated away; QEX_JOURNAL_MAX_BYTES sets its size)",
                    )
                )
            self.stream, self.seq = stream, seq
            out.append(event)
        return out

    def _line(self, kind: str) -> dict:
        return {"event": kind, "stream": self.stream, "seq": self.seq, "time": time.time()}

    def _gap(self, missed, next_seq: int, stream: str, reason: str) -> dict:
        return {
            "event": "gap",
            "stream": stream,
            "seq": next_seq - 1,
            "time": time.time(),
            "missed": missed,
            "next_seq": next_seq,
            "reason": reason,
        }

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def _look_at(folder: str) -> None:
    """Open ``folder`` (and close it): an NFS client revalidates a directory it opens, and
    with it the names it had cached as missing (a journal created on another machine)."""
    try:
        os.close(os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    except OSError:
        pass


def _index_position(root: str) -> tuple[str | None, int]:
    """The position the index records (when the journal holds no event)."""
    from qex.store import fs

    try:
        data = fs.read_json(os.path.join(root, layout.INDEX))
        return data.get("stream"), int(data.get("seq", 0))
    except (OSError, ValueError, AttributeError, TypeError):
        return None, 0


# ---- waiting for the journal to change -------------------------------------------


class Watch:
    """inotify on the state directory (journal names only), through ctypes.

    ``fileno()`` is None where inotify is missing: the caller then polls.
    """

    IN_MODIFY, IN_MOVED_TO, IN_CREATE, IN_Q_OVERFLOW = 0x2, 0x80, 0x100, 0x4000

    def __init__(self, root: str):
        self.fd = None
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                return
            mask = self.IN_MODIFY | self.IN_MOVED_TO | self.IN_CREATE
            if libc.inotify_add_watch(fd, os.fsencode(root), mask) < 0:
                os.close(fd)
                return
            self.fd = fd
        except (OSError, AttributeError):
            self.fd = None

    def fileno(self) -> int | None:
        return self.fd

    def relevant(self) -> bool:
        """Drain the queued notifications; True if one names a journal file."""
        import struct

        hit = False
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return hit
            at = 0
            while at + 16 <= len(data):
                _wd, mask, _cookie, length = struct.unpack_from("iIII", data, at)
                name = data[at + 16 : at + 16 + length].rstrip(b"\0")
                if name.startswith(b"journal") or mask & self.IN_Q_OVERFLOW:
                    hit = True
                at += 16 + length

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def states() -> list[str]:
    return list(STATES)
