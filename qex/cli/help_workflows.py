"""The text of `qex help workflows` (its own module: helptext.py holds the short topics).
Each recipe is one that tests/e2e/test_snakemake.py or tests/e2e/test_make_xargs.py runs;
docs/integrations.md says more."""

WORKFLOWS = """\
qex under a workflow manager: each step a qex job, the manager's own exit
code kept, a Ctrl-C of the manager stops the jobs. (docs/integrations.md
says more; the profile ships in the repository: integrations/snakemake/qex.)

Snakemake 9 (pip install snakemake snakemake-executor-plugin-cluster-generic):
  cp -r integrations/snakemake/qex ~/.config/snakemake/    then: snakemake --profile qex
  The profile's config.yaml:
    executor: cluster-generic
    cluster-generic-submit-cmd: "qex submit --cpu {threads} --mem {resources.mem_mb}MB --name smk-{rule} --tag snakemake --"
    cluster-generic-status-cmd: "qex status --word"
    cluster-generic-cancel-cmd: qex-cancel
    jobs: 64
    default-resources:
      mem_mb: 1000
    seconds-between-status-checks: 5
  and beside it an executable qex-cancel:  #!/bin/sh  exec qex kill "$@"
    (Snakemake runs its cancel command without a shell, as one word.)
  qex submit prints the id alone; Snakemake appends the job script's path.
  qex status --word ID prints one word and exits 0: running (queued,
  starting, running), success (completed), failed (any other end). A failed
  rule's output: qex logs ID (Snakemake prints the id as external_jobid).

GNU make: every recipe line a job (make -j N and -k keep their meaning):
  SHELL := qex
  .SHELLFLAGS := run --quiet --cpu 1 --mem 1GB --tag make -- /bin/sh -c
  big.out: .SHELLFLAGS := run --quiet --cpu 4 --mem 8GB --tag make -- /bin/sh -c
    a failed job fails its target with the job's code (make: Error 3);
    Ctrl-C of make: each qex run kills its job (Error 125). $(shell ...)
    runs through SHELL too; .ONESHELL makes one job of a whole recipe.
  Or one line at a time, make's shell untouched:
    out.txt:
    <TAB>qex run --quiet --cpu 2 -- ./process in.txt > $@

xargs -P: every argument a job, qex's budget the real limit:
  xargs -P 4 -n1 qex run --quiet --cpu 1 -- ./process < inputs.txt
    xargs exits 123 if a job failed (qex run returns the job's code);
    Ctrl-C of xargs: each qex run kills its job.
"""
