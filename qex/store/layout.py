"""The state directory's layout: the names in it, and what makes it shared.

A directory is *shared* (``qex init --shared``) when it is setgid and
group-writable: only its owner or root can make it so, so no member can
switch a directory between the two modes. Private and shared directories
hold the same names with other modes (docs/multiuser.md).
"""

import os
import stat

HOOKS_PENDING = "hooks-pending"  # markers of stop hooks to run (qex.hooks.markers)


SUBDIRS = ("jobs", "groups", "pause")
DIR_MODE = 0o2770


def is_shared(st: os.stat_result) -> bool:
    return bool(st.st_mode & stat.S_ISGID) and bool(st.st_mode & stat.S_IWGRP)


def learn(store: object) -> None:
    """Set ``store.shared`` and ``store.owner_uid`` from the directory itself."""
    try:
        st = os.stat(store.root)
    except OSError:
        return
    store.shared = is_shared(st)
    store.owner_uid = st.st_uid
    if store.shared:
        ensure_file(os.path.join(store.root, "lock"), 0o660)


def ensure_file(path: str, mode: int) -> None:
    """The file exists; if this user made it, it has ``mode`` whatever the umask."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError:
        return  # the pass that needs it says what is wrong
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) != mode:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


def open_job_dir(path: str) -> None:
    """A new job directory of a shared state directory (before it is renamed into view)."""
    os.chmod(path, DIR_MODE)
    ensure_file(os.path.join(path, "alive.lock"), 0o640)
