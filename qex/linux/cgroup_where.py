"""Where this process's memory cgroup is (``here``) and where cgroup file systems are
mounted: the parsing of /proc/self/cgroup and /proc/self/mountinfo (``locate``, pure),
for ``qex.linux.cgroup`` and ``qex.linux.scope``."""

from __future__ import annotations

import os


def locate(proc_cgroup: str, mountinfo: str) -> tuple[str, str] | None:
    """(kind, directory) of the memory cgroup the reading process runs in.

    ``kind`` is "v1" when the memory controller is bound to a v1 hierarchy
    (a line ``N:...memory...:/path``), else "v2" (the ``0::/path`` line).
    """
    v1_path = v2_path = None
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hier, controllers, path = parts
        if "memory" in controllers.split(","):
            v1_path = path
        elif hier == "0" and controllers == "":
            v2_path = path
    mounts = _cgroup_mounts(mountinfo)
    if v1_path is not None:
        kind, path = "v1", v1_path
        candidates = [(root, point) for fstype, root, point, opts in mounts if fstype == "cgroup" and "memory" in opts]
    elif v2_path is not None:
        kind, path = "v2", v2_path
        candidates = [(root, point) for fstype, root, point, _ in mounts if fstype == "cgroup2"]
    else:
        return None
    for root, point in candidates:
        rel = _relative(path, root)
        if rel is not None:
            return kind, os.path.normpath(os.path.join(point, rel)) if rel else point
    return None


def _relative(path: str, root: str) -> str | None:
    if root == "/":
        return path.lstrip("/")
    if path == root:
        return ""
    if path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1 :]
    return None


def _cgroup_mounts(mountinfo: str) -> list[tuple[str, str, str, set[str]]]:
    """(fstype, root, mount point, super options) of each cgroup file system."""
    out = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 1 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        opts = set(tail[2].split(",")) if len(tail) > 2 else set()
        out.append((tail[0], _unescape(fields[3]), _unescape(fields[4]), opts))
    return out


def _unescape(text: str) -> str:
    """mountinfo writes a space as \\040 (and tab, newline, backslash likewise)."""
    if "\\" not in text:
        return text
    import re

    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


_HERE: list = []  # (pid, where): what here() found in this process


def here() -> tuple[str, str] | None:
    """(kind, directory) of this process's memory cgroup, or None. Read once per
    process: a supervisor asks for every job, and its home cgroup does not change
    (it visits the job's cgroup only for the spawn: ``JobCgroup.join``)."""
    pid = os.getpid()
    if _HERE and _HERE[0][0] == pid:
        return _HERE[0][1]
    where = _read_here()
    _HERE[:] = [(pid, where)]
    return where


def _read_here() -> tuple[str, str] | None:
    try:
        with open("/proc/self/cgroup") as fh:
            proc_cgroup = fh.read()
        with open("/proc/self/mountinfo") as fh:
            mountinfo = fh.read()
    except OSError:
        return None
    return locate(proc_cgroup, mountinfo)


def mount_points() -> list[str]:
    try:
        with open("/proc/self/mountinfo") as fh:
            return [point for _, _, point, _ in _cgroup_mounts(fh.read())]
    except OSError:
        return []
