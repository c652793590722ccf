"""Errors that reach the user, each with the exit code the contract gives.

Every error carries a sentence that names what was wrong and a remedy. One
top-level handler in ``qex.cli`` prints ``qex: <message>`` on stderr and exits
with ``exit_code``; nothing else in qex prints a traceback to a user.
"""


class QexError(Exception):
    """Base of every error a user can see. ``exit_code`` follows CONTRACT.md.

    ``kind``: a stable word for what went wrong (``qex schema error``: under ``--json``
    a failure is ``{"error", "code", "kind", "option", "value"}`` on stderr). ``option``
    and ``value``: the option at fault and the value given, where one is (else read
    from a sentence that begins ``--option: 'value' ...``, as most do)."""

    exit_code = 1
    kind = "error"

    def __init__(
        self, message: str, *, exit_code: int | None = None, option: str | None = None, value: str | None = None
    ):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
        self.option, self.value = option, value

    @property
    def message(self) -> str:
        return str(self)

    @property
    def code(self) -> int:
        """The exit code (``qex.api`` sets ``exit_code`` to the command line's: ``error_exit_code``)."""
        return self.exit_code


class UsageError(QexError):
    """A bad command line or a bad value in one: nothing was done."""

    kind = "usage"
    exit_code = 2


class RefusedError(QexError):
    """qex could not do what was asked and no job ran (121 for job commands)."""

    kind = "refused"
    exit_code = 121


class ConfigError(RefusedError):
    """The config file cannot be used: it names the file, the key, the remedy."""

    kind = "config"


class SpecError(RefusedError):
    """A submission (options, job file, pipeline) is invalid; no job was made."""

    kind = "spec"


class LockTimeout(RefusedError):
    """A lock (the state directory's) stayed held past --lock-timeout: nothing was done."""

    kind = "lock_timeout"


class NoSuchJob(QexError):
    """No job or group with that id: 127 and nothing else means 127."""

    kind = "no_such_job"
    exit_code = 127


class AmbiguousId(QexError):
    """A word that matches two things; the message lists them."""

    kind = "ambiguous"
    exit_code = 2


class StoreError(QexError):
    """The state directory cannot be used (permissions, full disk, damage)."""

    kind = "store"
    exit_code = 1


class PermissionRefused(QexError):
    """Another user's job: no kill, cancel, clean or reading of its secrets."""

    kind = "permission"
    exit_code = 1


class BrokenRecord(StoreError):
    """A status.json that cannot be read; names the file (and ``job_id``)."""

    kind = "broken_record"
    job_id: str | None = None


# Every ``kind`` above, for ``qex schema error`` (a test keeps it whole).
KINDS = (
    "error",
    "usage",
    "refused",
    "config",
    "spec",
    "lock_timeout",
    "no_such_job",
    "ambiguous",
    "store",
    "permission",
    "broken_record",
    "interrupted",
    "ended",
    "running",
    "not_paused",
    "not_cleaned",
)


# The commands of the exit-code table (CONTRACT.md "Exit codes"; qex help exit-codes): their
# code is the job's, so 0-96 and 2 among them are never qex's own.
JOB_COMMANDS = ("submit", "run", "pipeline", "rerun", "wait")
STATUS_REPORTS = ("--wait", "--follow", "--quiet")  # status with one of these is in the table too


def reports_a_job(argv: list[str]) -> bool:
    """Whether this command line is one of the exit-code table's: its code is a job's."""
    if not argv:
        return False
    if argv[0] in JOB_COMMANDS:
        return True
    # (argparse takes a unique abbreviation of an option: --qu is --quiet; -q, -f and -qf are short ones)
    return argv[0] == "status" and any(
        len(a) > 2
        and a.startswith("--")
        and any(o.startswith(a) for o in STATUS_REPORTS)
        or len(a) > 1
        and a[0] == "-"
        and a[1] != "-"
        and bool(set(a[1:]) & {"q", "f"})
        for a in argv[1:]
    )


def error_exit_code(argv: list[str], exc: QexError) -> int:
    """The one place that decides the exit code of an error that reached the command line.

    On the commands of the exit-code table, anything qex could not do -- a bad command
    line (2 elsewhere: an unknown option, a missing argument, an ambiguous id), a refusal,
    a damaged record, a full disk (1 elsewhere) -- is 121: 0-96 (2 among them) is the
    job's own code there. 127 (no such job) keeps its meaning everywhere. Other commands
    keep each error's own code (``qex.base.errors``), but a reading command that cannot
    use the config has failed (1), and a bad value given to one of their options (a
    ``SpecError``: ``list --last abc``, ``clean --older-than x``) is a bad command line (2).
    """
    code = exc.exit_code
    if code not in (1, 2, 121):
        return code
    if reports_a_job(argv):
        return 121
    if isinstance(exc, ConfigError):
        return 1
    if isinstance(exc, SpecError):
        return 2
    return code
    if reports_a_job(argv):
        return 121
    if isinstance(exc, ConfigError):
        return 1
    return code
