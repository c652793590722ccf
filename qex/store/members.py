"""A shared state directory's members (``qex init --shared``; docs/multiuser.md).

The rule: **no member's qex acts on anything another member could have
written.** So each member has a state directory of their own inside the shared
one, ``member-<uid>``, that only they write (mode 2750: the group reads it);
every pass writes only in its own user's, and reads the others' as claims to
count and jobs to show, checked before use:

- an entry is a member's only if it is a real directory (never a symlink),
  owned by the uid its name gives, and writable by nobody else;
- a file read from it is a regular file of that uid with one link
  (``fs.read_json(owner=...)``), and what it says is checked like any record.

The shared directory itself is setgid, sticky and group-writable (3770): any
member adds their own entry, nobody renames or removes another's. A member
whose plain name a squatter took first (an entry ``member-<uid>`` the member
does not own) makes ``member-<uid>-<hex>``; readers take, per uid, the first
valid entry by name, so a squatter can only make a name that nobody uses.
"""

from __future__ import annotations

import os
import stat

from qex.base.errors import PermissionRefused, StoreError
from qex.store import layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.store.records import Status


def enter(root: str, st: os.stat_result) -> str:
    """``root`` is a shared directory (``st``, its lstat): the path of this user's
    member directory in it (made if missing), or a refusal with the sentence a
    member or an outsider needs."""
    if layout.is_old_shared(st):
        if any(os.path.lexists(os.path.join(root, n)) for n in (layout.INDEX, layout.JOBS)):
            raise StoreError(
                f"{root} is a shared state directory of an older qex, in which members could act "
                f"on each other's files; its owner upgrades it with qex init --shared {root}"
            )
        raise StoreError(
            f"{root} is setgid and group-writable, but qex init --shared did not make it, so nothing "
            f"in it would have the modes the members need; its owner makes it a shared queue with "
            f"qex init --shared {root} (or chmod 700 {root} keeps it private)"
        )
    uid = os.getuid()
    if uid != 0 and uid != st.st_uid and st.st_gid != os.getgid() and st.st_gid not in os.getgroups():
        raise PermissionRefused(
            f"you are not in the group {_group_name(st.st_gid)} of the shared state directory "
            f"{root}; ask its owner to add you (usermod -aG), or unset QEX_STATE_DIR "
            "to use a queue of your own"
        )
    return own(root, uid)


def own(root: str, uid: int) -> str:
    """The path of this user's member directory in ``root``, made if missing."""
    found = members(root).get(uid)
    if found is not None:
        return found
    for suffix in ("", os.urandom(4).hex()):
        path = os.path.join(root, layout.member_dir(uid, suffix))
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue  # a squatter's entry (members() found none of ours): another name
        except OSError as exc:
            raise StoreError(
                f"cannot make your directory in the shared state directory {root}: "
                f"{exc.strerror}; ask its owner to check its mode (qex init --shared {root})"
            ) from None
        os.chmod(path, layout.MEMBER_MODE)
        return path
    raise StoreError(
        f"cannot make your directory in the shared state directory {root}: the names are taken; "
        f"ask its owner to remove what squats them (qex init --shared {root} lists them)"
    )


def readable(path: str) -> None:
    """A folder of this member's that the others read: mode 2750 whatever the umask."""
    try:
        st = os.lstat(path)
        if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) != layout.MEMBER_MODE:
            os.chmod(path, layout.MEMBER_MODE)
    except OSError:
        pass  # the command that needs it says what is wrong


def members(root: str) -> dict[int, str]:
    """uid -> the path of that member's directory: per uid, the first valid entry by name."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return {}
    out: dict[int, str] = {}
    for name in names:
        uid = layout.member_of(name)
        if uid is None or uid in out:
            continue
        path = os.path.join(root, name)
        if valid(path, uid):
            out[uid] = path
    return out


def squatters(root: str) -> list[str]:
    """Entries named as a member's that are not that member's (for qex info and init)."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    return [n for n in names if (u := layout.member_of(n)) is not None and not valid(os.path.join(root, n), u)]


def valid(path: str, uid: int) -> bool:
    """A real directory of ``uid`` that nobody else can write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def starter_alive(member: str, uid: int) -> bool:
    """A process of member ``uid`` that will start their queued jobs is alive: their
    waker holds its lock (a lock, never a pid: a pid is reused, a lock dies with
    its holder). The lock file must be theirs; anyone else's proves nothing."""
    import fcntl

    path = os.path.join(member, layout.waker_lock(uid))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        return False
    finally:
        os.close(fd)


def waiting_for_owner(member: str, uid: int, rec: Status) -> Status:
    """Another member's queued job as a reader sees it (``owner_absent``)."""
    if rec.state != "queued":
        return rec
    words = owner_absent(member, uid)
    return rec if words is None else rec.evolve(**words)


def owner_absent(member: str, uid: int) -> dict | None:
    """What another member's queued jobs say when no qex of their owner is running
    (nothing will start them, whatever reason their last pass gave); None: one is."""
    if starter_alive(member, uid):
        return None
    from qex.base.paths import user_name

    who = user_name(uid)
    return {
        "blocked_reason": f"no qex of {who}'s is running; any qex command of {who}'s starts it",
        "blocked_holder": "owner",
    }


def _group_name(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
