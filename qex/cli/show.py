"""qex list, logs, info, config show, schema, version."""

from __future__ import annotations

import os
import sys
import time

from qex.base.errors import QexError, SpecError
from qex.base.text import plain
from qex.cli.common import err, out, print_json, reading_context
from qex.store import layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from argparse import Namespace

    from qex.config.context import Context


def cmd_version(args: Namespace) -> int:
    from qex.base.version import VERSION

    out(f"qex {VERSION}")
    return 0


def _wanted_states(args) -> set[str] | None:
    from qex.base.states import ACTIVE, FINAL

    if not args.state:
        return None
    wanted = set()
    for s in args.state:
        wanted |= set(ACTIVE) if s == "active" else set(FINAL) if s == "final" else {s}
    return wanted


def cmd_list(args: Namespace) -> int:
    from qex.base.states import ACTIVE
    from qex.cli.render import LIST_HEADER, list_row

    ctx = reading_context()
    store = ctx.store
    states = _wanted_states(args)
    members = None
    if args.group:
        from qex.jobs.resolve import resolve

        target = resolve(store, args.group)
        if not target.is_group:
            raise SpecError(f"--group: {args.group} is a job, not a group; give a group id or name")
        members = target.members
    cwd = os.path.abspath(args.cwd) if args.cwd else None
    if members is None and (states is None or not states <= set(ACTIVE)):
        return _list_all(store, args, states, cwd)
    if members is not None:
        candidates = members  # a group: its members only, never a scan of all history
    else:
        active = store.read_index_jobs()
        candidates = sorted(active, key=lambda j: active[j].get("seq", 0))
    records, now = [], time.time()
    index = store.read_index_jobs()
    for job_id in candidates:
        rec = _read_row(store, job_id, index)
        if rec is not None and _listed(rec, args, states, cwd):
            records.append(rec)
    records.sort(key=lambda r: r.get("seq", 0))
    if members is None:
        records += [r for r in _others_active(store) if _listed(r, args, states, cwd)]
    if args.json:
        print_json(records)
        return 0
    out(LIST_HEADER)
    for rec in records:
        out(list_row(rec, now))
    return 0


def _read_row(store, job_id: str, index: dict) -> dict | None:
    """A job's record as `qex list` shows it; None (a broken one named on stderr) when unreadable."""
    from qex.base.errors import BrokenRecord

    try:
        return store.read_live(job_id, index)
    except BrokenRecord as exc:
        err(f"qex: {plain(str(exc), None)}")
    except QexError:
        pass  # a job directory still being made, or cleaned meanwhile
    return None


def _listed(rec: dict, args, states, cwd) -> bool:
    if states is not None and rec.get("state") not in states:
        return False
    if args.tag and not set(args.tag) <= set(rec.get("tags") or ()):
        return False
    return cwd is None or rec.get("cwd") == cwd


def _list_all(store, args, states, cwd) -> int:
    """Every job, streamed in submission order: finished jobs from the history index
    (qex/store/history.py), active ones from their records; the first row is printed
    before the thousandth history line is parsed. ``--json`` reads each record, as
    before, and streams the same array."""
    import json

    from qex.cli.render import LIST_HEADER
    from qex.store import history

    index = store.read_index_jobs()
    items, missed = history.listing(store, index, lambda exc: err(f"qex: {plain(str(exc), None)}"))
    write, now, first = sys.stdout.write, time.time(), True
    if not args.json:
        write(LIST_HEADER + "\n")
    jobs = store.jobs
    for _seq, job_id, line, rec in items:
        if line is not None and (not args.json or states or args.tag or cwd):
            try:
                rec = json.loads(line)
            except ValueError:
                rec = None  # a damaged line: its record says it
            else:
                if args.json:  # the line filters; the record is printed
                    if not _listed(rec, args, states, cwd):
                        continue
                    rec = None
                else:
                    try:
                        if history.identity(os.stat(f"{jobs}/{job_id}/{layout.STATUS}")) != rec.get("st"):
                            rec = None  # the record changed since (damaged, edited): read it
                    except OSError:
                        continue  # cleaned meanwhile
        if rec is None:
            rec = _read_row(store, job_id, index)
        if rec is None or not _listed(rec, args, states, cwd):
            continue
        first = _row(rec, args, write, now, first)
    for rec in _others_active(store):  # a shared directory: the other members' queued and running jobs
        if _listed(rec, args, states, cwd):
            first = _row(rec, args, write, now, first)
    if args.json:
        write("[]\n" if first else "]\n")
    sys.stdout.flush()
    history.repair(store, missed)
    return 0


def _row(rec: dict, args, write, now: float, first: bool) -> bool:
    import json

    from qex.cli.render import list_row

    if args.json:
        write(("[" if first else ", ") + json.dumps(rec, sort_keys=True))
    else:
        write(list_row(rec, now) + "\n")
    if first:
        sys.stdout.flush()  # the first row at once, whatever the size of the store
    return False


def _others_active(store) -> list[dict]:
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
    return sorted(out, key=lambda r: r.get("submitted_at") or 0)


