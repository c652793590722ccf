"""The version of qex, kept apart so that reading it imports nothing else."""

VERSION = "0.1.0"
