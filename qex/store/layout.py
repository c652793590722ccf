"""The state directory's layout: the names in it, and what makes it shared.

This module names every file and folder of a state directory; every other
module takes the names from here (``tests/test_rules.py`` keeps a name's
literal out of them). Layout::

    <state>/lock                   the state lock (held by a pass for milliseconds)
    <state>/index.json             the active index: a compact entry per queued,
                                   starting or running job, so a pass reads one file
    <state>/journal.jsonl          the event journal = the pass's write-ahead log
    <state>/journal.1.jsonl        the journal before its last rotation
    <state>/history.jsonl          a line per finished job, for qex list (history.py)
    <state>/jobs/<id>/             status.json, spec.json (0600); from its start:
                                   stdout.log, stderr.log (and their .cut records),
                                   supervisor.log, alive.lock, pid; vram (a GPU job's
                                   VRAM peak so far); after a stop
                                   hook: hook.ran, hook.log; cgroup (an older qex's);
                                   stdin (the job's input, when it has one);
                                   stdout.pipe, stderr.pipe (while a qex run follows it);
                                   call.pickle, result.pickle (a call of qex.Executor)
                                   slurm.log (the Slurm backend: its batch script's output)
    <state>/jobs/.new-<id>/        a job directory being made (renamed into view)
    <state>/jobs/.clean-<id>/      a job directory being removed (qex clean)
    <state>/groups/<id>.json       the members of a group
    <state>/pause/                 pause files: queue.json, lock-<name>.json,
                                   .ended-<id>.json (a queue pause being ended)
    <state>/hooks-pending/<uid>.<id>  a stop hook to run
    <state>/hooks.log, waker.log   the stdout and stderr of a hook runner, of a waker
    <state>/waker-<uid>.lock       held by the one waker of a user
    <state>/learn.json, learn.lock the learner's store and its lock
                                   (learn.json.corrupt-<time>: a damaged one, moved aside)
    <state>/dedupe-recent.json     the dedupe keys of recently ended jobs
    <state>/pruned                 empty; its time says when old records were last pruned
    <state>/gpu-seen               the driver's last report of the VRAM each process
                                   holds (qex.base.gpu_use), read at most once per
                                   [gpu] observe_every; gpu-reading.json: its last
                                   report of the GPUs (qex info)

Named by their writers, beside the file they become (not here: a temporary
name follows from the final one): ``.<name>.<pid>.tmp`` while a file is written
atomically (``qex.store.fs.write_atomic``), ``.<log>.final`` while a cut log is
made final (``qex.supervisor.logs``).

A directory is *shared* (``qex init --shared``) when it is setgid, sticky and
group-writable: only its owner or root can make it so, so no member can
switch a directory between the two modes. It holds the shared lock and a
state directory per member (``member_dir``), each with the layout above,
written by that member alone and readable by the group (docs/multiuser.md).
"""

import os
import stat

# ---- the state directory itself ------------------------------------------------------------

LOCK = "lock"  # the state lock; its ``applied`` line (qex.store.lock, qex.store.replay)
INDEX = "index.json"  # the active index (qex.store.index; written by the commit, qex.store.commit)
JOURNAL = "journal.jsonl"  # the event journal (qex.store.journal; appended by every pass)
JOURNAL_ROTATED = "journal.1.jsonl"  # the journal before its rotation (qex.store.journal.rotate)
HISTORY = "history.jsonl"  # a line per finished job (qex.store.history)
JOBS = "jobs"  # a directory per job (qex.store.state)
GROUPS = "groups"  # a file per group (qex.jobs.groups)
PAUSE = "pause"  # the pause files (qex.queue.pause)
HOOKS_PENDING = "hooks-pending"  # markers of stop hooks to run (qex.hooks.markers)
HOOKS_LOG = "hooks.log"  # a hook runner's stdout and stderr (qex.hooks.pending)
WAKER_LOG = "waker.log"  # a waker's stdout and stderr (qex.queue.waker)
LEARN = "learn.json"  # the learner's store (qex.jobs.learn)
LEARN_LOCK = "learn.lock"  # held while the learner's store is rewritten (qex.jobs.learn)
DEDUPE_RECENT = "dedupe-recent.json"  # the dedupe keys of recently ended jobs (qex.jobs.dedupe)
PRUNED = "pruned"  # its time: when ended records were last pruned (qex.queue.prune)
GPU_SEEN = "gpu-seen"  # the VRAM each process holds, as the driver last said (qex.queue.gpuseen)
GPU_READING = "gpu-reading.json"  # the GPUs, as the driver last said (qex.queue.gpuseen, for qex info)


def waker_lock(uid: int) -> str:
    """Held by the one waker of user ``uid`` (qex.queue.waker)."""
    return f"waker-{uid}.lock"


def starter_lock(uid: int) -> str:
    """Held by a starter of user ``uid`` until its pass holds the state lock (qex.supervisor.starter)."""
    return f"starter-{uid}.lock"


def learn_aside(when: int) -> str:
    """Where a damaged learner's store is moved, at ``when`` (qex.jobs.learn)."""
    return f"{LEARN}.corrupt-{when}"


# ---- in a job's directory, jobs/<id>/ -------------------------------------------------------

