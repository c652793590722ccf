"""Spawning a job: its environment, its executable on its PATH, ``posix_spawn``
into its process group (and memory cgroup), and its pid file around the spawn
(``qex.linux.pidfile``). The supervisor (``qex.supervisor.run``) calls ``spawn``.
"""

from __future__ import annotations

import _signal as signal  # the C module: signal.py builds enums, ~2 ms of a starting supervisor
import os
import stat

from qex.base.errors import StoreError
from qex.linux import cgroup, manners, pidfile
from qex.linux.proc import signal_group
from qex.queue.context import Launch
from qex.store import fs, layout
from qex.supervisor.memory import Meter

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.config.model import Config
    from qex.store.records import Spec, Status

_CRASH = "QEX_CRASH_AT" in os.environ  # crash points for tests (qex.base.faults); off in normal use
if _CRASH:
    from qex.base import faults


# The job's copy of its lock in the peer directory (``qex.users.peer_dir.hold_job_lock``): the
# same open file, so the flock stays held while any process of the job keeps it open, whatever
# happens to the supervisor (docs/multiuser.md, "Liveness"). High, away from the fds a script
# numbers itself (3-9) or a shell moves its own to (10 and up); below the fd limit.
LOCK_FD = 1023


def job_lock_fd() -> int:
    """The fd the job gets its peer lock at: ``LOCK_FD``, or the highest one the fd limit
    (``RLIMIT_NOFILE``, which the job inherits) allows; -1 if that leaves none above 2."""
    try:
        limit = os.sysconf("SC_OPEN_MAX")
    except (OSError, ValueError):
        limit = LOCK_FD + 1
    if limit <= 0:  # (no limit)
        return LOCK_FD
    fd = min(LOCK_FD, limit - 1)
    return fd if fd > 2 else -1


THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "RAYON_NUM_THREADS",
    "GOMAXPROCS",
    "JULIA_NUM_THREADS",
)


def job_env(spec: Spec, rec: Status, config: Config) -> dict:
    env = dict(spec.env)
    pools = {p.name: p for p in config.pools}
    assigned = {a.pool: a.devices for a in rec.assigned}
    for p in pools.values():  # its devices, or no device (the fence): PoolDef.job_env
        env.update(p.job_env(assigned.get(p.name)))
    for a in rec.assigned:
        pool = pools.get(a.pool)
        devices = ",".join(str(d) for d in a.devices)
        if a.pool == "gpu":
            env["QEX_GPU_DEVICES"] = devices
            size = a.size or (min(pool.devices[d] for d in a.devices) if pool and a.devices else 0)
            env["QEX_GPU_VRAM"] = str(size)
    for name, claim in rec.claims.pools.items():
        pool = pools.get(name)
        if pool is not None and pool.count is not None:
            env[f"QEX_CLAIM_{_env_name(name)}"] = str(claim.count)
    if spec.hints:
        cores = max(1, int(rec.claims.cpu))  # a whole number: make -j"$QEX_CPU" (0.5 -> 1, 2.7 -> 2)
        env.setdefault("QEX_CPU", str(cores))
        env.setdefault("QEX_MEM", str(rec.claims.mem))
        for var in THREAD_VARS:
            env.setdefault(var, str(cores))
    env["QEX_JOB_ID"] = rec.id
    env["QEX_ATTEMPT"] = str(rec.attempt)
    return env


def _env_name(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).upper()


