"""The invariant checker: reads a state directory and says what is wrong with it.

It reads the files qex writes (records, the active index, the journal), never
qex's own code paths, so a bug in the code cannot hide itself. Used after each
round of the crash harness (tests/crash/test_rounds.py), by the concurrency
test and by the soak mode (bench/soak.py). Every check returns sentences; an
empty list means the state directory keeps every promise of docs/reliability.md.

``read_view`` takes the state lock (as a pass would), so it sees a moment
between two passes. A pass that died may have left journal events that no
pass has applied yet; the view applies them itself (the journal is the
write-ahead log), so the invariants hold at every instant, not only after a
replay.
"""

import errno
import fcntl
import json
import os
import time

ACTIVE = ("queued", "starting", "running")
HOLDING = ("starting", "running")
FINAL_RAN = ("completed", "failed", "killed", "timeout", "oom")
FINAL_NOT_RAN = ("expired", "cancelled", "skipped")
FINAL = FINAL_RAN + FINAL_NOT_RAN
STATES = ACTIVE + FINAL


class View:
    """What the checker read under the state lock."""

    def __init__(self):
        self.status: dict[str, dict | None] = {}  # job dir -> status.json (None: missing)
        self.broken: dict[str, str] = {}  # job dir -> why status.json is unreadable
        self.records: dict[str, dict] = {}  # effective record (status + unapplied events)
        self.index: dict | None = None
        self.index_error: str | None = None
        self.events: list[dict] = []  # rotated journal, then the current one
        self.current_events: list[dict] = []
        self.torn_tail = False
        self.unapplied: list[dict] = []
        self.debris: list[str] = []  # hidden dirs, temp files
        self.lock_wait = 0.0
        self.holes = 0  # seq jumps between whole appends (a cut append)
        self.history: list[dict] | None = None  # history.jsonl's whole lines (None: no file)
        self.history_damaged: list[bytes] = []


def _read_json(path: str):
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        data = b""
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    return json.loads(data)


def _read_journal(path: str) -> tuple[list[dict], bool]:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return [], False
    torn = bool(data) and not data.endswith(b"\n")
    events = []
    for line in data.splitlines()[:-1] if torn else data.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            events.append({"_damaged": line[:80]})
    return events, torn


def _whole_appends(events: list[dict]) -> list[dict]:
    """The events of appends written whole: each carries ``commit``, its append's last seq."""
    out, pending = [], []
    for event in events:
        pending.append(event)
        last, seq = event.get("commit"), event.get("seq")
        if not isinstance(last, int) or not isinstance(seq, int) or seq >= last:
            out += pending
            pending = []
    return out


def _whole(rec: dict) -> dict:
    """A record as status.json holds it: qex writes every field, defaults under the event's."""
    try:
        from qex.store.records import status_defaults
    except ImportError:  # a qex from before status_defaults
        return rec
    return {**status_defaults(), **rec}


class Locked:
    """The state lock, taken as a pass takes it, with a bound on the wait."""

    def __init__(self, state_dir: str, limit: float = 15.0):
        self.path = os.path.join(state_dir, "lock")
        self.limit = limit
        self.fd = None
        self.waited = 0.0

    def __enter__(self):
        start = time.monotonic()
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return self  # no pass ever ran
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                    raise
            if time.monotonic() - start > self.limit:
                os.close(self.fd)
                raise AssertionError(f"the state lock {self.path} was held for more than {self.limit}s")
            time.sleep(0.005)
        self.waited = time.monotonic() - start
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)


def read_view(state_dir: str, lock: bool = True) -> View:
    if lock:
        with Locked(state_dir) as held:
            view = _read_view(state_dir)
            view.lock_wait = held.waited
            return view
    return _read_view(state_dir)


