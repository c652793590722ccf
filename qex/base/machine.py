"""Facts about the machine, read from /proc: cores, memory total and available."""

import os


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def meminfo() -> dict[str, int]:
    """MemTotal and MemAvailable in bytes (empty if /proc is not there).

    One read of the file's first page (the two come first, and every pass asks)."""
    out = {}
    data = b"\n" + _read_proc("/proc/meminfo", 4096)
    for key in ("MemTotal", "MemAvailable"):
        at = data.find(b"\n" + key.encode() + b":")
        if at >= 0:
            try:
                out[key] = int(data[at : at + 64].split(None, 2)[1]) * 1024
            except (ValueError, IndexError):
                pass
    return out


def _read_proc(path: str, size: int) -> bytes:
    """Up to ``size`` bytes of a /proc file, in one read (b"" if it cannot be read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        return os.read(fd, size)
    except OSError:
        return b""
    finally:
        os.close(fd)


# Memory pressure (PSI): its file, which QEX_PSI_FILE replaces (the tests write one; every
# process of a queue must see the same, so it is read from the environment they inherit).
PSI_MEMORY = "/proc/pressure/memory"


def psi_path() -> str:
    return os.environ.get("QEX_PSI_FILE") or PSI_MEMORY


def memory_pressure(path: str | None = None) -> float:
    """``some avg10`` of the memory PSI file: the share (a percentage) of the last 10 s in
    which some task waited for memory. Raises OSError (ValueError: a file that says no
    such number) where the kernel gives none (before Linux 4.20, CONFIG_PSI off, psi=0)."""
    path = path or psi_path()
    with open(path, "rb") as fh:  # (a kernel with psi=0 refuses the read: EOPNOTSUPP)
        data = fh.read(512)
    for line in data.splitlines():
        if line.startswith(b"some "):
            for word in line.split()[1:]:
                if word.startswith(b"avg10="):
                    from qex.base import numbers

                    value = float(word[6:])
                    if numbers.ok(value, 100):
                        return value
    raise ValueError(f"{path} holds no 'some avg10=' percentage")


def mem_total() -> int:
    return meminfo().get("MemTotal", 0)


def process_start_time(pid: int) -> int | None:
    """Clock ticks since boot at which ``pid`` started (field 22 of /proc/pid/stat)."""
    data = _read_proc(f"/proc/{pid}/stat", 4096)
    if not data:
        return None
    try:
        return int(data[data.rindex(b")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


def process_real_uid(pid: int) -> int | None:
    """The real uid of ``pid`` (the Uid line of /proc/pid/status), or None."""
    data = _read_proc(f"/proc/{pid}/status", 8192)
    for line in (data or b"").splitlines():
        if line.startswith(b"Uid:"):
            try:
                return int(line.split()[1])
            except (ValueError, IndexError):
                return None
    return None


def process_peak_rss(pid: int | None) -> int | None:
    """The largest resident memory ``pid`` has had, in bytes (VmHWM of /proc/pid/status), or None."""
    if not pid:
        return None
    data = _read_proc(f"/proc/{pid}/status", 8192)
    for line in (data or b"").splitlines():
        if line.startswith(b"VmHWM:"):
            try:
                return int(line.split()[1]) * 1024
            except (ValueError, IndexError):
                return None
    return None


_BOOT_ID: str | None = None


def boot_id() -> str:
    """This boot's id (read once per process: it cannot change while the process lives)."""
    global _BOOT_ID
    if _BOOT_ID is None:
        try:
            with open("/proc/sys/kernel/random/boot_id") as fh:
                _BOOT_ID = fh.read().strip()
        except OSError:
            return ""
    return _BOOT_ID
