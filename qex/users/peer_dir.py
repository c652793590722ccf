"""The peer directory (``QEX_PEER_DIR``, ``[peers] dir``, default
``/tmp/qex-peers``): where it is, the names of this queue's files in it,
opening it and its entries safely, and the liveness lock of each running job.

**The peer directory is hostile ground** (``/tmp`` is world-writable). It is
made with the sticky bit (mode 1777). Everything is opened relative to the
directory's descriptor with ``O_NOFOLLOW | O_NONBLOCK``: a symlink is never
followed, a FIFO never blocks. An entry that is not a regular file, or has
more than one link, is not read (``open_entry`` says why, as a
``BadRecord``).

**Liveness is a held lock, never a pid.** When a pass starts a job it creates
a fresh lock file ``<key>.<job>.<random>.lock`` in the peer directory with
``O_EXCL`` and takes an exclusive ``flock`` on it at once (a racer that got
there first makes us try another name: ``hold_job_lock``); the job's
supervisor inherits that descriptor and holds it for its whole life, and the
job gets a copy of it (``qex.supervisor.spawn.LOCK_FD``: the same open file, so
the lock stays held while any process of the job lives, whatever happened to
the supervisor); a supervisor that goes on to the next job of its user hands
that job its lock (``engine.apply_plan``). A record names each job's lock
file, not the job. A reader counts a job only while its lock file is a
regular file owned by the record's owner and cannot be locked
(``LOCK_SH|LOCK_NB`` fails: ``lock_held``): when every process of that queue
and of its jobs is gone, nothing holds the locks and the record stops
counting by itself. At a job's recorded end its supervisor removes the file,
held or not (docs/multiuser.md, "Liveness").
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat

from qex.users.peer_record import BadRecord

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context

_OPEN_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
ADMIT_LOCK = ".admit.lock"  # the admission turn's lock file (qex.users.peer_admission)


# ---- names ---------------------------------------------------------------------


def directory(ctx: Context) -> str:
    """Where the peer directory is (``qex.config.keys.peer_dir``)."""
    from qex.config.keys import peer_dir

    return peer_dir(ctx.config)


def key(ctx: Context) -> str:
    """The name of this queue's record (without .json): its user and state directory."""
    return key_for(ctx.uid, ctx.store.root)


_KEYS: dict = {}


def key_for(uid: int, root: str) -> str:
    """``u<uid>-<FNV-1a 64 of the real path, hex>``: stable across versions and
    cheap (hashlib would cost every command milliseconds of start-up). Worked out
    once per process (a supervisor's every pass names its record)."""
    known = _KEYS.get((uid, root))
    if known is not None:
        return known
    h = 0xCBF29CE484222325
    for byte in os.path.realpath(root).encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    _KEYS[(uid, root)] = name = f"u{uid}-{h:016x}"
    return name


# ---- the directory ---------------------------------------------------------------


def _describe_mode(st) -> str:
    return f"mode {stat.S_IMODE(st.st_mode):04o}"


def open_dir(path: str, create: bool) -> tuple[int | None, str | None, str | None]:
    """Open the peer directory safely: (fd, problem, note). fd is None when it
    is missing (and not created) or unusable (then ``problem`` says why)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return None, None, None
        made = _make_dir(path)
        if made is not None:
            return None, made, None
        st = os.lstat(path)
    except OSError as exc:
        return None, f"the peer directory {path} cannot be read ({exc.strerror})", None
    if stat.S_ISLNK(st.st_mode):
        return (
            None,
            (
                f"the peer directory {path} is a symbolic link, which qex does not follow; "
                "remove it or set [peers] dir to a real directory"
            ),
            None,
        )
    if not stat.S_ISDIR(st.st_mode):
        return None, f"the peer directory {path} is not a directory; remove it or set [peers] dir", None
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022 and not mode & stat.S_ISVTX:
        return (
            None,
            (
                f"the peer directory {path} is writable by other users without the sticky bit "
                f"({_describe_mode(st)}): anyone could replace the records in it; "
                f"chmod 1777 {path} (as its owner) or set [peers] dir"
            ),
            None,
        )
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        return None, f"the peer directory {path} cannot be opened ({exc.strerror})", None
    again = os.fstat(fd)
    if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        return None, f"the peer directory {path} changed while it was opened; try again", None
    note = None
    if st.st_uid not in (0, os.getuid()):
        note = (
            f"the peer directory {path} belongs to {owner_name(st.st_uid)}, who can remove other users' "
            f"records; an administrator can make it as root: install -d -m 1777 {path}"
        )
    return fd, None, note


def _make_dir(path: str) -> str | None:
    parent = os.path.dirname(path.rstrip("/")) or "/"
    try:
        os.makedirs(parent, 0o755, exist_ok=True)
        os.mkdir(path, 0o700)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchmod(fd, 0o1777)  # like /tmp: everyone may add a record, nobody may touch another's
        finally:
            os.close(fd)
    except FileExistsError:
        return None  # made by someone else meanwhile: checked by the caller
    except OSError as exc:
        return (
            f"cannot create the peer directory {path} ({exc.strerror}); set [peers] dir to a directory you can create"
        )
    return None


def owner_name(uid: int) -> str:
    """The name of user ``uid``, for the sentences that name a file's owner."""
    from qex.base.paths import user_name

    return user_name(uid)


