"""Reading the config file's tables and keys against the table of keys
(qex/config/keys.py): an unknown table or key is refused with the closest
known name, each value goes to the parser the table names for it
(qex/config/parse.py), and each ``[[pool]]`` is checked here.

Only a file that is not in the parsed-config cache is read: a command whose
config comes from the cache never imports this module (nor tomlkit).
"""

import re

from qex.base import names, numbers, units
from qex.config.keys import DEVICE_KEYS, KEYS, POOL_KEYS, Key, PoolDef
from qex.config.model import Config, assemble
from qex.config.parse import Checks, did_you_mean, fail, shown, type_name


def _tables() -> dict[str, dict[str, Key]]:
    tables: dict[str, dict[str, Key]] = {}
    for key in KEYS:
        if key.name:
            tables.setdefault(key.section, {})[key.name] = key
    return tables


TABLES = _tables()  # "budget" -> {"cpu": its Key, "mem": ...}, in the table's order
LISTS = {k.key: k for k in KEYS if not k.name}  # the lists of tables: "pool" ([[pool]])
_NAMES = sorted([*TABLES, *LISTS])
_LISTED = ", ".join(f"[[{t}]]" if t in LISTS else f"[{t}]" for t in _NAMES)


def read(path: str, data: dict) -> tuple[dict, list[str]]:
    """The values the TOML ``data`` of the file at ``path`` sets (by Config
    field), and their keys (``"budget.cpu"``, ``"pool"``)."""
    return Reader(path).read(data)


