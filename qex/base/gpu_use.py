"""The VRAM each process holds on each GPU, as the driver reports it: a machine
fact, read where a GPU claim is to be admitted (``qex.queue.gpuseen``) and by a
GPU job's supervisor, which samples its job's use (``qex.supervisor.vram``).

A reading (``Seen``) is a list of (pid, GPU UUID, bytes), and, when asked for,
the driver's index of each UUID (a config names a device by its index or its
UUID). The readers, as ``qex.base.gpus`` chooses them (``QEX_GPU_READER``):

- NVML, NVIDIA's binding (``qex.base.gpus_nvml.apps``): each GPU's, and each
  MIG instance's, running compute processes, no process started;
- ``nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid
  --format=csv,noheader,nounits`` (and ``--query-gpu=index,uuid`` for the
  indices), started together, read without blocking (``Reader``) and never
  waited for past a deadline: nvidia-smi without persistence mode takes ~1.5 s
  a call, and a driver that hangs would hang it. Through nvidia-smi a process
  on a MIG instance is reported on its GPU (the query names no instance).

AMD's tools report no per-process VRAM in a form qex reads: there nothing is
measured (the config schedules as before).

The last reading of a state directory is kept in a small text file
(``qex.base.gpu_files``; ``qex.store.layout.GPU_SEEN``), so that every command,
and every job's sampler, reads the driver at most once per
``[gpu] observe_every``.

Builtin modules only (``posix``, ``select``, ``time``): the minimal watcher
imports this module.
"""

import posix
import select
import time

from qex.base import numbers

MiB = 1 << 20
WAIT = 2.0  # seconds a reading may take at most (a pass, a sample)
APPS = ("--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv,noheader,nounits")
INDICES = ("--query-gpu=index,uuid", "--format=csv,noheader,nounits")
NVML, SMI = "nvml", "nvidia-smi"


class Seen:
    """One reading: when (``at``), through what (``source``), the processes
    (``apps``: ((pid, uuid, bytes), ...)), the driver's index of each GPU UUID
    (``indices``, {} when not read), or why there is none (``error``)."""

    __slots__ = ("at", "source", "apps", "indices", "error")

    def __init__(self, at: float, source: str, apps: tuple = (), indices: dict | None = None, error: str = ""):
        self.at, self.source, self.apps, self.indices, self.error = at, source, apps, indices or {}, error

    def __repr__(self) -> str:
        return f"Seen(at={self.at}, source={self.source!r}, apps={self.apps!r}, error={self.error!r})"


# ---- which reader ------------------------------------------------------------------


def which(program: str, path: str) -> str | None:
    for folder in path.split(":"):
        candidate = f"{folder or '.'}/{program}"
        try:
            if posix.access(candidate, posix.X_OK) and not _is_dir(candidate):
                return candidate
        except OSError:
            continue
    return None


def _is_dir(path: str) -> bool:
    return (posix.stat(path).st_mode & 0o170000) == 0o040000


def _get(env: dict, key: str) -> str:
    """``env[key]`` whether its keys are str or bytes (``posix.environ``)."""
    value = env.get(key)
    if value is None:
        try:
            value = env.get(key.encode(), "")
        except TypeError:  # (os.environ takes str keys only)
            value = ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def reader_for(env: dict, nvml: bool) -> str:
    """The reader to use: NVML where ``nvml`` (its binding can be imported here)
    and ``QEX_GPU_READER`` allows it, else nvidia-smi on PATH; "" for none."""
    only = _get(env, "QEX_GPU_READER")
    if only in ("none", "amd-smi", "rocm-smi"):
        return ""
    if nvml and only in ("", NVML):
        return NVML
    if only in ("", SMI) and which("nvidia-smi", _get(env, "PATH")):
        return SMI
    return ""


# ---- nvidia-smi, without blocking ------------------------------------------------------

_ABANDONED: list = []  # readers killed past their deadline, not reaped yet


def _reap_abandoned() -> None:
    for pid in list(_ABANDONED):
        try:
            done = posix.waitpid(pid, posix.WNOHANG)[0]
        except ChildProcessError:
            done = pid
        if done:
            _ABANDONED.remove(pid)


