"""Helpers of the workflow-manager tests: `qex` as a command on the PATH, as make,
xargs and Snakemake call it, and processes started as a terminal would start them."""

import os
import signal
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROFILE = os.path.join(REPO, "integrations", "snakemake", "qex")


def qex_on_path(q, calls: str | None = None) -> dict:
    """The queue's environment with a `qex` command first on the PATH (this checkout's qex);
    ``calls``: a file that gets a line ``start ARGS`` as each call begins, ``end ARGS`` as it ends."""
    bin_dir = os.path.join(q.root, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    path = os.path.join(bin_dir, "qex")
    run = f'"{sys.executable}" -m qex "$@"'
    if calls:
        run = f'echo "start $*" >> "{calls}"\n{run}\nrc=$?\necho "end $*" >> "{calls}"\nexit $rc'
    with open(path, "w") as fh:
        fh.write(f"#!/bin/sh\n{run if calls else 'exec ' + run}\n")
    os.chmod(path, 0o755)
    pythonpath = os.pathsep.join(p for p in (REPO, q.env.get("PYTHONPATH")) if p)
    return {**q.env, "PATH": f"{bin_dir}{os.pathsep}{q.env.get('PATH', '')}", "PYTHONPATH": pythonpath}


def start(argv, env, cwd, **kw) -> subprocess.Popen:
    """Start ``argv`` in its own process group with SIGINT at its default, as a
    terminal's foreground job is (a shell's background job would ignore it)."""
    kw.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        **kw,
    )


def ctrl_c(proc: subprocess.Popen) -> None:
    """What Ctrl-C does: SIGINT to the whole foreground process group."""
    os.killpg(proc.pid, signal.SIGINT)
