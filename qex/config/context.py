"""What one process knows while it works on one state directory: its store and
config, who it runs as, the machine's size (``Context``).

A plain class: the submit path imports this module, and building attrs classes
at import costs every command milliseconds. It lives in config/ (below hooks/,
users/ and queue/) so that every layer that takes a ``ctx`` can name its type."""

from __future__ import annotations

import os

from qex.base.errors import QexError
from qex.store.state import Store

TYPE_CHECKING = False  # (typing itself is not imported: qex submit's start-up)
if TYPE_CHECKING:
    from qex.config.model import Config


class Context:
    """What one process knows while it works on one state directory."""

    __slots__ = ("store", "config", "uid", "user", "cores", "mem_total", "forks")

    def __init__(
        self, store: Store, config: Config, uid: int, user: str, cores: int, mem_total: int, forks: bool = True
    ):
        self.store, self.config, self.uid, self.user = store, config, uid, user
        self.cores, self.mem_total = cores, mem_total
        # Whether this process may fork what a pass starts (supervisors, a waker, a hook runner).
        # False in a program that uses qex.api: its passes only commit, and a fresh qex process
        # admits and forks (qex.supervisor.starter), never a copy of the program.
        self.forks = forks

    @classmethod
    def load(cls, config: Config | None = None) -> Context:
        from qex.base import machine, paths
        from qex.config.file import load_config

        store = Store(paths.state_dir())
        store.ensure()
        try:
            store.repair_after_reboot()  # (a reader without the lock reads repaired records too)
        except QexError:
            pass  # a command that only reads still answers; the next pass that can write repairs
        return cls(
            store=store,
            config=config or load_config(),
            uid=os.getuid(),
            user=paths.user_name(),
            cores=machine.cores(),
            mem_total=machine.mem_total(),
        )

    def reload_config(self) -> None:
        """Read the config again; a config broken meanwhile keeps the one in force."""
        from qex.base.errors import QexError
        from qex.config.file import load_config

        try:
            self.config = load_config()
        except QexError as exc:
            from qex.base import say

            say.warning(f"keeping the config in force: {exc}")

    def budget(self) -> tuple[int, int]:
        return self.config.resolve_budget(self.cores, self.mem_total)

    def reserve(self) -> int:
        """The memory reserve in bytes on this machine (``Config.resolve_reserve``)."""
        return self.config.resolve_reserve(self.mem_total)

    def holdable(self) -> tuple[int, int | None]:
        """(millicores, bytes) that one job could ever hold on this machine when it is
        idle: every core, and the memory less the reserve (None: the machine's memory is
        unknown). A claim above either can never start, whatever the budget says (an
        absolute budget may exceed the machine)."""
        mem = max(self.mem_total - self.reserve(), 0) if self.mem_total > 0 else None
        return self.cores * 1000, mem

    def check_holdable(self, cpu: int, mem: int, cpu_from: str, mem_from: str) -> None:
        """Refuse (SpecError, 121) a claim of ``cpu`` millicores and ``mem`` bytes that no
        idle machine could hold (``holdable``), whatever ``[queue] oversized`` says: it
        would wait for ever. ``*_from`` name where each came from (``--mem``, ``[defaults] mem``)."""
        from qex.base.errors import SpecError
        from qex.base.units import format_cores, format_size

        cores, memory = self.holdable()
        if cpu > cores:
            raise SpecError(
                f"{cpu_from}: this job claims {format_cores(cpu)} cores and this machine has "
                f"{format_cores(cores)}: it could never start; claim at most {format_cores(cores)}"
            )
        if memory is not None and mem > memory:
            raise SpecError(
                f"{mem_from}: this job claims {format_size(mem)} of memory and this machine has "
                f"{format_size(self.mem_total)}, of which {format_size(self.reserve())} is kept by "
                f"[system] reserve_mem: it could never start; claim at most {format_size(memory)}"
            )
