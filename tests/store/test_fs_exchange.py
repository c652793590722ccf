"""A lazy commit's records replace the old file by an exchange (qex.store.fs.write_atomic):
the same atomic swap for a reader, never through a link, and the old file is freed only
once the state lock is let go."""

import os
import stat

from qex.store import fs


def test_an_exchanged_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "status.json"
    path.write_bytes(b"old\n")
    before = os.stat(path).st_ino
    fs.write_atomic(str(path), b"new\n", mode=0o644, sync_dir=False, sync=False, exchange=True)
    assert path.read_bytes() == b"new\n"
    assert os.stat(path).st_ino != before
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert sorted(os.listdir(tmp_path)) == ["status.json"]


def test_the_old_file_of_an_exchange_under_the_lock_is_freed_after_it(tmp_path):
    """While the lock is held (free_later), the replaced file is kept open: it is
    unlinked, but still open in this process, until free_replaced."""
    path = tmp_path / "status.json"
    path.write_bytes(b"old\n")
    old = os.stat(path)
    fs.free_later()
    try:
        fs.write_atomic(str(path), b"new\n", sync_dir=False, sync=False, exchange=True)
        held = [fd for fd in map(int, os.listdir("/proc/self/fd")) if _ident(fd) == (old.st_dev, old.st_ino)]
        assert held, "the replaced file should be held open until the lock is let go"
    finally:
        fs.free_replaced()
    assert not [fd for fd in map(int, os.listdir("/proc/self/fd")) if _ident(fd) == (old.st_dev, old.st_ino)]


def test_a_link_or_directory_planted_at_the_record_is_never_swapped_in(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"theirs\n")
    link = tmp_path / "status.json"
    link.symlink_to(target)
    fs.write_atomic(str(link), b"new\n", sync_dir=False, sync=False, exchange=True)
    assert not link.is_symlink() and link.read_bytes() == b"new\n"  # the rename replaced the link
    assert target.read_bytes() == b"theirs\n"
    planted = tmp_path / "other.json"
    planted.mkdir()
    try:
        fs.write_atomic(str(planted), b"new\n", sync_dir=False, sync=False, exchange=True)
    except Exception as exc:  # the rename refuses to replace a directory, as without the exchange
        assert "other.json" in str(exc)
    assert planted.is_dir()
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def _ident(fd):
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def test_an_exchanged_record_is_not_written_out_at_once_where_a_rename_would_be(tmp_path):
    """On ext4 (delayed allocation, auto_da_alloc) a rename over an existing file
    allocates the new file's blocks and starts writing them at once; the exchange
    leaves them to writeback (its extent stays delayed, FIEMAP says), so a record
    replaced a moment later is never written. Skips where the file system has no
    FIEMAP or no delayed allocation, or does not flush a file renamed over another."""
    import pytest

    over = tmp_path / "over"
    over.write_bytes(b"old\n")
    fs.write_atomic(str(over), b"y" * 3000, sync_dir=False, sync=False)
    renamed = _delayed(over)
    if renamed is None:
        pytest.skip("no FIEMAP, or no delayed allocation, on this file system")
    if renamed:
        pytest.skip("a rename over a file does not flush it on this file system (no auto_da_alloc)")
    path = tmp_path / "status.json"
    path.write_bytes(b"old\n")
    fs.write_atomic(str(path), b"z" * 3000, sync_dir=False, sync=False, exchange=True)
    assert _delayed(path) is True


def _delayed(path) -> bool | None:
    """Whether the file's first extent is still delayed (not allocated); None if unknown."""
    import fcntl
    import struct

    fiemap = struct.pack("=QQLLLL", 0, 1 << 62, 0, 0, 1, 0) + bytes(56)
    try:
        with open(path, "rb") as fh:
            out = fcntl.ioctl(fh.fileno(), 0xC020660B, fiemap)  # FS_IOC_FIEMAP
    except OSError:
        return None
    if struct.unpack_from("=L", out, 20)[0] != 1:  # fm_mapped_extents
        return None
    flags = struct.unpack_from("=L", out, 32 + 40)[0]  # fe_flags of the first extent
    return bool(flags & 0x4)  # FIEMAP_EXTENT_DELALLOC
