"""What one process knows while it works on one state directory (``Context``),
a job it admitted and must start (``Launch``), and what a pass decided that its
caller acts on once the lock is let go (``PassResult``).

Plain classes here: the submit path imports this module, and building attrs
classes at import costs every command milliseconds."""

import os

from qex.base.errors import QexError
from qex.store.state import Store


class Context:
    """What one process knows while it works on one state directory."""

    __slots__ = ("store", "config", "uid", "user", "cores", "mem_total")

    def __init__(self, store: Store, config, uid: int, user: str, cores: int, mem_total: int):
        self.store, self.config, self.uid, self.user = store, config, uid, user
        self.cores, self.mem_total = cores, mem_total

    @classmethod
    def load(cls, config=None) -> "Context":
        from qex.base import machine, paths
        from qex.config.file import load_config

        store = Store(paths.state_dir())
        store.ensure()
        try:
            store.repair_after_reboot()  # (a reader without the lock reads repaired records too)
        except QexError:
            pass  # a command that only reads still answers; the next pass that can write repairs
        return cls(store=store, config=config or load_config(), uid=os.getuid(),
                   user=paths.user_name(), cores=machine.cores(), mem_total=machine.mem_total())

    def reload_config(self) -> None:
        """Read the config again; a config broken meanwhile keeps the one in force."""
        from qex.base.errors import QexError
        from qex.config.file import load_config

        try:
            self.config = load_config()
        except QexError as exc:
            import sys

            print(f"qex: keeping the config in force: {exc}", file=sys.stderr)

    def budget(self) -> tuple[int, int]:
        return self.config.resolve_budget(self.cores, self.mem_total)


class Launch:
    """A job this process admitted and must start: its liveness lock is held.
    ``peer_fd``: this job's liveness lock in the peer directory (qex.users.peer_dir)."""

    __slots__ = ("job_id", "alive_fd", "peer_fd", "peer_lock", "fresh", "follows", "attempt", "spec", "meter")

    def __init__(self, job_id: str, alive_fd: int, peer_fd: int = -1, peer_lock: str | None = None):
        self.job_id, self.alive_fd, self.peer_fd, self.peer_lock = job_id, alive_fd, peer_fd, peer_lock
        self.fresh = False  # admitted by a pass just before (qex.supervisor.run._start reads it without the lock)
        self.follows = False  # admitted by the pass of the supervisor whose job just ended, which starts it
        self.attempt = 1  # the attempt the pass starts
        self.spec = self.meter = None  # read and made before the commit's byte (qex.supervisor.run.prepare_early)

    def __repr__(self) -> str:
        return f"Launch({self.job_id!r}, alive_fd={self.alive_fd}, peer_fd={self.peer_fd})"


class PassResult:
    """What a pass decided that the caller acts on after the lock is released."""

    __slots__ = ("value", "launches", "queued_mine", "running_mine", "next_deadline")

    def __init__(self, value=None, launches=None, queued_mine: bool = False, running_mine: bool = False,
                 next_deadline: float | None = None):
        self.value, self.launches = value, launches if launches is not None else []
        self.queued_mine, self.running_mine, self.next_deadline = queued_mine, running_mine, next_deadline
