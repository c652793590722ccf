"""qex top: a live, full-screen view of the queue (curses), or one plain frame.

``curses`` is imported here and nowhere else (tests/test_layers.py): no other
command pays for it (it is the standard library's, ~2 ms; Textual cost ~170 ms
and rich ~53 ms to import, measured for issue 24). What it shows is read
without the state lock (``qex.queue.look``) and drawn by ``qex.cli.topframe``;
it starts nothing: ``k`` and ``c`` go through ``qex.control.actions``, the one
home of kill and cancel, as ``qex kill`` and ``qex cancel`` do.

The terminal is given back as it was on ``q``, Ctrl-C, SIGTERM and SIGHUP (a
closed terminal): the handlers raise ``_Leave``, which the ``finally`` of
``Screen.run`` turns into ``endwin``. While a kill or a cancel is under way a
signal waits for its end (a pass is never cut). What qex writes on stderr
meanwhile (a lock's holder, a warning) is kept and printed once the terminal
is back.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from qex.cli import topframe, tty
from qex.cli.common import context, err, out

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from argparse import Namespace

    from qex.config.context import Context
    from qex.queue.look import Look
    from qex.store.records import Row

REFRESH = 1.0  # seconds between two reads of the queue
ENDED = 50  # the ended jobs shown, newest first
LOG_BYTES = 64 << 10
HELP = """\
qex top: the queue, read again every second (it takes no lock and starts nothing)

  up/down, PgUp/PgDn, Home/End, Ctrl-P/Ctrl-N   move
  k        kill the job (a running one, its every process; a queued one is cancelled; asks first)
  c        cancel the job (a queued one; asks first)
  l        the last lines of the job's output (again: back)
  /        show only the rows that hold a text (id, name, state, user, reason); empty: all
  ?        this help
  q        quit (Ctrl-C too)

Bars: # held by this queue, = by other queues (other users), . free.
ELAPSED: queued, the time in the queue; running, since it started;
ended, from its start to its end. PEAK: the memory peak so far.

Any key goes back."""


class _Leave(Exception):
    """A signal to leave (Ctrl-C, SIGTERM, SIGHUP): the exit code."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def cmd_top(args: Namespace) -> int:
    from qex.queue.look import Look

    ctx = context()  # (not reading_context: a viewer starts nothing, not even a waker)
    look = Look(ctx)
    why = None if args.once else _no_screen()
    if args.once or why:
        if why:
            err(f"qex: {why}; here is one plain frame (qex top --once)")
        width = tty.width(sys.stdout, 0) if sys.stdout.isatty() else None
        out(topframe.once(look.read(ENDED), width or None))
        return 0
    return Screen(ctx, look).run()


def _no_screen() -> str | None:
    """Why there can be no full screen here, or None."""
    if not (tty.can_move(sys.stdout) and sys.stdin.isatty()):
        return "qex top needs a terminal that can move its cursor (not a pipe, not TERM=dumb)"
    try:
        import curses  # noqa: F401 (a Python built without it)
    except ImportError as exc:
        return f"this Python has no curses ({exc})"
    return None


