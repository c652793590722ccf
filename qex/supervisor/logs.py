"""Where a job's output goes: the supervisor reads the pipes and writes the files."""

import os

CHECK_EVERY = 64 << 10  # a log looks at the free space at least every 64 KiB it writes


class Sink:
    """One output stream of a job, written to its log file as it arrives."""

    def __init__(self, path: str):
        from qex.store import fs

        self.bytes = 0
        self.lines = 0
        self.failed: str | None = None
        self.fd = None
        self.room = 0  # bytes this log may write before it looks at the free space again
        try:  # a symlink or a FIFO planted in its place is never followed nor blocked on
            self.fd = fs.open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        except OSError as exc:
            self.failed = f"cannot open {path}: {exc.strerror or exc}"

    def write(self, data: bytes) -> None:
        self.bytes += len(data)
        self.lines += data.count(b"\n")
        if self.failed:
            return
        if len(data) > self.room and not self._look(len(data)):
            return
        self.room -= len(data)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view):]
        except OSError as exc:  # a full disk stops the log, never the job
            self.failed = exc.strerror or str(exc)

    def _look(self, want: int) -> bool:
        """Stop the log before the disk is so full that records cannot be written."""
        from qex.store import fs

        try:
            st = os.fstatvfs(self.fd)
        except OSError:
            self.room = CHECK_EVERY
            return True
        free = st.f_bavail * st.f_frsize
        if free - want < fs.LOG_ROOM:
            self.failed = (f"the disk is nearly full (less than {fs.LOG_ROOM >> 10} KiB free); qex stopped "
                           "the log so that the job's record can still be written")
            return False
        self.room = min(CHECK_EVERY, free - fs.LOG_ROOM)
        return True

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
