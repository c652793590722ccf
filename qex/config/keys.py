"""Every key of the config file, declared once: ``KEYS``.

One row per key: where it is in the file, the ``Config`` field that holds it,
what it holds, the reader's parser for it, its default, how ``qex config
show`` words it, and one line on what it means. Everything else is derived
from this table, so a key added here reaches all of it:

- the tables and keys the reader accepts, and its "unknown key ... (did you
  mean ...)" refusals (qex/config/read.py);
- the fields of ``Config`` and their defaults, the sources ("default", the
  file, ``default (enforce.mode = ...)``) (qex/config/model.py);
- the body of the parsed-config cache (qex/config/cache.py);
- ``qex config show``, text and ``--json``, and the key lines of ``qex help
  config`` (qex/config/show.py).

Above the table: the values a config holds that are more than a number or a
word (``Percent``: ``[budget] cpu = "75%"``; ``PoolDef``: a ``[[pool]]``), and
the rules that resolve a setting on this machine (``resolve_word``: a claim
word against a budget; ``peer_dir``: the peer directory in force).

Importing this module imports no parser: a config read from the cache needs
the table (its fields, defaults, sources) but never the reader, whose parsers
the table names as text (``parse``), as it names ``config show``'s words
(``show``). (It is one module, not two, for the start-up of every command.)
"""

from __future__ import annotations

import os

from qex.base.plain import Plain
from qex.base.states import FINAL_RAN

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Mapping

DEFAULT_PEER_DIR = "/tmp/qex-peers"
PEER_DIR_ENV = "QEX_PEER_DIR"
BACKEND_ENV = "QEX_BACKEND"
BACKENDS = ("local", "slurm")


class Percent(Plain, frozen=True):
    """A share of the machine, above 0 and at most 100."""

    value: float

    def __init__(self, value):
        value = float(value)
        if not (0 < value <= 100):
            raise ValueError(f"a percentage must be above 0 and at most 100, not {value!r}")
        super().__init__(value)

    def of(self, total: int) -> int:
        """This share of ``total``, rounded down, in exact arithmetic on the
        decimal the percentage is written as (33.3% of 1000 is 333, not 332)."""
        num, den = _exact_decimal(repr(self.value))
        return num * total // (den * 100)

    def __str__(self) -> str:
        return f"{self.value:g}%"


def _exact_decimal(text: str) -> tuple[int, int]:
    """``"33.3"`` -> (333, 10), ``"1e-05"`` -> (1, 100000): what ``Fraction(text)``
    gives for a float's repr, without importing fractions (and decimal)."""
    mantissa, _, exp = text.partition("e")
    whole, _, frac = mantissa.partition(".")
    num, den = int(whole + frac), 10 ** len(frac)
    shift = int(exp) if exp else 0
    if shift >= 0:
        return num * 10**shift, den
    return num, den * 10**-shift


# What "no device" is in each variable a pool may give its devices in (the fence):
# CUDA reads an empty list as none; ROCm documents its variables as the list of the
# devices exposed and names no value for none, so qex writes -1, an index no device
# has (HIP's runtime reads an empty HIP_VISIBLE_DEVICES as its default: unset).
# Any other name: "". (docs/gpus.md)
NO_DEVICE = {
    "CUDA_VISIBLE_DEVICES": "",
    "ROCR_VISIBLE_DEVICES": "-1",
    "HIP_VISIBLE_DEVICES": "-1",
    "GPU_DEVICE_ORDINAL": "-1",
}
# Given with device indices in CUDA_VISIBLE_DEVICES, so that index N is nvidia-smi's
# GPU N (CUDA's own default order is fastest first).
DEVICE_ORDER = ("CUDA_DEVICE_ORDER", "PCI_BUS_ID")


