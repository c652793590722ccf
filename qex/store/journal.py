"""The event journal: append-only JSON lines, one per change of a job.

It is also the write-ahead log of a pass: the events (each carries the whole
new record) are appended and fsynced first, then status.json files and the
active index are written. A pass that dies in between leaves events that the
next pass replays, so a change is either wholly applied or absent.
Written only under the state lock, by the actor that made the change.
"""

import json
import os

from qex.base import numbers
from qex.store import fs, layout

ROTATED = layout.JOURNAL_ROTATED  # (tests have it from here)
DEFAULT_MAX_BYTES = 8 << 20
_CRASH = "QEX_CRASH_AT" in os.environ  # crash points for tests (qex.base.faults); off in normal use


def new_stream() -> str:
    return os.urandom(6).hex()


def max_bytes() -> int:
    raw = os.environ.get("QEX_JOURNAL_MAX_BYTES")
    try:
        return max(4096, int(raw)) if raw else DEFAULT_MAX_BYTES
    except ValueError:
        return DEFAULT_MAX_BYTES


encode = fs.json_bytes  # one event as its line: the bytes of every JSON file qex writes


def encode_job_event(event: dict, job: bytes) -> bytes:
    """``encode`` of a job event whose ``job`` (the record) is already ``job``, its
    JSON as ``encode`` writes it: the record is encoded once per commit, for the
    journal and for its status.json (``Store.commit_locked``). The event's other
    keys sort before ``job`` (change, commit, event, id) or after it (name,
    previous, seq, state, stream, time)."""
    head, tail = {}, {}
    for key, value in event.items():
        if key != "job":
            (head if key < "job" else tail)[key] = value
    before = json.dumps(head, separators=(",", ":"), sort_keys=True)[:-1].encode()  # '{...' without its '}'
    after = json.dumps(tail, separators=(",", ":"), sort_keys=True)[1:].encode()  # '...}' without its '{'
    return b"".join((before, b"," if head else b"", b'"job":', job, b"," if tail else b"", after, b"\n"))


def append(
    path: str,
    events: list[dict],
    mode: int = 0o600,
    sync: bool = True,
    data: bytes | None = None,
    info: dict | None = None,
) -> int:
    """Append ``events`` as lines and fsync; return the new size of the file
    (``info``, when given, receives its ``ino``).

    ``mode`` is applied to a journal this user owns (a shared state directory
    needs 0660 whatever the umask of the user who started the file).
    ``sync=False`` (a lazy commit): the fsync is made once the state lock is
    let go, before the pass returns (``fs.sync_at_release``). ``data``: the
    events' lines, encoded by the caller (``encode``, ``encode_job_event``).
    """
    if data is None:
        data = b"".join(encode(e) for e in events)
    fd = fs.open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)  # never a symlink or a FIFO
    try:
        if mode != 0o600:
            st = os.fstat(fd)
            if st.st_uid == os.getuid() and st.st_mode & 0o777 != mode:
                os.fchmod(fd, mode)
        st = os.fstat(fd)
        before = st.st_size
        if info is not None:
            info["ino"] = st.st_ino
        if st.st_blocks * 512 < before + len(data):
            _reserve(fd, before + len(data))
        try:
            if _CRASH:
                _torn(fd, data)
            fs.write_all(fd, data)
            if sync:
                os.fsync(fd)
        except OSError:
            # Take back every byte of this append: a change is wholly written or absent.
            os.ftruncate(fd, before)
            raise
        size = os.fstat(fd).st_size
    except BaseException:
        os.close(fd)
        raise
    if sync:
        os.close(fd)
    else:
        fs.sync_at_release(fd, path)
    return size


def _reserve(fd: int, need: int) -> None:
    """Allocate the journal's blocks ahead of its appends, as far as it grows before it
    is rotated (``fallocate`` with ``FALLOC_FL_KEEP_SIZE``: the size, which readers
    go by, stays the data's). An append and its fsync then write into blocks the
    file already has. Without it, on ext4, the appends of a drain (each fsynced,
    between the other files a pass makes) gave the file a new extent now and then,
    and converting each append's blocks at the end of its write merged and split
    them, freeing a block of the extent tree each time: a discard of the disk
    (with ``-o discard``) for ~0.7 of every drain pass's fsyncs, each slowing the
    next flush. Where it cannot (no ``fallocate``, a full disk), the journal grows as
    before."""
    global _FALLOCATE
    if _FALLOCATE is None:
        try:
            import ctypes

            _FALLOCATE = ctypes.CDLL(None, use_errno=True).fallocate
            _FALLOCATE.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
        except (OSError, AttributeError, ImportError):
            _FALLOCATE = False
    if _FALLOCATE is not False and _FALLOCATE(fd, 1, 0, max(need, max_bytes() + RESERVE_PAST)) != 0:  # KEEP_SIZE
        import ctypes
        import errno

        if ctypes.get_errno() in (errno.EOPNOTSUPP, errno.ENOSYS):
            _FALLOCATE = False  # this file system has none: not asked again


_FALLOCATE = None
RESERVE_PAST = 2 << 20  # reserved past the rotation size: the append that crosses it may be a fan-out's