class Reader(Checks):
    """Checks the unwrapped TOML of one file, table by table, key by key."""

    def build(self, data: dict) -> Config:
        values, keys = self.read(data)
        return assemble(self.path, values, keys)

    def parse(self, key: Key, where: str, value: object) -> object:
        """``value`` checked by the parser the table names for ``key``."""
        check = getattr(self, key.parse)
        return check(where, value, key.options) if key.options else check(where, value)

    def read(self, data: dict) -> tuple[dict, list[str]]:
        """The values the file sets (by Config field), and their keys ("budget.cpu", "pool")."""
        values: dict = {}
        keys: list[str] = []
        for table, content in data.items():
            if table in LISTS:
                values[LISTS[table].attr] = self.parse(LISTS[table], table, content)
                keys.append(table)
                continue
            if table not in TABLES:
                kind = "table" if isinstance(content, dict) else "key"
                named = f"[{units.safe_text(table, 60)}]" if kind == "table" else units.safe_text(table, 60)
                fail(
                    self.path,
                    f"unknown {kind} {named}{did_you_mean(table, _NAMES)}; the tables are {_LISTED}; "
                    "remove or rename it",
                )
            if not isinstance(content, dict):
                fail(
                    self.path,
                    f"{units.safe_text(table, 60)} must be a table [{table}], not {type_name(content)}; "
                    f"write it as [{table}] with its keys below",
                )
            known = TABLES[table]
            for name, value in content.items():
                where = f"[{table}] {units.safe_text(name, 60)}"
                if name not in known:
                    hint, keys_of = did_you_mean(name, known), ", ".join(known)
                    fail(
                        self.path,
                        f"unknown key {where}{hint}; the keys of [{table}] are {keys_of}; remove or rename it",
                    )
                values[known[name].attr] = self.parse(known[name], where, value)
                keys.append(known[name].key)
        return values, keys

    # -- [[pool]] --

    def pools(self, where: str, content: object) -> tuple[PoolDef, ...]:
        if isinstance(content, dict):
            fail(self.path, "[pool] must be written [[pool]] (one [[pool]] per pool); add the second bracket")
        if not isinstance(content, list) or not all(isinstance(p, dict) for p in content):
            fail(self.path, "pool must be a list of tables; write each pool as [[pool]] with its keys below")
        pools, seen = [], {}
        for k, table in enumerate(content, start=1):
            pool = self.pool(k, table)
            norm = _env_part(pool.name)
            if norm in seen:
                j, other = seen[norm]
                same = "the same name as" if other == pool.name else f"a name that shares its variables with {other} in"
                fail(self.path, f"[[pool]] #{k} name={pool.name} has {same} [[pool]] #{j}; give each its own name")
            seen[norm] = (k, pool.name)
            pools.append(pool)
        envs = {}
        for k, pool in enumerate(pools, start=1):
            for var in pool.variables:
                if var in envs:
                    j = envs[var]
                    fail(
                        self.path,
                        f"[[pool]] #{k} name={pool.name} gives its devices in {var}, "
                        f"as [[pool]] #{j} does; give each pool its own env",
                    )
                envs[var] = k
        return tuple(pools)

    def pool(self, k: int, table: dict) -> PoolDef:
        name = table.get("name")
        label = f"[[pool]] #{k}" + (f" name={units.safe_text(name, 60)}" if isinstance(name, str) else "")
        for key in table:
            if key not in POOL_KEYS:
                fail(
                    self.path,
                    f"{label}: unknown key {units.safe_text(key, 60)}{did_you_mean(key, POOL_KEYS)}; "
                    "the keys of a pool are " + ", ".join(POOL_KEYS) + "; remove or rename it",
                )
        if name is None:
            fail(self.path, f'{label} has no name; add name = "gpu" (or another name)')
        if not isinstance(name, str) or not (names.is_pool_name(name) or names.is_reserved(name)):
            fail(self.path, f"{label}: name = {shown(name)} is not a pool name; {names.RULE}")
        if names.is_reserved(name):
            fail(
                self.path,
                f"{label}: the name {name} is reserved for the budget (cpu and mem are not pools); "
                "set [budget] cpu/mem instead, or choose another name",
            )
        has_count, has_devices = "count" in table, "devices" in table
        if has_count and has_devices:
            fail(
                self.path,
                f"{label} has both count and devices; keep count for a pool of plain units, "
                "or devices for a pool of devices with a size each",
            )
        if not has_count and not has_devices:
            fail(
                self.path,
                f"{label} has neither count nor devices; add count = N (plain units) "
                'or devices = ["24GB", ...] (one size per device)',
            )
        if has_count:
            for key in ("size", "env", "fence"):
                if key in table:
                    fail(
                        self.path,
                        f"{label}: {key} applies only to a pool with devices; remove it, "
                        f"or use devices instead of count (a plain pool's jobs get QEX_CLAIM_{_env_part(name)})",
                    )
            return PoolDef(name=name, count=self.positive_int(f"{label}: count", table["count"]))
        return self.device_pool(label, name, table)

    def device_pool(self, label: str, name: str, table: dict) -> PoolDef:
        sizes, ids, models = self.devices(label, table["devices"])
        size_label = table.get("size", "vram")
        if not isinstance(size_label, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", size_label, re.ASCII):
            fail(
                self.path,
                f'{label}: size = {shown(size_label)} is not a label; use a word such as "vram" '
                "(letters, digits, '-' or '_')",
            )
        env = self.env_names(label, name, table.get("env"))
        fence = table.get("fence")
        if fence is not None:
            self.boolean(f"{label}: fence", fence)
        return PoolDef(
            name=name, count=None, devices=sizes, size_label=size_label, env=env, fence=fence, ids=ids, names=models
        )

    def env_names(self, label: str, name: str, env: object) -> str | tuple[str, ...]:
        """``env`` as written: a name, or a list of names (a tuple); the default when unset."""
        default = "CUDA_VISIBLE_DEVICES" if name == "gpu" else f"QEX_{_env_part(name)}_DEVICES"
        if env is None:
            return default
        listed = env if isinstance(env, list) else [env]
        if not listed or len(set(map(str, listed))) != len(listed):
            fail(self.path, f"{label}: env = {shown(env)} must name each variable once; e.g. {default}")
        for var in listed:
            if not isinstance(var, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", var, re.ASCII):
                fail(
                    self.path,
                    f"{label}: env = {shown(var)} is not an environment variable name; "
                    f"use letters, digits and '_', not starting with a digit, e.g. {default}",
                )
        below = [v for v in listed if v in _AFTER_ROCR]
        if "ROCR_VISIBLE_DEVICES" in listed and below:
            fail(
                self.path,
                f"{label}: env lists ROCR_VISIBLE_DEVICES with {below[0]}, but ROCm applies "
                f"ROCR_VISIBLE_DEVICES first and numbers the devices it leaves from 0, so the same value "
                f'in {below[0]} names other devices or none; keep env = "ROCR_VISIBLE_DEVICES" '
                "(it hides devices from HIP and OpenCL too), or list the others without it",
            )
        return env if isinstance(env, str) else tuple(listed)

    def devices(self, label: str, devices: object) -> tuple[tuple[int, ...], tuple[str, ...], tuple[str, ...]]:
        """(sizes, ids, names) of ``devices = [...]``: each a size, or a table
        ``{ size, index | uuid, name }``. ids and names are empty when no table gives one."""
        if not isinstance(devices, list) or not devices:
            example = '["24GB", "24GB"]'
            fail(self.path, f"{label}: devices must be a non-empty list of sizes, one per device, e.g. {example}")
        if len(devices) > numbers.DEVICE + 1:
            fail(self.path, f"{label}: devices lists {len(devices)} devices; a pool has at most {numbers.DEVICE + 1}")
        sizes, ids, models = [], [], []
        for i, d in enumerate(devices):
            where = f"{label}: devices[{i}]"
            if not isinstance(d, dict):
                sizes.append(self.positive_size(where, d))
                ids.append(str(i))
                models.append("")
                continue
            size, device_id, model = self.device(where, d, i)
            sizes.append(size)
            ids.append(device_id)
            models.append(model)
        for i, device_id in enumerate(ids):
            if ids.index(device_id) != i:
                fail(
                    self.path,
                    f"{label}: devices[{i}] names the device {units.safe_text(device_id)} as "
                    f"devices[{ids.index(device_id)}] does; declare each device once",
                )
        plain_ids = ids == [str(i) for i in range(len(ids))]
        return tuple(sizes), (() if plain_ids else tuple(ids)), (tuple(models) if any(models) else ())

    def device(self, where: str, table: dict, i: int) -> tuple[int, str, str]:
        """(size, id, name) of one device given as a table."""
        for key in table:
            if key not in DEVICE_KEYS:
                fail(
                    self.path,
                    f"{where}: unknown key {units.safe_text(key, 60)}{did_you_mean(key, DEVICE_KEYS)}; "
                    "the keys of a device are " + ", ".join(DEVICE_KEYS) + "; remove or rename it",
                )
        if "size" not in table:
            fail(self.path, f'{where} has no size; add size = "24GB" (or a number of bytes)')
        if "index" in table and "uuid" in table:
            fail(self.path, f"{where} has both index and uuid; keep one: the job is given what it names")
        device_id = str(i)
        if "index" in table:
            device_id = str(self.nonneg_int(f"{where}: index", table["index"]))
        elif "uuid" in table:
            uuid = table["uuid"]
            if not isinstance(uuid, str) or not re.fullmatch(r"(GPU|MIG)-[A-Za-z0-9/_-]{1,120}", uuid, re.ASCII):
                fail(
                    self.path,
                    f"{where}: uuid = {shown(uuid)} is not a device UUID; give it as nvidia-smi -L "
                    "writes it, GPU-... or MIG-...",
                )
            device_id = uuid
        model = table.get("name", "")
        if not isinstance(model, str) or len(model) > 128 or not model.isprintable():
            fail(
                self.path,
                f"{where}: name = {shown(model)} is not a device's name; give the model as text, "
                "at most 128 printable characters",
            )
        return self.positive_size(f"{where}: size", table["size"]), device_id, model


# Variables read after ROCR_VISIBLE_DEVICES has filtered and renumbered the devices.
_AFTER_ROCR = ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")


def _env_part(name: str) -> str:
    return name.upper().replace("-", "_")
