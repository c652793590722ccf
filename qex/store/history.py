"""The history index: one compact line per job that reached a final state.

``<state>/history.jsonl`` lets ``qex list`` print every job of a store with
100,000 finished records without reading 100,000 ``status.json`` files. It is
a cache of the records, never the truth: the records and the journal are.

Writers (all under the state lock):

- ``commit_locked`` calls ``note_final_locked`` after the status files of a
  commit are written (and flushed), before the index moves on: one line per
  job the commit made final (previous state active, new state final). A pass
  that dies before its index is saved leaves its events in the journal; the
  next pass replays them and calls ``note_replayed_locked``, which appends
  only the jobs the file does not hold yet (idempotent).
- an append starts on a line boundary: a torn last line (a writer killed in
  the middle of a write) is cut first; readers ignore it meanwhile.
- ``forget_locked`` (``qex clean``) rewrites the file without the removed jobs.
- ``repair`` (``qex list``): a final job that the file misses (a store made by
  an older qex, a damaged or deleted file, a line lost to a power cut: the
  appends are not fsynced, the file is rebuilt from the records) is read from
  its record by the reader anyway and appended then, once.

The reader never trusts the file alone: it lists ``jobs/`` once (a job whose
directory is gone was cleaned and is not shown), takes active jobs from the
active index, and reads the record of any job directory that neither names.

Each line starts ``{"seq":N,"id":"..."`` so a reader can sort the file by
submission order without parsing every line as JSON.
"""

from __future__ import annotations

import json
import os

from qex.base.states import FINAL
from qex.store import layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from qex.base.errors import BrokenRecord
    from qex.store.records import Row

ERROR_CHARS = 240  # a list row shows at most 160 characters of the error
_CRASH = "QEX_CRASH_AT" in os.environ  # crash points for tests (qex.base.faults); off in normal use
_LINE = rb'^\{"seq":(\d+),"id":"([0-9A-Za-z_.-]+)",'  # how line_of starts a line


def path_of(store: object) -> str:
    return os.path.join(store.root, layout.HISTORY)


def line_of(rec: dict, store: object = None) -> bytes:
    """The history line of a final record: what a list row and the list filters need
    (its accounting too: ``started_at`` and ``usage``, which a line of a qex before them
    lacks: ``qex list`` reads that job's record when it shows them), and ``st``, the identity of its status.json (a reader that finds another file there
    reads the record: one ``stat`` per row finds a record damaged or rewritten since)."""
    claims = rec.get("claims") or {}
    row = {
        "seq": int(rec.get("seq", 0)),
        "id": rec["id"],
        "state": rec["state"],
        "name": rec.get("name", ""),
        "owner": rec.get("owner", ""),
        "uid": rec.get("uid", -1),
        "submitted_at": rec.get("submitted_at"),
        "started_at": rec.get("started_at"),
        "ended_at": rec.get("ended_at"),
        "claims": {"cpu": claims.get("cpu", 1.0), "mem": claims.get("mem", 0)},
    }
    pools = claims.get("pools")
    if pools:
        row["claims"]["pools"] = {k: {"count": v.get("count", 1), "size": v.get("size")} for k, v in pools.items()}
    for key in ("exit_code", "signal", "supervisor_lost", "tags", "cwd", "group", "group_name", "vram_over"):
        value = rec.get(key)
        if value not in (None, False, [], ""):
            row[key] = value
    if rec.get("error"):
        row["error"] = str(rec["error"])[:ERROR_CHARS]
    usage = rec.get("usage") or {}
    row["usage"] = {"max_rss": usage.get("max_rss"), "cpu_secs": usage.get("cpu_secs")}  # (qex list: peak, cpu)
    if store is not None:
        try:
            row["st"] = identity(os.stat(store.path(rec["id"], layout.STATUS)))
        except OSError:
            pass
    return json.dumps(row, separators=(",", ":")).encode() + b"\n"


def identity(st: os.stat_result) -> list[int]:
    """What changes when status.json is replaced (every write renames a new file in) or edited."""
    return [st.st_ino, st.st_size, st.st_mtime_ns]


# ---- writers (state lock held) ------------------------------------------------------


