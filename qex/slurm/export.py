"""``qex export slurm FILE``: a self-contained bash script that submits the same work with
``sbatch --parsable`` and wires the dependencies, needing nothing of qex on the cluster.

Each job is one ``sbatch`` whose script (a here-document) sets the job's own ``--env``
and job-file ``env`` and execs its command in its directory; a pipeline's ``needs`` and
``after`` become ``--dependency=afterok:``/``afterany:`` on the ids the earlier calls
printed; a fan-out (``--each-line``) is one job array whose task N runs line N's command.
The script prints each Slurm job id on its own line, in submission order.
"""

from __future__ import annotations

import shlex

from qex.slurm import translate

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.model import Config
    from qex.store.records import Status

END = "SBATCH_SCRIPT_END"


def script(config: Config, source: str, jobs: list[tuple[Status, dict, str]], array: bool = False) -> str:
    """The script for ``jobs``: (record, the job's own env, its sbatch --export) in submission
    order (records as qex.jobs.submit.build makes them; needs/after name earlier ones).
    ``array``: the jobs are one fan-out, submitted as one array."""
    lines = [
        "#!/bin/bash",
        f"# Exported by qex from {_comment(source)}: submits {len(jobs)} job(s) with sbatch.",
        "# Needs only bash and Slurm's sbatch; prints each Slurm job id on a line.",
        "set -euo pipefail",
    ]
    if array:
        rec, env, exported = jobs[0]
        argv = translate.sbatch_args(config, rec, [], None, array=len(jobs), exported=exported)
        body = ["case ${SLURM_ARRAY_TASK_ID} in"]
        body += [f"  {i}) exec {shlex.join(r.command)} ;;" for i, (r, _, _) in enumerate(jobs)]
        body += ["esac", "exit 2"]
        lines += _sbatch("j0", argv, env, rec.cwd, body)
        return "\n".join(lines) + "\n"
    var = {}
    for i, (rec, env, exported) in enumerate(jobs):
        deps = [f"afterok:${var[d]}" for d in rec.needs]
        deps += [f"afterany:${var[d]}" for d in rec.after]
        argv = translate.sbatch_args(config, rec, deps, None, exported=exported)
        var[rec.id] = f"j{i}"
        lines += _sbatch(f"j{i}", argv, env, rec.cwd, [f"exec {shlex.join(rec.command)}"])
    return "\n".join(lines) + "\n"


def _sbatch(name: str, argv: list[str], env: dict, cwd: str, body: list[str]) -> list[str]:
    quoted = " ".join(f'"{a}"' if a.startswith("--dependency=") else shlex.quote(a) for a in argv)  # ($jN)
    return [
        f"{name}=$(sbatch --parsable {quoted} <<'{END}'",
        "#!/bin/bash",
        *(f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())),
        f"cd {shlex.quote(cwd)}",
        *body,
        END,
        ")",
        f"{name}=${{{name}%%;*}}",
        f'echo "${name}"',
    ]


def _comment(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)
