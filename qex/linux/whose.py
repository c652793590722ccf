"""Whose is a process: the qex job it belongs to, if any (``whose``).

Asked of the processes a GPU driver reports (the VRAM they hold): a job's
supervisor asks it to find its job's processes (``qex.supervisor.vram``), and a
pass asks it to tell a job's use from VRAM used outside qex
(``qex.queue.gpuseen``). It is the one place that decides, in this order:

1. **The environment**: every process of a job inherits ``QEX_JOB_ID`` (its
   spawn sets it, ``qex.supervisor.spawn.job_env``). It survives what the other
   marks do not: a process that starts its own session (``torchrun`` starts its
   workers with ``start_new_session``; a daemon), a double fork, a parent that
   died (the process is reparented), and the end of its supervisor, so it also
   names a process an ended job left behind. The kernel lets only the
   process's own user (and root) read it.
2. **The job's memory cgroup** (``qex-<job id>-<attempt>``, where qex makes one:
   ``qex.linux.cgroup``): exact, and readable for any user's process.
3. **Its ancestry**: a chain of parents that reaches a qex supervisor (its
   name is ``qex.linux.title.SUPERVISOR``, or its argv carries ``WATCHER_TAG``
   or ``FINISHER_TAG`` where the title could not be set: both readable for any
   user's process). It says "a job of that
   user's qex", not which job (a supervisor that goes on to its next job keeps
   the argv of the first). A supervisor is a child subreaper while its job runs
   (``qex.linux.tree``): what the job orphans is reparented to it.

Not the session nor the process group: a job's processes share the session
of its supervisor, whose leader (the first child of a double fork,
``qex.queue.fork``) has exited, and torchrun's workers and daemons leave
both. A process none of the three marks is nobody's job: its VRAM is used
outside qex, whoever owns it. (A job's process that clears its environment,
runs in no per-job cgroup and whose parents have died is missed too: its use
counts as outside qex, which makes qex careful, never careless.)

Builtin modules only (``posix``): the minimal watcher imports this module.
"""

import posix

from qex.linux.title import SUPERVISOR

JOB_ENV = "QEX_JOB_ID"  # the variable every job's process inherits (qex.supervisor.spawn)
CGROUP_PREFIX = "qex-"  # a job's memory cgroup: qex-<job id>-<attempt> (qex.linux.cgroup)
WATCHER_TAG = "qex-watch"  # the argv word of a supervisor's minimal watcher (qex.supervisor.watch)
FINISHER_TAG = "qex-finish"  # ... and of the supervisor after it (qex.supervisor.handoff)
SUPERVISOR_TAGS = (WATCHER_TAG, FINISHER_TAG)
MAX_DEPTH = 64  # parents looked at, at most
_READ = 1 << 16  # the most read of a /proc file (an environment can be larger: see _env_job)


def cgroup_name(job_id: str, attempt: int) -> str:
    """The name of a job's memory cgroup."""
    return f"{CGROUP_PREFIX}{job_id}-{attempt}"


def cgroup_job(name: str) -> str | None:
    """The job id in a cgroup name ``qex-<id>-<attempt>`` (or a systemd scope's,
    ``qex-<id>-<attempt>.scope``: qex.linux.scope), or None for another name."""
    if not name.startswith(CGROUP_PREFIX):
        return None
    if name.endswith(".scope"):
        name = name[: -len(".scope")]
    job_id, sep, attempt = name[len(CGROUP_PREFIX) :].rpartition("-")
    return job_id if sep and job_id and attempt.isdigit() else None


class Whose:
    """What a process is: its user (``uid``), its name (``comm``), and its job:
    ``job`` the job id (from its environment or its cgroup), ``via`` how it was
    known ("env", "cgroup", "supervisor": a job of some qex of that user, whose
    id is not known; "" for no job), ``supervisor`` the pid of the supervisor its
    ancestry reached (0 when it was not asked)."""

    __slots__ = ("pid", "uid", "comm", "job", "via", "supervisor")

    def __init__(self, pid: int, uid: int, comm: str, job: str | None = None, via: str = "", supervisor: int = 0):
        self.pid, self.uid, self.comm, self.job, self.via, self.supervisor = pid, uid, comm, job, via, supervisor

    def __repr__(self) -> str:
        return f"Whose(pid={self.pid}, uid={self.uid}, comm={self.comm!r}, job={self.job!r}, via={self.via!r})"


