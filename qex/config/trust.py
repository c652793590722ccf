"""Who can change the config file: it is used only when no one but the caller
and root can.

A config's ``[hooks] on_stop`` runs as the user whose qex ends a job. A file
another user can change (a group or world write bit on it, an owner who is
neither the caller nor root, a directory on its path that others can write)
would let that user run commands as the caller; it is refused, as ssh's
StrictModes refuses such an ``authorized_keys``, with a sentence that names
the file, what is wrong and the remedy (``ConfigError``: 121 for the job
commands, 1 for the others).

The rules, for the caller (the effective uid):

- the file is owned by the caller or root, and neither its group nor others
  may write it;
- so is each directory from the file's up to ``/``, on the file's real path
  and on the path as given (the directory of a symbolic link is on it too),
  except that a sticky directory (``/tmp``) may be writable by others: there
  the entry the path goes through (a link, most often) must be the caller's
  or root's, since nobody else can then rename or remove it;
- a group's write bit does not count when the group is its owner's private
  group: named as its owner, the owner's primary group, listing no other
  member (the rule by which RHEL and Fedora give such users umask 002).

``check_path`` runs on every load, a config from the parsed-config cache
included (``qex.config.file.load_config``): one ``stat`` per directory on the
path (a few microseconds each), no lookup of a name unless a group bit is set.
``check_file`` runs again on the descriptor the text is read from
(``qex.config.text.read_text``).
"""

from __future__ import annotations

import os
import stat

from qex.base.errors import ConfigError

_WHY = "could make qex run their commands as you (a [hooks] on_stop)"


def check_path(path: str) -> None:
    """Refuse the config at ``path`` (absolute) when anyone but the caller or
    root could change it. Nothing is checked when nothing is there or it is
    not a regular file: the reader says what is wrong."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except (OSError, ValueError):
        return
    if not stat.S_ISREG(st.st_mode):
        return
    me = os.geteuid()
    check_file(path, st, me)
    seen: set[tuple[str, str]] = set()
    _check_dirs(path, real, me, seen)
    if real != path:
        _check_dirs(path, path, me, seen)


def check_file(path: str, st: os.stat_result, me: int | None = None) -> None:
    """Refuse the config at ``path`` whose file has the stat ``st`` when it is
    not the caller's or root's, or when its group or others may write it."""
    me = os.geteuid() if me is None else me
    if st.st_uid not in (me, 0):
        you = f"you ({_user(me)})" + (" or root" if me else "")
        raise ConfigError(
            f"{path} belongs to {_owner(st.st_uid)}, not to {you}: its owner {_WHY}; keep a copy of your own "
            f"(cp {path} ~/.config/qex.toml, or set QEX_CONFIG to your copy), or ask root to own it "
            f"(chown root {path})"
        )
    if _open(st):
        who, bits = _writers(st)
        raise ConfigError(
            f"{path} is writable by {who} (mode {_mode(st)}): they {_WHY}; remove their write: chmod {bits}-w {path}"
        )


def _check_dirs(path: str, start: str, me: int, seen: set[tuple[str, str]]) -> None:
    """Check each directory above ``start`` up to ``/`` (a pair seen before: the rest was seen too)."""
    child, parent = start, os.path.dirname(start)
    while (parent, child) not in seen:
        seen.add((parent, child))
        try:
            st = os.stat(parent)
        except OSError:
            return  # the reader says what is wrong
        _check_dir(path, parent, child, st, me, child == start)
        if parent == child or parent == os.path.dirname(parent):
            return
        child, parent = parent, os.path.dirname(parent)


def _check_dir(path: str, where: str, child: str, st: os.stat_result, me: int, direct: bool) -> None:
    at = f"is in {where}" if direct else f"is under {where}"
    if st.st_uid not in (me, 0):
        raise ConfigError(
            f"{path} {at}, which belongs to {_owner(st.st_uid)}: its owner {_WHY} by replacing "
            "the file; move the config to a directory of yours or root's (and set QEX_CONFIG to it)"
        )
    if not _open(st):
        return
    if not st.st_mode & stat.S_ISVTX:
        who, bits = _writers(st)
        raise ConfigError(
            f"{path} {at}, which is writable by {who} (mode {_mode(st)}) and not sticky: they "
            f"{_WHY} by replacing the file; remove their write: chmod {bits}-w {where}, or move "
            "the config to a directory only you or root can write"
        )
    try:
        entry = os.lstat(child)
    except OSError:
        return
    if entry.st_uid not in (me, 0):  # (a link: a directory or file on the real path passed the rules above)
        lead = f"{path} is a symbolic link" if child == path else f"{path} goes through the symbolic link {child}"
        raise ConfigError(
            f"{lead} of {_owner(entry.st_uid)} in {where}, a directory {_writers(st)[0]} can "
            f"write: its owner {_WHY} by pointing it elsewhere; use a path of your own (set "
            "QEX_CONFIG to it)"
        )


def _open(st: os.stat_result) -> bool:
    """Whether anyone but the owner may write (a name is looked up only for a group's bit alone)."""
    mode = st.st_mode
    return bool(mode & stat.S_IWOTH or (mode & stat.S_IWGRP and not _private_group(st.st_gid, st.st_uid)))


def _writers(st: os.stat_result) -> tuple[str, str]:
    """Who besides the owner may write (``"the group lab"``, ``"every user"``) and the bits of a chmod."""
    who, bits = [], ""
    if st.st_mode & stat.S_IWGRP and not _private_group(st.st_gid, st.st_uid):
        who.append(f"the group {_group(st.st_gid)}")
        bits += "g"
    if st.st_mode & stat.S_IWOTH:
        who.append("every user")
        bits += "o"
    return " and ".join(who), bits


_PRIVATE: dict[tuple[int, int], bool] = {}  # (gid, uid) -> whether it is uid's private group


def _private_group(gid: int, uid: int) -> bool:
    """Whether ``gid`` is ``uid``'s private group: named as the user, the user's
    primary group, with no other member listed."""
    known = _PRIVATE.get((gid, uid))
    if known is None:
        import grp
        import pwd

        try:
            group, user = grp.getgrgid(gid), pwd.getpwuid(uid)
        except KeyError:
            known = False
        else:
            known = (
                user.pw_gid == gid
                and group.gr_name == user.pw_name
                and all(member == user.pw_name for member in group.gr_mem)
            )
        _PRIVATE[(gid, uid)] = known
    return known


def _mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):04o}"


def _user(uid: int) -> str:
    from qex.base.paths import user_name

    return user_name(uid)


def _owner(uid: int) -> str:
    return f"{_user(uid)} (uid {uid})"


def _group(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def owner_name(path: str) -> str | None:
    """The login name of the owner of the file at ``path`` (its real path), or None."""
    try:
        return _user(os.stat(path).st_uid)
    except (OSError, ValueError):
        return None
