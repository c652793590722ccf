"""The parsed-config cache (qex.config.cache): a hit gives what parsing gives,
any change to the file is seen, a cache qex did not write for this user is
never believed, and a submission on a hit imports no TOML parser."""

import json
import os
import subprocess
import sys

import pytest

from qex.config import cache as config_cache
from qex.config.file import load_config
from qex.config.model import Config
from qex.config.read import Reader
from qex.config.text import parse_toml

RICH = """
[budget]
cpu = "50%"
mem = "16GB"
[enforce]
mode = "single-user"
[defaults]
cpu = "half"
mem = "2GB"
timeout = "4h"
vram = "8GB"
[hooks]
on_stop = ["notify-send", "qex"]
on_stop_states = ["failed", "oom"]
[learn]
margin = "30%"
[peers]
dir = "/srv/qex-peers"
[[pool]]
name = "gpu"
devices = ["24GB", "24GB"]
[[pool]]
name = "net"
count = 4
"""


def cached_show(q, cache):
    proc = q.run("config", "show", "--json", env={"XDG_CACHE_HOME": cache}, check=0)
    return json.loads(proc.stdout)


def wait_cached(q, cache):
    """Run `qex config show` until it answers from the cache (the file must be a little old first)."""
    return q.wait_for(
        lambda: (lambda d: d if d["from_cache"] else None)(cached_show(q, cache)),
        timeout=20,
        what="a config read from the cache",
    )


def cache_file(cache):
    return os.path.join(cache, "qex", config_cache.FILE)


def rewrite_cache(cache, change):
    path = cache_file(cache)
    with open(path) as fh:
        data = json.load(fh)
    change(data["entries"][0]["body"]["values"])
    st = os.stat(path)
    with open(path, "w") as fh:
        json.dump(data, fh)
    os.chmod(path, st.st_mode & 0o7777)


def test_a_cache_entry_gives_the_config_parsing_gives(tmp_path):
    path = str(tmp_path / "qex.toml")
    values, keys = Reader(path).read(parse_toml(path, RICH))
    parsed = Reader(path).build(parse_toml(path, RICH))
    again = config_cache.config_of(path, json.loads(json.dumps(config_cache.body_of(values, keys))))
    assert again == parsed and again.sources == parsed.sources and again.from_cache
    assert again.pools[0].devices == (24 << 30, 24 << 30) and again.hook_on_stop == ("notify-send", "qex")


def test_an_edit_in_place_of_the_same_size_and_mtime_is_seen(q, tmp_path):
    cache = str(tmp_path / "cache")
    q.write_config("[budget]\ncpu = 2\n")
    old = os.stat(q.config).st_mtime_ns - 3_600_000_000_000
    os.utime(q.config, ns=(old, old))
    hit = wait_cached(q, cache)
    assert hit["values"]["budget.cpu"]["value"] == 2.0
    ino = os.stat(q.config).st_ino
    with open(q.config, "r+") as fh:  # the same inode, the same size, the same mtime: only ctime moves
        fh.write("[budget]\ncpu = 3\n")
    os.utime(q.config, ns=(old, old))
    st = os.stat(q.config)
    assert (st.st_ino, st.st_size, st.st_mtime_ns) == (ino, len("[budget]\ncpu = 3\n"), old)
    seen = cached_show(q, cache)
    assert seen["values"]["budget.cpu"]["value"] == 3.0 and not seen["from_cache"]
    assert wait_cached(q, cache)["values"]["budget.cpu"]["value"] == 3.0


def test_a_replaced_file_is_seen(q, tmp_path):
    cache = str(tmp_path / "cache")
    q.write_config("[budget]\ncpu = 2\n")
    wait_cached(q, cache)
    with open(q.config + ".new", "w") as fh:
        fh.write("[budget]\ncpu = 3\n")
    os.rename(q.config + ".new", q.config)
    assert cached_show(q, cache)["values"]["budget.cpu"]["value"] == 3.0


