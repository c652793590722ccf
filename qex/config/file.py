"""The config file (``qex.toml``): where it is, reading it.

A missing file means the defaults. A file that exists but cannot be used (a
directory, a FIFO, unreadable, not UTF-8, not TOML, an unknown table or key, a
bad value) raises ``ConfigError`` naming the file, the key and the remedy; it
never falls back to the defaults and never blocks (a FIFO is never opened).

Its keys, their defaults and the Config they make are in qex/config/keys.py
and qex/config/model.py. tomlkit is imported only when there is a file to
read. Values are checked here, by hand rather than through cattrs, because
each key takes several input shapes (``"75%"``, ``2``, ``"1.5"``) and each
refusal needs its own remedy.
"""

import os
import stat

from qex.base import units
from qex.base.errors import ConfigError, SpecError
from qex.config.keys import KEYS, MODES, SOURCE_KEYS, Percent, PoolDef
from qex.config.model import Config, assemble

MAX_CONFIG_BYTES = 1024 * 1024  # a config larger than this is a mistake, not a config
OVERSIZED = ("run-when-idle", "reject", "queue")
FINAL_STATES = ("completed", "failed", "killed", "timeout", "oom", "expired", "cancelled", "skipped")
RESERVED_POOL_NAMES = ("cpu", "mem")
MIN_LOG_LIMIT = 4096  # qex.supervisor.logs.MIN_LIMIT
_CACHED_FIELDS = frozenset(k.attr for k in KEYS)  # the fields a file sets: a Config's but path, exists, sources


def config_path(env=os.environ) -> str:
    """``$QEX_CONFIG``, else ``$XDG_CONFIG_HOME/qex.toml``, else ``~/.config/qex.toml``."""
    explicit = env.get("QEX_CONFIG")
    if explicit:
        return os.path.abspath(explicit)
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "qex.toml")


def load_config(path: str | None = None, env=os.environ) -> Config:
    """Read and check the config at ``path`` (default: ``config_path(env)``).

    A file unchanged since a command of this user read it comes from the
    parsed-config cache (``qex.config.cache``) without parsing TOML."""
    from qex.config import cache as config_cache

    path = config_path(env) if path is None else os.path.abspath(path)
    known = _CACHED.get(path)
    if known is not None and config_cache.key_of(path) == known[0]:
        return known[1]  # a supervisor reloads it at each job's start and end: one stat
    found: list = []
    body = config_cache.lookup(path, env, found)
    if body is not None:
        try:
            config = _from_cache_body(path, body)
        except (KeyError, TypeError, ValueError, AttributeError):
            pass  # a damaged entry: parse the file
        else:
            _CACHED[path] = (found[0], config)  # the cache only holds a file that was not changing
            return config
    stat_out: list = []
    text = _read_text(path, stat_out)
    if text is None:
        return Config.default(path)
    known = _READ.get(path)
    if known is not None and known[0] == text:
        return known[1]  # a supervisor reads it at each job's start and end: parse a text once
    values, keys = _Reader(path).read(_parse_toml(path, text))
    config = assemble(path, values, keys)
    _READ[path] = (text, config)
    config_cache.store(path, stat_out[0], _cache_body(values, keys), env)
    return config


_READ: dict[str, tuple[str, "Config"]] = {}  # path -> (text, the Config it gave) in this process
_CACHED: dict[str, tuple[dict, "Config"]] = {}  # path -> (config_cache key, the Config of that entry)


# -- reading the file ----------------------------------------------------------


def _fail(path: str, message: str):
    """Refuse the file over a key: ``PATH: [budget] cpu = ...; remedy``."""
    raise ConfigError(f"{path}: {message}")


def _fail_file(path: str, message: str):
    """Refuse the file as a whole: ``PATH is a directory, ...; remedy``."""
    raise ConfigError(f"{path} {message}")