def note_final_locked(store: object, changes: list[tuple[dict, str | None, str]]) -> None:
    """After a commit's status files: a line for each job it made final."""
    entering = None
    for rec, previous, _change in changes:
        if rec.get("state") in FINAL and previous not in FINAL:
            if entering is None:
                entering = {}
            entering[rec["id"]] = None
    if entering is None:
        return  # the common case of a submission or a start: nothing to do, no file touched
    last = {}
    for rec, _previous, _change in changes:
        if rec["id"] in entering:
            last[rec["id"]] = rec
    _append_locked(store, [line_of(r, store) for r in last.values() if r.get("state") in FINAL])


def note_replayed_locked(store: object, records: list[dict]) -> None:
    """After a replay of events a dead pass left: the final jobs the file misses (idempotent)."""
    finals = [r for r in records if r.get("state") in FINAL]
    if not finals:
        return
    present = _present(store, {r["id"] for r in finals})
    lines, seen = [], set()
    for rec in reversed(finals):  # a job's last form
        job_id = rec["id"]
        if job_id in present or job_id in seen or not os.path.isdir(store.job_dir(job_id)):
            continue
        seen.add(job_id)
        lines.append(line_of(rec, store))
    _append_locked(store, lines[::-1])


def _present(store, wanted: set) -> set:
    """Which of ``wanted`` the file holds, reading it backwards from its end: a replay's
    jobs (a commit that left the index behind the journal, or one cut by a death) are
    in its last lines if they are there at all, so a drain never reads the whole file."""
    import re

    from qex.store import fs

    found: set = set()
    try:
        fd = fs.open_regular(path_of(store))
    except OSError:
        return found
    try:
        pos = _whole_end(fd, os.fstat(fd).st_size)  # a torn last line is no line
        pattern, carry, step = re.compile(_LINE, re.M), b"", 8192
        while pos > 0 and len(found) < len(wanted):
            start = max(0, pos - step)
            chunk = os.pread(fd, pos - start, start) + carry
            pos, step = start, min(step * 2, 1 << 20)
            if start > 0:  # the first bytes may be the end of a line that starts before
                nl = chunk.find(b"\n")
                if nl < 0:
                    carry = chunk
                    continue
                carry, chunk = chunk[: nl + 1], chunk[nl + 1 :]
            for m in pattern.finditer(chunk):
                job_id = m[2].decode()
                if job_id in wanted and job_id not in found:
                    try:  # a line damaged after its id is no line: the job is appended again
                        json.loads(chunk[m.start() : chunk.index(b"\n", m.start())])
                    except ValueError:
                        continue
                    found.add(job_id)
    except OSError:
        pass
    finally:
        os.close(fd)
    return found


def forget_locked(store: object, removed: Iterable[str]) -> None:
    """``qex clean``: rewrite the file with only the jobs that exist, once each (it drops
    the removed jobs, damaged lines and what an earlier clean that died left)."""
    gone = set(removed)
    data = _read(store)
    if not data or not gone:
        return
    from qex.store import fs

    try:
        names = set(os.listdir(store.jobs))
    except OSError:
        return
    kept, seen = [], set()
    for _seq, job_id, line in scan(data):
        if job_id in names and job_id not in gone and job_id not in seen:
            seen.add(job_id)
            kept.append(line + b"\n")
    try:
        fs.write_atomic(path_of(store), b"".join(kept), mode=store.file_mode, sync_dir=False)
    except Exception:  # noqa: BLE001 - a cache: a reader skips the lines of removed jobs anyway
        pass


def _append_locked(store, lines: list[bytes]) -> None:
    """Append whole lines; never fails a commit (the reader repairs what is missing)."""
    if not lines:
        return
    from qex.store import fs

    try:
        fd = fs.open_regular(path_of(store), os.O_RDWR | os.O_APPEND | os.O_CREAT, store.file_mode)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if store.file_mode != 0o600 and st.st_uid == os.getuid() and st.st_mode & 0o777 != store.file_mode:
            os.fchmod(fd, store.file_mode)
        before = _whole_end(fd, st.st_size)
        if before != st.st_size:
            os.ftruncate(fd, before)  # a torn last line: the job it named is replayed or repaired
        data = b"".join(lines)
        try:
            if _CRASH:
                _torn(fd, data)
            fs.write_all(fd, data)
        except OSError:
            os.ftruncate(fd, before)
    except OSError:
        pass
    finally:
        os.close(fd)
    if _CRASH:
        from qex.base import faults

        faults.hit("history.after_append")


