"""A job's states, and the sets every module decides by. The one home of these
sets: a module that needs "has it ended?" or "does it hold capacity?" imports
them from here, never spells them out again."""

QUEUED = "queued"
ACTIVE = ("queued", "starting", "running")  # in the queue's index
HOLDING = ("starting", "running")  # holds its claims (capacity, devices, locks)
FINAL_RAN = ("completed", "failed", "killed", "timeout", "oom")  # ended after it ran: it has an exit code or signal
FINAL_NOT_RAN = ("expired", "cancelled", "skipped")  # ended without running
FINAL = FINAL_RAN + FINAL_NOT_RAN
STATES = ACTIVE + FINAL
MISSING = "missing"  # a dependency that names no job: counts as ended (qex.admit)
DEPENDENCY_ENDED = frozenset(FINAL + (MISSING,))

# The one word a workflow manager asks for (Snakemake's cluster-generic status command):
# `qex status --word` prints it. Every state maps to one of the three.
WORKFLOW_WORDS = ("running", "success", "failed")


def workflow_word(states: list[str]) -> str:
    """``running`` while any job is queued, starting or running (a retry waits as
    queued), ``success`` when every one completed, else ``failed`` (any other end:
    failed, killed, timeout, oom, expired, cancelled, skipped)."""
    if any(s in ACTIVE for s in states):
        return "running"
    return "success" if all(s == "completed" for s in states) else "failed"
