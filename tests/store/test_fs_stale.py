"""A record replaced by another NFS client between a reader's open and its read answers
ESTALE there (tests/vm/test_nfs.py met it: ``qex wait`` ended 121 on a completed job). The
real case needs two NFS mounts (the VM test); here the read's failure is injected, to check
that the reader looks the name up again and gets the new file, and gives up after a few."""

import errno
import os

import pytest

from qex.store import fs


def test_a_stale_handle_is_looked_up_again_and_the_new_file_read(tmp_path, monkeypatch):
    path = tmp_path / "status.json"
    path.write_bytes(b'{"state": "completed"}')
    real_fstat, real_stat, stale, calls = os.fstat, os.stat, [2], []

    def fstat(fd):  # (where the guest met it: the open file's attributes)
        calls.append("fstat")
        if stale[0]:
            stale[0] -= 1
            raise OSError(errno.ESTALE, "Stale file handle")
        return real_fstat(fd)

    def stat(p, **kw):
        calls.append("stat")
        return real_stat(p, **kw)

    monkeypatch.setattr(fs.os, "fstat", fstat)
    monkeypatch.setattr(fs.os, "stat", stat)
    before = len(os.listdir("/proc/self/fd"))
    assert fs.read_json(str(path)) == {"state": "completed"}
    assert calls == ["fstat", "stat", "fstat", "stat", "fstat"]  # (the name looked up again before each reopen)
    assert len(os.listdir("/proc/self/fd")) == before  # (each stale descriptor closed)


@pytest.mark.parametrize(
    "code, tries", [(errno.ESTALE, "STALE_TRIES"), (errno.EIO, 1)], ids=["stale-stays", "other-error"]
)
def test_a_handle_that_stays_stale_is_an_error_after_a_few_lookups_and_other_errors_at_once(
    tmp_path, monkeypatch, code, tries
):
    path = tmp_path / "status.json"
    path.write_bytes(b"{}")
    seen = []

    def read(fd, n):
        seen.append(fd)
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(fs.os, "read", read)
    with pytest.raises(OSError) as caught:
        fs.read_bytes(str(path))
    assert caught.value.errno == code
    assert len(seen) == (fs.STALE_TRIES if tries == "STALE_TRIES" else tries)