def test_a_cache_qex_did_not_write_for_this_user_is_ignored(q, tmp_path):
    cache = str(tmp_path / "cache")
    q.write_config("[budget]\ncpu = 2\n")
    wait_cached(q, cache)

    def forged(values):
        values["budget_cpu"] = 7000

    # The test can fail: a forged entry in a file of the right owner and mode is believed.
    rewrite_cache(cache, forged)
    assert cached_show(q, cache)["values"]["budget.cpu"]["value"] == 7.0

    rewrite_cache(cache, forged)
    os.chmod(cache_file(cache), 0o644)  # readable by others: not ours alone
    shown = cached_show(q, cache)
    assert shown["values"]["budget.cpu"]["value"] == 2.0 and not shown["from_cache"]

    wait_cached(q, cache)
    rewrite_cache(cache, forged)
    os.chmod(os.path.join(cache, "qex"), 0o755)  # a directory others can read: not read at all
    shown = cached_show(q, cache)
    assert shown["values"]["budget.cpu"]["value"] == 2.0 and not shown["from_cache"]
    os.chmod(os.path.join(cache, "qex"), 0o700)

    if os.geteuid() != 0:
        return  # only root can give the file to another user; the mode checks above ran
    wait_cached(q, cache)
    rewrite_cache(cache, forged)
    os.chown(cache_file(cache), 12345, 12345)
    shown = cached_show(q, cache)
    assert shown["values"]["budget.cpu"]["value"] == 2.0 and not shown["from_cache"]


def test_a_bad_config_is_never_cached_and_its_message_is_unchanged(q, tmp_path):
    cache = str(tmp_path / "cache")
    q.write_config("[budget]\ncpu = 2\n")
    wait_cached(q, cache)
    q.write_config('[budget]\ncpu = "lots"\n')
    old = os.stat(q.config).st_mtime_ns - 3_600_000_000_000
    os.utime(q.config, ns=(old, old))
    errors = set()
    for _ in range(3):
        proc = q.run("config", "show", env={"XDG_CACHE_HOME": cache})
        assert proc.returncode == 1
        errors.add(proc.stderr)
    assert len(errors) == 1 and "[budget] cpu = 'lots' is not a percentage" in errors.pop()
    with open(cache_file(cache)) as fh:
        assert [e["body"]["values"]["budget_cpu"] for e in json.load(fh)["entries"]] == [2000]


def test_no_cache_is_written_where_it_cannot_be_private(tmp_path):
    (tmp_path / "qex.toml").write_text("[budget]\ncpu = 2\n")
    old = os.stat(tmp_path / "qex.toml").st_mtime_ns - 3_600_000_000_000
    os.utime(tmp_path / "qex.toml", ns=(old, old))
    os.mkdir(tmp_path / "cache")
    os.mkdir(tmp_path / "cache" / "qex", 0o755)
    os.chmod(tmp_path / "cache" / "qex", 0o755)
    st = os.stat(tmp_path / "qex.toml")
    config_cache.store(
        str(tmp_path / "qex.toml"),
        st,
        {"values": {}, "keys": []},
        env={"XDG_CACHE_HOME": str(tmp_path / "cache")},
        now_ns=st.st_ctime_ns + 10**10,
    )
    assert os.listdir(tmp_path / "cache" / "qex") == []
    os.chmod(tmp_path / "cache" / "qex", 0o700)
    config_cache.store(
        str(tmp_path / "qex.toml"),
        st,
        {"values": {}, "keys": []},
        env={"XDG_CACHE_HOME": str(tmp_path / "cache")},
        now_ns=st.st_ctime_ns + 10**10,
    )
    assert os.listdir(tmp_path / "cache" / "qex") == [config_cache.FILE]
    assert os.stat(cache_file(str(tmp_path / "cache"))).st_mode & 0o777 == 0o600


def test_a_file_changed_within_the_clock_tick_is_not_cached(tmp_path):
    path = tmp_path / "qex.toml"
    path.write_text("[budget]\ncpu = 2\n")
    st = os.stat(path)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    config_cache.store(str(path), st, {"values": {}, "keys": []}, env=env, now_ns=st.st_ctime_ns + 1000)
    assert config_cache.lookup(str(path), env) is None
    config_cache.store(str(path), st, {"values": {}, "keys": []}, env=env, now_ns=st.st_ctime_ns + 10**10)
    assert config_cache.lookup(str(path), env) == {"values": {}, "keys": []}