class Run:
    """A program whose stdout is read without blocking; stdin and stderr from and
    to /dev/null. ``fd`` is -1 once all of its output is in."""

    __slots__ = ("pid", "fd", "chunks", "status")

    def __init__(self, argv: list, env: dict):
        _reap_abandoned()
        r, w = posix.pipe()  # (both close-on-exec)
        posix.set_blocking(r, False)
        # posix_spawn closes nothing: a supervisor's inheritable fds (its job's liveness
        # and peer locks, after the watcher's exec) must not live on in a hung reader
        closes = [(posix.POSIX_SPAWN_CLOSE, fd) for fd in inheritable() if fd > 2]
        try:
            self.pid = posix.posix_spawn(
                argv[0],
                argv,
                env,
                file_actions=[
                    *closes,
                    (posix.POSIX_SPAWN_OPEN, 0, "/dev/null", posix.O_RDONLY, 0),
                    (posix.POSIX_SPAWN_DUP2, w, 1),
                    (posix.POSIX_SPAWN_OPEN, 2, "/dev/null", posix.O_WRONLY, 0),
                ],
                setsid=True,
            )
        except BaseException:
            posix.close(r)
            raise
        finally:
            posix.close(w)
        self.fd, self.chunks, self.status = r, [], None

    def feed(self) -> None:
        """Read what is there; at its end, close and reap (never blocks)."""
        while self.fd >= 0:
            try:
                chunk = posix.read(self.fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if chunk:
                self.chunks.append(chunk)
                continue
            posix.close(self.fd)
            self.fd = -1
        self.reap()

    def reap(self) -> None:
        if self.status is None:
            try:
                pid, status = posix.waitpid(self.pid, posix.WNOHANG)
            except ChildProcessError:
                pid, status = self.pid, 0
            if pid:
                self.status = posix.waitstatus_to_exitcode(status)

    def abandon(self) -> None:
        """Past its deadline: killed, and left (a driver call stuck in the kernel cannot be
        waited for); reaped by a later reading (``_reap_abandoned``)."""
        try:
            posix.kill(self.pid, 9)
        except OSError:
            pass
        if self.fd >= 0:
            posix.close(self.fd)
            self.fd = -1
        self.reap()
        if self.status is None:
            _ABANDONED.append(self.pid)

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", "replace")


def inheritable() -> list[int]:
    """This process's inheritable fds (what posix_spawn would pass on)."""
    out = []
    try:
        names = posix.listdir("/proc/self/fd")
    except OSError:
        return out
    for name in names:
        try:
            fd = int(name)
            if posix.get_inheritable(fd):
                out.append(fd)
        except (ValueError, OSError):
            continue  # (the listing's own fd, closed by now)
    return out


class Reader:
    """One reading through nvidia-smi: the apps query, and the indices query when
    asked, started together; poll ``fds()``, ``feed(fd)`` what is readable, and take
    ``result()`` once ``done()`` (or at the deadline: it says so)."""

    __slots__ = ("runs", "deadline", "started", "program")

    def __init__(self, program: str, env: dict, indices: bool, wait: float = WAIT):
        self.program, self.started = program, time.time()
        self.deadline = time.monotonic() + wait
        self.runs = [Run([program, *APPS], env)]
        if indices:
            try:
                self.runs.append(Run([program, *INDICES], env))
            except OSError:
                pass  # (the apps say what is wrong)

    def fds(self) -> list[int]:
        return [r.fd for r in self.runs if r.fd >= 0]

    def feed(self, fd: int) -> None:
        for r in self.runs:
            if r.fd == fd:
                r.feed()

    def done(self) -> bool:
        for r in self.runs:
            if r.fd < 0:
                r.reap()
        return all(r.fd < 0 and r.status is not None for r in self.runs)

    def late(self) -> bool:
        return time.monotonic() >= self.deadline

    def result(self) -> Seen:
        """The reading (abandoning what has not answered by now)."""
        late = [r for r in self.runs if r.fd >= 0 or r.status is None]
        for r in late:
            r.abandon()
        apps_run = self.runs[0]
        if apps_run in late:
            return Seen(self.started, SMI, error=f"nvidia-smi did not answer within {WAIT:g} s")
        if apps_run.status != 0:
            return Seen(
                self.started, SMI, error=f"nvidia-smi failed (exit {apps_run.status}): {_first_line(apps_run.text())}"
            )
        apps = parse_apps(apps_run.text())
        if apps is None:
            return Seen(
                self.started, SMI, error=f"nvidia-smi answered what qex cannot read: {_first_line(apps_run.text())}"
            )
        indices = {}
        if len(self.runs) > 1 and self.runs[1] not in late and self.runs[1].status == 0:
            indices = parse_indices(self.runs[1].text()) or {}
        return Seen(self.started, SMI, tuple(apps), indices)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = "".join(c if c.isprintable() else "?" for c in line.strip())
        if line:
            return line[:200]
    return "no output"


def uuid_ok(text: str) -> bool:
    """A GPU's or a MIG instance's UUID as the driver writes it (GPU-..., MIG-...)."""
    return 4 < len(text) <= 128 and text[:4] in ("GPU-", "MIG-") and all(c.isalnum() or c in "-/" for c in text)


def parse_apps(text: str) -> list | None:
    """The (pid, uuid, bytes) of ``--query-compute-apps=pid,used_memory,gpu_uuid
    --format=csv,noheader,nounits``; a process whose memory the driver does not
    give ("[N/A]", "[Insufficient Permissions]") is left out. None: not that format."""
    out = []
    for line in text.splitlines():
        if not line.strip() or line.strip() == "No running processes found":
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 3:
            return None
        pid, used, uuid = fields
        if used.startswith("["):
            continue
        try:
            pid_n, mib = int(pid), int(used)
        except ValueError:
            return None
        if not (numbers.ok(pid_n, numbers.PID, 1) and numbers.ok(mib * MiB, numbers.BYTES) and uuid_ok(uuid)):
            return None
        out.append((pid_n, uuid, mib * MiB))
    return out


def parse_indices(text: str) -> dict | None:
    """{uuid: index} of ``--query-gpu=index,uuid --format=csv,noheader,nounits``."""
    out = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 2 or not fields[0].isdigit() or not uuid_ok(fields[1]):
            return None
        out[fields[1]] = int(fields[0])
    return out


def read_now(env: dict, indices: bool, nvml: bool = True, wait: float = WAIT) -> Seen | None:
    """A reading now, waiting for it at most ``wait`` seconds (None: no reader here)."""
    reader = reader_for(env, nvml and _nvml_importable())
    if reader == NVML:
        got = nvml(indices)
        if got is not None:
            return got
        reader = SMI if which("nvidia-smi", _get(env, "PATH")) and _get(env, "QEX_GPU_READER") != NVML else ""
    if reader != SMI:
        return None
    try:
        r = Reader(which("nvidia-smi", _get(env, "PATH")), env, indices, wait)
    except OSError as exc:
        return Seen(time.time(), SMI, error=f"nvidia-smi could not start: {exc.strerror}")
    poll = select.poll()
    for fd in r.fds():
        poll.register(fd, select.POLLIN)
    while not r.done() and not r.late():
        if not r.fds():  # all output in: the programs end a moment later
            time.sleep(0.001)
            continue
        left = max(0.0, r.deadline - time.monotonic())
        for fd, _mask in poll.poll(max(1, int(left * 1000))):
            r.feed(fd)
            if fd not in r.fds():
                poll.unregister(fd)
    return r.result()


def nvml(indices: bool = True) -> Seen | None:
    """A reading through NVML (``qex.base.gpus_nvml.apps``); None where it does not load."""
    from qex.base import gpus_nvml

    at = time.time()
    got = gpus_nvml.apps()
    if got is None:
        return None
    apps, where, error = got
    if error:
        return Seen(at, NVML, error=error)
    return Seen(
        at,
        NVML,
        tuple(
            a for a in apps if uuid_ok(a[1]) and numbers.ok(a[0], numbers.PID, 1) and numbers.ok(a[2], numbers.BYTES)
        ),
        where if indices else {},
    )


def _nvml_importable() -> bool:
    import sys

    if "pynvml" in sys.modules:
        return True
    try:
        from importlib.util import find_spec

        return find_spec("pynvml") is not None
    except (ImportError, ValueError):
        return False
