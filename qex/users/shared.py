"""A state directory several users share: ``qex init --shared DIR --group G``.

One queue, one order, exact accounting: every user's jobs are in one index,
and each user's passes see all of them. A directory is *shared* when it is
setgid and group-writable (what ``init`` makes; only its owner or root can
make it so, so no member can switch a directory between the two modes).

The layout is the private one with other modes (docs/multiuser.md):

    DIR/                   2770 owner:G  setgid, so all inside gets group G
    DIR/lock               0660          every user's pass takes it
    DIR/index.json         0660          rewritten (by rename) by every pass
    DIR/journal.jsonl      0660          appended to by every pass
    DIR/history.jsonl      0660          appended to by every pass that ends a job
    DIR/jobs/, groups/, pause/   2770
    DIR/<hooks pending>/   3770          markers of stop hooks to run (sticky)
    DIR/jobs/<id>/         2770 of the job's owner: other users' passes must
                           replace status.json in it (reasons, reserve, expiry)
      status.json          0640   the public record; any member's pass rewrites it
      alive.lock, pid      0640   other users' passes check liveness with them
      spec.json            0600   command and environment: the owner's secret
      stdout.log, stderr.log, supervisor.log   0600   the owner's only

What it promises: nobody reads another user's environment or logs (file
modes; qex also refuses politely first), nobody runs anything as another user
(a supervisor runs only a spec.json that its own user owns, and the kernel
keeps signals to one's own processes), and the budget is shared exactly.
What it does not: the members of G can damage the shared index or cancel
records by writing files directly; they trust each other not to sabotage
the queue (use private directories and the peer directory otherwise).
"""

from __future__ import annotations

import os
import stat

from qex.base.errors import PermissionRefused, QexError, UsageError
from qex.store.layout import DIR_MODE, HOOKS_PENDING, INDEX, JOBS, JOURNAL, LOCK, SUBDIRS, ensure_file, is_shared

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.store.state import Store


def describe(store: Store) -> str:
    """One line for qex info."""
    if not store.shared:
        return "private (only its owner's jobs)"
    from qex.base.paths import user_name

    try:
        st = os.stat(store.root)
        import grp

        group = grp.getgrgid(st.st_gid).gr_name
    except (OSError, KeyError):
        group = str(getattr(store, "owner_uid", "?"))
    return f"shared by the group {group} (owner {user_name(store.owner_uid)})"


# ---- qex init --shared DIR [--group G] --------------------------------------------------

def _group(word: str | None) -> tuple[int, str]:
    import grp

    if word is None:
        gid = os.getgid()
        try:
            return gid, grp.getgrgid(gid).gr_name
        except KeyError:
            return gid, str(gid)
    try:
        if word.isdigit():
            return int(word), grp.getgrgid(int(word)).gr_name
        return grp.getgrnam(word).gr_gid, word
    except KeyError:
        raise UsageError(f"--group: there is no group {word!r} on this machine; "
                         "give an existing group (getent group lists them)") from None


def _member(gid: int) -> bool:
    return os.getuid() == 0 or gid == os.getgid() or gid in os.getgroups()


def _looks_like_queue(path: str) -> bool:
    return any(os.path.lexists(os.path.join(path, n)) for n in (INDEX, JOURNAL, JOBS, LOCK))


def init_shared(path: str, group: str | None) -> dict:
    """Make (or repair) a shared state directory; returns what was done, with warnings."""
    path = os.path.abspath(path)
    gid, gname = _group(group)
    if not _member(gid):
        raise PermissionRefused(f"--group: you are not a member of the group {gname}, so you cannot give "
                                "it a directory; choose one of your groups (id -Gn lists them)")
    existed = os.path.lexists(path)
    if existed:
        _check_existing(path)
    else:
        try:
            os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
            os.mkdir(path, 0o700)
        except OSError as exc:
            raise QexError(f"cannot create {path}: {exc.strerror}; choose a directory you can create") from None
    try:
        os.chown(path, -1, gid)
        os.chmod(path, DIR_MODE)
        for name in SUBDIRS:
            sub = os.path.join(path, name)
            if not os.path.isdir(sub) or os.path.islink(sub):
                os.mkdir(sub, 0o700)
            os.chown(sub, -1, gid)
            os.chmod(sub, DIR_MODE)
        ensure_file(os.path.join(path, LOCK), 0o660)
        _hook_markers(path, gid)
    except OSError as exc:
        raise QexError(f"cannot set up {path}: {exc.strerror}") from None
    return {"path": path, "group": gname, "gid": gid, "created": not existed,
            "warnings": _reach_warnings(path, gid)}


def _hook_markers(path: str, gid: int) -> None:
    """The stop hooks' pending markers (qex.hooks.markers): every member's pass adds one
    per job it ends, and only its owner removes it: setgid, sticky, group-writable."""
    sub = os.path.join(path, HOOKS_PENDING)
    if not os.path.isdir(sub) or os.path.islink(sub):
        os.mkdir(sub, 0o700)
    os.chown(sub, -1, gid)
    os.chmod(sub, 0o3770)


def _check_existing(path: str) -> None:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise QexError(f"{path} is not a directory (or is a symbolic link); give a new directory")
    if st.st_uid != os.getuid() and os.getuid() != 0:
        from qex.base.paths import user_name

        raise PermissionRefused(f"{path} belongs to {user_name(st.st_uid)}; only its owner (or root) "
                                "can make it shared")
    if is_shared(st):
        return  # again on a shared directory: repairs the modes
    names = [n for n in os.listdir(path) if not n.startswith(".")]
    if _looks_like_queue(path):
        jobs = os.path.join(path, JOBS)
        n = len(os.listdir(jobs)) if os.path.isdir(jobs) else 0
        raise QexError(f"{path} holds a private queue ({n} job directories); its records are private "
                       "to you. Give a new directory to qex init --shared (the private queue stays as it is)")
    if names:
        raise QexError(f"{path} is not empty; give a new or empty directory")


def _reach_warnings(path: str, gid: int) -> list[str]:
    """Parents that members of the group cannot enter."""
    out = []
    parent = os.path.dirname(path)
    while True:
        try:
            st = os.stat(parent)
        except OSError:
            break
        mode = st.st_mode
        if not (mode & stat.S_IXOTH or (st.st_gid == gid and mode & stat.S_IXGRP)):
            out.append(f"{parent} is mode {stat.S_IMODE(mode):04o}: the other members of the group cannot "
                       f"reach {path}; choose a directory they can enter (e.g. under /srv)")
        if parent == "/":
            break
        parent = os.path.dirname(parent)
    return out