class Screen:
    """The full-screen view: its state (selection, filter, the mode: table, log, help, a question)."""

    def __init__(self, ctx: Context, look: Look):
        self.ctx, self.look = ctx, look
        self.data: dict | None = None
        self.selected: str | None = None
        self.ids: list[str] = []
        self.ended: set[str] = set()  # the ids of the ended rows at the last drawing
        self.filter, self.mode, self.message, self.asking = "", "table", "", None
        self.busy, self.pending = False, None
        self.log: list[str] = []
        self.next_read = 0.0
        self.colour = tty.colour_on(sys.stdout)

    # ---- the terminal, taken and given back -------------------------------------------

    def run(self) -> int:
        import curses
        import locale

        locale.setlocale(locale.LC_ALL, "")
        os.environ.setdefault("ESCDELAY", "25")
        saved = {s: signal.signal(s, self._signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        kept, stderr = _capture_stderr()
        code = 0
        try:
            for name in ("LINES", "COLUMNS"):  # the size from the terminal: exported, they go stale
                os.environ.pop(name, None)
            screen = curses.initscr()
            try:
                self._setup(curses, screen)
                self._loop(curses, screen)
            finally:
                _quietly(curses.endwin)
        except _Leave as leave:
            code = leave.code
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)
            _give_back_stderr(kept, stderr)
        return code

    def _signal(self, signum, frame) -> None:
        code = 0 if signum == signal.SIGINT else 128 + signum
        if self.busy:
            self.pending = code  # a kill or a cancel is under way: leave after it
            return
        raise _Leave(code)

    def _setup(self, curses, screen) -> None:
        curses.noecho()
        curses.cbreak()
        screen.keypad(True)
        _quietly(curses.curs_set, 0)
        self.attrs = _attributes(curses, self.colour)

    # ---- the loop --------------------------------------------------------------------

    def _loop(self, curses, screen) -> None:
        quick = 0  # reads that returned at once with nothing: a terminal that is gone
        while True:
            if time.monotonic() >= self.next_read:
                self.data = self.look.read(ENDED)
                self.next_read = time.monotonic() + REFRESH
                if self.mode == "log":
                    self._read_log()
            self._draw(curses, screen)
            wait = max(0.0, self.next_read - time.monotonic())
            screen.timeout(int(wait * 1000) + 1)
            began = time.monotonic()
            try:
                key = screen.get_wch()
            except curses.error:
                key = None
            if key is None:
                quick = quick + 1 if time.monotonic() - began < wait / 2 else 0
                if quick > 50:
                    raise _Leave(128 + signal.SIGHUP)
                continue
            quick = 0
            if self._key(curses, key) == "quit":
                return

    def _key(self, curses, key) -> str | None:
        """Act on one key; "quit" to leave."""
        if self.asking is not None:
            return self._answer(key)
        if self.mode == "filter":
            return self._filter_key(curses, key)
        if self.mode == "help":
            self.mode = "table"
            return None
        if key == "q":
            return "quit"
        if key in ("k", "c"):
            self._ask("kill" if key == "k" else "cancel")
        elif key == "l":
            self.mode = "table" if self.mode == "log" else "log"
            self._read_log()
        elif key == "/":
            self.mode, self.message = "filter", ""
        elif key == "?":
            self.mode = "help"
        elif key == "\x1b" and self.mode == "log":
            self.mode = "table"
        elif key == curses.KEY_RESIZE:
            curses.update_lines_cols()
        else:
            self._move(curses, key)
        return None

    def _move(self, curses, key) -> None:
        page = max(1, curses.LINES - 12)
        steps = {
            curses.KEY_UP: -1,
            "\x10": -1,
            curses.KEY_DOWN: 1,
            "\x0e": 1,
            curses.KEY_PPAGE: -page,
            curses.KEY_NPAGE: page,
            curses.KEY_HOME: -(10**9),
            curses.KEY_END: 10**9,
        }
        if key not in steps or not self.ids:
            return
        at = self.ids.index(self.selected) if self.selected in self.ids else 0
        self.selected = self.ids[max(0, min(len(self.ids) - 1, at + steps[key]))]
        if self.mode == "log":
            self._read_log()

    def _filter_key(self, curses, key) -> None:
        if key in ("\n", "\r", curses.KEY_ENTER):
            self.mode = "table"
        elif key == "\x1b":
            self.filter, self.mode = "", "table"
        elif key in (curses.KEY_BACKSPACE, "\x7f", "\b"):
            self.filter = self.filter[:-1]
        elif isinstance(key, str) and key.isprintable():
            self.filter += key
        return None

    # ---- kill, cancel ----------------------------------------------------------------

    def _ask(self, verb: str) -> None:
        rec = self._selected_row()
        if rec is None:
            self.message = f"no job to {verb}"
            return
        self.asking = (verb, rec.id)
        self.message = f"{verb} {rec.id[:8]} ({rec.name})? y/n"

    def _answer(self, key) -> None:
        verb, job_id = self.asking
        self.asking = None
        if key not in ("y", "Y"):
            self.message = f"not done: {verb} {job_id[:8]}"
            return
        self.busy = True
        try:
            self.message = act(self.ctx, verb, job_id)
        finally:
            self.busy = False
        self.next_read = 0.0  # read again at once: the change shows
        if self.pending is not None:
            raise _Leave(self.pending)

    def _selected_row(self) -> Row | None:
        if self.data is None:
            return None
        return next((r for r in topframe.rows_of(self.data) if r.id == self.selected), None)

    # ---- the log -----------------------------------------------------------------------

    def _read_log(self) -> None:
        rec = self._selected_row()
        self.log = [] if rec is None else log_tail(self.ctx, rec)

    # ---- drawing ------------------------------------------------------------------------

    def _draw(self, curses, screen) -> None:
        height, width = screen.getmaxyx()
        screen.erase()
        if self.mode == "help":
            lines = [[(line, None)] for line in HELP.splitlines()]
        elif self.mode == "log":
            lines = [[(line, None)] for line in self.log[-(height - 1) :]] + [[(self._status_text(), "status")]]
        else:
            lines = self._table(height, width)
        for y, line in enumerate(lines[:height]):
            x = 0
            for text, kind in line:
                if x >= width - 1:
                    break
                _quietly(screen.addstr, y, x, _drawable(text[: width - 1 - x]), self.attrs.get(kind, 0))
                x += len(text)
        screen.noutrefresh()
        curses.doupdate()

    def _table(self, height: int, width: int) -> list:
        wanted = topframe.matcher(self.filter)
        rows = topframe.rows_of(self.data, wanted)
        ids = [r.id for r in rows]
        ended = {r.id for r in self.data["ended"]}
        if self.selected not in ids or (self.selected in ended and self.selected not in self.ended):
            # gone, or it ended (it moves down among the ended): the row that took its place
            at = self.ids.index(self.selected) if self.selected in self.ids else 0
            self.selected = ids[min(at, len(ids) - 1)] if ids else None
        self.ids, self.ended = ids, ended
        status = [(self._status_text(), "status")]
        frame = topframe.build(self.data, width, height, self.selected, wanted, status)
        return frame.lines

    def _status_text(self) -> str:
        if self.mode == "filter":
            return f"/{self.filter}_   (Enter: keep, Esc: clear)"
        shown = f"{len(self.ids)} jobs" + (f" matching '{self.filter}'" if self.filter else "")
        if self.mode == "log":
            shown = f"the output of {self.selected[:8] if self.selected else '-'} (l or Esc: back)"
        return f"{shown}  |  {self.message or topframe.KEYS}"


def act(ctx: Context, verb: str, job_id: str) -> str:
    """Kill or cancel one job through qex.control.actions; what happened, in words."""
    from qex.base.errors import QexError
    from qex.control.actions import CANCEL, KILL, stop_jobs

    try:
        what = stop_jobs(ctx, [job_id], KILL if verb == "kill" else CANCEL, wait=False).get(job_id, "")
    except QexError as exc:
        return f"{verb} {job_id[:8]}: {exc}"
    if what.startswith("ended:"):
        return f"{job_id[:8]} has already ended ({what[6:]})"
    return {
        "signal": f"killing {job_id[:8]}: its supervisor stops every process of it",
        "running": f"{job_id[:8]} is running, not queued: k kills it",
        "cancelled": f"cancelled {job_id[:8]}: it will not start",
    }.get(what, f"{verb} {job_id[:8]}: {what}")


def log_tail(ctx: Context, rec: Row) -> list[str]:
    """The last lines of a job's stdout and stderr, each in safe form (your jobs only)."""
    from qex.base.errors import QexError
    from qex.base.text import plain
    from qex.control.actions import check_owner
    from qex.store import fs, layout

    try:
        check_owner(ctx, rec.id, rec.uid, rec.owner, "read the logs of", changes=False)
    except QexError as exc:
        return [str(exc)]
    lines = []
    for name in (layout.STDOUT, layout.STDERR):
        lines.append(f"---- {name} of {rec.id[:8]} {rec.name}")
        try:
            fd = fs.open_regular(ctx.store.path(rec.id, name))
            try:
                size = os.fstat(fd).st_size
                data = os.pread(fd, min(size, LOG_BYTES), max(0, size - LOG_BYTES))
            finally:
                os.close(fd)
        except OSError:
            continue
        lines += [plain(line, 400) for line in data.decode("utf-8", "replace").splitlines()[-200:]]
    return lines


def _attributes(curses, colour: bool) -> dict:
    """The attribute of each kind of piece: colours from qex.cli.tty's kinds where colour is on."""
    attrs = {
        "bold": curses.A_BOLD,
        "header": curses.A_BOLD | curses.A_UNDERLINE,
        "selected": curses.A_REVERSE,
        "status": curses.A_REVERSE,
        "quiet": curses.A_DIM,
        "free": curses.A_DIM,
    }
    if not colour or not curses.has_colors():
        return attrs
    curses.start_color()
    _quietly(curses.use_default_colors)
    palette = {
        "good": curses.COLOR_GREEN,
        "bad": curses.COLOR_RED,
        "active": curses.COLOR_CYAN,
        "waiting": curses.COLOR_YELLOW,
        "own": curses.COLOR_CYAN,
        "other": curses.COLOR_YELLOW,
    }
    for n, (kind, fg) in enumerate(palette.items(), start=1):
        try:
            curses.init_pair(n, fg, -1)
        except curses.error:
            curses.init_pair(n, fg, curses.COLOR_BLACK)
        attrs[kind] = curses.color_pair(n) | (curses.A_BOLD if kind == "bad" else 0)
    return attrs


def _drawable(text: str) -> str:
    """What the terminal's encoding can show (a C locale: ASCII; "…" becomes "~")."""
    encoding = sys.stdout.encoding or "ascii"
    try:
        text.encode(encoding)
        return text
    except UnicodeEncodeError:
        return text.replace("…", "~").encode(encoding, "replace").decode(encoding)


def _quietly(fn, *args) -> None:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - a corner of the screen, a terminal that is gone
        pass


def _capture_stderr():
    """What qex writes on stderr while the screen is up goes to a file (it would tear the screen)."""
    import tempfile

    try:
        sys.stderr.flush()
        kept = os.dup(2)
        stderr = tempfile.TemporaryFile()
        os.dup2(stderr.fileno(), 2)
        return kept, stderr
    except OSError:
        return None, None


def _give_back_stderr(kept, stderr) -> None:
    if kept is None:
        return
    try:
        sys.stderr.flush()
        os.dup2(kept, 2)
        os.close(kept)
        stderr.seek(0)
        said = stderr.read()
        if said:
            os.write(2, said)
    except OSError:
        pass