def test_the_cache_keeps_only_the_latest_max_entries_configs(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    for i in range(config_cache.MAX_ENTRIES + 3):
        path = tmp_path / f"c{i}.toml"
        path.write_text(f"[budget]\ncpu = {i + 1}\n")
        st = os.stat(path)
        config_cache.store(
            str(path), st, {"values": {"budget_cpu": i}, "keys": []}, env=env, now_ns=st.st_ctime_ns + 10**10
        )
    with open(cache_file(env["XDG_CACHE_HOME"])) as fh:
        assert len(json.load(fh)["entries"]) == config_cache.MAX_ENTRIES
    assert config_cache.lookup(str(path), env) == {"values": {"budget_cpu": i}, "keys": []}


def test_a_missing_config_gives_the_defaults_and_writes_no_cache(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    config = load_config(str(tmp_path / "absent.toml"), env=env)
    assert config == Config.default(str(tmp_path / "absent.toml")) and not config.from_cache
    assert not os.path.exists(tmp_path / "cache")


IMPORTS = """
import json, sys, traceback
WATCH = ("tomlkit", "cattrs", "attrs", "attr", "fractions", "shutil", "dataclasses")
found = {}

class Watch:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in WATCH and top not in found:
            frames = [f for f in traceback.extract_stack() if "/qex/" in f.filename]
            found[top] = frames[-1].filename.split("/qex/")[-1] if frames else "?"
        return None

sys.meta_path.insert(0, Watch())
from qex.cli import run
code = run(["submit", "--", "true"])
sys.stderr.write("IMPORTS " + json.dumps(found) + "\\n")
sys.stderr.flush()
"""


def test_a_submission_on_a_cache_hit_imports_no_toml_parser_and_no_cattrs(q, tmp_path):
    """Not tomlkit, cattrs, fractions, shutil or dataclasses; attrs only through
    qex/admit (it is leaving there: then nothing may import it)."""
    cache = str(tmp_path / "cache")
    q.write_config('[budget]\ncpu = 2\n[defaults]\nmem = "64MB"\n')
    wait_cached(q, cache)
    proc = subprocess.run(
        [sys.executable, "-c", IMPORTS],
        capture_output=True,
        text=True,
        timeout=60,
        env={**q.env, "XDG_CACHE_HOME": cache},
        cwd=q.root,
    )
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("IMPORTS "))
    found = json.loads(line[len("IMPORTS ") :])
    job_id = proc.stdout.strip()
    assert len(job_id) == 36, proc.stdout
    q.wait_state(job_id, "completed")
    for module in ("tomlkit", "cattrs", "fractions", "shutil", "dataclasses"):
        assert module not in found, found
    for module in ("attrs", "attr"):
        assert found.get(module, "admit/").startswith("admit/"), found


def test_a_parse_on_a_miss_imports_tomlkit_still(q, tmp_path):
    """The watch above can see an import: a fresh file is parsed (so the test above can fail)."""
    q.write_config("[budget]\ncpu = 2\n")
    proc = subprocess.run(
        [sys.executable, "-c", IMPORTS],
        capture_output=True,
        text=True,
        timeout=60,
        env={**q.env, "XDG_CACHE_HOME": str(tmp_path / "cache")},
        cwd=q.root,
    )
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("IMPORTS "))
    assert json.loads(line[len("IMPORTS ") :]).get("tomlkit") == "config/text.py"
    q.wait_state(proc.stdout.strip(), "completed")


@pytest.mark.parametrize("text", ["", "\n# only a comment\n"])
def test_an_empty_config_is_cached_as_the_defaults(q, tmp_path, text):
    cache = str(tmp_path / "cache")
    q.write_config(text)
    hit = wait_cached(q, cache)
    assert hit["exists"] and hit["values"]["budget.cpu"]["source"] == "default"


def _aged(path) -> None:
    """Wait (bounded) until the file's change time is older than the cache's racy window."""
    import time

    ctime = os.stat(path).st_ctime_ns
    deadline = time.monotonic() + 5
    while time.time_ns() < ctime + 2 * config_cache.RACY_NS and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_process_keeps_the_config_it_read_until_the_file_changes(tmp_path):
    """A supervisor reloads the config at each job's start and end: one stat while
    the file is unchanged, the new values as soon as it changed (even in place,
    same size, same mtime)."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    path = tmp_path / "qex.toml"
    path.write_text('[logs]\nmax_bytes = "1MB"\n')
    _aged(path)
    load_config(str(path), env)  # parsed, and cached
    first = load_config(str(path), env)  # from the cache file
    assert load_config(str(path), env) is first  # kept in the process
    assert first.logs_max_bytes == 1 << 20
    path.write_text('[logs]\nmax_bytes = "22MB"\n')
    _aged(path)
    assert load_config(str(path), env).logs_max_bytes == 22 << 20
    load_config(str(path), env)
    old = os.stat(path).st_mtime_ns
    path.write_text('[logs]\nmax_bytes = "33MB"\n')  # same size
    os.utime(path, ns=(old, old))
    assert load_config(str(path), env).logs_max_bytes == 33 << 20
