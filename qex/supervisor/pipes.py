"""A job's standard input, and the pipes between a job and the command that follows it.

Both sides of each rule are here: what the caller puts in the job's directory
before its submission's commit, and how the supervisor opens it when the job
starts (docs/design.md, "Following a job").

**The output** (``qex run``, ``qex submit --follow``): ``stdout.pipe`` and
``stderr.pipe``, FIFOs of mode 0600 the follower makes (``make``) before the
commit, so that no supervisor can start the job without them. The follower
holds the read end, and a write end of its own: a supervisor that closes its end
(between two attempts, or at the end) never gives it an end of file; the
follower ends when the record is final and the FIFOs are empty. The supervisor
opens the write end when the job starts (``open_output``: none there, or nobody
reading, means the log only) and writes into it every byte it writes into the
log (``qex.supervisor.logs.Sink``). It never drops a byte for a reader that is
there: while the FIFO is full it stops reading the job's pipe, and the job
waits as it would on a pipe. ``[logs] max_bytes`` cuts the file only. When a
stopped job's last output still waits for a reader that does not read, the
supervisor lets it go after the drain and removes the FIFO from the directory:
the follower finds it gone (``Ends.cut``) and says so.

**The input** (``stdin`` in the job's directory): nothing (the job reads
``/dev/null``), a copy of the caller's stdin (``--stdin -``, at most
``COPY_MAX``), a symbolic link to a file (``--stdin FILE``, opened when the job
starts) (``give_input``), or a FIFO whose write end ``qex run`` holds
(``make``): the job reads what ``qex run`` copies from its own stdin, and the
end of file when ``qex run`` closes it. ``open_input`` gives any of them to the
job as its fd 0.
"""

from __future__ import annotations

import errno
import os
import stat

from qex.base.errors import SpecError
from qex.store import layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from typing import BinaryIO

COPY_MAX = 64 << 20  # --stdin -: the most qex copies into a job's directory (as --each-line's input)
PIPE_SIZE = 1 << 20  # a follower's FIFO holds this much (fewer wake-ups; the kernel may give less)
_F_SETPIPE_SZ = 1031  # fcntl's F_SETPIPE_SZ (fcntl is not imported for one constant)


# ---- the caller's side ---------------------------------------------------------------------


class Ends:
    """The follower's ends of a job's pipes (``make``): ``out`` and ``err`` read the
    job's output (non-blocking), ``stdin`` writes its input (-1: none)."""

    def __init__(self, job_dir: str):
        self.dir = job_dir
        self.out = self.err = self.stdin = -1
        self._own: list[int] = []  # the follower's own write ends of the output FIFOs
        self._made: dict[str, tuple[int, int]] = {}  # name -> (dev, inode) of the FIFO it made

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def cut(self, name: str) -> bool:
        """Whether the supervisor removed this FIFO: it let go of a reader that did
        not take the last output of a stopped job (see the module's doc)."""
        made = self._made.get(name)
        if made is None:
            return False
        try:
            st = os.lstat(self.path(name))
        except OSError:
            return True
        return (st.st_dev, st.st_ino) != made

    def close_stdin(self) -> None:
        """The caller's input ended: the job reads the end of file."""
        if self.stdin >= 0:
            os.close(self.stdin)
            self.stdin = -1

    def close(self, remove: bool = True) -> None:
        """Close every end; ``remove``: and the FIFOs this follower made (those still its own)."""
        for fd in (self.out, self.err, self.stdin, *self._own):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.out = self.err = self.stdin = -1
        self._own = []
        if remove:
            for name in list(self._made):
                if not self.cut(name):
                    try:
                        os.unlink(self.path(name))
                    except OSError:
                        pass
        self._made = {}


def followed(job_dir: str) -> bool:
    """Whether a follower (the ``qex run`` that started the job) streams this job's output:
    its FIFOs are in the directory until it closes them (``Ends.close``)."""
    return any(stat.S_ISFIFO(_mode(os.path.join(job_dir, n))) for n in (layout.STDOUT_PIPE, layout.STDERR_PIPE))


