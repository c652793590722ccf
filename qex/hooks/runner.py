"""The hook runner: after a pass, a detached process that claims, runs and
judges the stop hooks of this user's pending markers (see ``qex.hooks.markers``
for when and why it is started)."""

from __future__ import annotations

import json
import os
import signal
import time

from qex.base.states import FINAL
from qex.base.text import one_line
from qex.hooks.markers import decide, pending_dir
from qex.linux.proc import KILL_GRACE
from qex.store import fs, layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.store.records import Status

OUTPUT_CAP = 1 << 20
DRAIN_AFTER_EXIT = 2.0


# ---- the runner --------------------------------------------------------------------


class _Hook:
    def __init__(self, job_id: str, job_dir: str, rec: Status, argv: tuple):
        self.job_id, self.dir, self.rec, self.argv = job_id, job_dir, rec, argv
        self.proc = None
        self.pidfd = None
        self.log_fd = None
        self.started = time.time()
        self.written = 0
        self.capped = False
        self.timed_out = False
        self.kill_at = None
        self.drain_until = None
        self.status = None
        self.error = None


def run_hooks(ctx: Context, job_ids: list[str]) -> None:
    """Claim each job (``hook.ran`` with O_EXCL), start its hook, watch them all."""
    ctx.reload_config()
    config = ctx.config
    hooks = []
    for job_id in job_ids:
        hook = _claim(ctx, job_id, config)
        if hook is not None:
            hooks.append(hook)
    _watch(hooks, config.hook_timeout)
    for hook in hooks:
        _verdict(hook, config.hook_timeout)


def _claim(ctx: Context, job_id: str, config) -> "_Hook | None":
    marker = os.path.join(pending_dir(ctx.store), layout.hook_marker(ctx.uid, job_id))
    decision = decide(ctx, job_id)
    if decision != "run":
        if decision == "drop":
            fs.unlink_quietly(marker)
        return None
    job_dir = ctx.store.job_dir(job_id)
    try:
        fd = os.open(
            os.path.join(job_dir, layout.HOOK_RAN),
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o644,
        )
    except OSError:
        fs.unlink_quietly(marker)  # another runner has it (or the job is gone)
        return None
    fs.unlink_quietly(marker)
    try:
        rec = ctx.store.read_status(job_id)
        hook = _Hook(job_id, job_dir, rec, config.hook_on_stop)
        _start(hook)
        os.write(
            fd,
            (
                json.dumps(
                    {
                        "command": list(hook.argv),
                        "started_at": hook.started,
                        "state": rec.state,
                        "pid": hook.proc.pid if hook.proc else None,
                    },
                    sort_keys=True,
                )
                + "\n"
            ).encode(),
        )
    finally:
        os.close(fd)
    return hook


def hook_env(rec: Status, job_dir: str) -> dict:
    """The environment of the hook: ours (the same user's) plus the job's QEX_* values."""
    from qex.base.units import safe_name

    env = {k: v for k, v in os.environ.items() if not k.startswith("QEX_TEST_")}
    started, ended = rec.started_at, rec.ended_at
    env.update(
        {
            "QEX_JOB_ID": rec.id,
            "QEX_JOB_NAME": safe_name(rec.name),
            "QEX_STATE": rec.state,
            "QEX_EXIT_CODE": "" if rec.exit_code is None else str(rec.exit_code),
            "QEX_SIGNAL": rec.signal or "",
            "QEX_ELAPSED_SECS": str(int(ended - started)) if started and ended else "",
            "QEX_CWD": one_line(rec.cwd),
            "QEX_JOB_DIR": job_dir,
            "QEX_ATTEMPTS": str(len([a for a in rec.attempts if a.started_at])),
            "QEX_MAX_RSS": "" if rec.usage.max_rss is None else str(rec.usage.max_rss),
            "QEX_TAGS": one_line(" ".join(rec.tags)),
        }
    )
    return env


