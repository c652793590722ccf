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
    return Context(
        store=store, config=Config(path="/nonexistent/qex.toml"), uid=uid, user="u", cores=4, mem_total=1 << 34
    )


def test_init_makes_a_shared_directory_that_the_store_recognises(tmp_path):
    root = str(tmp_path / "lab" / "queue")
    done = shared.init_shared(root, None)
    assert done["created"] and done["gid"] == os.getgid()
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o3770
    ctx = ctx_for(root, os.getuid())
    assert ctx.store.shared and ctx.store.owner_uid == os.getuid() and ctx.store.shared_root == root
    assert ctx.store.root == os.path.join(root, f"member-{os.getuid()}")  # its own directory in it
    assert stat.S_IMODE(os.stat(ctx.store.root).st_mode) == 0o2750
    assert ctx.store.file_mode == 0o640 and ctx.store.status_mode == 0o640
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


def test_a_squatted_member_name_is_passed_by_and_never_used(tmp_path):
    root = str(tmp_path / "lab")
    shared.init_shared(root, None)
    squat = os.path.join(root, f"member-{os.getuid()}")
    os.mkdir(squat)
    os.chown(squat, 65534, -1)  # another user's entry under this user's name
    ctx = ctx_for(root, os.getuid())
    assert ctx.store.root != squat and os.path.basename(ctx.store.root).startswith(f"member-{os.getuid()}-")
    assert ctx_for(root, os.getuid()).store.root == ctx.store.root  # and found again, the same
    assert any(
        "is named as a member's directory but is not theirs" in w for w in shared.init_shared(root, None)["warnings"]
    )


def test_a_first_format_shared_directory_is_refused_until_its_owner_upgrades_it(tmp_path):
    root = tmp_path / "old"
    root.mkdir()
    (root / "jobs").mkdir()
    (root / "index.json").write_text('{"jobs": {}}')
    os.chmod(root, 0o2770)  # the first format: setgid, group-writable, not sticky
    with pytest.raises(QexError, match="older qex.*qex init --shared"):
        ctx_for(str(root), os.getuid())
    done = shared.init_shared(str(root), None)
    assert any("moved to" in w for w in done["warnings"])
    assert ctx_for(str(root), os.getuid()).store.shared
    (root / "index.json").write_text('{"jobs": {"j": {"state": "running"}}}')
    os.chmod(root, 0o2770)
    with pytest.raises(QexError, match="1 jobs queued or running"):
        shared.init_shared(str(root), None)


def test_a_directory_shared_by_hand_is_refused_before_anything_is_made_in_it(tmp_path):
    """chmod 2770 and chgrp, as a person makes one: never a half-shared directory."""
    root = tmp_path / "byhand"
    root.mkdir()
    os.chmod(root, 0o2770)
    with pytest.raises(QexError, match="qex init --shared did not make it.*qex init --shared"):
        ctx_for(str(root), os.getuid())
    assert os.listdir(root) == []
    shared.init_shared(str(root), None)
    assert ctx_for(str(root), os.getuid()).store.shared