def _mode(path: str) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def make(job_dir: str, forward_stdin: bool) -> Ends:
    """The FIFOs of a job that this process follows, made in its directory before the
    commit (``stdin`` too when ``forward_stdin``); raises OSError (the caller follows
    the log files instead)."""
    ends = Ends(job_dir)
    try:
        for name in (layout.STDOUT_PIPE, layout.STDERR_PIPE):
            read = _fifo(ends, name, os.O_RDONLY)
            ends._own.append(os.open(ends.path(name), os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC))
            grow(read)
            if name == layout.STDOUT_PIPE:
                ends.out = read
            else:
                ends.err = read
        if forward_stdin:
            # A write end needs a reader to open: this one's own, for the moment of the open.
            both = _fifo(ends, layout.STDIN, os.O_RDWR)
            try:
                ends.stdin = os.open(ends.path(layout.STDIN), os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                grow(both)
            finally:
                os.close(both)
    except OSError:
        ends.close()
        raise
    return ends


def _fifo(ends: Ends, name: str, flags: int) -> int:
    path = ends.path(name)
    os.mkfifo(path, 0o600)
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    st = os.fstat(fd)
    ends._made[name] = (st.st_dev, st.st_ino)
    return fd


def grow(fd: int) -> None:
    """A larger pipe: fewer wake-ups of the supervisor and the follower per MB. Only a
    followed job's (its FIFOs, and its own pipes: ``qex.supervisor.run._watch``): a
    user's pipes share a budget (/proc/sys/fs/pipe-user-pages-soft), and a drain of
    many jobs must not spend it."""
    import fcntl

    try:
        fcntl.fcntl(fd, _F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:
        pass


def give_input(job_dir: str, source: str, stream: BinaryIO | None = None) -> None:
    """The job's ``stdin`` in its directory: ``-`` copies ``stream`` (at most
    ``COPY_MAX``), a path makes a link to that file (checked now, opened when the
    job starts). Raises SpecError (121) with what to do."""
    path = os.path.join(job_dir, layout.STDIN)
    if source == "-":
        _copy_input(path, stream)
        return
    from qex.base.units import safe_text

    shown = safe_text(source)
    target = os.path.abspath(source)
    try:
        st = os.stat(target)
    except OSError as exc:
        raise SpecError(
            f"--stdin: cannot read {shown}: {exc.strerror}; give a file the job can read, or - for this command's stdin"
        ) from None
    if stat.S_ISDIR(st.st_mode):
        raise SpecError(f"--stdin: {shown} is a directory; give a file")
    if not os.access(target, os.R_OK):
        raise SpecError(f"--stdin: {shown} is not readable by you; give a file the job can read")
    os.symlink(target, path)


def _copy_input(path: str, stream: BinaryIO | None) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    total = 0
    try:
        source = stream.fileno() if stream is not None else 0
        while True:
            try:
                chunk = os.read(source, 1 << 20)
            except OSError as exc:
                if exc.errno == errno.EBADF:
                    break  # no stdin at all (closed): an empty input
                raise SpecError(f"--stdin -: cannot read this command's stdin: {exc.strerror}") from None
            if not chunk:
                break
            total += len(chunk)
            if total > COPY_MAX:
                raise SpecError(
                    f"--stdin -: the input is larger than {COPY_MAX >> 20}MiB, the most qex copies "
                    "into a job's directory; put it in a file and give --stdin FILE; "
                    "no job was submitted"
                )
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


# ---- the supervisor's side -----------------------------------------------------------------


def open_output(path: str) -> int:
    """The write end (non-blocking) of the follower's FIFO at ``path``, or -1: none
    there, nobody reading it, or not this user's FIFO."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return -1  # (ENOENT: nobody follows; ENXIO: the follower is gone)
    try:
        st = os.fstat(fd)
    except OSError:
        st = None
    if st is None or not stat.S_ISFIFO(st.st_mode) or st.st_uid != os.getuid():
        os.close(fd)
        return -1
    return fd


def open_input(path: str) -> int | None:
    """The job's fd 0 from its directory's ``stdin`` (a blocking descriptor the caller
    closes after the spawn), or None: it has none (``/dev/null``). Raises OSError."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if st.st_uid != os.getuid():
        raise PermissionError(errno.EPERM, "it is not this user's (replaced by another user?)")
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC  # (never waits for a writer: a FIFO's open)
    if not stat.S_ISLNK(st.st_mode):
        flags |= os.O_NOFOLLOW
    fd = os.open(path, flags)
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        os.set_blocking(fd, True)  # the job reads it as any stdin: waiting for input
    except BaseException:
        os.close(fd)
        raise
    return fd


def input_words(path: str) -> str:
    """What the job's ``stdin`` is, for a sentence: the file a link names, or the path."""
    try:
        return os.readlink(path)
    except OSError:
        return path
