"""The config in force: ``Config``, whose fields and defaults are the rows of
the table of keys (qex/config/keys.py), and ``assemble``, which makes one of
the checked values a file sets (read from the file or from the parsed-config
cache) and says where each value came from."""

import os

from qex.base import units
from qex.base.plain import Factory, Plain
from qex.config.keys import BY_KEY, KEYS, MODES, SOURCE_KEYS, Percent, PoolDef, peer_dir, resolve_word


def _default_sources() -> dict[str, str]:
    return dict.fromkeys(SOURCE_KEYS, "default")


# The fields of Config but sources: path, exists, then one per key in the table's
# order, with the key's default (a class made from the table, not written).
_Fields = type("_Fields", (Plain,), {
    "__module__": __name__, "__qualname__": "_Fields",
    "__annotations__": {"path": str, "exists": bool, **{k.attr: k.type for k in KEYS}},
    "exists": False, **{k.attr: k.default for k in KEYS},
}, frozen=True)


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

    # -- qex config show ----------------------------------------------------

    def show(self, cores: int, mem_total: int, env=None) -> list[tuple[str, str, str]]:
        """Rows (key, value in words, source) for ``qex config show``."""
        env = os.environ if env is None else env
        budget_cpu, budget_mem = self.resolve_budget(cores, mem_total)
        rows = [
            ("budget.cpu", _words_budget_cpu(self.budget_cpu, budget_cpu, cores)),
            ("budget.mem", _words_budget_mem(self.budget_mem, budget_mem, mem_total)),
            ("system.reserve_mem", units.format_size(self.reserve_mem)),
            ("enforce.mode", self.mode),
            ("queue.oversized", self.oversized),
            ("queue.max_bypass", str(self.max_bypass)),
            ("defaults.cpu", _words_cpu_claim(self.default_cpu, self.default_cpu_millicores(cores, mem_total))),
            ("defaults.mem", _words_mem_claim(self.default_mem, self.default_mem_bytes(cores, mem_total))),
            ("defaults.timeout", _words_optional(self.default_timeout, units.format_duration)),
            ("defaults.vram", _words_optional(self.default_vram, units.format_size, "none (whole devices)")),
            ("defaults.max_queue_time", _words_optional(self.default_max_queue_time, units.format_duration)),
            ("defaults.oom_retries", str(self.default_oom_retries)),
            ("defaults.retries", str(self.default_retries)),
            ("logs.max_bytes", _words_optional(self.logs_max_bytes, _per_stream, "no limit")),
            ("hooks.on_stop", units.safe_text(" ".join(self.hook_on_stop)) if self.hook_on_stop else "none"),
            ("hooks.on_stop_states", ", ".join(self.hook_states) or "none"),
            ("hooks.timeout", units.format_duration(self.hook_timeout)),
            ("learn.enabled", "yes" if self.learn_enabled else "no"),
            ("learn.margin", f"{self.learn_margin * 100:g}%"),
            ("peers.dir", units.safe_text(peer_dir(self, env))),
            ("store.max_age", units.format_duration(self.store_max_age)),
            ("store.max_records", str(self.store_max_records)),
        ]  # fmt: skip
        rows = [(key, words, self._source(key, env)) for key, words in rows]
        if not self.pools:
            rows.append(("pool", "none", self.sources.get("pool", "default")))
        for p in self.pools:
            rows.append((f"pool.{p.name}", _words_pool(p), self.sources.get("pool", "default")))
        return rows

    def show_json(self, cores: int, mem_total: int, env=None) -> dict:
        """``{"path", "exists", "values": {key: {"value", "resolved", "source"}}}``.

        ``value`` is the setting as qex holds it (cores in millicores, sizes in
        bytes, times in seconds, a percentage as ``"75%"``, null for unset);
        ``resolved`` is what it means on this machine (for the budget and the
        default claims) and otherwise equals ``value``. ``pool`` is a list.
        ``from_cache``: read from the parsed-config cache (qex.config.cache).
        """
        env = os.environ if env is None else env
        budget_cpu, budget_mem = self.resolve_budget(cores, mem_total)
        held = {
            "budget.cpu": (self.budget_cpu, budget_cpu),
            "budget.mem": (self.budget_mem, budget_mem),
            "system.reserve_mem": self.reserve_mem,
            "enforce.mode": self.mode,
            "queue.oversized": self.oversized,
            "queue.max_bypass": self.max_bypass,
            "defaults.cpu": (self.default_cpu, self.default_cpu_millicores(cores, mem_total)),
            "defaults.mem": (self.default_mem, self.default_mem_bytes(cores, mem_total)),
            "defaults.timeout": self.default_timeout,
            "defaults.vram": self.default_vram,
            "defaults.max_queue_time": self.default_max_queue_time,
            "defaults.oom_retries": self.default_oom_retries,
            "defaults.retries": self.default_retries,
            "logs.max_bytes": self.logs_max_bytes,
            "hooks.on_stop": list(self.hook_on_stop),
            "hooks.on_stop_states": list(self.hook_states),
            "hooks.timeout": self.hook_timeout,
            "learn.enabled": self.learn_enabled,
            "learn.margin": f"{self.learn_margin * 100:g}%",
            "peers.dir": (self.peers_dir, peer_dir(self, env)),
            "store.max_age": self.store_max_age,
            "store.max_records": self.store_max_records,
            "pool": [_pool_json(p) for p in self.pools],
        }
        values = {}
        for key, entry in held.items():
            value, resolved = entry if isinstance(entry, tuple) else (entry, entry)
            value = str(value) if isinstance(value, Percent) else value
            values[key] = {"value": value, "resolved": resolved, "source": self._source(key, env)}
        return {"path": self.path, "exists": self.exists, "from_cache": self.from_cache, "values": values}

    def _source(self, key: str, env) -> str:
        if key == "peers.dir" and env.get("QEX_PEER_DIR"):
            return "environment (QEX_PEER_DIR)"
        return self.sources.get(key, "default")



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


