"""A config file anyone but its user or root could change is refused
(qex.config.trust): its modes, its owner, its directories, read from the
parsed-config cache or not."""

import grp
import os
import time

import pytest

from qex.base.errors import ConfigError
from qex.config import cache as config_cache
from qex.config import trust
from qex.config.file import load_config
from qex.config.text import read_text

ROOT = os.geteuid() == 0
NOBODY = 65534
HOOK = '[hooks]\non_stop = ["touch", "/nonexistent/hooked"]\n'
as_root = pytest.mark.skipif(not ROOT, reason="giving a file to another user needs root")


def shared_gid() -> int:
    """A group that is not this user's private group: a group of several users, such as a lab's."""
    candidates = [g.gr_gid for g in grp.getgrall() if g.gr_name in ("users", "nogroup")] if ROOT else os.getgroups()
    for gid in candidates + ([NOBODY] if ROOT else []):
        if not trust._private_group(gid, os.geteuid()):
            return gid
    pytest.skip("no group but this user's private one to give the file to")


def config(tmp_path, text=HOOK, mode=0o644, where=None) -> str:
    folder = tmp_path if where is None else where
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "qex.toml"
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)


def refused(path: str, *fragments: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(path, env={})
    message = str(e.value)
    assert message.startswith(path + " ") and e.value.exit_code == 121, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


# -- the file --------------------------------------------------------------------


def test_a_config_of_its_user_that_only_it_writes_is_used(tmp_path):
    assert load_config(config(tmp_path), env={}).hook_on_stop == ("touch", "/nonexistent/hooked")


def test_a_config_its_group_can_write_is_refused_with_the_group_and_the_remedy(tmp_path):
    path = config(tmp_path, mode=0o664)
    gid = shared_gid()
    os.chown(path, -1, gid)
    os.chmod(path, 0o664)
    refused(
        path,
        f"is writable by the group {group_name(gid)} (mode 0664)",
        "run their commands as you",
        f"chmod g-w {path}",
    )


def test_a_config_every_user_can_write_is_refused(tmp_path):
    path = config(tmp_path, mode=0o646)
    refused(path, "is writable by every user (mode 0646)", f"chmod o-w {path}")


def test_a_group_write_bit_of_the_owners_private_group_does_not_count(tmp_path):
    """Where the owner's group is theirs alone (umask 002 on RHEL and Fedora), only they can write."""
    if not trust._private_group(os.getegid(), os.geteuid()):
        pytest.skip("this user's primary group is not a private group")
    assert load_config(config(tmp_path, mode=0o664), env={}).exists


@as_root
def test_a_config_of_another_user_is_refused(tmp_path):
    path = config(tmp_path)
    os.chown(path, NOBODY, -1)
    refused(path, f"belongs to {trust._user(NOBODY)} (uid {NOBODY}), not to you", "chown root")


def test_reading_an_open_config_checks_its_trust_too(tmp_path):
    path = config(tmp_path, mode=0o666)
    with pytest.raises(ConfigError, match="writable by every user"):
        read_text(path)


def test_what_is_not_a_regular_file_is_left_to_the_reader(tmp_path):
    with pytest.raises(ConfigError, match="device"):
        load_config("/dev/null", env={})  # (mode 0666, but a device: the reader says so)
    assert load_config(str(tmp_path / "missing.toml"), env={}).exists is False


# -- its directories ---------------------------------------------------------------


def test_a_config_in_a_directory_its_group_can_write_is_refused(tmp_path):
    folder = tmp_path / "lab"
    path = config(tmp_path, where=folder)
    gid = shared_gid()
    os.chown(folder, -1, gid)
    os.chmod(folder, 0o775)
    refused(
        path,
        f"is in {folder}, which is writable by the group {group_name(gid)} (mode 0775) and not sticky",
        f"chmod g-w {folder}",
    )


def test_a_directory_further_up_counts_too(tmp_path):
    path = config(tmp_path, where=tmp_path / "a" / "b")
    os.chmod(tmp_path / "a", 0o777)
    refused(path, f"is under {tmp_path / 'a'}, which is writable by every user (mode 0777)")


def test_a_sticky_directory_every_user_writes_is_fine_for_a_file_of_its_own(tmp_path):
    folder = tmp_path / "tmp"
    path = config(tmp_path, where=folder)
    os.chmod(folder, 0o1777)
    assert load_config(path, env={}).exists


@as_root
def test_a_config_in_a_directory_of_another_user_is_refused(tmp_path):
    folder = tmp_path / "theirs"
    path = config(tmp_path, where=folder)
    os.chown(folder, NOBODY, -1)
    refused(path, f"is in {folder}, which belongs to {trust._user(NOBODY)}")


@as_root
def test_a_link_of_another_user_in_a_sticky_directory_is_refused(tmp_path):
    target = config(tmp_path, where=tmp_path / "mine")
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    link = sticky / "qex.toml"
    os.symlink(target, link)
    os.chown(link, NOBODY, -1, follow_symlinks=False)
    refused(str(link), "is a symbolic link of", "pointing it elsewhere")


def test_the_directory_of_a_link_is_checked_as_well_as_the_real_one(tmp_path):
    target = config(tmp_path, where=tmp_path / "mine")
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    link = open_dir / "qex.toml"
    os.symlink(target, link)
    os.chmod(open_dir, 0o777)
    refused(str(link), f"is in {open_dir}, which is writable by every user")


# -- every load, the cache's included ----------------------------------------------


def test_a_cached_config_is_refused_once_its_directory_is_opened(tmp_path):
    folder = tmp_path / "conf"
    path = config(tmp_path, where=folder)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    st = os.stat(path)
    config_cache.store(path, st, {"values": {}, "keys": []}, env=env, now_ns=st.st_ctime_ns + 10**10)
    assert load_config(path, env=env).from_cache
    os.chmod(folder, 0o777)  # the file's stat (the cache's key) is unchanged
    with pytest.raises(ConfigError, match="writable by every user"):
        load_config(path, env=env)
    os.chmod(folder, 0o755)
    assert load_config(path, env=env).from_cache


def test_the_trust_check_of_a_config_path_takes_under_a_millisecond(tmp_path):
    """One stat per directory on the path: well under a millisecond a load."""
    path = config(tmp_path)
    trust.check_path(path)
    start = time.perf_counter()
    for _ in range(100):
        trust.check_path(path)
    assert (time.perf_counter() - start) / 100 < 0.001
