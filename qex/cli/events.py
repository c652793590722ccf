"""qex events: follow the journal; one line per change of any job."""

import os
import select
import sys
import time

from qex.base.errors import UsageError


def _options(args):
    from qex.store.events import BadSince, parse_since

    try:
        since = parse_since(args.since)
    except BadSince:
        raise UsageError(f"--since: {args.since!r} is not a position; use STREAM:SEQ (the stream and seq of "
                         "the last line you read), start (everything the journal holds) or now") from None
    if args.count is not None and args.count < 0:
        raise UsageError(f"--count: {args.count} is negative; give the number of job lines to print, or 0")
    limit = None
    if args.timeout is not None:
        from qex.base.units import parse_duration

        limit = parse_duration(args.timeout, "--timeout")
    return since, limit


def cmd_events(args) -> int:
    from qex.base import paths
    from qex.store.events import Reader, Watch, render
    from qex.store import fs

    since, limit = _options(args)
    root = paths.state_dir()
    fs.ensure_private_dir(root)
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
    jobs = 0
    try:
        while True:
            for event in reader.poll():
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
            wait = 0.1 if watch.fileno() is None else 1.0
            if deadline is not None:
                wait = min(wait, deadline - now)
            for fd, ev in poller.poll(max(0, wait) * 1000):
                if fd == stdout_fd and ev & (select.POLLERR | select.POLLHUP):
                    _quiet_stdout()
                    return 0
            if watch.fileno() is not None:
                watch.relevant()
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