class PoolDef(Plain, frozen=True):
    """A ``[[pool]]``: plain (``count`` units, no devices) or indexed (one
    capacity in bytes per device, ``env`` receives the devices).
    ``size_label`` says what a device's capacity is (``vram``); it is empty for
    a plain pool.

    ``env`` is as written: one variable's name, or a tuple of names, each
    given the same value (``variables``). ``ids`` says what those variables
    name for each device when the config says (a device's ``index`` or
    ``uuid``, as text); empty: each device is named by its position. ``names``
    are the models the config gives (``""`` where none). ``fence`` as written
    (None: unset; ``fenced`` resolves it: on for the pool ``gpu``).
    """

    name: str
    count: int | None
    devices: tuple[int, ...] = ()
    size_label: str = ""
    env: str | tuple[str, ...] | None = None
    fence: bool | None = None
    ids: tuple[str, ...] = ()
    names: tuple[str, ...] = ()

    @property
    def indexed(self) -> bool:
        return bool(self.devices)

    @property
    def total(self) -> int:
        """Units a claim may take: the count, or the number of devices."""
        return len(self.devices) if self.devices else (self.count or 0)

    @property
    def variables(self) -> tuple[str, ...]:
        """The names of the variables that receive the devices."""
        return (self.env,) if isinstance(self.env, str) else tuple(self.env or ())

    @property
    def fenced(self) -> bool:
        """Whether a job with no claim on the pool gets its variables set to no device."""
        return bool(self.variables) and (self.name == "gpu" if self.fence is None else self.fence)

    def device_id(self, d: int) -> str:
        """What the variables name for device ``d``: its index, or its UUID."""
        return self.ids[d] if self.ids else str(d)

    def job_env(self, devices: list[int] | None) -> dict[str, str]:
        """The variables a job gets from this pool: ``devices`` (qex's numbers of
        those it was given) named as the config says, with CUDA_DEVICE_ORDER
        beside device indices in CUDA_VISIBLE_DEVICES; with no claim (None), no
        device where the pool is fenced, else nothing (as captured)."""
        names = self.variables
        if devices is None:
            return {n: NO_DEVICE.get(n, "") for n in names} if self.fenced else {}
        value = ",".join(self.device_id(d) for d in devices)
        out = dict.fromkeys(names, value)
        if "CUDA_VISIBLE_DEVICES" in names:
            out[DEVICE_ORDER[0]] = DEVICE_ORDER[1]
        return out


def resolve_word(word: str, budget: int) -> int:
    """A claim word against a budget: ``guess``/``half`` = half, ``full``/``max`` = all."""
    if word in ("guess", "half"):
        return budget // 2
    if word in ("full", "max"):
        return budget
    raise ValueError(f"not a claim word: {word!r}")


def backend(config: object, env: Mapping[str, str] = os.environ) -> str:
    """The backend in force: ``$QEX_BACKEND`` (local or slurm), else ``[backend] kind``.
    A value of the variable that names no backend is refused (ConfigError, 121)."""
    word = env.get(BACKEND_ENV)
    if not word:
        return config.backend_kind
    if word not in BACKENDS:
        from qex.base import units
        from qex.base.errors import ConfigError

        raise ConfigError(
            f"{BACKEND_ENV}={units.safe_text(word)!r} names no backend; use local or slurm, "
            "or unset it to use [backend] kind"
        )
    return word


def peer_dir(config: object, env: Mapping[str, str] = os.environ) -> str:
    """The peer directory: ``$QEX_PEER_DIR``, else ``[peers] dir``, else /tmp/qex-peers."""
    return env.get(PEER_DIR_ENV) or config.peers_dir or DEFAULT_PEER_DIR


# ---- the table --------------------------------------------------------------------

MiB, GiB = 1024**2, 1024**3


class Key:
    """One key of the config file (see the module's docstring); its fields:

    ``key``      "budget.cpu": the table and the key in it; "pool": a list of tables ([[pool]])
    ``attr``     the Config field that holds it
    ``type``     what that field holds: cores in millicores, sizes in bytes, times in seconds
    ``parse``    the reader's parser for it: a method of qex.config.read.Reader
    ``default``  its value when the file does not set it (enforce.mode may change it: MODES)
    ``show``     how `qex config show` words it: a name in qex.config.show.WORDS
    ``doc``      what it means, in one line
    ``help``     what `qex help config` writes after its name ({default}, {options} filled in)
    ``options``  the words it takes, when it is a choice
    ``env``      the environment variable that wins over it

    ``section`` and ``name`` are the two parts of ``key`` (``name`` is "" for a
    list of tables). A plain class with slots: each command makes the table.
    """

    __slots__ = ("key", "attr", "type", "parse", "default", "show", "doc", "help", "options", "env", "section", "name")

    def __init__(
        self,
        key: str,
        attr: str,
        type: object,
        parse: str,
        default: object,
        show: str,
        doc: str,
        help: str = "",
        options: tuple[str, ...] = (),
        env: str = "",
    ):
        self.key, self.attr, self.type, self.parse, self.default = key, attr, type, parse, default
        self.show, self.doc, self.help, self.options, self.env = show, doc, help, options, env
        self.section, _, self.name = key.partition(".")

    def __repr__(self) -> str:
        return f"Key({self.key!r})"


