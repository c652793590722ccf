"""The Slurm backend's side of qex that needs no job's code: its clients (sbatch, squeue,
scancel, scontrol), the translation of a job's claims into sbatch options, and the batch
scripts (qex's own, and `qex export slurm`'s). See docs/slurm.md."""
