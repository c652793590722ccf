"""qex events: follow the journal; one line per change of any job."""

from __future__ import annotations

import os
import select
import sys
import time

from qex.base.errors import UsageError
from qex.base.states import FINAL

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from argparse import Namespace


def _options(args):
    from qex.store.events import BadSince, parse_since

    try:
        since = parse_since(args.since)
    except BadSince:
        raise UsageError(
            f"--since: {args.since!r} is not a position; use STREAM:SEQ (the stream and seq of "
            "the last line you read), start (everything the journal holds) or now"
        ) from None
    if args.count is not None and args.count < 0:
        raise UsageError(f"--count: {args.count} is negative; give the number of job lines to print, or 0")
    limit = None
    if args.timeout is not None:
        from qex.base.units import parse_duration

        limit = parse_duration(args.timeout, "--timeout")
    return since, limit


def cmd_events(args: Namespace) -> int:
    from qex.base import paths
    from qex.store.events import POLL, RECHECK, Reader, Watch
    from qex.store.state import Store

    since, limit = _options(args)
    store = Store(paths.state_dir())
    store.ensure()  # (refuses what every command refuses; in a shared directory: this member's events)
    root = store.root
    deadline = None if limit is None else time.monotonic() + limit
    watch = Watch(root)
    reader = Reader(root, since)
    out = sys.stdout
    poller = select.poll()
    if watch.fileno() is not None:
        poller.register(watch.fileno(), select.POLLIN)
    try:
        stdout_fd = out.fileno()
        poller.register(stdout_fd, 0)  # POLLERR/POLLHUP only: the reader of our pipe went away
    except (OSError, ValueError):
        stdout_fd = None
    jobs, fresh = 0, False
    try:
        while True:
            for event in reader.poll(fresh):
                out.write((_json(event) if args.json else render(event)) + "\n")
                if event.get("event") == "job":
                    jobs += 1
                    if args.count is not None and jobs >= args.count:
                        out.flush()
                        return 0
            out.flush()
            if args.count == 0:
                return 0
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return 0
            wait = POLL if watch.fileno() is None else RECHECK
            if deadline is not None:
                wait = min(wait, deadline - now)
            for fd, ev in poller.poll(max(0, wait) * 1000):
                if fd == stdout_fd and ev & (select.POLLERR | select.POLLHUP):
                    _quiet_stdout()
                    return 0
            # nothing from inotify about the journal: open it again (NFS: another client's writes)
            fresh = not (watch.fileno() is not None and watch.relevant())
    finally:
        reader.close()
        watch.close()


def _json(event: dict) -> str:
    import json

    return json.dumps(event, sort_keys=True, separators=(",", ":"))


def _quiet_stdout() -> None:
    """Our reader left: point stdout at /dev/null so that the final flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except OSError:
        pass


def render(event: dict) -> str:
    """One event in words. Names in their safe form; reasons and errors with
    their control characters replaced."""
    import time

    from qex.base.text import plain
    from qex.base.units import safe_text

    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(event.get("time") or 0))
    kind = event.get("event")
    if kind == "stream":
        pos = f"{event.get('stream')}:{event.get('seq')}" if event.get("stream") else "start"
        return f"# stream {event.get('stream') or '(none yet)'} from seq {event.get('seq')} (resume: qex events --since {pos})"
    if kind == "gap":
        missed = event.get("missed")
        count = "an uncounted number of" if missed is None else str(missed)
        return f"# gap: {count} event(s) missed: {plain(event.get('reason') or '', 300)}"
    job = event.get("job") or {}
    head = f"{when}  {event.get('seq'):>6}  {str(event.get('id', ''))[:8]}  {safe_text(event.get('name') or '', 40)}"
    if event.get("change") == "state":
        text = f"{event.get('previous') or 'new'} -> {event.get('state')}"
        if event.get("state") in FINAL:
            from qex.base import outcome
            from qex.store.records import Status, load

            text += f" (code {outcome.exit_code(load(Status, job))})"
            if job.get("error"):
                text += f": {plain(job['error'], 300)}"
        return f"{head}  {text}"
    why = job.get("blocked_reason") if event.get("state") == "queued" else None
    if why is None and job.get("kill_requested"):
        why = "qex kill asked it to stop"
    return f"{head}  {event.get('state')}: {plain(why or 'its record changed', 300)}"