def _start(hook: _Hook) -> None:
    import subprocess

    try:
        hook.log_fd = os.open(
            os.path.join(hook.dir, layout.HOOK_LOG),
            os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
        hook.proc = subprocess.Popen(
            list(hook.argv),
            cwd=hook.dir,
            env=hook_env(hook.rec, hook.dir),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            close_fds=True,
            process_group=0,
        )
        hook.pidfd = os.pidfd_open(hook.proc.pid)
        os.set_blocking(hook.proc.stdout.fileno(), False)
    except (OSError, ValueError) as exc:
        hook.error = f"could not start {hook.argv[0]!r}: {getattr(exc, 'strerror', None) or exc}"
        if hook.proc is not None and hook.proc.stdout is not None:
            hook.proc.stdout.close()
        hook.proc = None


def _watch(hooks: list[_Hook], timeout: float) -> None:
    """One loop over every hook: copy output (capped), time out, reap."""
    import selectors

    sel = selectors.DefaultSelector()
    live = [h for h in hooks if h.proc is not None]
    for h in live:
        sel.register(h.proc.stdout, selectors.EVENT_READ, ("out", h))
        sel.register(h.pidfd, selectors.EVENT_READ, ("exit", h))
    deadline = {id(h): h.started + timeout for h in live}
    while any(h.status is None or h.proc.stdout is not None for h in live):
        now = time.time()
        for h in live:
            if h.status is None and not h.timed_out and now >= deadline[id(h)]:
                h.timed_out = True
                _group(h, signal.SIGTERM)
                h.kill_at = now + KILL_GRACE
            if h.kill_at is not None and now >= h.kill_at and h.status is None:
                _group(h, signal.SIGKILL)
                h.kill_at = None
            if h.drain_until is not None and now >= h.drain_until and h.proc.stdout is not None:
                _close_out(sel, h)  # something the hook left behind holds its output
        times = [
            t
            for h in live
            for t in (
                None if h.timed_out or h.status is not None else deadline[id(h)],
                h.kill_at,
                h.drain_until if h.proc.stdout is not None else None,
            )
            if t is not None
        ]
        wait = max(0.0, min(times) - now) if times else None
        for key, _ in sel.select(wait):
            kind, h = key.data
            if kind == "out":
                _copy_out(sel, h)
            else:
                _, status, _ = os.wait4(h.proc.pid, 0)
                h.status = status
                sel.unregister(h.pidfd)
                os.close(h.pidfd)
                h.drain_until = time.time() + DRAIN_AFTER_EXIT
    sel.close()


def _copy_out(sel, h: _Hook) -> None:
    try:
        data = os.read(h.proc.stdout.fileno(), 65536)
    except BlockingIOError:
        return
    if not data:
        _close_out(sel, h)
        return
    room = OUTPUT_CAP - h.written
    if room > 0:
        try:
            os.write(h.log_fd, data[:room])
        except OSError:
            pass
        h.written += min(room, len(data))
    if len(data) > room:
        h.capped = True  # 1MB: shut the pipe and stop the hook
        _close_out(sel, h)
        if h.status is None:
            _group(h, signal.SIGTERM)
            h.kill_at = time.time() + 2.0


def _close_out(sel, h: _Hook) -> None:
    if h.proc.stdout is not None:
        sel.unregister(h.proc.stdout)
        h.proc.stdout.close()
        h.proc.stdout = None


def _group(h: _Hook, sig: int) -> None:
    try:
        os.killpg(h.proc.pid, sig)
    except OSError:
        pass


def _verdict(h: _Hook, timeout: float) -> None:
    from qex.base.units import format_duration

    ended = time.time()
    result = {
        "command": list(h.argv),
        "started_at": h.started,
        "ended_at": ended,
        "state": h.rec.state,
        "exit_code": None,
        "signal": None,
        "timed_out": h.timed_out,
        "output_capped": h.capped,
        "output_bytes": h.written,
        "error": h.error,
    }
    took = format_duration(ended - h.started)
    if h.error:
        words = h.error
    else:
        if os.WIFEXITED(h.status):
            result["exit_code"] = os.WEXITSTATUS(h.status)
            words = f"exited {result['exit_code']} after {took}"
        else:
            result["signal"] = signal.Signals(os.WTERMSIG(h.status)).name
            words = f"ended by {result['signal']} after {took}"
        if h.timed_out:
            words += f": stopped at its [hooks] timeout of {format_duration(timeout)}"
        if h.capped:
            words += f": its output passed {OUTPUT_CAP >> 20}MB, the pipe was shut and the hook stopped"
    result["verdict"] = words
    if h.log_fd is not None:
        os.close(h.log_fd)
    try:
        fs.write_json(os.path.join(h.dir, layout.HOOK_RAN), result, mode=0o644, sync_dir=False)
    except Exception:
        pass


# ---- reading the result (qex logs ID --hook) ----------------------------------------


def describe(ctx: Context, rec: Status) -> tuple[str | None, str]:
    """(hook.log path or None, one sentence: the verdict, or why there is none)."""
    job_id = rec.id
    ran = ctx.store.path(job_id, layout.HOOK_RAN)
    try:
        data = fs.read_json(ran)
    except FileNotFoundError:
        data = None
    except (OSError, ValueError):
        data = {}
    if data is not None:
        log = ctx.store.path(job_id, layout.HOOK_LOG)
        command = one_line(" ".join(str(a) for a in data.get("command") or ()))[:200]
        if "verdict" not in data:
            return log, f"the stop hook ({command}) is running, or its runner was lost before it said how it ended"
        return log, f"the stop hook ({command}) {one_line(data['verdict'])}"
    if rec.state not in FINAL:
        return None, f"the job is {rec.state}: the stop hook runs when it ends"
    if os.path.exists(os.path.join(pending_dir(ctx.store), layout.hook_marker(rec.uid, job_id))):
        return None, "the stop hook has not started yet: the next qex command of its owner starts it"
    if not ctx.config.hook_on_stop:
        return None, f"no stop hook ran: [hooks] on_stop is not set in {ctx.config.path}"
    return None, (
        f"no stop hook ran: the job ended {rec.state}, which [hooks] on_stop_states did not list when it ended"
    )
