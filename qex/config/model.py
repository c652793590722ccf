"""The config in force: ``Config``, whose fields and defaults are the rows of
the table of keys (qex/config/keys.py), and ``assemble``, which makes one of
the checked values a file sets (read from the file or from the parsed-config
cache) and says where each value came from."""

from __future__ import annotations

import os

from qex.base.plain import Factory, Plain
from qex.config.keys import (
    BY_KEY,
    KEYS,
    MODES,
    RESERVE_MOST,
    RESERVE_SHARE,
    SOURCE_KEYS,
    Percent,
    PoolDef,
    resolve_word,
)

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Mapping


def _default_sources() -> dict[str, str]:
    return dict.fromkeys(SOURCE_KEYS, "default")


# The fields of Config but sources: path, exists, then one per key in the table's
# order, with the key's default (a class made from the table, not written).
_Fields = type(
    "_Fields",
    (Plain,),
    {
        "__module__": __name__,
        "__qualname__": "_Fields",
        "__annotations__": {"path": str, "exists": bool, **{k.attr: k.type for k in KEYS}},
        "exists": False,
        **{k.attr: k.default for k in KEYS},
    },
    frozen=True,
)


class Config(_Fields, frozen=True):
    """What the config file says, every value checked, defaults filled in.

    Its fields: ``path``, ``exists``, one per key of ``qex.config.keys.KEYS``
    (``budget_cpu``, ``reserve_mem``, ..., ``pools``), then ``sources``. Cores
    are millicores, sizes bytes, times seconds. ``sources`` says for each key
    (``"budget.cpu"``) where its value came from: ``"default"``, ``"default
    (enforce.mode = single-user)"`` or the file's path.
    """

    sources: dict[str, str] = Factory(_default_sources)

    from_cache = False  # not a field: read from the parsed-config cache (qex.config.cache)

    @classmethod
    def default(cls, path: str, exists: bool = False) -> "Config":
        """The defaults, as if the file at ``path`` were missing or empty."""
        return cls(path=path, exists=exists)

    defaults = default  # the other spelling

    # -- resolving against the machine -------------------------------------

    def resolve_budget(self, cores: int, mem_total: int) -> tuple[int, int]:
        """(millicores, bytes) of the budget on a machine of ``cores`` cores and
        ``mem_total`` bytes. An absolute value is taken as written, even above
        the machine."""
        cpu = self.budget_cpu.of(cores * 1000) if isinstance(self.budget_cpu, Percent) else self.budget_cpu
        mem = self.budget_mem.of(mem_total) if isinstance(self.budget_mem, Percent) else self.budget_mem
        return cpu, mem

    def resolve_reserve(self, mem_total: int) -> int:
        """``[system] reserve_mem`` in bytes on a machine of ``mem_total`` bytes: as
        written, else (unset) 10% of the memory, at most 2GB (single-user: 512MB).

        The one rule of the reserve: admission (the available memory less it),
        the refusal of a claim no idle machine could hold (``Context.holdable``),
        the reasons that wait on it, ``qex info`` and ``qex config show`` all ask here."""
        if self.reserve_mem is not None:
            return self.reserve_mem
        return min(RESERVE_SHARE.of(max(mem_total, 0)), RESERVE_MOST.get(self.mode, RESERVE_MOST["cooperative"]))

    def default_cpu_millicores(self, cores: int, mem_total: int) -> int:
        """``[defaults] cpu`` in millicores (a word resolved against the budget)."""
        if isinstance(self.default_cpu, str):
            return resolve_word(self.default_cpu, self.resolve_budget(cores, mem_total)[0])
        return self.default_cpu

    def default_mem_bytes(self, cores: int, mem_total: int) -> int:
        """``[defaults] mem`` in bytes: as written, a word resolved against the
        budget, or (unset) the machine's memory divided by its cores."""
        if isinstance(self.default_mem, str):
            return resolve_word(self.default_mem, self.resolve_budget(cores, mem_total)[1])
        if self.default_mem is None:
            return mem_total // max(cores, 1)
        return self.default_mem

    def pool(self, name: str) -> PoolDef | None:
        """The pool declared with ``name``, or None."""
        return next((p for p in self.pools if p.name == name), None)

    # -- qex config show (qex/config/show.py) --------------------------------

    def show(self, cores: int, mem_total: int, env: Mapping[str, str] | None = None) -> list[tuple[str, str, str]]:
        """Rows (key, value in words, source) for ``qex config show``."""
        from qex.config import show

        return show.rows(self, cores, mem_total, os.environ if env is None else env)

    def show_json(self, cores: int, mem_total: int, env: Mapping[str, str] | None = None) -> dict:
        """``{"path", "exists", "from_cache", "values": {key: {"value", "resolved", "source"}}}``
        for ``qex config show --json`` (``qex.config.show.as_json``)."""
        from qex.config import show

        return show.as_json(self, cores, mem_total, os.environ if env is None else env)


_MODE = BY_KEY["enforce.mode"]


def assemble(path: str, values: dict, keys: list[str]) -> Config:
    """The Config of a file that sets ``values`` (checked, by Config field)
    under ``keys`` (``"budget.cpu"``, ``"pool"``): the table's defaults, those
    its ``enforce.mode`` changes, and where each value came from."""
    values = dict(values)
    sources = _default_sources()
    for key in keys:
        sources[key] = path
    mode = values.get(_MODE.attr, _MODE.default)
    for key, default in MODES[mode].items():
        values.setdefault(BY_KEY[key].attr, default)
        if sources[key] == "default":
            sources[key] = f"default (enforce.mode = {mode})"
    return Config(path=path, exists=True, sources=sources, **values)