def _read_view(state: str) -> View:
    view = View()
    jobs = os.path.join(state, "jobs")
    names = sorted(os.listdir(jobs)) if os.path.isdir(jobs) else []
    for name in names:
        if name.startswith("."):
            view.debris.append(f"jobs/{name}")
            continue
        path = os.path.join(jobs, name, "status.json")
        try:
            view.status[name] = _read_json(path)
        except FileNotFoundError:
            view.status[name] = None
        except (OSError, ValueError) as exc:
            view.status[name] = None
            view.broken[name] = str(exc)
        try:
            view.debris += [f"jobs/{name}/{f}" for f in os.listdir(os.path.join(jobs, name)) if f.endswith(".tmp")]
        except OSError:
            pass
    try:
        view.index = _read_json(os.path.join(state, "index.json"))
    except FileNotFoundError:
        view.index = None
    except (OSError, ValueError) as exc:
        view.index_error = str(exc)
    try:
        with open(os.path.join(state, "history.jsonl"), "rb") as fh:
            data = fh.read()
        view.history = []
        for line in data[: data.rfind(b"\n") + 1].splitlines():  # a torn last line is no line
            try:
                view.history.append(json.loads(line))
            except ValueError:
                view.history_damaged.append(line[:80])
    except FileNotFoundError:
        pass
    rotated, _ = _read_journal(os.path.join(state, "journal.1.jsonl"))
    current, view.torn_tail = _read_journal(os.path.join(state, "journal.jsonl"))
    view.events = rotated + current
    view.current_events = current
    # The effective records: status.json, then every event no pass has applied yet.
    view.records = {k: v for k, v in view.status.items() if isinstance(v, dict)}
    if isinstance(view.index, dict):
        applied_seq = view.index.get("seq", 0)
        tail = [e for e in current if isinstance(e.get("seq"), int) and e["seq"] > applied_seq]
    else:
        tail = current  # no index: the next pass applies each job's last event (rebuild)
    tail = _whole_appends(tail)  # a cut append is never applied (its lines are trimmed)
    for event in tail:
        rec = event.get("job")
        if event.get("event") == "job" and isinstance(rec, dict) and rec.get("id") in view.status:
            view.records[rec["id"]] = _whole(rec)
            view.unapplied.append(event)
    return view


# ---- the invariants ---------------------------------------------------------------


def check(
    view: View, *, known=(), cleaned=(), quiescent: bool = False, budget=None, runs: dict | None = None
) -> list[str]:
    """Every promise the files can show. ``known``: ids that a command printed;
    ``cleaned``: ids given to qex clean (they may be gone); ``budget``: see
    ``check_capacity``; ``runs``: (id, attempt) -> times the job's command started."""
    problems: list[str] = []
    problems += check_records(view)
    problems += check_known(view, known, cleaned)
    problems += check_journal(view)
    problems += check_index(view)
    problems += check_history(view)
    if budget is not None:
        problems += check_capacity(view, budget)
    if runs is not None:
        problems += check_runs(view, runs)
    if quiescent:
        problems += check_quiescent(view)
    return problems


def check_records(view: View) -> list[str]:
    out = []
    seqs: dict[int, str] = {}
    keys: dict[tuple, str] = {}
    for job_id, rec in view.records.items():  # dedupe: one active job per key and user
        key = rec.get("dedupe_key")
        if key and rec.get("state") in ACTIVE:
            if (key, rec.get("uid")) in keys:
                out.append(
                    f"job {job_id[:8]}: a second active job with the dedupe key {key!r} "
                    f"(also {keys[(key, rec.get('uid'))][:8]})"
                )
            keys[(key, rec.get("uid"))] = job_id
    for job_id, why in view.broken.items():
        out.append(f"job {job_id[:8]}: status.json is unreadable ({why})")
    for job_id, rec in view.records.items():
        tag = f"job {job_id[:8]}"
        if rec.get("id") != job_id:
            out.append(f"{tag}: status.json holds the id {rec.get('id')!r}")
        state = rec.get("state")
        if state not in STATES:
            out.append(f"{tag}: unknown state {state!r}")
            continue
        seq = rec.get("seq")
        if not isinstance(seq, int) or seq < 1:
            out.append(f"{tag}: bad seq {seq!r}")
        elif seq in seqs:
            out.append(f"{tag}: seq {seq} duplicates job {seqs[seq][:8]} (a job made twice?)")
        else:
            seqs[seq] = job_id
        out += [f"{tag}: {p}" for p in _attempts_problems(rec)]
    return out


