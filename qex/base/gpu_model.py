"""What a GPU driver reports, as qex holds it (``qex.base.gpus`` reads it),
and how a reader program is run: never waited for past a time limit."""

from __future__ import annotations

import os

from qex.base.plain import Plain

MiB = 1024 * 1024
GiB = 1024 * MiB


class Mig(Plain, frozen=True):
    """A MIG instance: its UUID (MIG-...), its profile (``3g.40gb``), its memory in
    bytes; ``exact`` is False when the size is the profile's name's (nvidia-smi)."""

    uuid: str
    profile: str
    memory: int
    exact: bool = True


class Gpu(Plain, frozen=True):
    """One GPU as the driver numbers it (nvidia-smi's index), its UUID, model,
    memory in bytes; ``mig_on`` with its MIG instances in ``mig``."""

    index: int
    uuid: str
    name: str
    memory: int
    mig_on: bool = False
    mig: tuple = ()


class Reading(Plain, frozen=True):
    """What one reader said: ``vendor`` ("nvidia", "amd"), ``source`` (the
    reader), the driver's version, the GPUs; ``error`` when the reader is there
    but did not answer (a driver not loaded, a time limit)."""

    vendor: str
    source: str
    driver: str = ""
    gpus: tuple = ()
    error: str = ""

    def summary(self) -> str:
        """``2 GPUs (0: NVIDIA A100-SXM4-80GB, 1: NVIDIA A100-SXM4-80GB)``."""
        listed = ", ".join(f"{g.index}: {g.name}" for g in self.gpus)
        return f"{len(self.gpus)} GPU{'s' if len(self.gpus) != 1 else ''} ({listed})"


# ---- running a reader --------------------------------------------------------------


class Failed(Plain, frozen=True):
    why: str


def which(program: str, env: dict) -> str | None:
    for directory in env.get("PATH", "").split(os.pathsep):
        path = os.path.join(directory or ".", program)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def run(argv: list[str], timeout: float, env: dict) -> str | Failed:
    """The output of ``argv``, or why there is none. Never waits past ``timeout``:
    a reader that does not answer by then is killed and left (a driver call
    stuck in the kernel cannot be waited for)."""
    import subprocess

    name = os.path.basename(argv[0])
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except OSError as e:
        return Failed(f"{name} could not start: {e.strerror}")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return Failed(f"{name} did not answer within {timeout:g} s")
    text = out.decode("utf-8", "replace")
    if proc.returncode != 0:
        return Failed(
            f"{name} failed (exit {proc.returncode}): {first_line(text + chr(10) + err.decode('utf-8', 'replace'))}"
        )
    return text


def first_line(text: str) -> str:
    from qex.base.text import plain

    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "no output")
    return plain(line, 200)
