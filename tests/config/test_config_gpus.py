"""A GPU pool in the config (issue 32): devices by index or UUID, a list of
variables, the fence; what a job's environment gets from each (PoolDef.job_env);
the parsed-config cache gives back what parsing gives."""

import json

import pytest

from qex.base.errors import ConfigError
from qex.config import cache as config_cache
from qex.config.keys import PoolDef
from qex.config.read import Reader
from qex.config.text import parse_toml

GiB = 1024**3


def pools(tmp_path, text: str) -> tuple[PoolDef, ...]:
    path = str(tmp_path / "qex.toml")
    return Reader(path).build(parse_toml(path, text)).pools


def refused(tmp_path, text: str) -> str:
    with pytest.raises(ConfigError) as e:
        pools(tmp_path, text)
    return str(e.value)


MIXED = """
[[pool]]
name = "gpu"
devices = [
  { index = 2, size = "80GB", name = "NVIDIA A100-SXM4-80GB" },
  { uuid = "MIG-aaaa-bbbb", size = 10737418240 },
  "24GB",
]
"""


def test_two_devices_that_name_one_index_are_refused(tmp_path):
    message = refused(tmp_path, MIXED)  # "24GB" is at place 2, and the first says index = 2
    assert "devices[2]" in message and "devices[0]" in message and "once" in message


def test_device_ids_are_what_the_job_is_given(tmp_path):
    (gpu,) = pools(tmp_path, MIXED.replace("index = 2", "index = 5"))
    assert gpu.ids == ("5", "MIG-aaaa-bbbb", "2") and gpu.names == ("NVIDIA A100-SXM4-80GB", "", "")
    assert gpu.job_env([0, 1]) == {"CUDA_VISIBLE_DEVICES": "5,MIG-aaaa-bbbb", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    (plain,) = pools(tmp_path, '[[pool]]\nname = "gpu"\ndevices = ["8GB", { size = "8GB", index = 1 }]\n')
    assert plain.ids == () and plain.names == ()  # as before: the place is the index


@pytest.mark.parametrize(
    "device, fragments",
    [
        ("{ index = 0 }", ["devices[0] has no size"]),
        ('{ size = "8GB", index = 0, uuid = "GPU-1" }', ["both index and uuid"]),
        ('{ size = "8GB", uuid = "0" }', ["not a device UUID", "MIG-"]),
        ('{ size = "8GB", idx = 0 }', ["unknown key idx", "did you mean index"]),
        ('{ size = "8GB", index = -1 }', ["index", "at least 0"]),
        ('{ size = "8GB", name = 3 }', ["name", "model"]),
    ],
)
def test_a_bad_device_table_is_refused_naming_it(tmp_path, device, fragments):
    message = refused(tmp_path, f'[[pool]]\nname = "gpu"\ndevices = [{device}]\n')
    assert "[[pool]] #1 name=gpu: devices[0]" in message
    for fragment in fragments:
        assert fragment in message, message


def test_the_fence_is_on_for_gpu_and_set_by_fence(tmp_path):
    gpu, npu = pools(tmp_path, '[[pool]]\nname = "gpu"\ndevices = ["8GB"]\n[[pool]]\nname = "npu"\ndevices = ["8GB"]\n')
    assert gpu.fenced and gpu.fence is None and not npu.fenced
    assert gpu.job_env(None) == {"CUDA_VISIBLE_DEVICES": ""} and npu.job_env(None) == {}
    off, on = pools(
        tmp_path,
        '[[pool]]\nname = "gpu"\ndevices = ["8GB"]\nfence = false\n'
        '[[pool]]\nname = "npu"\ndevices = ["8GB"]\nfence = true\n',
    )
    assert not off.fenced and off.job_env(None) == {}
    assert on.fenced and on.job_env(None) == {"QEX_NPU_DEVICES": ""}
    assert "fence" in refused(tmp_path, '[[pool]]\nname = "gpu"\ndevices = ["8GB"]\nfence = "yes"\n')
    assert "applies only to a pool with devices" in refused(tmp_path, '[[pool]]\nname = "n"\ncount = 1\nfence = true\n')


def test_a_list_of_variables_each_get_the_value_and_their_own_no_device(tmp_path):
    (gpu,) = pools(
        tmp_path,
        '[[pool]]\nname = "gpu"\ndevices = ["8GB", "8GB"]\n'
        'env = ["HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "QEX_X"]\n',
    )
    assert gpu.variables == ("HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "QEX_X")
    assert gpu.job_env([1]) == dict.fromkeys(gpu.variables, "1")  # no CUDA_VISIBLE_DEVICES: no order variable
    assert gpu.job_env(None) == {"HIP_VISIBLE_DEVICES": "-1", "GPU_DEVICE_ORDINAL": "-1", "QEX_X": ""}
    (rocr,) = pools(tmp_path, '[[pool]]\nname = "gpu"\ndevices = ["8GB"]\nenv = "ROCR_VISIBLE_DEVICES"\n')
    assert rocr.job_env(None) == {"ROCR_VISIBLE_DEVICES": "-1"}


@pytest.mark.parametrize(
    "env, fragment",
    [
        ('["ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"]', "ROCR_VISIBLE_DEVICES first"),
        ('["ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"]', "numbers the devices it leaves from 0"),
        ("[]", "name each variable once"),
        ('["A", "A"]', "name each variable once"),
        ('["A", 1]', "not an environment variable name"),
        ('["1A"]', "not an environment variable name"),
    ],
)
def test_a_bad_list_of_variables_is_refused(tmp_path, env, fragment):
    assert fragment in refused(tmp_path, f'[[pool]]\nname = "gpu"\ndevices = ["8GB"]\nenv = {env}\n')


def test_two_pools_cannot_share_a_variable_of_a_list(tmp_path):
    message = refused(
        tmp_path,
        '[[pool]]\nname = "gpu"\ndevices = ["8GB"]\nenv = ["A", "B"]\n'
        '[[pool]]\nname = "npu"\ndevices = ["8GB"]\nenv = "B"\n',
    )
    assert "[[pool]] #2 name=npu gives its devices in B" in message


def test_the_cache_gives_back_what_parsing_gives(tmp_path):
    text = MIXED.replace("index = 2", "index = 5") + 'env = ["CUDA_VISIBLE_DEVICES", "QEX_X"]\nfence = false\n'
    path = str(tmp_path / "qex.toml")
    values, keys = Reader(path).read(parse_toml(path, text))
    parsed = Reader(path).build(parse_toml(path, text))
    again = config_cache.config_of(path, json.loads(json.dumps(config_cache.body_of(values, keys))))
    assert again == parsed and again.pools[0].env == ("CUDA_VISIBLE_DEVICES", "QEX_X")


def test_config_show_words_the_fence_and_the_ids(tmp_path):
    path = str(tmp_path / "qex.toml")
    config = Reader(path).build(parse_toml(path, MIXED.replace("index = 2", "index = 5")))
    rows = {k: v for k, v, _ in config.show(8, 64 * GiB, env={})}
    assert "indices and UUIDs in CUDA_VISIBLE_DEVICES" in rows["pool.gpu"] and "fence" in rows["pool.gpu"]
    pool = config.show_json(8, 64 * GiB, env={})["values"]["pool"]["value"][0]
    assert (
        pool["ids"] == ["5", "MIG-aaaa-bbbb", "2"] and pool["fence"] is True and pool["env"] == "CUDA_VISIBLE_DEVICES"
    )