# ---- its entries ---------------------------------------------------------------


def list_names(fd: int) -> list[str]:
    """The names in the directory ``fd``; none when it cannot be listed."""
    try:
        return os.listdir(fd)
    except OSError:
        return []


def open_entry(dir_fd: int, name: str) -> tuple[int, os.stat_result]:
    """Open one entry for reading: (fd, stat), or BadRecord with the reason."""
    try:
        fd = os.open(name, _OPEN_READ, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BadRecord("a symbolic link: not followed") from None
        if exc.errno == errno.ENOENT:
            raise BadRecord("removed while it was read") from None
        raise BadRecord(f"cannot be opened ({exc.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode) else "special"
        raise BadRecord(f"not a regular file ({kind})")
    if st.st_nlink != 1:
        os.close(fd)
        raise BadRecord(f"has {st.st_nlink} hard links: a planted link is not read")
    return fd, st


def read_fd(fd: int, limit: int) -> bytes:
    """Up to ``limit`` + 1 bytes of ``fd``: a caller that gets more than ``limit``
    knows the file is too large. Stops early where a read would block."""
    chunks, total = [], 0
    while total <= limit:
        try:
            chunk = os.read(fd, min(1 << 16, limit + 1 - total))
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def unlink_quietly(dir_fd: int, name: str) -> None:
    """Remove ``name`` from the directory ``dir_fd``, if it can be."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


# ---- the liveness lock of one job ----------------------------------------------


def lock_held(dir_fd: int, name: str | None, uid: int) -> bool:
    """True while the job's supervisor or a process of the job holds its lock file
    (owned by the record's owner), and the file is still there by that name."""
    if not name:
        return False
    try:
        fd, st = open_entry(dir_fd, name)
    except BadRecord:
        return False
    try:
        if st.st_uid != uid:
            return False  # a lock planted by someone else proves nothing
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
        return False
    finally:
        os.close(fd)  # releases the shared lock we may have taken


def hold_job_lock(ctx: Context, job_id: str) -> tuple[int, str | None]:
    """Create and lock this job's liveness file in the peer directory.

    Returns (fd, name); the caller's supervisor keeps fd for the job's life, and
    the job gets a copy (``qex.supervisor.spawn.spawn``).
    (-1, None) when the peer directory cannot be used (``qex info`` says why).
    """
    fd_dir, _problem, _ = open_dir(directory(ctx), create=True)
    if fd_dir is None:
        return -1, None
    try:
        for _ in range(8):
            name = f"{key(ctx)}.{job_id[:8]}.{os.urandom(6).hex()}.lock"
            try:
                fd = os.open(
                    name,
                    os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                    0o644,
                    dir_fd=fd_dir,
                )
            except FileExistsError:
                continue
            except OSError:
                return -1, None
            try:
                os.fchmod(fd, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd, name
            except OSError:
                os.close(fd)  # someone opened and locked it between our create and lock: another name
                unlink_quietly(fd_dir, name)
        return -1, None
    finally:
        os.close(fd_dir)


def release_job_lock(ctx: Context, fd: int, name: str | None) -> None:
    """The job has ended and its record says so: remove its lock file, then let go.
    The file goes even if a process the job left behind still holds the lock: its
    queue counts it no more, and a reader opens the lock by its name."""
    if name:
        try:
            dfd = os.open(directory(ctx), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            dfd = None
        if dfd is not None:
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if st.st_uid == os.getuid() and (fd < 0 or (st.st_dev, st.st_ino) == _ident(fd)):
                    unlink_quietly(dfd, name)
            except OSError:
                pass
            finally:
                os.close(dfd)
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass


def _ident(fd: int):
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


# ---- for the waker ------------------------------------------------------------------


def dir_version(ctx: Context, since: tuple | None = None) -> tuple[tuple[int, int], tuple[str, ...] | None] | None:
    """Changes whenever another queue's record or lock file in the peer directory
    is added, replaced or removed (a peer's job started or ended). ``since``: the
    version returned before; while the directory's own stat is unchanged, that is
    the answer (one stat). This queue's own files are left out: its jobs' starts
    and ends run passes of their own."""
    path = directory(ctx)
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    stamp = (st.st_ino, st.st_mtime_ns)
    if since is not None and since[0] == stamp:
        return since
    mine = key(ctx) + "."
    try:
        names = sorted(n for n in os.listdir(path) if not n.startswith(mine) and n != ADMIT_LOCK)
    except OSError:
        return stamp, None
    return stamp, tuple(names)
