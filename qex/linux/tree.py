"""A job's processes beyond its process group: everything the job started.

A job's supervisor is a child subreaper while its job runs
(``qex.linux.proc.child_subreaper``): a process the job orphans (a daemon's
double fork, ``(setsid cmd &)``) becomes the supervisor's child, not init's.
So the job's processes are its process group and every descendant of the
supervisor, wherever it went (its own group or session, ``setsid``). A
supervisor forks nothing while its job runs, and it never goes on to another
job while it still has a process of an earlier one (``qex.supervisor.run._finish``):
its descendants are its job's. ``stop`` signals them all; ``kill_all`` SIGKILLs
them until none is left (``qex kill``, ``--timeout``). A job that ended by
itself keeps what it left behind: nothing here is called then.

Imports nothing but builtin modules: the minimal watcher (``qex.supervisor.watch``) runs it.
"""

import posix as os

_ROUNDS = 20  # kill_all: scans at most (a process that forks as it dies is caught in the next)


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start time in clock ticks) of a process, or None if it is gone."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        raw = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        fields = raw[raw.rindex(b")") + 2 :].split()
        return fields[0].decode(), int(fields[1]), int(fields[19])
    except (ValueError, IndexError):
        return None


def start_of(pid: int) -> int:
    """The start time of ``pid`` (clock ticks since boot); 0 if it is gone."""
    st = _stat(pid)
    return st[2] if st is not None else 0


def descendants(root: int, since: int = 0) -> list[int]:
    """The live (not zombie) descendants of ``root`` that started at ``since`` or later
    (and whose ancestors below ``root`` did: a process that started before the job, the
    first child of a fork made at the end of the previous job, is not the job's, nor
    is what it forks)."""
    children: dict[int, list[int]] = {}
    info = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                info[int(name)] = st
                children.setdefault(st[1], []).append(int(name))
    found, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        state, _, start = info[pid]
        if start >= since:
            todo.extend(children.get(pid, ()))
            if state not in ("Z", "X"):
                found.append(pid)
    return found


def stop(leader: int, sig: int, since: int = 0) -> None:
    """Send ``sig`` to the job's process group and to every descendant of this
    process (its supervisor) started since the job's leader."""
    _signal_group(leader, sig)
    for pid in descendants(os.getpid(), since):
        _signal(pid, sig)


def kill_all(leader: int, since: int = 0) -> None:
    """SIGKILL the job's group and every descendant of this process, again until none
    is left (or ``_ROUNDS`` scans), then reap those this process adopted."""
    _signal_group(leader, 9)  # SIGKILL (the signal module builds enums: not in the watcher)
    for _ in range(_ROUNDS):
        left = descendants(os.getpid(), since)
        if not left:
            break
        for pid in left:
            _signal(pid, 9)
    reap_adopted(leader)


def reap_adopted(leader: int, forks: tuple[int, ...] = ()) -> int:
    """Reap this process's children that have ended, but the job's leader (its
    supervisor waits for it by pid: ``wait4``) and ``forks`` (the first children of
    its double forks, which ``qex.linux.proc.reap_later`` reaps). Returns how many
    others still live: what the job left behind."""
    alive = 0
    for pid in _children():
        if pid == leader or pid in forks:
            continue
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        except OSError:
            done = 0
        if not done:
            alive += 1
    return alive


def _children() -> list[int]:
    """This process's children: the kernel's list of each of its threads (Linux 3.5+,
    CONFIG_PROC_CHILDREN), else a scan of /proc."""
    me, out = os.getpid(), []
    try:
        for tid in os.listdir(f"/proc/{me}/task"):
            fd = os.open(f"/proc/{me}/task/{tid}/children", os.O_RDONLY | os.O_CLOEXEC)
            try:
                chunks = []
                while True:
                    chunk = os.read(fd, 4096)
                    if not chunk:
                        break
                    chunks.append(chunk)
            finally:
                os.close(fd)
            out.extend(int(w) for w in b"".join(chunks).split())
        return out
    except (OSError, ValueError):
        pass
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None and st[1] == me:
                out.append(int(name))
    return out


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass
