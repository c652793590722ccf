"""qex export slurm FILE: a job file or a pipeline file (``--each-line LINES``: a fan-out of a
job file) as a bash script that submits the same work to Slurm with sbatch alone
(``qex.slurm.export``). Every job is checked as ``qex submit`` would check it on the Slurm
backend (``qex help slurm``: what is refused); nothing is queued, nothing is submitted."""

from __future__ import annotations

import os

from qex.cli.common import context, out

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from argparse import Namespace


def cmd_export(args: Namespace) -> int:
    from qex.base.errors import SpecError
    from qex.jobs import jobfile, pipeline
    from qex.jobs.submit import MINIMAL_ENV
    from qex.slurm import export, translate

    os.environ["QEX_BACKEND"] = "slurm"  # (this command's jobs are built as the Slurm backend builds them)
    ctx = context()
    doc = jobfile.read_document(args.file, "job or pipeline file")
    if "jobs" in doc:
        if args.each_line:
            raise SpecError("--each-line makes jobs of one job file; a pipeline file has its own stages: remove it")
        built = pipeline.build_all(ctx, pipeline.check(pipeline.load(args.file), args.file), args.file, "")
    else:
        built = _job_file(ctx, args)
    jobs = []
    for b in built:
        words = b.spec.request
        env = dict(words.get("job_env") or {})
        env.update(item.partition("=")[::2] for item in words.get("env") or ())
        jobs.append((b.record, env, translate.export_mode(words.get("env_capture", "all"), MINIMAL_ENV)))
    out(export.script(ctx.config, args.file, jobs, array=bool(args.each_line)).rstrip("\n"))
    return 0


def _job_file(ctx, args: Namespace) -> list:
    from argparse import Namespace as Args

    from qex.base.errors import SpecError
    from qex.jobs import fanout, jobfile
    from qex.jobs.request import Request
    from qex.jobs.submit import build

    job = jobfile.load(args.file)
    if job.needs or job.after:
        raise SpecError(
            f"{args.file}: needs/after name jobs of a qex queue, which an exported script does not "
            "have; export a pipeline file whose stages name each other"
        )
    req = Request(command=[])
    jobfile.apply_to(req, job, args.file)
    if not args.each_line:
        return [build(ctx, req)]
    _, _, _, built = fanout.prepare(
        ctx, Args(each_line=args.each_line, max_jobs=args.max_jobs), lambda _args, _ctx: req
    )
    return built
