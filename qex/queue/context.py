"""A job a pass admitted and this process must start (``Launch``), and what a
pass decided that its caller acts on once the lock is let go (``PassResult``).
What the process knows while it works on a state directory, ``Context``, is in
``qex.config.context``.

Plain classes here: the submit path imports this module, and building attrs
classes at import costs every command milliseconds."""


class Launch:
    """A job this process admitted and must start: its liveness lock is held.
    ``peer_fd``: this job's liveness lock in the peer directory (qex.users.peer_dir)."""

    __slots__ = ("job_id", "alive_fd", "peer_fd", "peer_lock", "fresh", "follows", "attempt", "spec", "meter")

    def __init__(self, job_id: str, alive_fd: int, peer_fd: int = -1, peer_lock: str | None = None):
        self.job_id, self.alive_fd, self.peer_fd, self.peer_lock = job_id, alive_fd, peer_fd, peer_lock
        self.fresh = False  # admitted by a pass just before (qex.supervisor.starting.start reads it without the lock)
        self.follows = False  # admitted by the pass of the supervisor whose job just ended, which starts it
        self.attempt = 1  # the attempt the pass starts
        self.spec = self.meter = None  # read and made before the commit's byte (qex.supervisor.run.prepare_early)

    def __repr__(self) -> str:
        return f"Launch({self.job_id!r}, alive_fd={self.alive_fd}, peer_fd={self.peer_fd})"


class PassResult:
    """What a pass decided that the caller acts on after the lock is released."""

    __slots__ = ("value", "launches", "queued_mine", "running_mine", "next_deadline")

    def __init__(
        self,
        value=None,
        launches=None,
        queued_mine: bool = False,
        running_mine: bool = False,
        next_deadline: float | None = None,
    ):
        self.value, self.launches = value, launches if launches is not None else []
        self.queued_mine, self.running_mine, self.next_deadline = queued_mine, running_mine, next_deadline