def _attempts_problems(rec: dict) -> list[str]:
    out = []
    state = rec["state"]
    attempts = rec.get("attempts") or []
    attempt = rec.get("attempt", 1)
    numbers = [a.get("number") for a in attempts]
    if numbers != list(range(1, len(attempts) + 1)):
        out.append(f"attempt numbers {numbers} are not 1..{len(attempts)}")
    if state in FINAL_RAN:
        if len(attempts) != attempt:
            out.append(f"{state} at attempt {attempt} with {len(attempts)} attempt entries")
        elif attempts:
            last = attempts[-1]
            if last.get("state") != state:
                out.append(f"state {state} but its last attempt says {last.get('state')}")
            for key in ("exit_code", "signal"):
                if last.get(key) != rec.get(key):
                    out.append(f"{key} {rec.get(key)!r} but its last attempt says {last.get(key)!r}")
        if state == "completed" and rec.get("exit_code") != 0:
            out.append(f"completed with exit code {rec.get('exit_code')!r}")
    elif len(attempts) != attempt - 1:
        out.append(f"{state} at attempt {attempt} with {len(attempts)} attempt entries")
    if state in FINAL:
        if rec.get("ended_at") is None:
            out.append(f"{state} without ended_at")
        elif rec.get("ended_at") + 1 < rec.get("submitted_at", 0):
            out.append("ended before it was submitted")
    if state in ("running",) and not rec.get("pid"):
        out.append("running without a pid")
    return out


def check_known(view: View, known, cleaned) -> list[str]:
    """Every id a command printed is a job (unless qex clean was asked to remove it);
    every job the journal made is a job (unless cleaned)."""
    out = []
    cleaned = set(cleaned)
    for job_id in known:
        if job_id in cleaned:
            continue
        if job_id not in view.status:
            out.append(f"job {job_id[:8]}: its id was printed but its directory is gone (lost)")
        elif job_id not in view.records:
            out.append(f"job {job_id[:8]}: its id was printed but it has no record (lost)")
    made = {e.get("id") for e in _whole_appends(view.events) if e.get("event") == "job"}  # a cut append made nothing
    for job_id in made:
        if job_id in view.status and job_id not in view.records and job_id not in cleaned:
            out.append(f"job {str(job_id)[:8]}: the journal made it but it has no record (lost)")
    return out


def check_journal(view: View) -> list[str]:
    """Sequence numbers go up by one with no hole: across the rotated file and the
    current one (a hole there is one rotation too many, which qex reports as a gap)."""
    out = []
    prev = None
    closed = True
    view.holes = 0
    streams = set()
    for event in view.events:
        if "_damaged" in event:
            out.append(f"journal: a damaged line {event['_damaged']!r}")
            continue
        seq = event.get("seq")
        streams.add(event.get("stream"))
        if not isinstance(seq, int):
            out.append(f"journal: an event without a seq: {str(event)[:80]}")
            continue
        if prev is not None and seq != prev + 1:
            if seq > prev and closed:
                view.holes += 1  # a cut append's seqs are never given again; the harness bounds these
            else:
                out.append(f"journal: seq {seq} follows {prev} (a hole inside an append, or a repeat)")
        prev = seq
        closed = not isinstance(event.get("commit"), int) or seq >= event["commit"]
    if len(streams) > 1:
        out.append(f"journal: {len(streams)} streams in one journal ({sorted(map(str, streams))})")
    # (the index may be ahead of the journal: the seqs of a cut append, trimmed, are never given again)
    # The record of a job is its last event (status.json is written after the event).
    last = {}
    for event in _whole_appends(view.current_events):  # a cut append changed nothing
        if event.get("event") == "job" and isinstance(event.get("job"), dict):
            last[event["job"].get("id")] = _whole(event["job"])
    for job_id, rec in last.items():
        if job_id in view.records and view.records[job_id] != rec:
            mine = view.records[job_id]
            keys = sorted(k for k in set(mine) | set(rec) if mine.get(k) != rec.get(k))
            out.append(
                f"job {str(job_id)[:8]}: status.json differs from its last journal event in "
                f"{keys} ({mine.get('state')} vs {rec.get('state')})"
            )
    return out


def entry_of(rec: dict) -> dict:
    from qex.store.state import entry_of as qex_entry_of

    return qex_entry_of(rec)


