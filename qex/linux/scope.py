"""A job's memory cgroup on a systemd machine with cgroup v2: a transient scope per attempt.

Where the cgroup qex runs in cannot have children with the memory controller (a login
session's ``session-N.scope``, a system service: v2 forbids controllers below a cgroup
that holds processes), qex asks systemd for a cgroup instead: each attempt runs in a
transient scope of its own, ``qex-<id>-<attempt>.scope``, with ``MemoryAccounting=yes``
and ``OOMPolicy=continue`` (the default, ``stop``, would stop the scope at the first OOM
kill, and its cgroup with the counters would go before qex reads them).

- a user: the user manager (``user@UID.service``), over its private socket
  ``$XDG_RUNTIME_DIR/systemd/private`` (or the session bus): the scope lands in its
  ``app.slice``. The runtime directory is ``/run/user/UID`` where the environment names
  none (cron, with lingering on). The job (and its supervisor, which moves
  into the scope for good) stays inside the limits of the user's slice; only the session
  scope they would have shared changes;
- root, outside the root cgroup: the system manager, ``/run/systemd/private`` (or the
  system bus), under ``qex.slice``.

How a job gets in with nothing of it outside, and why the scope outlives it. As the
supervisor prepares the attempt (an early supervisor: while its submission still
commits), it asks for the scope with its own pid (``make``): systemd moves the
supervisor in. The scope is ``Delegate=yes``, so the supervisor may then split it into
two leaves: ``supervisor`` (itself) and ``qex-<id>-<attempt>`` (the job's), with the
memory controller on for them. From there it is the same as a cgroup of qex's own
(``qex.linux.cgroup``): the supervisor moves itself into the job's leaf for the spawn
(the job is born there) and back; the job's peak and OOM count are its leaf's, without
the supervisor's pages. The supervisor staying in the scope keeps it, and so the
counters, after the job's last process has gone (systemd stops a scope, and removes its
cgroup, once it is empty) until the job's record is written; it leaves when it exits or
moves into its next job's scope, and systemd then collects the scope
(``CollectMode=inactive-or-failed``).

D-Bus is spoken by ``qex.linux.dbus`` (no library: see there). One connection per
supervisor process, opened when its first job is prepared.
"""

from __future__ import annotations

import errno
import os
import time

from qex.linux import dbus

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.linux.cgroup import JobCgroup

SUPERVISOR_LEAF = "supervisor"  # the scope's leaf the supervisor stays in (the job's: qex-<id>-<attempt>)
SLICE = "qex.slice"  # the system manager's jobs go under it (a user's: the user manager's app.slice)
INSIDE_WAIT = 5.0  # seconds the supervisor waits for systemd to move it into the scope
_PATH, _IFACE, _DEST = "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager", "org.freedesktop.systemd1"
_CONN: list = []  # (pid, Connection): this process's


def manager(environ: dict = os.environ) -> tuple[str, str, bool] | tuple[None, str, bool]:
    """(which, socket path, through a bus daemon) of the systemd manager to ask, or
    (None, why not, False). ``which``: "user" or "system"."""
    if os.geteuid() == 0:
        for path, bus in (("/run/systemd/private", False), ("/run/dbus/system_bus_socket", True)):
            if os.path.exists(path):
                return "system", path, bus
        return None, "no systemd system manager answers here (no /run/systemd/private)", False
    runtime = environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    candidates = [(os.path.join(runtime, "systemd", "private"), False)]
    address = environ.get("DBUS_SESSION_BUS_ADDRESS", "")
    if address.startswith("unix:path="):
        candidates.append((address[len("unix:path=") :].split(",")[0], True))
    candidates.append((os.path.join(runtime, "bus"), True))
    for path, bus in candidates:
        if os.path.exists(path):
            return "user", path, bus
    return None, f"no systemd user manager for uid {os.getuid()} ({runtime}/systemd/private is not there)", False


def remedy(is_root: bool) -> str:
    """The one-line way to per-job accounting where no manager answers."""
    if is_root:
        return "run qex under systemd, or give it a cgroup that delegates memory to its children"
    return (
        f"loginctl enable-linger {_user()} (a user manager that outlives logins), "
        "or ask root for a cgroup that delegates memory (Delegate=yes)"
    )


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return str(os.getuid())


