"""Facts about the machine, read from /proc: cores, memory total and available."""

import os


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def meminfo() -> dict[str, int]:
    """MemTotal and MemAvailable in bytes (empty if /proc is not there)."""
    out = {}
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                key, _, rest = line.partition(b":")
                if key in (b"MemTotal", b"MemAvailable"):
                    out[key.decode()] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def mem_total() -> int:
    return meminfo().get("MemTotal", 0)


def process_start_time(pid: int) -> int | None:
    """Clock ticks since boot at which ``pid`` started (field 22 of /proc/pid/stat)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    try:
        return int(data[data.rindex(b")") + 2:].split()[19])
    except (ValueError, IndexError):
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
