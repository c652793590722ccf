"""A state directory several users share: ``qex init --shared DIR --group G``.

One queue, one order, one budget: each member's passes see every member's
jobs. A directory is *shared* when it is setgid and group-writable (what
``init`` makes; only its owner or root can make it so, so no member can switch
a directory between the two modes). Its layout (docs/multiuser.md)::

    DIR/                  3770 owner:G  setgid, sticky: a member adds their own entry;
                                        nobody renames or removes another's
    DIR/lock              0640 of DIR's owner: every member's pass holds it (read-only)
    DIR/member-<uid>/     2750 of that member: their own state directory, written by
                          them alone, read by the group (qex.store.members)
      index.json, journal.jsonl, history.jsonl   0640
      jobs/<id>/          2750: status.json 0640; spec.json, logs 0600

The rule: **no member's qex acts on anything another member could have
written**: it never runs it, signals on its word, writes it back as itself,
or trusts a number in it unchecked. Records of others are read as claims
(their queued jobs' place in the one order and the capacity reserved for
them, ``qex.queue.others``; their running jobs through the peer records) and
shown. A directory of the first format (2770, one index every member
rewrote) is refused until its owner runs ``qex init --shared DIR`` again,
which upgrades it.
"""

from __future__ import annotations

import os
import stat

from qex.base.errors import PermissionRefused, QexError, UsageError
from qex.store.layout import INDEX, JOBS, JOURNAL, LOCK, SHARED_MODE, ensure_file, is_old_shared, is_shared

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.store.state import Store


def describe(store: Store) -> str:
    """One line for qex info."""
    if not store.shared:
        return "private (only its owner's jobs)"
    from qex.base.paths import user_name

    try:
        st = os.stat(store.shared_root or store.root)
        import grp

        group = grp.getgrgid(st.st_gid).gr_name
    except (OSError, KeyError):
        group = str(getattr(store, "owner_uid", "?"))
    return f"shared by the group {group} (owner {user_name(store.owner_uid)})"


def members_summary(store: Store) -> dict | None:
    """For qex info: each other member's queued and running jobs, whether a qex of
    theirs is running (their queued jobs hold capacity only then), and the entries
    of the shared directory that were passed by. None for a private directory."""
    if store.shared_root is None:
        return None
    from qex.base.paths import user_name
    from qex.base.states import HOLDING
    from qex.store import members

    out = []
    for uid, other in store.others():
        states = [e.get("state") for e in other.read_index_jobs().values() if isinstance(e, dict)]
        out.append(
            {
                "user": user_name(uid),
                "uid": uid,
                "dir": other.root,
                "queued": states.count("queued"),
                "running": sum(1 for s in states if s in HOLDING),
                "qex_running": members.starter_alive(other.root, uid),
            }
        )
    ignored = [
        f"{os.path.join(store.shared_root, n)} is named as a member's directory but is not theirs"
        for n in members.squatters(store.shared_root)
    ]
    return {"members": out, "ignored": ignored}


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
        raise UsageError(
            f"--group: there is no group {word!r} on this machine; give an existing group (getent group lists them)"
        ) from None


def _member(gid: int) -> bool:
    return os.getuid() == 0 or gid == os.getgid() or gid in os.getgroups()


def _looks_like_queue(path: str) -> bool:
    return any(os.path.lexists(os.path.join(path, n)) for n in (INDEX, JOURNAL, JOBS, LOCK))


def init_shared(path: str, group: str | None) -> dict:
    """Make (or repair) a shared state directory; returns what was done, with warnings."""
    path = os.path.abspath(path)
    gid, gname = _group(group)
    if not _member(gid):
        raise PermissionRefused(
            f"--group: you are not a member of the group {gname}, so you cannot give "
            "it a directory; choose one of your groups (id -Gn lists them)"
        )
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
        moved = _upgrade(path) if existed and is_old_shared(os.lstat(path)) else None
        os.chown(path, -1, gid)
        os.chmod(path, SHARED_MODE)
        lock = os.path.join(path, LOCK)
        ensure_file(lock, 0o640)
        if os.stat(lock).st_uid == os.getuid():
            os.chown(lock, -1, gid)
    except OSError as exc:
        raise QexError(f"cannot set up {path}: {exc.strerror}") from None
    from qex.store import members

    warnings = _reach_warnings(path, gid)
    if moved:
        warnings.append(f"the first format's files were moved to {moved} (their jobs had all ended)")
    warnings += [
        f"{os.path.join(path, n)} is named as a member's directory but is not theirs; remove it"
        for n in members.squatters(path)
    ]
    return {"path": path, "group": gname, "gid": gid, "created": not existed, "warnings": warnings}


def _upgrade(path: str) -> str:
    """A shared directory of the first format (one index every member rewrote): its
    files move aside to ``format1-<time>/`` once no job of it is queued or running."""
    import json
    import time

    try:
        with open(os.path.join(path, INDEX), "rb") as f:
            jobs = json.load(f).get("jobs") or {}
    except FileNotFoundError:
        jobs = {}
    except (OSError, ValueError, AttributeError) as exc:
        raise QexError(
            f"cannot read {os.path.join(path, INDEX)} ({exc}) to upgrade {path}; "
            "move its files away by hand, then run qex init --shared again"
        ) from None
    from qex.base.states import ACTIVE

    active = [j for j, e in jobs.items() if isinstance(e, dict) and e.get("state") in ACTIVE]
    if active:
        raise QexError(
            f"{path} is a shared directory of the first format with {len(active)} jobs queued or "
            "running; let them end (or cancel them), then run qex init --shared again to upgrade it"
        )
    aside = os.path.join(path, time.strftime("format1-%Y%m%d-%H%M%S"))
    os.mkdir(aside, 0o700)
    for name in os.listdir(path):
        if name not in (os.path.basename(aside), LOCK):
            os.rename(os.path.join(path, name), os.path.join(aside, name))
    return aside


def _check_existing(path: str) -> None:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise QexError(f"{path} is not a directory (or is a symbolic link); give a new directory")
    if st.st_uid != os.getuid() and os.getuid() != 0:
        from qex.base.paths import user_name

        raise PermissionRefused(
            f"{path} belongs to {user_name(st.st_uid)}; only its owner (or root) can make it shared"
        )
    if is_shared(st):
        return  # again on a shared directory: repairs the modes (and upgrades the first format)
    names = [n for n in os.listdir(path) if not n.startswith(".")]
    if _looks_like_queue(path):
        jobs = os.path.join(path, JOBS)
        n = len(os.listdir(jobs)) if os.path.isdir(jobs) else 0
        raise QexError(
            f"{path} holds a private queue ({n} job directories); its records are private "
            "to you. Give a new directory to qex init --shared (the private queue stays as it is)"
        )
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
            out.append(
                f"{parent} is mode {stat.S_IMODE(mode):04o}: the other members of the group cannot "
                f"reach {path}; choose a directory they can enter (e.g. under /srv)"
            )
        if parent == "/":
            break
        parent = os.path.dirname(parent)
    return out