def _read_text(path: str, stat_out: list | None = None) -> str | None:
    """The file's text, or None when nothing is at ``path``. Never opens a
    FIFO or a device: the type is checked with ``stat`` first, and the open is
    non-blocking and re-checked with ``fstat``. ``stat_out`` receives the
    stat of the file read, taken before the read (the parsed-config cache
    stores only when the file still has it after the parse)."""
    where = "set QEX_CONFIG to another file, or move this one away to use the defaults"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            _fail_file(path, "is a symbolic link to a missing file; fix the link or remove it to use the defaults")
        return None
    except NotADirectoryError:
        _fail_file(path, f"cannot be reached: a part of the path is a file, not a directory; {where}")
    except OSError as e:
        _fail_file(path, f"cannot be examined ({e.strerror}); {where}")
    if stat.S_ISDIR(st.st_mode):
        _fail_file(path, f"is a directory, not a file; write the config as a file at this path, or {where}")
    if not stat.S_ISREG(st.st_mode):
        kind = _file_kind(st.st_mode)
        _fail_file(path, f"is a {kind}, not a regular file; replace it with a regular file, or {where}")
    if st.st_size > MAX_CONFIG_BYTES:
        _fail_file(path, f"is {units.format_size(st.st_size)}, too large for a config (at most 1MB); {where}")
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    try:
        # The symlink (a dotfile manager's) is followed on purpose, once, by
        # realpath; O_NOFOLLOW then refuses a link swapped in after the stat.
        fd = os.open(os.path.realpath(path), flags)
    except PermissionError:
        _fail_file(path, f"cannot be read (permission denied); make it readable (chmod u+r), or {where}")
    except OSError as e:
        _fail_file(path, f"cannot be opened ({e.strerror}); {where}")
    try:
        st2 = os.fstat(fd)
        if not stat.S_ISREG(st2.st_mode) or (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino):
            _fail_file(path, "changed while qex was reading it; run the command again")
        if stat_out is not None:
            stat_out.append(st2)
        chunks, size = [], 0
        while size <= MAX_CONFIG_BYTES:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        _fail_file(path, f"cannot be read ({e.strerror}); {where}")
    finally:
        os.close(fd)
    if size > MAX_CONFIG_BYTES:
        _fail_file(path, f"is too large for a config (at most 1MB); {where}")
    raw = b"".join(chunks)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        _fail_file(path, f"is not UTF-8 text (byte {e.start + 1}, line {line}); save it as UTF-8")
    return text.removeprefix("\ufeff")


def _printable(text: str) -> str:
    """Printable ASCII only (a parser's message may echo the file's bytes)."""
    return "".join(c if " " <= c <= "~" else "?" for c in text)


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def _parse_toml(path: str, text: str) -> dict:
    import tomlkit

    try:
        return tomlkit.parse(text).unwrap()
    except Exception as e:  # tomlkit raises ParseError, and others on odd input
        detail = _printable(str(e))[:160] or type(e).__name__
        _fail_file(path, f"is not valid TOML ({detail}); fix the syntax (see `qex help config`)")


# -- checking the values -------------------------------------------------------


def _type_name(value) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number with a fraction"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return "a date or time"


def _shown(value) -> str:
    """A value from the file, quoted, in printable ASCII, at most 60 characters."""
    text = _printable(value if isinstance(value, str) else repr(value))
    text = text if len(text) <= 60 else text[:59] + "…"
    return f"'{text}'" if isinstance(value, str) else text


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return _is_int(value) or isinstance(value, float)


_PERCENT_FORM = r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*%\s*"


def _percent_number(value) -> float | None:
    """The number in ``"75%"``, or None when ``value`` is not a percentage."""
    import re

    m = re.fullmatch(_PERCENT_FORM, value, re.ASCII) if isinstance(value, str) else None
    return float(m.group(1)) if m else None