def check_index(view: View) -> list[str]:
    """The active index equals the active records, entry by entry."""
    if view.index_error:
        return [f"index.json is unreadable ({view.index_error})"]
    if view.index is None:
        return []  # no pass has saved one yet (or a dead first pass): the next rebuilds it
    out = []
    jobs = view.index.get("jobs") or {}
    unapplied = {e["job"]["id"] for e in view.unapplied}  # the next pass puts these in the index
    active = {j for j, r in view.records.items() if r.get("state") in ACTIVE}
    for job_id in sorted(active - set(jobs) - unapplied):
        out.append(f"job {job_id[:8]}: {view.records[job_id]['state']} but not in the active index (never admitted)")
    for job_id in sorted(set(jobs) - active - unapplied):
        rec = view.records.get(job_id)
        out.append(f"job {job_id[:8]}: in the active index but its record is {rec.get('state') if rec else 'missing'}")
    for job_id in sorted(active & set(jobs)):
        if job_id in unapplied:
            continue  # the next pass rewrites this entry from the event
        want = entry_of(view.records[job_id])
        # The words of a waiting job's reason live in the index (a new kind of wait, its holder,
        # is journaled into the record; new words for the same kind are not: qex.queue.engine._set_reasons).
        got = {**jobs[job_id], "reason": want["reason"]} if want["state"] == "queued" else jobs[job_id]
        if got != want:
            diff = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
            out.append(f"job {job_id[:8]}: its index entry differs from its record in {diff}")
    seqs = [r.get("seq", 0) for r in view.records.values() if isinstance(r.get("seq"), int)]
    if seqs and view.index.get("next_job", 1) <= max(seqs) and not view.unapplied:
        out.append(f"index: next_job {view.index.get('next_job')} would repeat seq {max(seqs)}")
    return out


def check_history(view: View) -> list[str]:
    """history.jsonl (qex list's index of finished jobs) lists exactly the final jobs that
    exist, each once, in its final state. A job made final by an event no pass has applied
    yet may be missing (the replay adds it); a line of a job whose directory is gone
    (cleaned: qex clean rewrites the file, a crash in between may leave it) is skipped by
    every reader."""
    out = [f"history: a damaged line {line!r}" for line in view.history_damaged]
    lines = view.history or []
    unapplied = {e["job"]["id"] for e in view.unapplied}
    seen: dict[str, int] = {}
    for row in lines:
        job_id = row.get("id")
        seen[job_id] = seen.get(job_id, 0) + 1
        if job_id not in view.status:
            continue  # cleaned
        rec = view.records.get(job_id)
        if rec is None:
            out.append(f"history: job {str(job_id)[:8]} is listed but has no record")
        elif rec.get("state") not in FINAL:
            out.append(
                f"history: job {str(job_id)[:8]} is listed {row.get('state')} but its record is {rec.get('state')}"
            )
        elif (row.get("state"), row.get("seq")) != (rec.get("state"), rec.get("seq")):
            out.append(
                f"history: job {str(job_id)[:8]} is listed {row.get('state')} seq {row.get('seq')} "
                f"but its record is {rec.get('state')} seq {rec.get('seq')}"
            )
    out += [f"history: job {str(j)[:8]} is listed {n} times" for j, n in seen.items() if n > 1]
    if view.history is not None or any(r.get("state") in FINAL for r in view.records.values()):
        for job_id, rec in view.records.items():
            if rec.get("state") in FINAL and job_id not in seen and job_id not in unapplied:
                out.append(f"history: job {job_id[:8]} is {rec['state']} but not in history.jsonl")
    return out


def held_by_records(view: View) -> dict:
    """What the records say is held: cores (millicores), memory, pool units, device use."""
    cpu = mem = 0
    units: dict[str, int] = {}
    devices: dict[tuple[str, int], list] = {}
    for job_id, rec in view.records.items():
        if rec.get("state") not in HOLDING:
            continue
        claims = rec.get("claims") or {}
        cpu += round(float(claims.get("cpu", 1)) * 1000)
        mem += int(claims.get("mem", 0))
        for name, claim in (claims.get("pools") or {}).items():
            units[name] = units.get(name, 0) + int(claim.get("count", 1))
        for a in rec.get("assigned") or ():
            for d in a.get("devices", ()):
                devices.setdefault((a["pool"], d), []).append((job_id, a.get("size")))
    return {"cpu": cpu, "mem": mem, "units": units, "devices": devices}


