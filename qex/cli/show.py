"""qex list, info, config show, schema, version (qex logs: qex.cli.logs)."""

from __future__ import annotations

import os
import sys
import time

from qex.base import say
from qex.base.errors import QexError, SpecError
from qex.base.text import plain
from qex.cli.common import out, print_json, reading_context
from qex.jobs.resolve import name_matches
from qex.store import layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from argparse import Namespace

    from qex.store.records import Row, Status


def cmd_version(args: Namespace) -> int:
    from qex.base.version import VERSION

    if args.json:  # qex schema version
        from qex.store.records import FORMAT

        print_json({"version": VERSION, "record_format": FORMAT})
        return 0
    out(f"qex {VERSION}")
    return 0


def _wanted_states(args) -> set[str] | None:
    from qex.base.states import ACTIVE, FINAL

    if not args.state:
        return None
    wanted = set()
    for words in args.state:  # (each --state a comma list: parser._state_list)
        for s in words:
            wanted |= set(ACTIVE) if s == "active" else set(FINAL) if s == "final" else {s}
    return wanted


class _Wanted:
    """What `qex list` shows: its filters (--state, --tag, --cwd, --name, --since)."""

    def __init__(self, args, now: float):
        self.states, self.tags = _wanted_states(args), set(args.tag)
        self.cwd = os.path.abspath(args.cwd) if args.cwd else None
        self.name = args.name
        self.since = None if args.since is None else _since(args.since, now)

    def any(self) -> bool:
        return bool(self.states or self.tags or self.cwd or self.name or self.since is not None)

    def __call__(self, rec: Row | Status) -> bool:
        if self.states is not None and rec.state not in self.states:
            return False
        if self.tags and not self.tags <= set(rec.tags):
            return False
        if self.name is not None and not name_matches(self.name, rec.name):
            return False
        if self.since is not None and (rec.ended_at or self.since) < self.since:
            return False  # (an active job is in any window that reaches now)
        return self.cwd is None or rec.cwd == self.cwd


def _since(text: str, now: float) -> float:
    """--since: a duration back from now (1h, 2d) or an ISO 8601 time (local when it names no zone)."""
    from qex.base.errors import UsageError
    from qex.base.units import parse_duration

    try:
        return now - parse_duration(text, "--since")
    except SpecError:
        pass
    from datetime import datetime

    try:
        return datetime.fromisoformat(text).timestamp()
    except (ValueError, OverflowError, OSError):
        raise UsageError(
            f"--since: {text!r} is neither a duration (90s, 30m, 4h, 2d) nor an ISO 8601 time "
            "(2025-03-21, 2025-03-21T14:00, 2025-03-21T14:00+01:00)"
        ) from None


class _Rows:
    """The rows of `qex list`, as text (its --format fields, colour on a terminal) or one JSON array."""

    def __init__(self, args, now: float):
        from qex.cli import listing, tty

        self.json, self.now, self.first, self.write = args.json, now, True, sys.stdout.write
        self.fields = listing.parse_format(args.format) if args.format else None
        self.paint = None
        if not self.json and tty.colour_on(sys.stdout):
            self.paint = lambda text, state: tty.paint(text, tty.TONE.get(state), True)
        self.needs_record = self.json or bool(listing.NEEDS_RECORD & set(self.fields or listing.DEFAULT))

    def start(self) -> None:
        from qex.cli import listing

        if not self.json:
            self.write(listing.header(self.fields or listing.DEFAULT) + "\n")

    def put(self, rec: Row | Status) -> None:
        import json

        from qex.cli import listing

        if self.json:
            self.write(
                ("[" if self.first else ", ") + json.dumps(listing.json_row(rec, self.now, self.fields), sort_keys=True)
            )
        else:
            self.write(listing.row(rec, self.now, self.fields or listing.DEFAULT, self.paint) + "\n")
        if self.first:
            sys.stdout.flush()  # the first row at once, whatever the size of the store
        self.first = False

    def end(self) -> None:
        if self.json:
            self.write("[]\n" if self.first else "]\n")
        sys.stdout.flush()


def cmd_list(args: Namespace) -> int:
    from qex.base.states import ACTIVE

    ctx = reading_context()
    store, now = ctx.store, time.time()
    wanted, rows = _Wanted(args, now), _Rows(args, now)
    if args.last is not None and args.last < 0:
        from qex.base.errors import UsageError

        raise UsageError(f"--last: {args.last} is below 0; give how many of the newest jobs to show")
    members = None
    if args.group:
        from qex.jobs.resolve import resolve

        target = resolve(store, args.group)
        if not target.is_group:
            raise SpecError(f"--group: {args.group} is a job, not a group; give a group id or name")
        members = target.members
    if members is None and (wanted.states is None or not wanted.states <= set(ACTIVE)):
        return _list_all(store, args, wanted, rows)
    if members is not None:
        candidates = members  # a group: its members only, never a scan of all history
    else:
        active = store.read_index_jobs()
        candidates = sorted(active, key=lambda j: active[j].get("seq", 0))
    records = []
    index = store.read_index_jobs()
    for job_id in candidates:
        rec = _read_row(store, job_id, index)
        if rec is not None and wanted(rec):
            records.append(rec)
    records.sort(key=lambda r: r.seq)
    if members is None:
        records += [r for r in _others_active(store) if wanted(r)]
    rows.start()
    for rec in records if args.last is None else records[-args.last :] if args.last else ():
        rows.put(rec)
    rows.end()
    return 0


