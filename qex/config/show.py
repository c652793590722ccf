"""What a user reads about the config: ``qex config show`` (text and
``--json``) and the key lines of ``qex help config``, both made from the table
of keys (qex/config/keys.py), one row per key in its order.

Each key names (``Key.show``) how its value is worded in ``WORDS``: a function
of the value held and of this machine that gives the words, the value as JSON
and what it resolves to here.
"""

from __future__ import annotations

from qex.base import units
from qex.config.keys import KEYS, Key, Percent, PoolDef, backend, peer_dir

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Mapping


class _Here:
    """The machine and environment a config is shown on."""

    __slots__ = ("config", "cores", "mem_total", "env", "budget")

    def __init__(self, config, cores: int, mem_total: int, env):
        self.config, self.cores, self.mem_total, self.env = config, cores, mem_total, env
        self.budget = config.resolve_budget(cores, mem_total)


def rows(config: object, cores: int, mem_total: int, env: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """Rows (key, value in words, source) for ``qex config show``."""
    here, out = _Here(config, cores, mem_total, env), []
    for key in KEYS:
        value, source = getattr(config, key.attr), _source(config, key, env)
        if key.show == "pools":
            out += [(f"{key.key}.{p.name}", _words_pool(p), source) for p in value] or [(key.key, "none", source)]
        else:
            out.append((key.key, WORDS[key.show](value, here)[0], source))
    return out


def as_json(config: object, cores: int, mem_total: int, env: Mapping[str, str]) -> dict:
    """``{"path", "exists", "from_cache", "values": {key: {"value", "resolved", "source"}}}``.

    ``value`` is the setting as written, in the records' units (cores as a number
    of cores, sizes in bytes, times in seconds, a percentage as ``"75%"``, null for unset);
    ``resolved`` is what it means on this machine (for the budget and the
    default claims) and otherwise equals ``value``. ``pool`` is a list.
    ``from_cache``: read from the parsed-config cache (qex.config.cache).
    """
    here, values = _Here(config, cores, mem_total, env), {}
    for key in KEYS:
        _, value, resolved = WORDS[key.show](getattr(config, key.attr), here)
        values[key.key] = {"value": value, "resolved": resolved, "source": _source(config, key, env)}
    return {"path": config.path, "exists": config.exists, "from_cache": config.from_cache, "values": values}


def _source(config, key: Key, env) -> str:
    if key.env and env.get(key.env):
        return f"environment ({key.env})"
    return config.sources.get(key.key, "default")


# -- the words of each kind of value: (words, value as JSON, resolved here) ---------


def _json(value):
    return str(value) if isinstance(value, Percent) else list(value) if isinstance(value, tuple) else value


def _held(words: str, value) -> tuple:
    """Words for a value that means the same on any machine."""
    value = _json(value)
    return words, value, value


def _budget_cpu(setting, here: _Here) -> tuple:
    n, cores = here.budget[0], here.cores
    if isinstance(setting, Percent):
        words = f"{setting} of {cores} cores = {units.format_cores(n)} cores"
    else:
        above = f" (above this machine's {cores} cores)" if n > cores * 1000 else ""
        words = f"{units.format_cores(n)} cores{above}"
    return words, _cores(setting), n / 1000


def _cores(setting):
    """A setting held in millicores, as JSON shows it: a number of cores (a word or a percentage as it is)."""
    return setting / 1000 if isinstance(setting, int) else _json(setting)


def _budget_mem(setting, here: _Here) -> tuple:
    n, total = here.budget[1], here.mem_total
    if isinstance(setting, Percent):
        words = f"{setting} of {units.format_size(total)} = {units.format_size(n)}"
    else:
        above = f" (above this machine's {units.format_size(total)})" if n > total else ""
        words = f"{units.format_size(n)}{above}"
    return words, _json(setting), n


def _default_cpu(setting, here: _Here) -> tuple:
    n = here.config.default_cpu_millicores(here.cores, here.mem_total)
    cores = f"{units.format_cores(n)} core{'s' if n != 1000 else ''}"
    return (f"{setting} ({cores})" if isinstance(setting, str) else cores), _cores(setting), n / 1000


def _default_mem(setting, here: _Here) -> tuple:
    n = here.config.default_mem_bytes(here.cores, here.mem_total)
    if setting is None:
        return f"machine memory / cores = {units.format_size(n)}", setting, n
    return (f"{setting} ({units.format_size(n)})" if isinstance(setting, str) else units.format_size(n)), setting, n


def _reserve(setting, here: _Here) -> tuple:
    n = here.config.resolve_reserve(here.mem_total)
    if setting is not None:
        return units.format_size(n), setting, n
    from qex.config.keys import RESERVE_MOST, RESERVE_SHARE

    most = RESERVE_MOST.get(here.config.mode, RESERVE_MOST["cooperative"])
    return (
        (
            f"{RESERVE_SHARE} of {units.format_size(here.mem_total)}, at most {units.format_size(most)} = "
            f"{units.format_size(n)}"
        ),
        setting,
        n,
    )


def _optional(fmt, none: str = "none"):
    return lambda value, here: _held(none if value is None else fmt(value), value)


def _peer_dir(setting, here: _Here) -> tuple:
    resolved = peer_dir(here.config, here.env)
    return units.safe_text(resolved), setting, resolved


def _backend(setting, here: _Here) -> tuple:
    from qex.base.errors import ConfigError

    try:
        resolved = backend(here.config, here.env)
    except ConfigError:
        resolved = setting  # (the command that uses it says why the variable is refused)
    return resolved, setting, resolved


def _margin(value, here: _Here) -> tuple:
    words = f"{value * 100:g}%"
    return words, words, words


def _pools(value, here: _Here) -> tuple:
    pools = [_pool_json(p) for p in value]
    return "", pools, pools  # (as text: one row per pool, rows())


WORDS = {
    "budget_cpu": _budget_cpu,
    "budget_mem": _budget_mem,
    "default_cpu": _default_cpu,
    "default_mem": _default_mem,
    "reserve": _reserve,
    "text": lambda value, here: _held(str(value), value),
    "optional_text": lambda value, here: _held("unset" if value is None else units.safe_text(value), value),
    "size": lambda value, here: _held(units.format_size(value), value),
    "duration": lambda value, here: _held(units.format_duration(value), value),
    "optional_duration": _optional(units.format_duration),
    "vram": _optional(units.format_size, "none (whole devices)"),
    "shard": _optional(units.format_size, "unset (--vram gets whole GPUs)"),
    "per_stream": _optional(lambda n: f"{units.format_size(n)} per stream", "no limit"),
    "argv": lambda value, here: _held(units.safe_text(" ".join(value)) if value else "none", value),
    "states": lambda value, here: _held(", ".join(value) or "none", value),
    "yes_no": lambda value, here: _held("yes" if value else "no", value),
    "margin": _margin,
    "pressure": _optional(lambda v: f"{v:g}% (memory PSI some avg10)", "off"),
    "io_class": lambda value, here: _held(
        f"{value} (priority 7, the lowest)" if value == "best-effort" else value, value
    ),
    "peer_dir": _peer_dir,
    "backend": _backend,
    "pools": _pools,
}


def _words_pool(p: PoolDef) -> str:
    if not p.indexed:
        return f"{p.count} unit{'s' if p.count != 1 else ''}"
    sizes = ", ".join(units.format_size(d) for d in p.devices)
    by_uuid = [not p.device_id(d).isdigit() for d in range(len(p.devices))]
    named = "UUIDs" if all(by_uuid) else "indices and UUIDs" if any(by_uuid) else "indices"
    fence = "; no claim: no device (fence)" if p.fenced else ""
    return (
        f"{len(p.devices)} device{'s' if len(p.devices) != 1 else ''} of {p.size_label}: {sizes}; "
        f"{named} in {', '.join(p.variables)}{fence}"
    )


def _pool_json(p: PoolDef) -> dict:
    env = list(p.env) if isinstance(p.env, tuple) else p.env
    out = {"name": p.name, "count": p.count, "devices": list(p.devices), "size": p.size_label or None, "env": env}
    if p.indexed:
        out.update(fence=p.fenced, ids=[p.device_id(d) for d in range(len(p.devices))], names=list(p.names) or None)
    return out


# -- qex help config ----------------------------------------------------------------


def help_lines() -> list[str]:
    """The key lines of ``qex help config``: one per table, its keys in the
    table's order, each with what ``Key.help`` says (its default as written
    in the file, its options, an example); keys whose value lists
    alternatives (``|``) are set apart by two spaces."""
    lines, tables = [], {}
    for key in KEYS:
        tables.setdefault(key.section, []).append(key)
    for section, keys in tables.items():
        items = [f"{k.name} {_help_of(k)}".strip() for k in keys]
        if not keys[0].name:  # a list of tables: one line per example
            lines += [f"  {f'[[{section}]]':<10} {item}" for item in "\n".join(items).splitlines()]
            continue
        sep = ",  " if any(" | " in item for item in items) else ", "
        lines.append(f"  {f'[{section}]':<10} {sep.join(items)}")
    return lines


def _help_of(key: Key) -> str:
    text = key.help.replace("{options}", " | ".join(f'"{o}"' for o in key.options))
    return text.replace("{default}", as_written(key, key.default)) if "{default}" in text else text


def as_written(key: Key, value: object) -> str:
    """``value`` as the file would say it (``"2GB"``, ``"30s"``, ``true``, ``2``, ``["oom"]``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (Percent, str)):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(as_written(key, v) for v in value) + "]"
    if key.show in ("budget_cpu", "default_cpu"):
        return f'"{units.format_cores(value)}"'
    if key.show in ("size", "vram", "per_stream", "reserve"):
        return f'"{units.format_size(value)}"'
    if key.show in ("duration", "optional_duration"):
        return f'"{units.format_duration(value)}"'
    if key.show == "margin":
        return f'"{value * 100:g}%"'
    if key.show == "pressure":
        return "none" if value is None else f'"{value:g}%"'
    return str(value)
