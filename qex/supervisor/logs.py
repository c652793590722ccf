"""Where a job's output goes: the supervisor reads the pipes and writes the files."""

import os
import stat


class Sink:
    """One output stream of a job, written to its log file as it arrives."""

    def __init__(self, path: str):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
                          | os.O_NONBLOCK, 0o600)
        st = os.fstat(self.fd)
        if st.st_uid != os.getuid() or st.st_nlink != 1 or not stat.S_ISREG(st.st_mode):
            os.close(self.fd)  # a shared directory: never write a job's output into someone else's file
            raise PermissionError(f"{path} is not this user's log file (replaced by another user?)")
        self.bytes = 0
        self.lines = 0
        self.failed: str | None = None

    def write(self, data: bytes) -> None:
        self.bytes += len(data)
        self.lines += data.count(b"\n")
        if self.failed:
            return
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view):]
        except OSError as exc:  # a full disk stops the log, never the job
            self.failed = exc.strerror or str(exc)

    def close(self) -> None:
        os.close(self.fd)