def spawn(ctx: Context, launch: Launch, spec: Spec, rec: Status, meter: Meter) -> tuple[Child | None, str | None]:
    """Spawn a 'starting' job in its process group (and memory cgroup) and write its pid
    file. Returns (process, None), or (None, why it could not start, in words).

    ``os.posix_spawn`` (glibc: clone with CLONE_VM|CLONE_VFORK, no copy of this
    process's page tables, no Python code in the child). What a preexec_fn did in
    the child the supervisor does around the spawn: it resolves the command with
    the job's PATH and enters the job's cwd, moves itself into the job's memory
    cgroup (the job is born there), and writes the pid file twice: an intent line
    before the spawn (a supervisor that dies from there on leaves a job that may
    have run: the next pass stops what is in its cgroup and records it lost, never
    starts it again), the job's pid and start time right after.
    """
    store = ctx.store
    pid_path = store.path(launch.job_id, layout.PID)
    mode = 0o640 if store.shared else 0o600
    if not meter.job_dir:  # (an early supervisor made it before the commit's byte: prepare_early)
        meter.prepare(store.job_dir(launch.job_id), launch.job_id, rec.attempt)
    env = job_env(spec, rec, ctx.config)
    home = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the job directory (supervise)
    intent = False
    try:
        try:
            os.chdir(spec.cwd)
            path = executable(spec.command[0], env)
            fs.settle()  # the commit that started it is durable before it can run (fs.defer_syncs)
            intent_line = f"{os.getpid()} {own_start()}"
            try:
                pidfile.write(pid_path, "-", intent_line, mode, cgroup.note(meter.cg))
            except OSError as exc:
                raise OSError(f"cannot write its pid file {pid_path}: {exc.strerror or exc}") from None
            intent = True
            if _CRASH:
                faults.hit("supervisor.before_spawn")
            born = (
                meter,
                (pid_path, "-", intent_line, mode),
                (path, env, launch.peer_fd, store.path(launch.job_id, layout.STDIN), spec.command),
            )
            proc = manners.spawn_with(lambda: _born(*born), *manners_of(spec, ctx.config))
        finally:
            _go_home(home)
    except (OSError, ValueError, StoreError) as exc:  # ValueError: what posix_spawn refuses to pass (a NUL,
        if intent:  # an env name with =); StoreError: a failed fsync
            fs.unlink_quietly(pid_path)  # it never ran: a pass may start it again
        return None, _not_started(spec, exc)
    if _CRASH:
        faults.hit("supervisor.after_spawn")
    proc.pid_line = (pid_path, mode, cgroup.note(meter.cg))
    if meter.cg is None:  # without its cgroup, the pid line is all a later pass could stop it by
        try:
            write_pid_line(proc)
        except OSError as exc:  # no evidence a later pass could stop it by: it must not run
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
            return None, f"cannot write its pid file {pid_path}: {exc.strerror or exc}"
    fs.free_deferred()  # (the files its pass replaced: the job runs meanwhile)
    return proc, None


def _born(meter: Meter, intent: tuple, child: tuple) -> Child:
    """In the thread of the job's manners (``qex.linux.manners.spawn_with``; a v1 cgroup
    moves a thread): into its cgroup, the spawn, back. ``intent``: the pid file's intent
    line, written again without the cgroup if this supervisor cannot join it; ``child``:
    ``_child``'s arguments (the peer lock's fd: the job gets a copy, ``Child.spawn``)."""
    noted = meter.cg
    meter.enter()
    if noted is not None and meter.cg is None:  # it could not join: the job is born outside it
        pidfile.write(*intent)
    try:
        return _child(*child)
    finally:
        meter.leave()


def _child(path: str, env: dict, lock: int, input_path: str, argv: tuple) -> Child:
    """The job, with its peer lock ``lock`` and its stdin from ``input_path``
    (``qex.supervisor.pipes.open_input``; an OSError that says which if it cannot be
    opened), by ``posix_spawn``."""
    from qex.supervisor import pipes

    try:
        stdin = pipes.open_input(input_path)
    except OSError as exc:
        raise OSError(f"cannot open its input {pipes.input_words(input_path)}: {exc.strerror or exc}") from None
    try:
        return Child.spawn(path, argv, env, lock, stdin)
    finally:
        if stdin is not None:
            os.close(stdin)  # (the job's now)


def manners_of(spec: Spec, config: Config) -> tuple[int, str | None, int]:
    """The niceness, I/O class and oom_score_adj the job runs with: its spec's (the
    submission resolved them), else the config's (a spec an older qex wrote)."""
    io_class = getattr(spec, "io_class", None) or config.io_class
    oom = getattr(spec, "oom_score_adj", None)
    return (
        config.nice if spec.nice is None else spec.nice,
        None if io_class == "none" else io_class,
        config.oom_score_adj if oom is None else oom,
    )


def _not_started(spec, exc: BaseException) -> str:
    return f"cannot start {spec.command[0]!r}: {getattr(exc, 'strerror', None) or exc}"


def pid_line_now(proc: Child) -> None:
    """The job is recorded running (or watched by another program from now on): its
    pid line is written first. A failure is said in supervisor.log; the job, in its
    cgroup, goes on (the intent line still names that cgroup)."""
    try:
        write_pid_line(proc)
    except OSError as exc:
        print(
            f"qex: cannot write the job's pid line ({exc.strerror or exc}); a pass that finds this "
            "supervisor lost stops the job through its cgroup",
            flush=True,
        )