def _torn(fd: int, data: bytes) -> None:
    """Crash point journal.torn: write half of the append, then die."""
    from qex.base import faults

    if faults.due("journal.torn"):
        os.write(fd, data[: len(data) // 2])
        faults.die()


def read_from(path: str, offset: int) -> tuple[list[dict], int]:
    """Complete lines after ``offset``; returns (events, offset after the last whole line).

    A last line without its newline is a write that died half-way: it is not
    an event and is left out (the next append truncates nothing; see ``trim``).
    """
    from qex.base.errors import StoreError

    try:
        fd = fs.open_regular(path)
    except FileNotFoundError:
        return [], 0
    except OSError as exc:
        raise StoreError(
            f"the journal {path} cannot be read ({exc.strerror or exc}); move it away "
            "(the records keep every job; only the event history is lost)"
        ) from None
    try:
        size = os.fstat(fd).st_size
        if size <= offset:
            return [], min(offset, size)
        os.lseek(fd, offset, os.SEEK_SET)
        data = b""
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    end = data.rfind(b"\n") + 1
    events = []
    for line in data[:end].splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a damaged line is skipped, never fatal
        if isinstance(event, dict):
            events.append(event)
    return events, offset + end


def read_committed(
    path: str, offset: int, info: dict | None = None, ino: int | None = None
) -> tuple[list[dict], int, int]:
    """Like ``read_from``, but only whole appends: the events up to the end of the
    last append whose every line was written, and the offset after it.

    Each event of one append carries ``commit``, the seq of that append's last
    event. A writer SIGKILLed during a large append (the kernel may stop a big
    write between pages) leaves the first lines of its append: they are not
    replayed, and ``trim`` cuts them, so a submission is wholly queued or absent.
    An event without ``commit`` (an older qex) is an append of its own.
    Returns (events, offset, the highest seq of any whole line, cut or not: the
    next append must not reuse a seq that a reader may have seen).
    ``info``, when given, receives the file's ``size`` and ``ino``.

    ``offset`` counts in the file of inode ``ino`` (None: not known). A journal of
    another inode, or shorter than ``offset``, is another file (the one counted in
    was rotated since, by a pass that died before it saved the index): it is read
    from its start, and ``info["other"]`` says so. Skipping it would lose its events,
    and the seqs of those events would be given again.
    """
    from qex.base.errors import StoreError

    try:
        fd = fs.open_regular(path)  # never follows a symlink nor blocks on a FIFO
    except FileNotFoundError:
        return [], 0, 0
    except OSError as exc:
        raise StoreError(
            f"the journal {path} cannot be read ({exc.strerror or exc}); move it away "
            "(the records keep every job; only the event history is lost)"
        ) from None
    try:
        st = os.fstat(fd)
        size = st.st_size
        if info is not None:
            info["size"], info["ino"] = size, st.st_ino
        if offset and (size < offset or (ino is not None and st.st_ino != ino)):
            offset = 0
            if info is not None:
                info["other"] = True
        if size <= offset:
            return [], min(offset, size), 0
        chunks, at = [], offset
        while True:  # (one pread for what a drain's pass replays: the other supervisor's last append)
            chunk = os.pread(fd, max(size - at, 1 << 16), at)
            chunks.append(chunk)
            at += len(chunk)
            if not chunk or at >= size:
                break
    finally:
        os.close(fd)
    events, done, highest = _whole_appends(b"".join(chunks))
    return events, offset + done, highest


def _whole_appends(data: bytes) -> tuple[list[dict], int, int]:
    """The events of ``data``'s whole appends (``read_committed``), the bytes they take
    (to the end of the last one), and the highest seq of any whole line, cut or not."""
    events, pending, done, pos, highest = [], [], 0, 0, 0
    while True:
        nl = data.find(b"\n", pos)
        if nl < 0:
            break
        line, pos = data[pos:nl], nl + 1
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a damaged line is skipped, never fatal
        if not isinstance(event, dict):
            continue
        seq = event.get("seq")
        if not numbers.ok(seq, numbers.SEQ, whole=True):
            seq = None  # (a damaged line: no seq of its counts, and its event is passed over: usable_event)
        elif seq > highest:
            highest = seq
        pending.append(event)
        last = event.get("commit")
        if seq is None or not numbers.ok(last, numbers.SEQ, whole=True) or seq >= last:
            events += pending
            pending, done = [], pos
    return events, done, highest


def trim(path: str, offset: int) -> None:
    """Cut a half-written last line so the next append starts on a line boundary."""
    try:
        fd = fs.open_regular(path, os.O_WRONLY)
    except OSError:
        return  # missing; or not a regular file, which read_from has refused already
    try:
        if os.fstat(fd).st_size > offset:
            os.ftruncate(fd, offset)
    finally:
        os.close(fd)


def rotate(directory: str) -> None:
    """Move the journal aside (one old file kept); the next append starts a new one."""
    os.replace(os.path.join(directory, layout.JOURNAL), os.path.join(directory, layout.JOURNAL_ROTATED))