def describe(found: dict) -> dict:
    """``qex info``: ``found`` (``cgroup.describe``: no cgroup of qex's own here) as a
    systemd scope per job would make it, where a manager answers; else with the remedy."""
    which, path, _ = manager()
    if which is None:
        return {**found, "why_not": f"{found.get('why_not')}; {path}", "remedy": remedy(os.geteuid() == 0)}
    parent = SLICE if which == "system" else f"user@{os.getuid()}.service/app.slice"
    return {
        "per_job_cgroup": True,
        "kind": "systemd-scope",
        "manager": which,
        "parent": parent,
        "socket": path,
        "oom_evidence": "cgroup",
    }


def connect() -> dbus.Connection:
    """This process's connection to its manager (made once; a forked child makes its own)."""
    pid = os.getpid()
    if _CONN and _CONN[0][0] == pid:
        return _CONN[0][1]
    which, path, bus = manager()
    if which is None:
        raise dbus.DBusError("org.freedesktop.DBus.Error.ServiceUnknown", path)
    conn = dbus.Connection(path, bus)
    _CONN[:] = [(pid, conn)]
    return conn


def forget_connection() -> None:
    if _CONN:
        if _CONN[0][0] == os.getpid():
            _CONN[0][1].close()
        del _CONN[:]


def unit_name(job_id: str, attempt: int) -> str:
    from qex.linux.whose import cgroup_name

    return cgroup_name(job_id, attempt) + ".scope"


def start(unit: str, pids: list[int], description: str) -> None:
    """Ask for the transient scope ``unit`` holding ``pids``. Raises DBusError (or OSError)."""
    props = [
        ("PIDs", ("au", pids)),
        ("MemoryAccounting", ("b", True)),
        ("OOMPolicy", ("s", "continue")),
        ("CollectMode", ("s", "inactive-or-failed")),
        ("Delegate", ("b", True)),
        ("Description", ("s", description)),
    ]
    if os.geteuid() == 0:
        props.append(("Slice", ("s", SLICE)))
    conn = connect()
    try:
        conn.call(_PATH, _IFACE, "StartTransientUnit", _DEST, "ssa(sv)a(sa(sv))", (unit, "fail", props, []))
    except (OSError, dbus.DBusError):
        forget_connection()  # (a broken connection: the next job makes a new one)
        raise


def make(unit: str, description: str) -> JobCgroup:
    """The job's leaf in a new scope ``unit`` that this supervisor is in (see the module
    doc). Raises OSError or DBusError; once systemd has moved this process, it stays in
    the scope (it cannot go back to its session's) even if the rest fails."""
    from qex.linux.cgroup import JobCgroup, _move_here

    start(unit, [os.getpid()], description)
    path = wait_inside(os.getpid(), unit)
    if path is None:
        raise OSError(errno.ETIMEDOUT, f"systemd did not move the supervisor into {unit} within {INSIDE_WAIT:g}s")
    home, leaf = os.path.join(path, SUPERVISOR_LEAF), os.path.join(path, unit[: -len(".scope")])
    for folder in (home, leaf):
        os.mkdir(folder)
    _move_here("v2", home)
    with open(os.path.join(path, "cgroup.subtree_control"), "w") as fh:
        fh.write("+memory")
    cg = JobCgroup("v2", leaf, scoped=True, home=home)
    if cg.peak() is None and cg.oom_kills() is None:
        raise OSError(errno.ENOENT, f"{leaf} has no memory accounting files")
    return cg


def wait_inside(pid: int, unit: str, timeout: float = INSIDE_WAIT) -> str | None:
    """The cgroup directory of ``unit`` once ``pid`` is in it (systemd moves it after the
    call returns), or None if it is not by ``timeout`` seconds."""
    deadline, delay = time.monotonic() + timeout, 0.0005
    suffix = "/" + unit
    while True:
        try:
            with open(f"/proc/{pid}/cgroup") as fh:
                for line in fh:
                    if line.startswith("0::"):
                        path = line[3:].strip()
                        if path.endswith(suffix):
                            return _mounted(path)
        except OSError:
            return None
        if time.monotonic() >= deadline:
            return None
        time.sleep(delay)
        delay = min(delay * 2, 0.005)


def _mounted(path: str) -> str | None:
    from qex.linux import cgroup_where

    for point in cgroup_where.mount_points():
        candidate = os.path.normpath(point + path)
        if os.path.isdir(candidate):
            return candidate
    return None
