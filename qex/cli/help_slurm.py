"""The text of `qex help slurm` (its own module: helptext.py holds the short topics). The
table is docs/slurm.md's; each row has its test in tests/slurm/."""

SLURM = """\
qex on a Slurm cluster: the same commands, job files and pipelines; Slurm is the
scheduler, qex keeps the records. (docs/slurm.md says more; docs/assumptions.md
says what the cluster must give.)

  [backend]
  kind = "slurm"              # or QEX_BACKEND=slurm for one command (local: this machine)
  partition = "gpu"           # sbatch --partition (unset: the cluster's default)
  account = "lab"             # sbatch --account
  qos = "normal"              # sbatch --qos
  sbatch_args = ["--exclusive"]   # more sbatch options, as written
  shard_size = "10GB"         # what one GPU shard stands for: --vram claims shards

What each request becomes (anything else with no faithful translation is refused
at submission, 121, with a sentence that names the option):
  --cpu N           --cpus-per-task=ceil(N)
  --mem SIZE        --mem=SIZE in MB, rounded up (unset: the cluster's default)
  --gpu N           --gres=gpu:N
  --vram SIZE       --gres=shard:ceil(SIZE/shard_size) with [backend] shard_size
                    (the VRAM one shard stands for); else whole GPUs, with a warning
  --claim NAME=N    --licenses=NAME:N (a size on a pool: refused)
  --lock NAME       --licenses=NAME:1 (the cluster defines the license NAME)
  --timeout T       --time=ceil(T in minutes); qex's step stops it at T itself
  --max-queue-time  --deadline=submission+T+timeout (needs --timeout: refused without)
  --priority P      --nice=-P (a negative nice needs Slurm's operator rights)
  needs / --needs   --dependency=afterok:ID
  after / --after   --dependency=afterany:ID
  --each-line FILE  one job array (--array=0-N-1), not N sbatch calls
  --env, --env-capture  the job's environment as qex captured it (the step
                    gives it; sbatch --export=NONE); export: --export=ALL|names|NONE
  --cwd DIR         --chdir=DIR
  --name, --tag     --job-name, --comment="qex:ID tags:a,b"
  refused: --retries (and [defaults] retries), --oom-retries, --stdin -,
           --dedupe-window

The job runs on its node under a qex step (the same qex, on the shared file
system): it writes the logs, the usage and the final record into the job's
directory as a local supervisor does, so results never need sacct. `qex wait`
and `qex status` read the records and ask squeue (one call) only for what is
still pending: a job Slurm holds with DependencyNeverSatisfied is cancelled
there and recorded skipped. `qex kill` is scancel (a running job: its step is
signalled, recorded killed). `qex run` and `--follow` follow the log files.

Without qex on the cluster:
  qex export slurm pipeline.toml > submit.sh && bash submit.sh
    a bash script that submits the same work with sbatch --parsable and wires
    afterok/afterany; a job file with --each-line LINES exports as one array.
"""