def cmd_logs(args: Namespace) -> int:
    from qex.jobs.resolve import resolve

    ctx = reading_context()
    target = resolve(ctx.store, args.id)
    if target.is_group:
        from qex.base.errors import UsageError
        from qex.jobs.groups import stage_names

        raise UsageError(f"{args.id} is a group; logs reads one job: give one of its jobs "
                         f"({stage_names(ctx.store, target.members)})")
    job_id = target.job
    rec = ctx.store.read_status_dict(job_id)
    from qex.control.actions import check_owner

    check_owner(ctx, rec, "read the logs of", changes=False)
    if args.hook:
        return _hook_log(ctx, rec, args)
    # Both streams: each to its own. One stream asked for: on stdout, so that it can be piped.
    streams = [(layout.STDOUT, sys.stdout), (layout.STDERR, sys.stderr)]
    if args.stdout:
        streams = streams[:1]
    elif args.stderr:
        streams = [(layout.STDERR, sys.stdout)]
    pattern = _grep(args)
    if args.follow:  # (a reader that came after the limit cut what it had not read says so: 1)
        from qex.cli import stream
        from qex.cli import wait as waiting

        outs = [out if pattern is None else _Grep(out, pattern) for _, out in streams]
        files = stream.Files([(ctx.store.path(job_id, name), "stdout" if name == layout.STDOUT else "stderr", o)
                              for (name, _), o in zip(streams, outs)])
        try:
            waiting.await_final(ctx, [job_id], None, idle=files.idle)
        except KeyboardInterrupt:
            return 1 if files.skipped else 0
        files.finish()
        for o in outs:
            if isinstance(o, _Grep):
                o.close()
        return 1 if files.skipped else 0
    for name, stream in streams:
        _print_log(ctx.store.path(job_id, name), stream, args.tail, pattern)
    from qex.cli.render import dropped_text

    dropped = dropped_text(rec)
    if dropped:
        err(f"qex: {dropped}")
    return 0


class _Grep:
    """A stream for ``logs --follow --grep``: what is written to it goes on to
    ``stream`` a whole line at a time, the lines that match only (the last line, if
    it has no newline when the job ends, at ``close``). It is its own ``buffer``."""

    def __init__(self, stream, pattern):
        self.stream, self.pattern, self.held = stream, pattern, b""
        self.buffer = self

    def write(self, data: bytes) -> int:
        lines = (self.held + data).split(b"\n")
        self.held = lines.pop()
        self._out(b"".join(line + b"\n" for line in lines if self.pattern.search(line)))
        return len(data)

    def flush(self) -> None:
        self.stream.flush()

    def close(self) -> None:
        held, self.held = self.held, b""
        if held and self.pattern.search(held):
            self._out(held)

    def _out(self, data: bytes) -> None:
        if data:
            self.stream.buffer.write(data)
            self.stream.flush()


def _grep(args):
    if not args.grep:
        return None
    import re

    try:
        return re.compile(args.grep.encode())
    except re.error as exc:
        raise SpecError(f"--grep: {args.grep!r} is not a regular expression ({exc})") from None


def _hook_log(ctx: Context, rec: dict, args) -> int:
    """qex logs ID --hook: the hook's output on stdout, the verdict on stderr."""
    from qex.hooks.runner import describe

    if args.follow:
        raise SpecError("--hook reads the stop hook's output once; drop --follow")
    log, words = describe(ctx, rec)
    if log is not None:
        _print_log(log, sys.stdout, args.tail, _grep(args))
    err(f"qex: {words}")
    return 0 if log is not None else 1


def _print_log(path: str, stream, tail, pattern) -> None:
    from qex.store import fs
    from qex.supervisor.logs import Follower

    try:
        os.close(fs.open_regular(path))  # refuses a FIFO or a symlink planted there
        data = Follower(path).read()  # consistent even while the output limit cuts the file
    except FileNotFoundError:
        return
    except OSError as exc:
        err(f"qex: cannot read {path}: {exc.strerror or exc}")
        return
    if pattern is not None or tail is not None:
        lines = data.splitlines(keepends=True)
        if pattern is not None:
            lines = [line for line in lines if pattern.search(line)]
        if tail is not None:
            lines = lines[-tail:] if tail > 0 else []
        data = b"".join(lines)
    stream.flush()
    stream.buffer.write(data)
    stream.flush()


def cmd_info(args: Namespace) -> int:
    from qex.cli.gpus import info_line
    from qex.queue.info import gather

    ctx = reading_context()
    info = gather(ctx)
    gpus = info_line(ctx)  # the driver against the pool gpu (qex.cli.gpus)
    if gpus is not None:
        info["gpu_check"] = gpus[1]
    if args.json:
        print_json(info)
        return 0
    from qex.queue.info import render

    lines = render(info).split("\n")
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
    out(f"config file: {config.path}" + ("" if config.exists else " (missing: the defaults are in force)")
        + (" (from the parsed-config cache: unchanged since qex last parsed it)" if config.from_cache else ""))
    rows = config.show(cores, mem)
    width = max((len(k) for k, _, _ in rows), default=10)
    for key, value, source in rows:
        out(f"{key:<{width}}  {value}  ({source})")
    return 0


def cmd_schema(args: Namespace) -> int:
    from qex.cli.schema import schema_for

    print_json(schema_for(args.kind))
    return 0
