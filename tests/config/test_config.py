"""The config file (qex/config/), read from real files in tmp_path."""

import os
import signal
import time

import pytest

from qex.base.errors import ConfigError
from qex.base.paths import config_path
from qex.config.file import load_config
from qex.config.keys import DEFAULT_HOOK_STATES, Percent, PoolDef, peer_dir
from qex.config.model import Config

GiB, MiB = 1024**3, 1024**2

SEED_EXAMPLE = """\
[[pool]]
name    = "gpu"
size    = "vram"
devices = ["24GB", "24GB", "24GB", "24GB"]
env     = "CUDA_VISIBLE_DEVICES"

[[pool]]
name  = "net"
count = 4
"""


@pytest.fixture
def alarm():
    """Fail (instead of hanging) a test that blocks for more than 5 seconds."""

    def on_alarm(signum, frame):
        raise TimeoutError("load_config blocked")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(5)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def write(tmp_path, text: str | bytes, name="qex.toml") -> str:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


def refused(path: str, *fragments: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(path, env={})
    message = str(e.value)
    assert path in message
    for fragment in fragments:
        assert fragment in message, message
    assert e.value.exit_code == 121
    return message


# -- where it is ---------------------------------------------------------------


def test_the_config_path_is_qex_config_else_xdg_config_home_else_home_dot_config(tmp_path):
    assert config_path({"QEX_CONFIG": "/etc/x.toml", "XDG_CONFIG_HOME": "/xdg"}) == "/etc/x.toml"
    assert config_path({"XDG_CONFIG_HOME": "/xdg"}) == "/xdg/qex.toml"
    assert config_path({}) == os.path.join(os.path.expanduser("~"), ".config", "qex.toml")


def test_load_uses_qex_config_from_env(tmp_path):
    path = write(tmp_path, "[queue]\nmax_bypass = 5\n", "mine.toml")
    config = load_config(env={"QEX_CONFIG": path})
    assert config.path == path and config.exists and config.max_bypass == 5


# -- missing and default -------------------------------------------------------


def test_missing_file_gives_the_defaults(tmp_path):
    path = str(tmp_path / "nope.toml")
    config = load_config(path, env={})
    assert config == Config.default(path)
    assert not config.exists and config.path == path
    assert config.budget_cpu == Percent(75) and config.budget_mem == Percent(75)
    assert config.reserve_mem is None  # unset: 10% of the machine's memory, at most 2GB
    assert config.resolve_reserve(64 * GiB) == 2 * GiB and config.resolve_reserve(2 * GiB) == 2 * GiB // 10
    assert config.mode == "cooperative" and config.oversized == "run-when-idle"
    assert config.max_bypass == 2
    assert config.default_cpu == 1000 and config.default_mem is None
    assert config.default_timeout is None and config.default_vram is None
    assert config.default_max_queue_time is None
    assert config.default_oom_retries == 1 and config.default_retries == 0
    assert config.logs_max_bytes == 32 * MiB
    assert config.hook_on_stop == () and config.hook_states == DEFAULT_HOOK_STATES
    assert config.hook_timeout == 30.0
    assert config.learn_enabled is True and config.learn_margin == pytest.approx(0.2)
    assert config.peers_dir is None
    assert config.store_max_age == 30 * 86400 and config.store_max_records == 10000
    assert config.pools == ()
    assert set(config.sources.values()) == {"default"}


def test_empty_file_gives_the_defaults_but_exists(tmp_path):
    config = load_config(write(tmp_path, ""), env={})
    assert config.exists and config.budget_cpu == Percent(75)


def test_a_budget_resolves_to_millicores_and_bytes_from_a_percent_or_an_amount():
    config = Config.default("/x")
    assert config.resolve_budget(8, 16 * GiB) == (6000, 12 * GiB)
    assert config.resolve_budget(3, 1000) == (2250, 750)
    assert Config(path="/x", budget_cpu=Percent(33.3)).resolve_budget(1, 100)[0] == 333
    assert Config(path="/x", budget_cpu=64000, budget_mem=GiB).resolve_budget(2, 4 * GiB) == (64000, GiB)


def test_default_claims_are_one_core_and_2gb_and_half_or_max_are_shares_of_the_budget():
    config = Config.default("/x")
    assert config.default_cpu_millicores(8, 16 * GiB) == 1000
    assert config.default_mem_bytes(8, 16 * GiB) == 2 * GiB
    half = Config(path="/x", default_cpu="half", default_mem="max")
    assert half.default_cpu_millicores(8, 16 * GiB) == 3000
    assert half.default_mem_bytes(8, 16 * GiB) == 12 * GiB


# -- files that are not regular files --------------------------------------------


def test_a_fifo_config_is_refused_within_a_second_naming_qex_config(tmp_path, alarm):
    path = str(tmp_path / "qex.toml")
    os.mkfifo(path)
    start = time.monotonic()
    message = refused(path, "FIFO", "regular file")
    assert time.monotonic() - start < 1.0
    assert "QEX_CONFIG" in message


def test_a_symlink_to_a_fifo_is_refused_as_a_fifo_without_blocking(tmp_path, alarm):
    fifo = str(tmp_path / "pipe")
    os.mkfifo(fifo)
    path = str(tmp_path / "qex.toml")
    os.symlink(fifo, path)
    refused(path, "FIFO")


def test_a_directory_config_is_refused_naming_its_path(tmp_path):
    path = str(tmp_path / "qex.toml")
    os.mkdir(path)
    refused(path, "is a directory")


def test_symlink_to_a_regular_file_is_followed(tmp_path):
    target = write(tmp_path, "[queue]\nmax_bypass = 3\n", "real.toml")
    path = str(tmp_path / "qex.toml")
    os.symlink(target, path)
    assert load_config(path, env={}).max_bypass == 3


def test_a_dangling_symlink_config_is_refused_as_a_link_to_a_missing_file(tmp_path):
    path = str(tmp_path / "qex.toml")
    os.symlink(str(tmp_path / "gone.toml"), path)
    refused(path, "symbolic link to a missing file")


def test_a_device_config_is_refused_without_blocking(alarm):
    with pytest.raises(ConfigError, match="device"):
        load_config("/dev/null", env={})


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_config_is_refused_with_the_chmod_remedy(tmp_path):
    path = write(tmp_path, "[queue]\nmax_bypass = 3\n")
    os.chmod(path, 0)
    refused(path, "permission denied", "chmod")


def test_path_through_a_file_is_refused(tmp_path):
    blocker = write(tmp_path, "x", "notadir")
    refused(os.path.join(blocker, "qex.toml"), "not a directory")


def test_a_config_over_2mib_is_refused_as_too_large(tmp_path):
    refused(write(tmp_path, "# " + "x" * (2 * MiB) + "\n"), "too large")


# -- bad text --------------------------------------------------------------------


def test_a_config_that_is_not_utf8_is_refused_naming_the_line(tmp_path):
    refused(write(tmp_path, b'[budget]\ncpu = "75\xff%"\n'), "not UTF-8", "line 2")


def test_a_config_starting_with_a_utf8_bom_is_read(tmp_path):
    assert load_config(write(tmp_path, "\ufeff[queue]\nmax_bypass = 1\n".encode()), env={}).max_bypass == 1


@pytest.mark.parametrize(
    "text", ["[budget\ncpu = 1\n", "cpu = \n", "[budget]\ncpu = 1\ncpu = 2\n", "a = [" * 2000, "[budget]\n[budget]\n"]
)
def test_invalid_toml_is_refused_with_the_remedy_fix_the_syntax(tmp_path, text):
    refused(write(tmp_path, text), "not valid TOML", "fix the syntax")


# -- unknown tables and keys -------------------------------------------------------


def test_unknown_key_names_table_key_and_file(tmp_path):
    message = refused(
        write(tmp_path, '[budget]\ncpux = "50%"\n'), "[budget] cpux", "did you mean cpu", "remove or rename"
    )
    assert "cpu, mem" in message


def test_an_unknown_table_is_refused_with_the_nearest_known_name(tmp_path):
    refused(write(tmp_path, "[bugdet]\ncpu = 1\n"), "unknown table [bugdet]", "did you mean budget")


def test_an_unknown_key_outside_any_table_is_refused_naming_it(tmp_path):
    refused(write(tmp_path, 'cpu = "50%"\n'), "unknown key cpu")


def test_a_table_name_given_a_plain_value_is_refused(tmp_path):
    refused(write(tmp_path, "budget = 3\n"), "must be a table")


# -- values ----------------------------------------------------------------------


def test_every_key_of_a_full_config_is_read_with_the_file_as_its_source(tmp_path):
    text = """
[budget]
cpu = "1.5"
mem = "48GB"
[system]
reserve_mem = "1GB"
stuck_after = "2h"
[enforce]
mode = "single-user"
[queue]
oversized = "reject"
max_bypass = 0
[defaults]
cpu = 0.5
mem = "guess"
timeout = "4h"
vram = "8GB"
max_queue_time = 3600
oom_retries = 0
retries = 2
[logs]
max_bytes = "none"
[hooks]
on_stop = ["notify-send", "qex"]
on_stop_states = ["failed", "oom", "failed"]
timeout = "10s"
[learn]
enabled = false
margin = "50%"
[gpu]
sample_every = "10s"
observe_every = 2
[peers]
dir = "/srv/qex-peers"
[store]
max_age = "7d"
max_records = 50
prune_every = "none"
[python]
max_input = "64MB"
[backend]
kind = "slurm"
partition = "gpu"
account = "lab"
qos = "high"
shard_size = "10GB"
sbatch_args = ["--exclusive"]
[politeness]
nice = 0
io_class = "idle"
oom_score_adj = -10
"""
    path = write(tmp_path, text)
    c = load_config(path, env={})
    assert c.budget_cpu == 1500 and c.budget_mem == 48 * GiB and c.reserve_mem == GiB and c.stuck_after == 7200
    assert c.mode == "single-user" and c.oversized == "reject" and c.max_bypass == 0
    assert c.default_cpu == 500 and c.default_mem == "guess"
    assert c.default_timeout == 4 * 3600 and c.default_vram == 8 * GiB and c.default_max_queue_time == 3600
    assert c.default_oom_retries == 0 and c.default_retries == 2
    assert c.logs_max_bytes is None
    assert c.hook_on_stop == ("notify-send", "qex") and c.hook_states == ("failed", "oom") and c.hook_timeout == 10
    assert c.learn_enabled is False and c.learn_margin == pytest.approx(0.5)
    assert c.peers_dir == "/srv/qex-peers"
    assert c.store_max_age == 7 * 86400 and c.store_max_records == 50 and c.store_prune_every is None
    assert c.python_max_input == 64 * 1024**2
    assert c.backend_kind == "slurm" and (c.slurm_partition, c.slurm_account, c.slurm_qos) == ("gpu", "lab", "high")
    assert c.slurm_sbatch_args == ("--exclusive",) and c.slurm_shard_size == 10 * GiB
    assert c.nice == 0 and c.io_class == "idle" and c.oom_score_adj == -10
    assert all(source == path for key, source in c.sources.items() if key not in ("pool", "system.max_pressure"))
    assert c.sources["pool"] == "default"


@pytest.mark.parametrize(
    "cpu, expected",
    [
        ('"50%"', Percent(50)),
        ('"100%"', Percent(100)),
        ("2", 2000),
        ('"1.5"', 1500),
        ("0.25", 250),
        ("64", 64000),
    ],  # fmt: skip
)
def test_budget_cpu_reads_a_percent_or_cores_written_as_a_number_or_a_string(tmp_path, cpu, expected):
    assert load_config(write(tmp_path, f"[budget]\ncpu = {cpu}\n"), env={}).budget_cpu == expected


@pytest.mark.parametrize("mem, expected", [('"60%"', Percent(60)), ('"16GB"', 16 * GiB), ("1073741824", GiB)])
def test_budget_mem_reads_a_percent_a_size_or_a_number_of_bytes(tmp_path, mem, expected):
    assert load_config(write(tmp_path, f"[budget]\nmem = {mem}\n"), env={}).budget_mem == expected


@pytest.mark.parametrize(
    "text, fragments",
    [
        ('[budget]\ncpu = "lots"\n', ["[budget] cpu", "'lots'", '"75%"']),
        ('[budget]\ncpu = "150%"\n', ["[budget] cpu", "above 100%", "absolute"]),
        ('[budget]\ncpu = "0%"\n', ["[budget] cpu", "not above 0%"]),
        ("[budget]\ncpu = 0\n", ["[budget] cpu", "positive number of cores"]),
        ("[budget]\ncpu = -2\n", ["[budget] cpu"]),
        ('[budget]\ncpu = "half"\n', ["[budget] cpu"]),
        ("[budget]\ncpu = true\n", ["[budget] cpu", "not a boolean"]),
        ("[budget]\ncpu = nan\n", ["[budget] cpu"]),
        ("[budget]\nmem = 0\n", ["[budget] mem"]),
        ('[budget]\nmem = "-1GB"\n', ["[budget] mem"]),
        ("[budget]\nmem = 1.5\n", ["[budget] mem", "not a number with a fraction"]),
        ('[system]\nreserve_mem = "x"\n', ["[system] reserve_mem", "512MB"]),
        ('[enforce]\nmode = "solo"\n', ["[enforce] mode", '"single-user"']),
        ('[queue]\noversized = "drop"\n', ["[queue] oversized", '"run-when-idle"']),
        ("[queue]\nmax_bypass = -1\n", ["[queue] max_bypass", "at least 0"]),
        ('[queue]\nmax_bypass = "2"\n', ["[queue] max_bypass", "not a string"]),
        ('[defaults]\ncpu = "0"\n', ["[defaults] cpu", "guess, half, full, max"]),
        ('[defaults]\nmem = "0"\n', ["[defaults] mem"]),
        ('[defaults]\ntimeout = "soon"\n', ["[defaults] timeout", "90s"]),
        ("[defaults]\ntimeout = 0\n", ["[defaults] timeout", "zero"]),
        ("[defaults]\ntimeout = -5\n", ["[defaults] timeout"]),
        ('[defaults]\nvram = "0"\n', ["[defaults] vram"]),
        ("[defaults]\noom_retries = 1.5\n", ["[defaults] oom_retries", "integer"]),
        ("[defaults]\nretries = -1\n", ["[defaults] retries"]),
        ('[logs]\nmax_bytes = "big"\n', ["[logs] max_bytes"]),
        ('[logs]\nmax_bytes = "1KB"\n', ["[logs] max_bytes", "below 4KB", "0 for no limit"]),
        ('[hooks]\non_stop = "notify-send"\n', ["[hooks] on_stop", "list of strings"]),
        ("[hooks]\non_stop = []\n", ["[hooks] on_stop", "empty list"]),
        ("[hooks]\non_stop = [1]\n", ["[hooks] on_stop"]),
        ('[hooks]\non_stop = [""]\n', ["[hooks] on_stop", "empty program name"]),
        ('[hooks]\non_stop_states = ["done"]\n', ["[hooks] on_stop_states", "'done'", "completed"]),
        ('[hooks]\ntimeout = "0s"\n', ["[hooks] timeout"]),
        ('[learn]\nenabled = "yes"\n', ["[learn] enabled", "true or false"]),
        ("[learn]\nmargin = 0.2\n", ["[learn] margin", '"20%"']),
        ('[learn]\nmargin = "200%"\n', ["[learn] margin"]),
        ('[peers]\ndir = "relative/dir"\n', ["[peers] dir", "absolute"]),
        ("[store]\nmax_records = 0\n", ["[store] max_records", "at least 1"]),
        ('[store]\nmax_age = "x"\n', ["[store] max_age"]),
        ("[store]\nmax_age = 1979-05-27\n", ["[store] max_age", "date"]),
    ],
)
def test_a_bad_value_of_any_key_is_refused_naming_the_table_the_key_and_the_forms(tmp_path, text, fragments):
    refused(write(tmp_path, text), *fragments)


def test_logs_max_bytes_of_0_none_or_unlimited_means_no_limit(tmp_path):
    for value in ("0", '"0"', '"none"', '"unlimited"', '"Unlimited"'):
        assert load_config(write(tmp_path, f"[logs]\nmax_bytes = {value}\n"), env={}).logs_max_bytes is None
    assert load_config(write(tmp_path, '[logs]\nmax_bytes = "1MB"\n'), env={}).logs_max_bytes == MiB


def test_a_bad_value_with_control_characters_is_shown_without_them(tmp_path):
    message = refused(write(tmp_path, '[budget]\ncpu = "\\u001b[2J\\u202e"\n'), "[budget] cpu")
    assert "\x1b" not in message and "\u202e" not in message


# -- enforce.mode and sources --------------------------------------------------------


def test_single_user_mode_changes_the_defaults(tmp_path):
    c = load_config(write(tmp_path, '[enforce]\nmode = "single-user"\n'), env={})
    assert c.budget_cpu == Percent(90) and c.budget_mem == Percent(90) and c.reserve_mem is None
    assert c.resolve_reserve(64 * GiB) == 512 * MiB and c.resolve_reserve(2 * GiB) == 2 * GiB // 10
    assert c.sources["budget.cpu"] == "default (enforce.mode = single-user)"
    assert c.sources["system.reserve_mem"] == "default (enforce.mode = single-user)"
    assert c.sources["enforce.mode"] == c.path


def test_explicit_budget_wins_over_the_mode(tmp_path):
    path = write(tmp_path, '[enforce]\nmode = "single-user"\n[budget]\ncpu = "50%"\n')
    c = load_config(path, env={})
    assert c.budget_cpu == Percent(50) and c.budget_mem == Percent(90)
    assert c.sources["budget.cpu"] == path
    assert c.sources["budget.mem"] == "default (enforce.mode = single-user)"
    assert c.resolve_budget(4, 8 * GiB) == (2000, int(8 * GiB * 0.9))


def test_cooperative_mode_sources_say_default(tmp_path):
    c = load_config(write(tmp_path, '[enforce]\nmode = "cooperative"\n'), env={})
    assert c.sources["budget.cpu"] == "default" and c.budget_cpu == Percent(75)


# -- pools ---------------------------------------------------------------------


def test_the_seed_example_reads_as_a_pool_of_4_gpus_and_a_counted_pool_of_4(tmp_path):
    path = write(tmp_path, SEED_EXAMPLE)
    c = load_config(path, env={})
    assert c.pools == (
        PoolDef(name="gpu", count=None, devices=(24 * GiB,) * 4, size_label="vram", env="CUDA_VISIBLE_DEVICES"),
        PoolDef(name="net", count=4, devices=(), size_label="", env=None),
    )
    assert c.pool("gpu").indexed and c.pool("gpu").total == 4
    assert not c.pool("net").indexed and c.pool("net").total == 4
    assert c.pool("nope") is None
    assert c.sources["pool"] == path


def test_a_pool_variable_is_cuda_visible_devices_for_gpu_and_qex_name_devices_otherwise(tmp_path):
    text = '[[pool]]\nname = "gpu"\ndevices = ["8GB"]\n[[pool]]\nname = "fpga-x"\ndevices = [1024]\n'
    gpu, fpga = load_config(write(tmp_path, text), env={}).pools
    assert gpu.env == "CUDA_VISIBLE_DEVICES" and gpu.size_label == "vram"
    assert fpga.env == "QEX_FPGA_X_DEVICES" and fpga.devices == (1024,)


@pytest.mark.parametrize(
    "text, fragments",
    [
        ('[[pool]]\nname = "a"\ncount = 2\ndevices = ["1GB"]\n', ["[[pool]] #1 name=a", "both count and devices"]),
        ('[[pool]]\nname = "a"\n', ["[[pool]] #1 name=a", "neither count nor devices"]),
        (
            '[[pool]]\nname = "a"\ncount = 1\n[[pool]]\nname = "a"\ncount = 2\n',
            ["[[pool]] #2 name=a", "#1", "own name"],
        ),
        ('[[pool]]\nname = "a-b"\ncount = 1\n[[pool]]\nname = "A_B"\ncount = 2\n', ["[[pool]] #2 name=A_B", "#1"]),
        ('[[pool]]\nname = "cpu"\ncount = 1\n', ["[[pool]] #1 name=cpu", "reserved", "[budget]"]),
        ('[[pool]]\nname = "mem"\ncount = 1\n', ["[[pool]] #1 name=mem", "reserved"]),
        ('[[pool]]\nname = "MEM"\ncount = 1\n', ["[[pool]] #1 name=MEM", "reserved"]),
        ("[[pool]]\ncount = 1\n", ["[[pool]] #1", "no name"]),
        ('[[pool]]\nname = "a b"\ncount = 1\n', ["[[pool]] #1", "not a pool name"]),
        ("[[pool]]\nname = 3\ncount = 1\n", ["[[pool]] #1", "not a pool name"]),
        ('[[pool]]\nname = "a"\ncount = 0\n', ["[[pool]] #1 name=a: count", "at least 1"]),
        ('[[pool]]\nname = "a"\ncount = true\n', ["[[pool]] #1 name=a: count"]),
        ('[[pool]]\nname = "a"\ndevices = []\n', ["[[pool]] #1 name=a", "non-empty list"]),
        ('[[pool]]\nname = "a"\ndevices = "24GB"\n', ["[[pool]] #1 name=a", "non-empty list"]),
        ('[[pool]]\nname = "a"\ndevices = ["24GB", "x"]\n', ["[[pool]] #1 name=a: devices[1]", "'x'"]),
        ('[[pool]]\nname = "a"\ndevices = ["0"]\n', ["[[pool]] #1 name=a: devices[0]", "zero"]),
        ('[[pool]]\nname = "a"\ncount = 2\nenv = "X"\n', ["[[pool]] #1 name=a: env", "only to a pool with devices"]),
        ('[[pool]]\nname = "a"\ncount = 2\nsize = "vram"\n', ["[[pool]] #1 name=a: size"]),
        ('[[pool]]\nname = "a"\ndevices = ["1GB"]\nenv = "1X"\n', ["[[pool]] #1 name=a: env", "environment variable"]),
        ('[[pool]]\nname = "a"\ndevices = ["1GB"]\nsize = 3\n', ["[[pool]] #1 name=a: size"]),
        ('[[pool]]\nname = "a"\ncount = 2\ncolour = "red"\n', ["[[pool]] #1 name=a: unknown key colour"]),
        (
            '[[pool]]\nname = "a"\ndevices = ["1GB"]\nenv = "E"\n[[pool]]\nname = "b"\ndevices = ["1GB"]\nenv = "E"\n',
            ["[[pool]] #2 name=b", "#1"],
        ),
        ('[pool]\nname = "a"\ncount = 2\n', ["[[pool]]", "second bracket"]),
        ("pool = 3\n", ["list of tables"]),
    ],
)
def test_a_bad_pool_definition_is_refused_naming_the_pool_and_what_is_wrong(tmp_path, text, fragments):
    refused(write(tmp_path, text), *fragments)


# -- peers ---------------------------------------------------------------------


def test_peer_dir_env_wins_over_the_file(tmp_path):
    c = load_config(write(tmp_path, '[peers]\ndir = "/srv/p"\n'), env={})
    assert peer_dir(c, {}) == "/srv/p"
    assert peer_dir(c, {"QEX_PEER_DIR": "/env/p"}) == "/env/p"
    assert peer_dir(Config.default("/x"), {}) == "/tmp/qex-peers"


# -- config show ---------------------------------------------------------------


def test_config_show_gives_each_value_resolved_with_its_source_in_rows_and_json(tmp_path):
    path = write(tmp_path, '[enforce]\nmode = "single-user"\n[budget]\ncpu = "50%"\n' + SEED_EXAMPLE)
    c = load_config(path, env={})
    rows = {key: (words, source) for key, words, source in c.show(8, 16 * GiB, env={})}
    assert rows["budget.cpu"] == ("50% of 8 cores = 4 cores", path)
    assert rows["budget.mem"][1] == "default (enforce.mode = single-user)"
    assert "24GB" in rows["pool.gpu"][0] and "CUDA_VISIBLE_DEVICES" in rows["pool.gpu"][0]
    assert rows["pool.net"][0] == "4 units"
    assert rows["peers.dir"] == ("/tmp/qex-peers", "default")
    data = c.show_json(8, 16 * GiB, env={"QEX_PEER_DIR": "/e"})
    assert data["path"] == path and data["exists"] is True
    values = data["values"]
    assert values["budget.cpu"] == {"value": "50%", "resolved": 4.0, "source": path}
    assert values["budget.mem"]["resolved"] == int(16 * GiB * 0.9)
    assert values["defaults.mem"] == {"value": None, "resolved": 2 * GiB, "source": "default"}
    assert values["peers.dir"] == {"value": None, "resolved": "/e", "source": "environment (QEX_PEER_DIR)"}
    assert [p["name"] for p in values["pool"]["value"]] == ["gpu", "net"]
    import json

    json.dumps(data)  # all of it is JSON


def test_show_says_an_absolute_budget_is_above_the_machine():
    rows = {k: w for k, w, _ in Config(path="/x", budget_cpu=16000, budget_mem=64 * GiB).show(4, 8 * GiB, env={})}
    assert "above" in rows["budget.cpu"] and "above" in rows["budget.mem"]