def _read_row(store, job_id: str, index: dict) -> Status | None:
    """A job's record, for a row of `qex list` (``qex.cli.listing`` reads a ``Status`` as
    it reads a ``Row``; ``--json`` prints the record); None (a broken one named on
    stderr) when unreadable."""
    from qex.base.errors import BrokenRecord

    try:
        return store.read_live(job_id, index)
    except BrokenRecord as exc:
        say.warning(plain(str(exc), None))
    except QexError:
        pass  # a job directory still being made, or cleaned meanwhile
    return None


def _list_all(store, args, wanted: _Wanted, rows: _Rows) -> int:
    """Every job, streamed in submission order: finished jobs from the history index
    (qex/store/history.py), active ones from their records; the first row is printed
    before the thousandth history line is parsed. ``--json`` reads each record, as
    before, and streams the same array. ``--last N``: the newest N that pass the
    filters, found from the end."""
    from qex.store import history

    index = store.read_index_jobs()
    items, missed = history.listing(store, index, lambda exc: say.warning(plain(str(exc), None)))
    found = _found(store, items, index, wanted, rows)
    others = (r for r in _others_active(store) if wanted(r))  # a shared directory: the other members' active jobs
    rows.start()
    if args.last is None:
        for rec in found:
            rows.put(rec)
        for rec in others:
            rows.put(rec)
    else:
        newest = list(reversed(list(others)))
        if len(newest) < args.last:
            found = _found(store, reversed(items), index, wanted, rows)
            for rec in found:
                newest.append(rec)
                if len(newest) >= args.last:
                    break
        for rec in reversed(newest[: args.last]):
            rows.put(rec)
    rows.end()
    history.repair(store, missed)
    return 0


def _found(store, items, index: dict, wanted: _Wanted, rows: _Rows):
    """The records of the listing's ``items`` that pass the filters, as rows need them: from
    the history line where it has what is shown (and the record is the one it was taken
    from: one ``stat``), else from the record."""
    from qex.store import history

    jobs = store.jobs
    for _seq, job_id, line, rec in items:
        if line is not None and (not rows.json or wanted.any()):
            rec = history.read_row(line)  # (None: a damaged line; its record says it)
            if rec is not None:
                if not wanted(rec):
                    continue
                if rows.json or (rows.needs_record and rec.usage is None):
                    rec = None  # the record is printed (or has what a line of an older qex lacks)
                else:
                    try:
                        if history.identity(os.stat(f"{jobs}/{job_id}/{layout.STATUS}")) != rec.st:
                            rec = None  # the record changed since (damaged, edited): read it
                    except OSError:
                        continue  # cleaned meanwhile
        if rec is None:
            rec = _read_row(store, job_id, index)
        if rec is not None and wanted(rec):
            yield rec


def _others_active(store) -> list[Status]:
    """The other members' queued and running jobs (a shared directory), oldest first."""
    if store.shared_root is None:
        return []

    out = []
    for _uid, other in store.others():
        index = other.read_index_jobs()
        for job_id in index:
            rec = _read_row(other, job_id, index)
            if rec is not None:
                out.append(rec)
    return sorted(out, key=lambda r: r.submitted_at or 0)


def cmd_info(args: Namespace) -> int:
    from qex.cli.gpus import info_line
    from qex.queue.info import gather

    ctx = reading_context()
    info = gather(ctx)
    gpus = info_line(ctx)  # the driver against the pool gpu (qex.cli.gpus)
    if gpus is not None:
        info["gpu_check"] = gpus[1]
    from qex.jobs.slurmjobs import on_slurm

    if on_slurm(ctx):  # (the controller it reaches: scontrol ping)
        from qex.slurm.clients import ping

        info["backend"] = {"kind": "slurm", "controller": ping()}
    if args.json:
        print_json(info)
        return 0
    from qex.queue.info import render

    lines = render(info).split("\n")
    if "backend" in info:
        lines.insert(0, f"backend   slurm: {info['backend']['controller']}")
    if gpus is not None:  # above the queue's health line, which ends what info says
        at = next((i for i, line in enumerate(lines) if line.startswith("queue ")), len(lines))
        lines.insert(at, f"gpus      {gpus[0]}")
    out("\n".join(lines))
    return 0


def cmd_config(args: Namespace) -> int:
    from qex.base import machine
    from qex.config.file import load_config

    if args.action == "detect":
        from qex.cli.gpus import cmd_detect

        return cmd_detect(args)
    if args.write or args.uuid:
        from qex.base.errors import UsageError

        raise UsageError("--write and --uuid go with `qex config detect`, not with show")
    config = load_config()
    cores, mem = machine.cores(), machine.mem_total()
    if args.json:
        print_json(config.show_json(cores, mem))
        return 0
    out(
        f"config file: {config.path}"
        + ("" if config.exists else " (missing: the defaults are in force)")
        + (" (from the parsed-config cache: unchanged since qex last parsed it)" if config.from_cache else "")
    )
    rows = config.show(cores, mem)
    width = max((len(k) for k, _, _ in rows), default=10)
    for key, value, source in rows:
        out(f"{key:<{width}}  {value}  ({source})")
    from qex.config.keys import backend

    if backend(config) == "slurm":
        from qex.slurm.clients import ping

        out(f"slurm controller: {ping()}")
    return 0


def cmd_schema(args: Namespace) -> int:
    from qex.cli.schema import schema_for

    print_json(schema_for(args.kind))
    return 0