def write_pid_line(proc: Child) -> None:
    """The job's ``<pid> <start time> [cgroup]`` over the intent line, once (``spawn``).

    A job born in its cgroup, which the intent line names, gets it only when it is
    recorded running (``starting.record_running``, before the watcher's exec): until then a
    pass that finds its supervisor lost stops what is in the cgroup, which is all
    of the job. A drain's job that ends within ``RUNNING_AFTER`` never needs it:
    reading the start time of a process that has just been spawned (and the write)
    was ~0.35 ms of each spawn here."""
    line, proc.pid_line = proc.pid_line, None
    if line is not None:
        from qex.base.machine import process_start_time

        path, mode, note = line
        pidfile.write(path, proc.pid, process_start_time(proc.pid), mode, note)


class Child:
    """The spawned job, as ``_watch``, ``_start`` and the hand-over use it (what they
    used of a ``subprocess.Popen``): ``pid``, the read ends ``stdout``/``stderr``
    (``fileno``, ``close``), ``wait()``, ``returncode``."""

    __slots__ = ("pid", "stdout", "stderr", "returncode", "pid_line")

    def __init__(self, pid: int, stdout, stderr):
        self.pid, self.stdout, self.stderr, self.returncode = pid, stdout, stderr, None
        self.pid_line = None  # (path, mode, cgroup note) of the pid line still to write (write_pid_line)

    @classmethod
    def spawn(
        cls, path: str, argv: list[str] | tuple[str, ...], env: dict, lock: int = -1, stdin: int | None = None
    ) -> "Child":
        """stdin from ``stdin`` (None: /dev/null), stdout and stderr to pipes, its own process
        group, SIGPIPE and SIGXFSZ back to their defaults (as subprocess's restore_signals;
        every other disposition as the supervisor has it), an empty signal mask. Every
        fd of this process is close-on-exec (``no_inherited_fds``): the job gets 0-2,
        and ``lock`` (its peer lock), if any, at ``job_lock_fd()``."""
        out_r, out_w = os.pipe()
        try:
            err_r, err_w = os.pipe()
        except OSError:
            os.close(out_r)
            os.close(out_w)
            raise
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0) if stdin is None else (os.POSIX_SPAWN_DUP2, stdin, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
        ]
        at = job_lock_fd() if lock >= 0 else -1
        if at >= 0 and lock != at:
            actions.append((os.POSIX_SPAWN_DUP2, lock, at))  # (last: over whatever the child had there)
        try:
            if at >= 0 and lock == at:
                os.set_inheritable(lock, True)  # already there: only its close-on-exec goes, for the spawn
            pid = os.posix_spawn(
                path,
                list(argv),
                env,
                file_actions=actions,
                setpgroup=0,
                setsigmask=(),
                setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
            )
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            if at >= 0 and lock == at:
                os.set_inheritable(lock, False)
            os.close(out_w)
            os.close(err_w)
        return cls(pid, open(out_r, "rb", buffering=0), open(err_r, "rb", buffering=0))

    def wait(self) -> int:
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            return self.returncode
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def executable(name: str, env: dict) -> str:
    """``command[0]`` as subprocess finds it: a name with a ``/`` as it is, else the first
    candidate on the job's PATH that is an executable file. Raises OSError as the exec
    would: Permission denied if only a non-executable candidate exists, else No such
    file or directory."""
    if os.sep in name:
        return name
    denied = None
    for folder in os.get_exec_path(env):
        path = os.path.join(folder, name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and os.access(path, os.X_OK):
            return path
        denied = denied or path
    import errno

    if denied is not None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), denied)
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)


_OWN_START: list = []  # (pid, start time) of this supervisor, for the intent line


def own_start() -> str:
    pid = os.getpid()
    if not _OWN_START or _OWN_START[0][0] != pid:
        from qex.base.machine import process_start_time

        _OWN_START[:] = [(pid, process_start_time(pid))]
    start = _OWN_START[0][1]
    return "" if start is None else str(start)


def _go_home(fd: int) -> None:
    """Back into the job directory after the spawn (the supervisor's cwd, see supervise)."""
    try:
        os.fchdir(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def no_inherited_fds() -> None:
    """Once per supervisor: every fd above 2 close-on-exec. What Python opens is already;
    this is for what the process that ran ``qex submit`` was given (a script's fd 3..N),
    which posix_spawn (it closes nothing) would otherwise pass on to every job."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return
    for name in names:
        fd = int(name)
        if fd > 2:
            try:
                if os.get_inheritable(fd):
                    os.set_inheritable(fd, False)
            except OSError:
                pass  # the fd of the listing itself, closed by now
