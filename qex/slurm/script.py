"""The batch script qex gives sbatch: it runs the job under qex's step on the node
(``python -m qex.supervisor.slurmstep ID``: the same interpreter and qex as the submitting
command, on the shared file system), which writes the logs, the usage and the final
record into the job's directory as a local supervisor does."""

from __future__ import annotations

import os
import shlex
import sys

# What the step needs of the submitting command's environment: where the state and the
# config are (the same paths on every node: a shared file system), and Python's own.
PASSED = ("QEX_CONFIG", "QEX_PEER_DIR", "QEX_KILL_GRACE", "PYTHONPATH", "XDG_CACHE_HOME", "HOME", "USER", "LOGNAME")
STEP = "qex.supervisor.slurmstep"


def batch_script(state_root: str, config_path: str, job_ids: list[str], log_of: str) -> str:
    """The script of one job, or of an array whose task N runs ``job_ids[N]``.
    ``log_of``: the path of a job's script log with ``{}`` for its id."""
    env = {k: os.environ[k] for k in PASSED if os.environ.get(k)}
    env["QEX_STATE_DIR"] = state_root
    env["QEX_CONFIG"] = config_path
    env.pop("QEX_BACKEND", None)
    env["QEX_SLURM_STEP"] = "1"  # (qex.queue.engine.ON_NODE: its passes start no local job on the node)
    log = shlex.quote(log_of).replace("{}", "'\"$id\"'")
    lines = [
        "#!/bin/bash",
        "# Written by qex: runs its job under qex's step, which records the job's result.",
        *(f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())),
        "ids=(" + " ".join(job_ids) + ")",
        "id=${ids[${SLURM_ARRAY_TASK_ID:-0}]}",
        f"exec >>{log} 2>&1",
        f'exec {shlex.quote(sys.executable)} -m {STEP} "$id"',
    ]
    return "\n".join(lines) + "\n"