def check_capacity(view: View, budget: dict) -> list[str]:
    """``budget``: {"cpu": millicores, "mem": bytes, "pools": {name: count or [capacities]}}.
    Never more than the budget, a pool or a device; a whole device never shared."""
    out = []
    held = held_by_records(view)
    if held["cpu"] > budget["cpu"]:
        out.append(f"capacity: {held['cpu'] / 1000} cores held, budget {budget['cpu'] / 1000}")
    if held["mem"] > budget["mem"]:
        out.append(f"capacity: {held['mem']} bytes held, budget {budget['mem']}")
    for name, spec in (budget.get("pools") or {}).items():
        if isinstance(spec, int):
            # an undeclared lock is a pool of one
            if held["units"].get(name, 0) > spec:
                out.append(f"capacity: {held['units'][name]} units of {name} held, it has {spec}")
        else:
            for i, cap in enumerate(spec):
                users = held["devices"].get((name, i), [])
                whole = [j for j, s in users if s is None]
                used = sum(cap if s is None else s for _, s in users)
                if used > cap or (whole and len(users) > 1):
                    out.append(f"capacity: device {name}:{i} of {cap} bytes used by {len(users)} jobs ({used})")
    for name, count in held["units"].items():
        if name not in (budget.get("pools") or {}) and count > 1:
            out.append(f"capacity: the lock {name} is held by {count} jobs")
    return out


def check_runs(view: View, runs: dict) -> list[str]:
    """An attempt's command runs at most once; a completed attempt ran."""
    out = []
    for (job_id, attempt), n in runs.items():
        if n > 1:
            out.append(f"job {job_id[:8]}: attempt {attempt} ran {n} times")
    for job_id, rec in view.records.items():
        if rec.get("state") == "completed" and runs.get((job_id, rec.get("attempt", 1)), 0) != 1:
            out.append(
                f"job {job_id[:8]}: completed but its command ran {runs.get((job_id, rec.get('attempt', 1)), 0)} times"
            )
    return out


def check_quiescent(view: View) -> list[str]:
    """After the bounded wait: every job final, nothing held, no torn or unapplied journal."""
    out = []
    for job_id, rec in view.records.items():
        if rec.get("state") not in FINAL:
            out.append(
                f"job {job_id[:8]}: still {rec.get('state')} after the bounded wait "
                f"({rec.get('blocked_reason') or rec.get('error') or ''})"
            )
    for job_id, rec in view.status.items():
        if rec is None and job_id not in view.broken and job_id not in view.records:
            pass  # a directory whose submission died before its first event: debris, see debris_of
    return out


def orphan_dirs(view: View) -> list[str]:
    """Job directories with no record and no event: a submission killed between
    making its directory and its first event (it printed no id; it is absent)."""
    return [j for j, rec in view.status.items() if rec is None and j not in view.records and j not in view.broken]


# ---- processes ----------------------------------------------------------------------


def _environ(pid: str) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return fh.read().split(b"\0")
    except OSError:
        return None


def _zombie(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        return data[data.rindex(b")") + 2 : data.rindex(b")") + 3] in (b"Z", b"X")
    except (OSError, ValueError):
        return True


def qex_processes(state_dir: str) -> list[int]:
    """Live qex processes (commands, supervisors, wakers) whose environment names this state dir."""
    needle = f"QEX_STATE_DIR={state_dir}".encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        env = _environ(pid)
        if not env or needle not in env or _zombie(pid):
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"qex" in fh.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def job_processes(job_ids) -> dict[str, list[int]]:
    """Live processes that carry QEX_JOB_ID of one of ``job_ids`` (a job's own processes)."""
    wanted = {f"QEX_JOB_ID={j}".encode(): j for j in job_ids}
    found: dict[str, list[int]] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        env = _environ(pid)
        if not env:
            continue
        for item in env:
            if item in wanted and not _zombie(pid):
                found.setdefault(wanted[item], []).append(int(pid))
                break
    return found


def read_runs(path: str) -> dict:
    """The marker file the harness's job commands append to: 'ID ATTEMPT' per start."""
    runs: dict = {}
    try:
        with open(path) as fh:
            for line in fh:
                parts = line.split()
                if len(parts) == 2:
                    key = (parts[0], int(parts[1]))
                    runs[key] = runs.get(key, 0) + 1
    except FileNotFoundError:
        pass
    return runs