STATUS = "status.json"  # the job's record (qex.store.commit)
SPEC = "spec.json"  # what to run, written once at submission (qex.store.state)
STDOUT = "stdout.log"  # the job's stdout (qex.supervisor.run, .logs)
STDERR = "stderr.log"  # the job's stderr (qex.supervisor.run, .logs)
SUPERVISOR_LOG = "supervisor.log"  # its supervisor's stdout and stderr (qex.queue.fork, qex.supervisor.run)
SLURM_LOG = "slurm.log"  # the Slurm backend: its batch script's stdout and stderr (qex.slurm.script)
ALIVE = "alive.lock"  # held by its supervisor while it lives (made by the pass: qex.queue.engine)
PID = "pid"  # the pid file (qex.linux.pidfile; written by qex.supervisor.spawn)
VRAM = "vram"  # a GPU job's VRAM peak so far, per device (qex.supervisor.vram)
CGROUP = "cgroup"  # names the job's cgroup: an older qex wrote it; read, removed (qex.linux.cgroup)
HOOK_RAN = "hook.ran"  # its stop hook was started; then its verdict (qex.hooks.runner)
HOOK_LOG = "hook.log"  # its stop hook's stdout and stderr (qex.hooks.runner)
STDIN = "stdin"  # its input: a copy (--stdin -), a link (--stdin FILE), a FIFO (qex run)
STDOUT_PIPE = "stdout.pipe"  # FIFOs its qex run / submit --follow reads the output from
STDERR_PIPE = "stderr.pipe"  # (qex.supervisor.pipes: made by the follower, written by the supervisor)
CALL = "call.pickle"  # a Python call: its function and arguments (qex.api.calls; read by qex.api.runner)
RESULT = "result.pickle"  # what the call returned or raised (written by qex.api.runner)
# What a job reads from its directory to run, beside its spec and stdin: a rerun's new job gets a copy
# (qex.control.rerun; stdin has its own rule there, by --stdin).
RUN_FILES = (CALL,)
CUT = ".cut"  # after a log's name: the log's cut record (qex.supervisor.logs)
_NEW_JOB = ".new-"  # before a job's id: its directory being made (qex.store.state)
_CLEANED = ".clean-"  # before a job's id: its directory being removed (qex.control.actions)


def new_job_dir(job_id: str) -> str:
    return _NEW_JOB + job_id


def cleaned_job_dir(job_id: str) -> str:
    return _CLEANED + job_id


def is_hidden_job_dir(name: str) -> bool:
    """A job directory being made or removed (a sweep removes those left behind)."""
    return name.startswith((_NEW_JOB, _CLEANED))


# ---- the other folders' files ---------------------------------------------------------------

PAUSE_QUEUE = "queue.json"  # in pause/: the queue is paused (qex.queue.pause)
_PAUSE_LOCK = "lock-"  # in pause/: lock-<name>.json, a person holds that lock (qex.queue.pause)
_PAUSE_ENDED = ".ended-"  # in pause/: .ended-<id>.json, a queue pause being ended (qex.queue.pause)


def pause_lock(name: str) -> str:
    return f"{_PAUSE_LOCK}{name}.json"


def paused_lock_of(filename: str) -> str | None:
    """The name in a lock's pause file name (unchecked), or None if it is none."""
    if filename.startswith(_PAUSE_LOCK) and filename.endswith(".json"):
        return filename[len(_PAUSE_LOCK) : -5]
    return None


def pause_ended(pause_id: str) -> str:
    return f"{_PAUSE_ENDED}{pause_id}.json"


def is_pause_ended(filename: str) -> bool:
    return filename.startswith(_PAUSE_ENDED) and filename.endswith(".json")


def group_file(group_id: str) -> str:
    """In groups/: a group's members (qex.jobs.groups)."""
    return f"{group_id}.json"


def group_of(filename: str) -> str | None:
    """The group a file in groups/ is of, or None if it is no group's."""
    return filename[:-5] if filename.endswith(".json") else None


def hook_marker(uid: int, job_id: str) -> str:
    """In hooks-pending/: the stop hook of job ``job_id`` of user ``uid`` is to run (qex.hooks.markers)."""
    return f"{uid}.{job_id}"


def hook_marker_job(filename: str, uid: int) -> str | None:
    """The job of a marker of user ``uid``, or None if it is another user's."""
    prefix = f"{uid}."
    return filename[len(prefix) :] if filename.startswith(prefix) else None


# ---- is it shared --------------------------------------------------------------------------

# A shared state directory (qex init --shared; docs/multiuser.md) holds one
# state directory per member, ``member-<uid>`` (``member-<uid>-<hex>`` when a
# squatter took the plain name), each written by that member alone; the shared
# lock every member's pass takes; and nothing else any member writes.
SHARED_MODE = 0o3770  # the shared directory: setgid, sticky, the group may add entries
MEMBER_MODE = 0o2750  # a member's folders: the group reads, only the member writes
MEMBER_FILE_MODE = 0o640  # a member's files that the group reads (records, index, journal)
_MEMBER = "member-"


def member_dir(uid: int, suffix: str = "") -> str:
    """In a shared directory: the state directory of member ``uid``."""
    return f"{_MEMBER}{uid}{'-' + suffix if suffix else ''}"


def member_of(name: str) -> int | None:
    """The uid a shared directory's entry names as its member, or None if it names none."""
    if not name.startswith(_MEMBER):
        return None
    word = name[len(_MEMBER) :].split("-", 1)[0]
    return int(word) if word.isdigit() and len(word) <= 10 else None


def is_shared(st: os.stat_result) -> bool:
    """Made shared by its owner: setgid and group-writable (format 1 or 2)."""
    return bool(st.st_mode & stat.S_ISGID) and bool(st.st_mode & stat.S_IWGRP)


def is_old_shared(st: os.stat_result) -> bool:
    """A shared directory of format 1 (before member directories): not sticky."""
    return is_shared(st) and not st.st_mode & stat.S_ISVTX


def ensure_file(path: str, mode: int) -> None:
    """The file exists; if this user made it, it has ``mode`` whatever the umask."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError:
        return  # the pass that needs it says what is wrong
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) != mode:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)