class _Reader:
    """Checks the unwrapped TOML of one file, key by key."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, key: str, message: str):
        _fail(self.path, f"{key} {message}")

    def units_call(self, parse, value, key: str):
        try:
            return parse(value, key)
        except SpecError as e:
            _fail(self.path, str(e))

    def want(self, key: str, value, ok: bool, expected: str):
        if not ok:
            self.fail(key, f"must be {expected}, not {_type_name(value)} ({_shown(value)})")

    # -- one parser per kind of value; each returns the value qex holds --

    def budget_cpu(self, key, value):
        forms = 'use a percentage like "75%" or a number of cores like 2 or "1.5"'
        if (pct := _percent_number(value)) is not None:
            return self.percent(key, value, pct, "an absolute number of cores")
        self.want(key, value, _is_number(value) or isinstance(value, str), forms[4:])
        try:
            millicores = self.cores(key, value)
        except ConfigError:
            millicores = None
        if not isinstance(millicores, int):
            self.fail(key, f"= {_shown(value)} is not a percentage or a positive number of cores; {forms}")
        return millicores

    def budget_mem(self, key, value):
        forms = 'use a percentage like "75%" or a size like "16GB" (or a number of bytes)'
        if (pct := _percent_number(value)) is not None:
            return self.percent(key, value, pct, 'an absolute size like "64GB"')
        self.want(key, value, _is_int(value) or isinstance(value, str), forms[4:])
        try:
            return self.positive_size(key, value)
        except ConfigError:
            self.fail(key, f"= {_shown(value)} is not a percentage or a positive size; {forms}")

    def percent(self, key, value, pct: float, absolute: str) -> Percent:
        if pct > 100:
            self.fail(key, f'= {_shown(value)} is above 100%; use at most "100%", or {absolute} to go above the machine')
        if pct <= 0:
            self.fail(key, f"= {_shown(value)} is not above 0%; use a percentage like \"75%\", or remove the key")
        return Percent(pct)

    def cores(self, key, value):
        """A number of cores (int, float or string) or a claim word -> millicores or word."""
        if isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                self.fail(key, f"= {_shown(value)} is not a number of cores; use a positive number like 1, 0.5 or 4")
            value = repr(value)
        return self.units_call(units.parse_cpu, str(value), key)

    def cpu_claim(self, key, value):
        forms = 'a number of cores like 1 or "0.5", or one of "guess", "half", "full", "max"'
        self.want(key, value, _is_number(value) or isinstance(value, str), forms)
        return self.cores(key, value)

    def mem_claim(self, key, value):
        forms = 'a size like "2GB" or one of "guess", "half", "full", "max"'
        self.want(key, value, _is_int(value) or isinstance(value, str), forms)
        return self.units_call(units.parse_mem, str(value), key)

    def size(self, key, value) -> int:
        self.want(key, value, _is_int(value) or isinstance(value, str), 'a size like "512MB" or a number of bytes')
        if _is_int(value) and value < 0:
            self.fail(key, f"= {value} is negative; use a size like \"512MB\" or 0")
        return self.units_call(units.parse_size, str(value), key)

    def positive_size(self, key, value) -> int:
        n = self.size(key, value)
        if n <= 0:
            self.fail(key, f"= {_shown(value)} is zero; use a positive size like \"512MB\", or remove the key")
        return n

    def optional_positive_size(self, key, value) -> int | None:
        return None if _is_none_word(value) else self.positive_size(key, value)

    def log_limit(self, key, value) -> int | None:
        if isinstance(value, str) and value.strip().lower() in ("none", "unlimited"):
            return None
        n = self.size(key, value) or None
        if n is not None and n < MIN_LOG_LIMIT:
            self.fail(key, f"= {_shown(value)} is below 4KB, the least that holds the head, the marker line "
                           "and a tail; use at least \"4KB\", or 0 for no limit")
        return n

    def duration(self, key, value) -> float:
        forms = 'a duration like "90s", "30m", "4h", "7d" or a number of seconds'
        self.want(key, value, _is_number(value) or isinstance(value, str), forms)
        if _is_number(value) and not (0 <= value < 1e15):  # also NaN and inf
            self.fail(key, f"= {_shown(value)} is not {forms}; use one")
        seconds = float(value) if _is_number(value) else self.units_call(units.parse_duration, value, key)
        if seconds <= 0:
            self.fail(key, f"= {_shown(value)} is zero; use a positive duration like \"30m\", or remove the key")
        return seconds

    def optional_duration(self, key, value) -> float | None:
        return None if _is_none_word(value) else self.duration(key, value)

    def count(self, key, value, minimum: int) -> int:
        self.want(key, value, _is_int(value), f"an integer of at least {minimum}")
        if value < minimum:
            self.fail(key, f"= {value} is below {minimum}; use an integer of at least {minimum}")
        return value

    def nonneg_int(self, key, value) -> int:
        return self.count(key, value, 0)

    def positive_int(self, key, value) -> int:
        return self.count(key, value, 1)

    def boolean(self, key, value) -> bool:
        self.want(key, value, isinstance(value, bool), "true or false")
        return value

    def choice(self, options):
        listed = ", ".join(f'"{o}"' for o in options)

        def check(key, value):
            self.want(key, value, isinstance(value, str), f"one of {listed}")
            if value not in options:
                self.fail(key, f"= {_shown(value)} is not one of {listed}; use one of them")
            return value

        return check

    def margin(self, key, value) -> float:
        pct = _percent_number(value)
        if pct is None or pct > 100:
            self.fail(key, f"= {_shown(value)} is not a percentage from 0% to 100%; use one like \"20%\"")
        return pct / 100

    def argv(self, key, value) -> tuple[str, ...]:
        example = 'a list of strings, the command and its arguments, e.g. ["notify-send", "qex"]'
        self.want(key, value, isinstance(value, list), example)
        if not value:
            self.fail(key, f"is an empty list; give the command to run ({example}), or remove the key")
        for item in value:
            self.want(key, item, isinstance(item, str), "a list of strings")
            if "\0" in item:
                self.fail(key, "holds a NUL character, which no command line can carry; remove it")
        if not value[0]:
            self.fail(key, "starts with an empty program name; put the program first")
        return tuple(value)

    def states(self, key, value) -> tuple[str, ...]:
        self.want(key, value, isinstance(value, list), "a list of state names, e.g. [\"failed\", \"oom\"]")
        for item in value:
            self.want(key, item, isinstance(item, str), "a list of state names")
            if item not in FINAL_STATES:
                listed = ", ".join(FINAL_STATES)
                self.fail(key, f"names {_shown(item)}, which is not a final state; use some of {listed}")
        return tuple(dict.fromkeys(value))

    def abs_dir(self, key, value) -> str:
        self.want(key, value, isinstance(value, str), "an absolute directory path")
        if not os.path.isabs(value) or "\0" in value:
            self.fail(key, f"= {_shown(value)} is not an absolute path; give a path that starts with /")
        return value

    # -- the tables --

    def schema(self):
        return {
            "budget": {"cpu": ("budget_cpu", self.budget_cpu), "mem": ("budget_mem", self.budget_mem)},
            "system": {"reserve_mem": ("reserve_mem", self.size)},
            "enforce": {"mode": ("mode", self.choice(tuple(MODES)))},
            "queue": {
                "oversized": ("oversized", self.choice(OVERSIZED)),
                "max_bypass": ("max_bypass", self.nonneg_int),
            },
            "defaults": {
                "cpu": ("default_cpu", self.cpu_claim),
                "mem": ("default_mem", self.mem_claim),
                "timeout": ("default_timeout", self.optional_duration),
                "vram": ("default_vram", self.optional_positive_size),
                "max_queue_time": ("default_max_queue_time", self.optional_duration),
                "oom_retries": ("default_oom_retries", self.nonneg_int),
                "retries": ("default_retries", self.nonneg_int),
            },
            "logs": {"max_bytes": ("logs_max_bytes", self.log_limit)},
            "hooks": {
                "on_stop": ("hook_on_stop", self.argv),
                "on_stop_states": ("hook_states", self.states),
                "timeout": ("hook_timeout", self.duration),
            },
            "learn": {"enabled": ("learn_enabled", self.boolean), "margin": ("learn_margin", self.margin)},
            "peers": {"dir": ("peers_dir", self.abs_dir)},
            "store": {
                "max_age": ("store_max_age", self.duration),
                "max_records": ("store_max_records", self.positive_int),
            },
        }

    def build(self, data: dict) -> Config:
        values, keys = self.read(data)
        return assemble(self.path, values, keys)

    def read(self, data: dict) -> tuple[dict, list[str]]:
        """The values the file sets (by Config field), and their keys ("budget.cpu", "pool")."""
        schema = self.schema()
        tables = sorted([*schema, "pool"])
        values: dict = {}
        keys: list[str] = []
        for table, content in data.items():
            if table == "pool":
                values["pools"] = self.pools(content)
                keys.append("pool")
                continue
            if table not in schema:
                kind = "table" if isinstance(content, dict) else "key"
                shown = f"[{units.safe_text(table, 60)}]" if kind == "table" else units.safe_text(table, 60)
                _fail(self.path, f"unknown {kind} {shown}{_did_you_mean(table, tables)}; the tables are "
                      + ", ".join(f"[{t}]" if t != "pool" else "[[pool]]" for t in tables) + "; remove or rename it")
            if not isinstance(content, dict):
                _fail(self.path, f"{units.safe_text(table, 60)} must be a table [{table}], not {_type_name(content)}; "
                      f"write it as [{table}] with its keys below")
            for key, value in content.items():
                where = f"[{table}] {units.safe_text(key, 60)}"
                if key not in schema[table]:
                    hint, keys_of = _did_you_mean(key, schema[table]), ", ".join(schema[table])
                    _fail(self.path, f"unknown key {where}{hint}; the keys of [{table}] are {keys_of}; remove or rename it")
                attr, parse = schema[table][key]
                values[attr] = parse(where, value)
                keys.append(f"{table}.{key}")
        return values, keys

    def pools(self, content) -> tuple[PoolDef, ...]:
        if isinstance(content, dict):
            _fail(self.path, "[pool] must be written [[pool]] (one [[pool]] per pool); add the second bracket")
        if not isinstance(content, list) or not all(isinstance(p, dict) for p in content):
            _fail(self.path, "pool must be a list of tables; write each pool as [[pool]] with its keys below")
        pools, seen = [], {}
        for k, table in enumerate(content, start=1):
            pool = self.pool(k, table)
            norm = _env_part(pool.name)
            if norm in seen:
                j, other = seen[norm]
                same = "the same name as" if other == pool.name else f"a name that shares its variables with {other} in"
                _fail(self.path, f"[[pool]] #{k} name={pool.name} has {same} [[pool]] #{j}; give each its own name")
            seen[norm] = (k, pool.name)
            pools.append(pool)
        envs = {}
        for k, pool in enumerate(pools, start=1):
            if pool.env is not None:
                if pool.env in envs:
                    j = envs[pool.env]
                    _fail(self.path, f"[[pool]] #{k} name={pool.name} gives its devices in {pool.env}, "
                          f"as [[pool]] #{j} does; give each pool its own env")
                envs[pool.env] = k
        return tuple(pools)

    def pool(self, k: int, table: dict) -> PoolDef:
        import re

        name = table.get("name")
        label = f"[[pool]] #{k}" + (f" name={units.safe_text(name, 60)}" if isinstance(name, str) else "")
        allowed = ("name", "count", "devices", "size", "env")
        for key in table:
            if key not in allowed:
                _fail(self.path, f"{label}: unknown key {units.safe_text(key, 60)}{_did_you_mean(key, allowed)}; "
                      "the keys of a pool are " + ", ".join(allowed) + "; remove or rename it")
        if name is None:
            _fail(self.path, f'{label} has no name; add name = "gpu" (or another name)')
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name, re.ASCII):
            rule = "use 1 to 64 letters, digits, '-' or '_'"
            _fail(self.path, f"{label}: name = {_shown(name)} is not a pool name; {rule}")
        if name.lower() in RESERVED_POOL_NAMES:
            _fail(self.path, f"{label}: the name {name} is reserved for the budget (cpu and mem are not pools); "
                  "set [budget] cpu/mem instead, or choose another name")
        has_count, has_devices = "count" in table, "devices" in table
        if has_count and has_devices:
            _fail(self.path, f"{label} has both count and devices; keep count for a pool of plain units, "
                  "or devices for a pool of devices with a size each")
        if not has_count and not has_devices:
            _fail(self.path, f'{label} has neither count nor devices; add count = N (plain units) '
                  'or devices = ["24GB", ...] (one size per device)')
        if has_count:
            for key in ("size", "env"):
                if key in table:
                    _fail(self.path, f"{label}: {key} applies only to a pool with devices; remove it, "
                          f"or use devices instead of count (a plain pool's jobs get QEX_CLAIM_{_env_part(name)})")
            return PoolDef(name=name, count=self.positive_int(f"{label}: count", table["count"]))
        devices = table["devices"]
        if not isinstance(devices, list) or not devices:
            example = '["24GB", "24GB"]'
            _fail(self.path, f"{label}: devices must be a non-empty list of sizes, one per device, e.g. {example}")
        sizes = tuple(self.positive_size(f"{label}: devices[{i}]", d) for i, d in enumerate(devices))
        size_label = table.get("size", "vram")
        if not isinstance(size_label, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", size_label, re.ASCII):
            _fail(self.path, f'{label}: size = {_shown(size_label)} is not a label; use a word such as "vram" '
                  "(letters, digits, '-' or '_')")
        default_env = "CUDA_VISIBLE_DEVICES" if name == "gpu" else f"QEX_{_env_part(name)}_DEVICES"
        env = table.get("env", default_env)
        if not isinstance(env, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", env, re.ASCII):
            _fail(self.path, f"{label}: env = {_shown(env)} is not an environment variable name; "
                  f"use letters, digits and '_', not starting with a digit, e.g. {default_env}")
        return PoolDef(name=name, count=None, devices=sizes, size_label=size_label, env=env)



# -- the parsed-config cache (qex.config.cache): the checked values as JSON ----


def _cache_body(values: dict, keys: list[str]) -> dict:
    def plain(value):
        if isinstance(value, Percent):
            return {"percent": value.value}
        if isinstance(value, PoolDef):
            return {"pool": [value.name, value.count, list(value.devices), value.size_label, value.env]}
        if isinstance(value, tuple):
            return [plain(v) for v in value]
        return value

    return {"values": {attr: plain(v) for attr, v in values.items()}, "keys": list(keys)}


def _from_cache_body(path: str, body: dict) -> Config:
    """The Config a cache entry holds; raises (KeyError, TypeError, ValueError) on a damaged one."""
    values = {}
    for attr, value in body["values"].items():
        if attr not in _CACHED_FIELDS:
            raise KeyError(attr)
        if isinstance(value, dict):
            value = Percent(value["percent"])
        elif attr == "pools":
            value = tuple(PoolDef(name=n, count=c, devices=tuple(d), size_label=z, env=e)
                          for n, c, d, z, e in (p["pool"] for p in value))
        elif isinstance(value, list):
            value = tuple(value)
        values[attr] = value
    keys = body["keys"]
    if not isinstance(keys, list) or not all(k in SOURCE_KEYS for k in keys):
        raise ValueError("keys")
    config = assemble(path, values, keys)
    object.__setattr__(config, "from_cache", True)
    return config


def _env_part(name: str) -> str:
    return name.upper().replace("-", "_")


def _is_none_word(value) -> bool:
    return isinstance(value, str) and value.strip().lower() == "none"


def _did_you_mean(word, choices) -> str:
    import difflib

    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""
