"""A real terminal for the tests: one tmux server per test on its own socket.

A command runs in a pane through a small script: it waits for the test's "go"
file (so that ``pipe-pane`` records every byte the command writes, from the
first), runs the command with the test's environment, writes its exit code
and ``stty -a`` (the terminal as the command left it), and waits for the test
to end. What the command wrote is kept raw (``raw``: escape codes and carriage
returns included), and the screen is read with ``capture-pane``. Every wait
is a bounded poll.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

BARE_CR = re.compile(rb"\r(?!\n)")  # a carriage return that is no line's end (a terminal writes \r\n for \n)
COLOUR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-7]|9[0-7])(?:;[0-9;]*)?m")  # an SGR that sets a foreground colour


def need_tmux() -> str:
    path = shutil.which("tmux")
    if path is None:
        pytest.skip("tmux is not installed: the real-terminal tests need it (.ci/run installs it)")
    return path


class Pane:
    """One command in a tmux pane of a private server."""

    def __init__(self, root: str, name: str = "t"):
        self.tmux = need_tmux()
        self.dir = os.path.join(root, f"tmux-{name}")
        os.makedirs(self.dir, exist_ok=True)
        self.socket = os.path.join(self.dir, "sock")
        self.name = name
        self.started = False

    def path(self, what: str) -> str:
        return os.path.join(self.dir, what)

    def tm(self, *args, check=True) -> str:
        proc = subprocess.run([self.tmux, "-S", self.socket, *args], capture_output=True, text=True, timeout=20)
        if check:
            assert proc.returncode == 0, (args, proc.stderr)
        return proc.stdout

    def start(self, argv: list[str], env: dict, width: int = 160, height: int = 40) -> None:
        """Run ``argv`` in a new pane with ``env`` (TERM is the pane's unless ``env`` sets it)."""
        # (the pane's own size, whatever the caller's says; Ctrl-C reaches the command, and the
        # script, which traps it (its child gets the default action back), goes on)
        lines = ["#!/bin/sh", "unset COLUMNS LINES", "trap : INT"]
        for key, value in env.items():
            if (
                key.isidentifier()
                and key not in ("COLUMNS", "LINES")
                and (key != "TERM" or value != os.environ.get("TERM"))
            ):
                lines.append(f"export {key}={shlex.quote(value)}")
        go, done = self.path("go"), self.path("done")
        lines += [
            f"while [ ! -e {shlex.quote(go)} ]; do sleep 0.02; done",
            f'sh -c \'echo $$ > {shlex.quote(self.path("pid"))}; exec "$0" "$@"\' '
            + " ".join(shlex.quote(a) for a in argv),
            f"echo $? > {shlex.quote(self.path('exit.tmp'))}",
            f"stty -a > {shlex.quote(self.path('stty'))} 2>&1",
            f"mv {shlex.quote(self.path('exit.tmp'))} {shlex.quote(self.path('exit'))}",
            f"while [ ! -e {shlex.quote(done)} ]; do sleep 0.05; done",
        ]
        script = self.path("run.sh")
        with open(script, "w") as fh:
            fh.write("\n".join(lines) + "\n")
        os.chmod(script, 0o755)
        self.tm("new-session", "-d", "-s", self.name, "-c", self.dir, "-x", str(width), "-y", str(height), script)
        self.started = True
        self.tm("pipe-pane", "-o", "-t", self.name, f"cat >> {shlex.quote(self.path('raw'))}")
        open(go, "w").close()

    def screen(self, escapes: bool = False) -> str:
        return self.tm("capture-pane", "-p", *(["-e"] if escapes else []), "-t", self.name)

    def raw(self) -> bytes:
        try:
            with open(self.path("raw"), "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return b""

    def keys(self, *keys: str) -> None:
        self.tm("send-keys", "-t", self.name, *keys)

    def wait_screen(self, predicate, timeout: float = 20.0, what: str = "the screen") -> str:
        """The screen once ``predicate(screen)`` holds; fails after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if predicate(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; the screen:\n{text}")
            time.sleep(0.05)

    def pid(self, timeout: float = 20.0) -> int:
        return int(self._file("pid", timeout))

    def exit_code(self, timeout: float = 20.0) -> int:
        return int(self._file("exit", timeout))

    def stty(self) -> str:
        with open(self.path("stty")) as fh:
            return fh.read()

    def display(self, fmt: str) -> str:
        return self.tm("display-message", "-p", "-t", self.name, fmt).strip()

    def _file(self, what: str, timeout: float) -> str:
        path, deadline = self.path(what), time.monotonic() + timeout
        while True:
            try:
                with open(path) as fh:
                    text = fh.read().strip()
                if text:
                    return text
            except FileNotFoundError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout}s waiting for {path}; the screen:\n"
                    + (self.screen() if self.started else "")
                )
            time.sleep(0.02)

    def close(self) -> None:
        if self.started:
            open(self.path("done"), "w").close()
            self.tm("kill-server", check=False)
            self.started = False


def qex_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "qex", *args]


def restored(stty: str) -> bool:
    """The terminal as a shell wants it: canonical input, echo (what curses turns off)."""
    words = stty.split()
    return "icanon" in words and "echo" in words and "-icanon" not in words and "-echo" not in words
