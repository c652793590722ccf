"""A config replaced under its name while a command reads it (an editor saves by renaming a
new file over the old; on NFS another machine's replacement makes the old file answer
ESTALE, as tests/vm/test_nfs.py met for records) is read again from its name; a file that
keeps changing is refused with the sentence that says so. The replacement and the ESTALE
are injected at the moment between the reader's look at the name and its open."""

import errno
import os
import pathlib

import pytest

from qex.base.errors import ConfigError
from qex.config import text
from qex.store import fs


def _config(tmp_path, body: str) -> str:
    path = tmp_path / "config.toml"
    path.write_text(body)
    os.chmod(path, 0o600)
    return str(path)


def _count_opens(monkeypatch) -> list[int]:
    """The descriptors os.open gives from now on (os is one module: a fake fstat must leave
    every other caller's descriptors alone)."""
    real_open, opens = os.open, []

    def open_(p, flags, *a):
        opens.append(fd := real_open(p, flags, *a))
        return fd

    monkeypatch.setattr(text.os, "open", open_)
    return opens


def test_a_config_saved_again_while_it_is_read_is_read_from_its_new_file(tmp_path, monkeypatch):
    path = _config(tmp_path, "[system]\nnice = 1\n")
    real_open, saves = os.open, [2]

    def open_(p, flags, *a):
        if saves[0] and p == os.path.realpath(path):  # an editor's save between the stat and the open
            saves[0] -= 1
            new = pathlib.Path(f"{path}.new")
            new.write_text(f"[system]\nnice = {10 + saves[0]}\n")  # (the built-in open: not os.open)
            new.rename(path)
        return real_open(p, flags, *a)

    monkeypatch.setattr(text.os, "open", open_)
    stat_out: list = []
    assert text.read_text(path, stat_out) == "[system]\nnice = 10\n"  # the last save, read whole
    assert [(s.st_dev, s.st_ino) for s in stat_out] == [(os.stat(path).st_dev, os.stat(path).st_ino)]


def test_a_stale_handle_is_looked_up_again(tmp_path, monkeypatch):
    path = _config(tmp_path, "[system]\nnice = 3\n")
    real_fstat, stale, opens = os.fstat, [fs.STALE_TRIES - 1], _count_opens(monkeypatch)

    def fstat(fd):
        if stale[0] and fd in opens:
            stale[0] -= 1
            raise OSError(errno.ESTALE, "Stale file handle")
        return real_fstat(fd)

    monkeypatch.setattr(text.os, "fstat", fstat)
    before = len(os.listdir("/proc/self/fd"))
    assert text.read_text(path) == "[system]\nnice = 3\n"
    assert stale == [0] and len(os.listdir("/proc/self/fd")) == before  # every stale descriptor closed


@pytest.mark.parametrize("how", ["stale", "replaced"])
def test_a_config_that_keeps_changing_is_refused_with_a_sentence(tmp_path, monkeypatch, how):
    path = _config(tmp_path, "[system]\nnice = 3\n")
    real_fstat, opens = os.fstat, _count_opens(monkeypatch)

    def fstat(fd):
        if fd not in opens:
            return real_fstat(fd)
        if how == "stale":
            raise OSError(errno.ESTALE, "Stale file handle")
        st = real_fstat(fd)
        return os.stat_result((st.st_mode, st.st_ino + 1, *tuple(st)[2:]))  # another file each time

    monkeypatch.setattr(text.os, "fstat", fstat)
    with pytest.raises(ConfigError) as caught:
        text.read_text(path)
    said = {"stale": "cannot be read (Stale file handle)", "replaced": "changed while qex was reading it"}[how]
    assert str(caught.value).startswith(f"{path} {said}")
    assert len(opens) == fs.STALE_TRIES