# -- words for qex config show -------------------------------------------------


def _words_budget_cpu(setting, millicores: int, cores: int) -> str:
    if isinstance(setting, Percent):
        return f"{setting} of {cores} cores = {units.format_cores(millicores)} cores"
    above = f" (above this machine's {cores} cores)" if millicores > cores * 1000 else ""
    return f"{units.format_cores(millicores)} cores{above}"


def _words_budget_mem(setting, n: int, mem_total: int) -> str:
    if isinstance(setting, Percent):
        return f"{setting} of {units.format_size(mem_total)} = {units.format_size(n)}"
    above = f" (above this machine's {units.format_size(mem_total)})" if n > mem_total else ""
    return f"{units.format_size(n)}{above}"


def _words_cpu_claim(setting, millicores: int) -> str:
    cores = f"{units.format_cores(millicores)} core{'s' if millicores != 1000 else ''}"
    return f"{setting} ({cores})" if isinstance(setting, str) else cores


def _words_mem_claim(setting, n: int) -> str:
    if setting is None:
        return f"machine memory / cores = {units.format_size(n)}"
    return f"{setting} ({units.format_size(n)})" if isinstance(setting, str) else units.format_size(n)


def _words_optional(value, fmt, none: str = "none") -> str:
    return none if value is None else fmt(value)


def _per_stream(n: int) -> str:
    return f"{units.format_size(n)} per stream"


def _words_pool(p: PoolDef) -> str:
    if not p.indexed:
        return f"{p.count} unit{'s' if p.count != 1 else ''}"
    sizes = ", ".join(units.format_size(d) for d in p.devices)
    return f"{len(p.devices)} device{'s' if len(p.devices) != 1 else ''} of {p.size_label}: {sizes}; indices in {p.env}"


def _pool_json(p: PoolDef) -> dict:
    return {"name": p.name, "count": p.count, "devices": list(p.devices), "size": p.size_label or None, "env": p.env}
