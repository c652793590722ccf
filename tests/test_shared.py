"""qex.users.shared in-process: what makes a directory shared, what init refuses."""

import os
import stat

import pytest

from qex.base.errors import QexError
from qex.config.context import Context
from qex.config.model import Config
from qex.store.state import Store
from qex.users import shared


def ctx_for(root: str, uid: int) -> Context:
    store = Store(root)
    store.ensure()
    return Context(store=store, config=Config(path="/nonexistent/qex.toml"), uid=uid, user="u", cores=4,
                   mem_total=1 << 34)


def test_init_makes_a_shared_directory_that_the_store_recognises(tmp_path):
    root = str(tmp_path / "lab" / "queue")
    done = shared.init_shared(root, None)
    assert done["created"] and done["gid"] == os.getgid()
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o2770
    ctx = ctx_for(root, os.getuid())
    assert ctx.store.shared and ctx.store.owner_uid == os.getuid()
    assert ctx.store.file_mode == 0o660 and ctx.store.status_mode == 0o640
    assert shared.init_shared(root, None)["created"] is False  # again: repairs, refuses nothing
    assert not ctx_for(str(tmp_path / "private"), os.getuid()).store.shared


def test_init_refuses_a_private_queue_a_non_empty_directory_and_a_symlink(tmp_path):
    private = str(tmp_path / "private")
    ctx_for(private, os.getuid())
    with pytest.raises(QexError, match="holds a private queue"):
        shared.init_shared(private, None)
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("x")
    with pytest.raises(QexError, match="not empty"):
        shared.init_shared(str(full), None)
    os.symlink(str(tmp_path / "elsewhere"), str(tmp_path / "link"))
    with pytest.raises(QexError, match="symbolic link"):
        shared.init_shared(str(tmp_path / "link"), None)