def whose(pid: int, proc: str = "/proc") -> Whose | None:
    """Whose is process ``pid`` (see the module's doc); None when it is gone or
    not in this machine's view (another pid namespace)."""
    try:
        uid = posix.stat(f"{proc}/{pid}").st_uid
    except OSError:
        return None
    comm = _text(_read(f"{proc}/{pid}/comm")).strip()
    job = _env_job(proc, pid)
    if job:
        return Whose(pid, uid, comm, job, "env")
    job = _cgroup_job(proc, pid)
    if job:
        return Whose(pid, uid, comm, job, "cgroup")
    supervisor = _supervisor_above(proc, pid)
    if supervisor:
        return Whose(pid, uid, comm, None, "supervisor", supervisor)
    return Whose(pid, uid, comm)


def _read(path: str, limit: int = _READ) -> bytes:
    try:
        fd = posix.open(path, posix.O_RDONLY | posix.O_CLOEXEC)
    except OSError:
        return b""
    try:
        chunks, size = [], 0
        while size < limit:
            chunk = posix.read(fd, min(65536, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError:
        return b""
    finally:
        posix.close(fd)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _env_job(proc: str, pid: int) -> str | None:
    """``QEX_JOB_ID`` of the process's environment (as it was at its exec), if this user may read it."""
    data = _read(f"{proc}/{pid}/environ", 1 << 22)  # (ARG_MAX-sized at most; only GPU processes are asked)
    key = JOB_ENV.encode() + b"="
    for item in data.split(b"\0"):
        if item.startswith(key):
            value = _text(item[len(key) :])
            return value if _job_id(value) else None
    return None


def _cgroup_job(proc: str, pid: int) -> str | None:
    """The job whose memory cgroup holds the process (any segment of a line of /proc/PID/cgroup)."""
    for line in _text(_read(f"{proc}/{pid}/cgroup")).splitlines():
        for segment in line.rpartition(":")[2].split("/"):
            job = cgroup_job(segment)
            if job and _job_id(job):
                return job
    return None


def _job_id(text: str) -> bool:
    """A word that can be a job id (it names a directory of the state directory)."""
    return 0 < len(text) <= 255 and "/" not in text and not text.startswith(".") and "\0" not in text


def parent_of(proc: str, pid: int) -> int:
    """The parent of ``pid`` from /proc/PID/stat (0 when it cannot be read)."""
    stat = _read(f"{proc}/{pid}/stat", 4096)
    end = stat.rfind(b")")  # the name in parentheses may hold anything, a ")" too
    fields = stat[end + 2 :].split() if end >= 0 else []
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return 0


def is_supervisor(argv: list[bytes]) -> bool:
    """Whether an argv is a qex supervisor's (``python [-I -S] -c CODE TAG JOB FD``,
    ``qex.supervisor.watch.entry_argv``)."""
    if len(argv) < 5 or argv[-5] != b"-c" or b"qex.supervisor" not in argv[-4]:
        return False
    return argv[-3].decode("ascii", "replace") in SUPERVISOR_TAGS


def _supervisor_above(proc: str, pid: int) -> int:
    """The first qex supervisor among the parents of ``pid`` (0: none)."""
    seen = 0
    current = parent_of(proc, pid)
    while current > 1 and seen < MAX_DEPTH:
        if _text(_read(f"{proc}/{current}/comm")).strip() == SUPERVISOR:
            return current
        argv = _read(f"{proc}/{current}/cmdline", 8192).split(b"\0")
        if argv and argv[-1] == b"":
            argv.pop()
        if is_supervisor(argv):
            return current
        current = parent_of(proc, current)
        seen += 1
    return 0
