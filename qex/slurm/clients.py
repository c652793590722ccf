"""Slurm's command-line clients, each called once per qex command (never once per job).

Slurm is reached only through its clients (``sbatch``, ``squeue``, ``scancel``,
``scontrol``), as a user's shell reaches it: ``SLURM_CONF`` and the rest of the
environment are Slurm's to read. Accounting (``sacct``) is never asked: many clusters
run without ``slurmdbd``, and a job's result is its record (docs/slurm.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess

from qex.base import units
from qex.base.errors import QexError, SpecError

TIMEOUT = 60.0  # a controller that does not answer within this is said to be down
ACTIVE_STATES = (
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "SUSPENDED",
    "REQUEUED",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "STOPPED",
    "PREEMPTED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESV_DEL_HOLD",
)
NEVER = "DependencyNeverSatisfied"  # squeue's reason for a job whose dependency can never be met


class SlurmError(QexError):
    """A Slurm client failed or is missing (exit 1; at submission, 121)."""

    exit_code = 1


def run(argv: list[str], what: str, input: str | None = None) -> str:
    """Run one client; its stdout, or SlurmError with its own words."""
    program = shutil.which(argv[0])
    if program is None:
        raise SlurmError(
            f'{argv[0]} is not on PATH: the Slurm backend ([backend] kind = "slurm" or '
            f"QEX_BACKEND=slurm) needs Slurm's clients; install them, or use QEX_BACKEND=local"
        )
    try:
        proc = subprocess.run(
            [program, *argv[1:]],
            input=input,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]} did not answer within {TIMEOUT:g} s ({what}): is slurmctld up?") from None
    if proc.returncode != 0:
        said = units.safe_text(" ".join(proc.stderr.split()))[:400] or f"exit {proc.returncode}"
        raise SlurmError(f"{argv[0]} failed ({what}): {said}")
    return proc.stdout


def submit(argv: list[str], script: str) -> str:
    """``sbatch --parsable ARGS`` with ``script`` on its stdin; the Slurm job id. A refusal
    of the options (an unknown partition, a request no node has) is the submission's (121)."""
    try:
        out = run(["sbatch", "--parsable", *argv], "submitting a job", input=script)
    except SlurmError as exc:
        raise SpecError(f"Slurm refused the job: {exc}") from None
    job_id = out.strip().split(";")[0]
    if not job_id.isdigit():
        raise SlurmError(f"sbatch answered {units.safe_text(out.strip())!r}, which is not a job id")
    return job_id


def queue_states(job_ids: list[str]) -> dict[str, tuple[str, str, str]]:
    """What Slurm says of the jobs it still knows, in one ``squeue`` call: their id
    (an array task as ``123_4``) -> (state, reason, node list). A job not in the answer
    has ended (or Slurm forgot it: ``MinJobAge``)."""
    if not job_ids:
        return {}
    bases = sorted({j.split("_")[0] for j in job_ids})
    out = run(
        ["squeue", "-h", "-a", "-r", "--states=all", "-j", ",".join(bases), "-o", "%i|%T|%r|%N"],
        "asking for the state of jobs",
    )
    found = {}
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4:
            found[parts[0]] = (parts[1], parts[2], parts[3])
    return found


def cancel(job_ids: list[str], signal: str | None = None, batch: bool = False) -> None:
    """``scancel`` the jobs (one call); with ``signal``, send it instead (``batch``: to the
    batch step's first process only, the qex step, which stops the job as ``qex kill`` does)."""
    if not job_ids:
        return
    argv = ["scancel"] + (["--signal", signal] if signal else []) + (["--batch"] if batch else [])
    try:
        run([*argv, *job_ids], "cancelling jobs")
    except SlurmError:
        if signal is None:
            raise
        run(["scancel", *job_ids], "cancelling jobs")  # (the step was not there yet to take the signal)


def ping() -> str:
    """The controller's answer to ``scontrol ping``, in its words ("Slurmctld(primary) at vm is UP")."""
    try:
        return " ".join(run(["scontrol", "ping"], "reaching the controller").split())
    except SlurmError as exc:
        return str(exc)


def environment_of_step() -> dict[str, str]:
    """What Slurm gives a job on its node that the job's own environment must keep
    (its ids, its devices): merged into the environment qex captured at submission."""
    keep = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "HIP_VISIBLE_DEVICES")
    return {k: v for k, v in os.environ.items() if k.startswith("SLURM") or k in keep}
