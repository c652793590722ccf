"""The table of config keys (qex/config/keys.py) is the one place a key is
declared: every key in it is accepted by the reader, shown by `qex config
show` (text and --json), written in `qex help config` and carried by the
parsed-config cache; a key not in it is refused. And a key added to the table
alone reaches all of them."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from qex.base.errors import ConfigError
from qex.config import cache as config_cache
from qex.config import keys as config_keys
from qex.config.file import load_config
from qex.config.keys import KEYS
from qex.config.model import Config
from qex.config.read import Reader
from qex.config.show import WORDS, as_written, help_lines
from qex.config.text import parse_toml

GiB = 1024**3
FIELDS = [k for k in KEYS if k.name]  # the keys of a table ([[pool]] is a list of tables)


def write(tmp_path, text: str) -> str:
    path = tmp_path / "qex.toml"
    path.write_text(text)
    return str(path)


def test_each_key_has_one_field_parser_words_and_doc():
    assert len({k.key for k in KEYS}) == len({k.attr for k in KEYS}) == len(KEYS)
    fields = Config.field_names()
    assert fields == ("path", "exists", *(k.attr for k in KEYS), "sources")
    for key in KEYS:
        assert callable(getattr(Reader, key.parse)), key
        assert key.show in WORDS and key.doc and "\n" not in key.doc, key
        assert getattr(Config.default("/x"), key.attr) == key.default


@pytest.mark.parametrize("key", FIELDS, ids=lambda k: k.key)
def test_the_reader_knows_each_key(tmp_path, key):
    """Its default, as the file would say it, gives its default with the file as its source;
    a value it cannot take is refused as a bad value of that key, never as an unknown key."""
    if key.default not in (None, ()):
        path = write(tmp_path, f"[{key.section}]\n{key.name} = {as_written(key, key.default)}\n")
        config = load_config(path, env={})
        assert getattr(config, key.attr) == key.default and config.sources[key.key] == path
    path = write(tmp_path, f"[{key.section}]\n{key.name} = {{odd = 1}}\n")
    with pytest.raises(ConfigError) as e:
        load_config(path, env={})
    assert f"[{key.section}] {key.name} " in str(e.value) and "unknown" not in str(e.value)


@pytest.mark.parametrize("section", sorted({k.section for k in FIELDS}))
def test_an_unknown_key_of_each_table_is_refused_with_the_keys_of_the_table(tmp_path, section):
    names = [k.name for k in FIELDS if k.section == section]
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, f"[{section}]\n{names[0]}_x = 1\n"), env={})
    assert f"unknown key [{section}] {names[0]}_x (did you mean {names[0]}?)" in str(e.value)
    assert f"the keys of [{section}] are {', '.join(names)};" in str(e.value)


def test_an_unknown_table_is_refused_with_every_table(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, "[nope]\nx = 1\n"), env={})
    for section in {k.section for k in KEYS}:
        assert (f"[{section}]" if any(k.name for k in KEYS if k.section == section) else f"[[{section}]]") in str(
            e.value
        )


def test_config_show_and_help_have_every_key(tmp_path):
    config = load_config(write(tmp_path, '[[pool]]\nname = "gpu"\ndevices = ["8GB"]\n'), env={})
    shown = config.show_json(8, 16 * GiB, env={})["values"]
    assert list(shown) == [k.key for k in KEYS]
    rows = [key for key, _, _ in config.show(8, 16 * GiB, env={})]
    assert rows == [k.key for k in FIELDS] + ["pool.gpu"]
    lines = help_lines()
    for key in KEYS:
        line = next(ln for ln in lines if ln.split()[0] in (f"[{key.section}]", f"[[{key.section}]]"))
        assert key.name in line.split(" ", 3)[-1], (key, line)


def test_every_key_survives_the_cache(tmp_path):
    text = "".join(
        f"[{s}]\n"
        + "".join(
            f"{k.name} = {as_written(k, k.default)}\n" for k in FIELDS if k.section == s and k.default not in (None, ())
        )
        for s in dict.fromkeys(k.section for k in FIELDS)
    )
    path = str(tmp_path / "qex.toml")
    values, keys = Reader(path).read(parse_toml(path, text))
    assert set(keys) == {k.key for k in FIELDS if k.default not in (None, ())}
    again = config_cache.config_of(path, json.loads(json.dumps(config_cache.body_of(values, keys))))
    assert again == Reader(path).build(parse_toml(path, text)) and again.from_cache


ADDED = 'Key("queue.x_test", "x_test", int, "nonneg_int", 3, "text", "a key a test adds", help="= {default}"),\n'

ONE_MORE_KEY = """
import importlib.util, json, sys
import qex.config
spec = importlib.util.spec_from_loader("qex.config.keys", loader=None)
keys = importlib.util.module_from_spec(spec)
exec(compile(sys.argv[1], "keys.py", "exec"), keys.__dict__)
sys.modules["qex.config.keys"] = qex.config.keys = keys
from qex.base.errors import ConfigError
from qex.config import cache, file, read, show
from qex.config.text import parse_toml
path = sys.argv[2]
config = file.load_config(path, env={})
values, found = read.Reader(path).read(parse_toml(path, open(path).read()))
cached = cache.config_of(path, json.loads(json.dumps(cache.body_of(values, found))))
try:
    file.load_config(path + ".bad", env={})
    refused = ""
except ConfigError as e:
    refused = str(e)
print(json.dumps({"value": config.x_test, "default": file.Config.default(path).x_test, "cached": cached.x_test,
                  "json": config.show_json(4, 1 << 30, env={})["values"]["queue.x_test"],
                  "rows": [r for r in config.show(4, 1 << 30, env={}) if r[0] == "queue.x_test"],
                  "help": [ln for ln in show.help_lines() if ln.startswith("  [queue]")], "refused": refused}))
"""


def test_a_key_added_to_the_table_alone_reaches_the_reader_show_help_and_cache(tmp_path):
    source = pathlib.Path(config_keys.__file__).read_text()
    assert source.count(")  # fmt: skip") == 1
    source = source.replace(")  # fmt: skip", ADDED + ")  # fmt: skip")
    path = write(tmp_path, "[queue]\nx_test = 7\n")
    (tmp_path / "qex.toml.bad").write_text("[queue]\nx_tset = 7\n")
    proc = subprocess.run(
        [sys.executable, "-c", ONE_MORE_KEY, source, path],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert (got["value"], got["default"], got["cached"]) == (7, 3, 7)
    assert got["json"] == {"value": 7, "resolved": 7, "source": path}
    assert got["rows"] == [["queue.x_test", "7", path]]
    assert got["help"] == [
        '  [queue]    oversized = "run-when-idle" | "reject" | "queue",  max_bypass = 2,  x_test = 3'
    ]
    assert "unknown key [queue] x_tset (did you mean x_test?)" in got["refused"]
    assert "the keys of [queue] are oversized, max_bypass, x_test;" in got["refused"]