# enforce.mode: the defaults each mode changes (those of "cooperative" are the table's).
# [system] reserve_mem unset is a share of the machine with a ceiling per mode (RESERVE_SHARE,
# RESERVE_MOST; resolved by ``Config.resolve_reserve``): single-user names it here so that
# its source says the mode, and keeps it unset.
MODES = {
    "cooperative": {},
    "single-user": {"budget.cpu": Percent(90), "budget.mem": Percent(90), "system.reserve_mem": None},
}
RESERVE_SHARE = Percent(10)  # the default reserve: this share of the machine's memory,
RESERVE_MOST = {"cooperative": 2 * GiB, "single-user": 512 * MiB}  # at most this, by enforce.mode
DEFAULT_HOOK_STATES = FINAL_RAN + ("expired",)
POOL_KEYS = ("name", "count", "devices", "size", "env", "fence")  # the keys of one [[pool]]
DEVICE_KEYS = ("size", "index", "uuid", "name")  # the keys of a device given as a table
IO_CLASSES = ("best-effort", "idle", "none")  # [politeness] io_class, --io-class (qex.linux.manners)

KEYS = (
    Key("budget.cpu", "budget_cpu", Percent | int, "budget_cpu", Percent(75), "budget_cpu",
        "the cores this queue's jobs may hold together: a share of the machine or a number of cores",
        help="= {default} | 6"),
    Key("budget.mem", "budget_mem", Percent | int, "budget_mem", Percent(75), "budget_mem",
        "the memory this queue's jobs may hold together: a share of the machine or a size",
        help='= {default} | "48GB"'),
    Key("system.reserve_mem", "reserve_mem", int | None, "size", None, "reserve",
        "memory kept for the machine: a job starts only when available memory less this covers its claim "
        "(unset: 10% of the machine's memory, at most 2GB; single-user: at most 512MB)",
        help='= "1GB" (unset: 10% of memory, at most 2GB)'),
    Key("system.stuck_after", "stuck_after", float, "duration", 3600.0, "duration",
        "how long a queued job may wait while none of its user's jobs run before status and "
        "submit --dedupe-key call it stuck", help="= {default}"),
    Key("system.max_pressure", "max_pressure", float | None, "pressure", None, "pressure",
        "no job starts while the machine's memory pressure (PSI some avg10 of /proc/pressure/memory, "
        "the share of the last 10 s some task waited for memory) is above this percentage (unset: off)",
        help='= "20%" (unset: off)'),
    Key("politeness.nice", "nice", int, "niceness", 10, "text",
        "the niceness every job runs at, absolute (a job's --nice wins); below its starter's needs root",
        help="= {default}"),
    Key("politeness.io_class", "io_class", str, "choice", "best-effort", "io_class",
        "the I/O class every job runs in: best-effort at its lowest priority, idle (disk time no one "
        "else wants), none (as its starter's); a job's --io-class wins", help="= {options}",
        options=IO_CLASSES),
    Key("politeness.oom_score_adj", "oom_score_adj", int, "oom_score_adj", 500, "text",
        "every job's oom_score_adj, so the kernel's OOM killer picks a batch job before a person's "
        "editor (-1000 to 1000; below its starter's needs root); a job's --oom-score-adj wins",
        help="= {default}"),
    Key("enforce.mode", "mode", str, "choice", "cooperative", "text",
        "a machine shared by several users, or by one: sets the defaults of the budget and the reserve",
        help="= {options}", options=tuple(MODES)),
    Key("queue.oversized", "oversized", str, "choice", "run-when-idle", "text",
        "what a claim above the budget does: runs alone when nothing else runs, is refused, or waits",
        help="= {options}", options=("run-when-idle", "reject", "queue")),
    Key("queue.max_bypass", "max_bypass", int, "nonneg_int", 2, "text",
        "how many later jobs may start past the front job while this queue's jobs hold what it waits for",
        help="= {default}"),
    Key("defaults.cpu", "default_cpu", str | int, "cpu_claim", 1000, "default_cpu",
        "the cores of a job that claims none: a number, or guess, half, full, max of the budget"),
    Key("defaults.mem", "default_mem", str | int | None, "mem_claim", None, "default_mem",
        "the memory of a job that claims none (unset: the machine's memory divided by its cores)"),
    Key("defaults.timeout", "default_timeout", float | None, "optional_duration", None, "optional_duration",
        "the time limit of a job that gives no --timeout (unset: none)"),
    Key("defaults.vram", "default_vram", int | None, "optional_positive_size", None, "vram",
        "the VRAM of a --gpu claim that gives no --vram (unset: whole devices)"),
    Key("defaults.max_queue_time", "default_max_queue_time", float | None, "optional_duration", None,
        "optional_duration", "how long a job that gives no --max-queue-time may wait to start (unset: forever)"),
    Key("defaults.oom_retries", "default_oom_retries", int, "nonneg_int", 1, "text",
        "retries, with the memory claim doubled, of a job the kernel stopped for memory (--oom-retries)"),
    Key("defaults.retries", "default_retries", int, "nonneg_int", 0, "text",
        "retries of a failed job that gives no --retries"),
    Key("logs.max_bytes", "logs_max_bytes", int | None, "log_limit", 32 * MiB, "per_stream",
        "the most each output stream of a job keeps, its head and its tail (0, none: no limit)",
        help='= {default}   (per stream; 0, "none", "unlimited": no limit; at least 4KB)'),
    Key("hooks.on_stop", "hook_on_stop", tuple[str, ...], "argv", (), "argv",
        "the command run once for each job that ends in one of on_stop_states (no shell)",
        help='= ["notify-send", "done"]'),
    Key("hooks.on_stop_states", "hook_states", tuple[str, ...], "states", DEFAULT_HOOK_STATES, "states",
        "the final states that run the stop hook", help="= [...]"),
    Key("hooks.timeout", "hook_timeout", float, "duration", 30.0, "duration",
        "how long the stop hook may run before TERM, then KILL", help="= {default}"),
    Key("learn.enabled", "learn_enabled", bool, "boolean", True, "yes_no",
        "whether a command's measured memory peak sets the memory claim of its next run without --mem",
        help="= {default}"),
    Key("learn.margin", "learn_margin", float, "margin", 0.2, "margin",
        'what the learner adds to the largest measured peak ("20%": the peak x 1.2)', help="= {default}"),
    Key("gpu.sample_every", "gpu_sample_every", float, "duration", 5.0, "duration",
        "how often a GPU job's supervisor samples the VRAM its processes use (the first sample: after 1 s)",
        help="= {default}"),
    Key("gpu.observe_every", "gpu_observe_every", float, "duration", 5.0, "duration",
        "how long the driver's report of VRAM in use is kept: a pass that admits a GPU claim reads it at most this often",
        help="= {default}"),
    Key("peers.dir", "peers_dir", str | None, "abs_dir", None, "peer_dir",
        "where the queues of this machine publish their claims to each other",
        help=f'= "{DEFAULT_PEER_DIR}"', env=PEER_DIR_ENV),
    Key("store.max_age", "store_max_age", float, "duration", 30 * 86400.0, "duration",
        "the age past which `qex clean --auto` removes an ended job's record", help="= {default}"),
    Key("store.max_records", "store_max_records", int, "positive_int", 10000, "text",
        "the most ended records `qex clean --auto` keeps", help="= {default}"),
    Key("store.prune_every", "store_prune_every", float | None, "optional_duration", 600.0, "optional_duration",
        "how often a supervisor whose job ended removes the records past max_age and max_records "
        '(none still needed); "none": never (qex clean --auto only)', help="= {default}"),
    Key("python.max_input", "python_max_input", int, "positive_size", 256 * MiB, "size",
        "the most a call of qex.Executor may take pickled (its function and arguments); a larger one is refused",
        help="= {default}"),
    Key("backend.kind", "backend_kind", str, "choice", "local", "backend",
        "where jobs run: on this machine (local, qex admits them), or on a Slurm cluster (slurm, "
        "sbatch submits them; see qex help slurm)", help="= {options}", options=BACKENDS, env=BACKEND_ENV),
    Key("backend.partition", "slurm_partition", str | None, "optional_word", None, "optional_text",
        "with kind slurm: the partition jobs are submitted to (sbatch --partition; unset: the cluster's default)",
        help='= "gpu"'),
    Key("backend.account", "slurm_account", str | None, "optional_word", None, "optional_text",
        "with kind slurm: the account jobs are charged to (sbatch --account; unset: the user's default)",
        help='= "lab"'),
    Key("backend.qos", "slurm_qos", str | None, "optional_word", None, "optional_text",
        "with kind slurm: the quality of service of the jobs (sbatch --qos; unset: the default)",
        help='= "normal"'),
    Key("backend.shard_size", "slurm_shard_size", int | None, "optional_positive_size", None, "shard",
        "with kind slurm: the VRAM one GPU shard of the cluster stands for (its `shard` gres); --vram then "
        "claims shards (unset: --vram gets whole GPUs, with a warning)", help='= "10GB"'),
    Key("backend.sbatch_args", "slurm_sbatch_args", tuple[str, ...], "arg_list", (), "argv",
        "with kind slurm: more sbatch options, given to every submission as written", help='= ["--exclusive"]'),
    Key("pool", "pools", tuple[PoolDef, ...], "pools", (), "pools",
        "the pools jobs claim: plain units (count), or devices with a size each (devices, size, env, fence)",
        help='name = "gpu", devices = ["24GB", "24GB"], env = "CUDA_VISIBLE_DEVICES", fence = true\n'
             'name = "gpu", devices = [{ index = 0, size = "80GB" }, { uuid = "MIG-...", size = "10GB" }]\n'
             'name = "net", count = 4'),
)  # fmt: skip

BY_KEY = {k.key: k for k in KEYS}
SOURCE_KEYS = tuple(BY_KEY)  # the keys `sources` has, in the file's order