def _whole_end(fd: int, size: int) -> int:
    """The offset after the last newline of the file (its size when it ends with one)."""
    end = size
    while end > 0:
        start = max(0, end - 4096)
        chunk = os.pread(fd, end - start, start)
        if not chunk:
            return 0
        nl = chunk.rfind(b"\n")
        if nl >= 0:
            return start + nl + 1
        end = start
    return 0


def _torn(fd: int, data: bytes) -> None:
    """Crash point history.torn: write part of the append, then die."""
    from qex.base import faults

    if faults.due("history.torn"):
        os.write(fd, data[: max(1, len(data) // 2)])
        faults.die()


# ---- readers (no lock) --------------------------------------------------------------


def _read(store) -> bytes:
    from qex.store import fs

    try:
        return fs.read_bytes(path_of(store))
    except OSError:
        return b""  # missing (no job has ended yet, or it was deleted), or not a regular file


def scan(data: bytes) -> list[tuple[int, str, bytes]]:
    """(seq, id, line) of every whole, readable line; a torn last line is left out."""
    end = data.rfind(b"\n")
    if end < 0:
        return []
    import re

    lines = data[:end].split(b"\n")
    found = re.compile(_LINE, re.M).findall(data, 0, end + 1)
    if len(found) == len(lines):  # every line as qex writes it: one regular-expression pass
        return [(int(seq), job_id.decode(), line) for (seq, job_id), line in zip(found, lines)]
    out = []
    for line in lines:  # a damaged line somewhere: line by line
        try:
            row = json.loads(line)
            seq, job_id = row["seq"], row["id"]
        except (ValueError, TypeError, KeyError):
            continue  # a damaged line: its job is read from its record (and repaired)
        if isinstance(seq, int) and isinstance(job_id, str):
            out.append((seq, job_id, line))
    return out


def read_row(line: bytes) -> Row | None:
    """A history line as a ``Row``; None for a damaged one (its job's record says it)."""
    from qex.store import check
    from qex.store.records import Row, load

    try:
        data = json.loads(line)
        check.row(data)
    except (ValueError, check.Damaged):
        return None
    return load(Row, data)


def ids_in(data: bytes) -> set[str]:
    return {job_id for _seq, job_id, _line in scan(data)}


def listing(store: object, active: dict, on_broken: Callable[[BrokenRecord], None]) -> tuple[list[tuple], list[dict]]:
    """Every job of the store in submission order, and the final records the history
    missed (as their JSON: ``repair`` writes their lines).

    Each job is (seq, id, history line or None, its ``Status`` or None): a job with
    neither is an active one, whose record is read when it is printed. ``active``: the active
    index's entries (read without the lock); ``on_broken(exc)`` is told of a record
    that cannot be read. Reads the history file and the names in ``jobs/`` once; reads
    a record only for a job that neither the history nor the active index names (a job
    being submitted right now, or one the history missed).
    """
    from qex.base.errors import BrokenRecord, QexError

    try:
        names = set(os.listdir(store.jobs))
    except FileNotFoundError:
        return [], []
    items, seen = [], set()
    add, mark = items.append, seen.add
    for seq, job_id, line in scan(_read(store)):
        if job_id in names and job_id not in seen:  # gone: cleaned (a crash between clean's steps)
            mark(job_id)
            add((seq, job_id, line, None))
    missed = []
    for job_id in names - seen:
        if job_id.startswith("."):
            continue  # a job directory being made or removed
        entry = active.get(job_id)
        if entry is not None and isinstance(entry.get("seq"), int):
            add((entry["seq"], job_id, None, None))
            continue
        try:
            rec = store.read_live(job_id, active)  # (a row; a final one to repair)
        except BrokenRecord as exc:
            on_broken(exc)
            continue
        except QexError:
            continue  # a job directory still being made
        add((rec.seq, job_id, None, rec))
        if rec.state in FINAL:
            missed.append(rec.asdict())
    items.sort(key=_first)
    return items, missed


def _first(item: tuple) -> int:
    return item[0]


def repair(store: object, records: list[dict]) -> None:
    """Append the final jobs a reader found missing (a store from an older qex, a damaged
    file): under the state lock, each once. Best effort: a reader may not write."""
    if not records:
        return
    try:
        with store.lock():
            note_replayed_locked(store, sorted(records, key=lambda r: r.get("seq", 0)))
    except Exception:  # noqa: BLE001 - the listing is printed; the next reader tries again
        pass
