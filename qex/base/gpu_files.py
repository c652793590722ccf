"""What qex keeps of the driver's reports, as small text files a minimal process
can write and read (no json): the last reading of the VRAM each process holds
(``layout.GPU_SEEN``: ``encode``, ``decode``, ``load``, ``keep``), and a running
GPU job's VRAM peak so far (``layout.VRAM``: ``live_text``, ``read_live``).
Written atomically (``write_quietly``), unsynced: they are caches and views.

Builtin modules only (``posix``): the minimal watcher imports this module.
"""

import posix

from qex.base import numbers
from qex.base.gpu_use import NVML, SMI, Seen, uuid_ok

FORMAT = "qex-gpu-apps 1"


def encode(seen: Seen, boot: str) -> bytes:
    """The reading as the text of the state directory's file::

    qex-gpu-apps 1
    boot <boot id>
    at <seconds>
    source nvidia-smi
    index <uuid> <index>
    app <pid> <uuid> <bytes>
    error <words>
    """
    lines = [FORMAT, f"boot {boot}", f"at {seen.at!r}", f"source {seen.source}"]
    lines += [f"index {u} {i}" for u, i in sorted(seen.indices.items()) if uuid_ok(u)]
    lines += [f"app {p} {u} {n}" for p, u, n in seen.apps if uuid_ok(u)]
    if seen.error:
        lines.append("error " + "".join(c if c.isprintable() else "?" for c in seen.error)[:300])
    return ("\n".join(lines) + "\n").encode()


def decode(data: bytes, boot: str) -> Seen | None:
    """The reading a file holds, or None (another boot's, damaged, another format).
    Every number is held to its bound (``qex.base.numbers``)."""
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return None
    if not lines or lines[0] != FORMAT:
        return None
    at, source, apps, indices, error, booted = None, "", [], {}, "", ""
    try:
        for line in lines[1:]:
            word, _, rest = line.partition(" ")
            parts = rest.split()
            if word == "boot":
                booted = rest
            elif word == "at":
                at = numbers.number(float(rest), numbers.TIME)
            elif word == "source":
                source = rest
            elif word == "index" and len(parts) == 2 and uuid_ok(parts[0]):
                indices[parts[0]] = numbers.number(int(parts[1]), numbers.DEVICE)
            elif word == "app" and len(parts) == 3 and uuid_ok(parts[1]):
                apps.append(
                    (
                        numbers.number(int(parts[0]), numbers.PID, 1),
                        parts[1],
                        numbers.number(int(parts[2]), numbers.BYTES),
                    )
                )
            elif word == "error":
                error = rest
            else:
                return None
    except (ValueError, numbers.BadNumber):
        return None
    if at is None or booted != boot or source not in (NVML, SMI):
        return None
    return Seen(at, source, tuple(apps), indices, error)


def boot_id() -> str:
    """This boot's id (a reading of another boot names other processes)."""
    try:
        fd = posix.open("/proc/sys/kernel/random/boot_id", posix.O_RDONLY | posix.O_CLOEXEC)
        try:
            return posix.read(fd, 64).decode("ascii", "replace").strip()
        finally:
            posix.close(fd)
    except OSError:
        return ""


def load(path: str, boot: str) -> Seen | None:
    """The reading kept at ``path`` (None when there is none to use)."""
    try:
        fd = posix.open(path, posix.O_RDONLY | posix.O_CLOEXEC | posix.O_NOFOLLOW | posix.O_NONBLOCK)
    except OSError:
        return None
    try:
        data = posix.read(fd, 1 << 20)
    except OSError:
        return None
    finally:
        posix.close(fd)
    return decode(data, boot)


def keep(path: str, seen: Seen, boot: str, mode: int) -> None:
    """Write the reading to ``path`` (``write_quietly``): a cache, whose failure is
    silent (the next reader reads the driver)."""
    write_quietly(path, encode(seen, boot), mode)


def write_quietly(path: str, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` atomically (a reader sees the old file or the new
    one), unsynced; a failure is silent."""
    folder, _, name = path.rpartition("/")
    tmp = f"{folder}/.{name}.{posix.getpid()}.tmp"  # (qex.store.fs.write_atomic's temporary name)
    try:
        fd = posix.open(tmp, posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_NOFOLLOW | posix.O_CLOEXEC, mode)
    except FileExistsError:
        try:
            posix.unlink(tmp)  # left by a process of this pid that died
        except OSError:
            pass
        return
    except OSError:
        return
    try:
        posix.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[posix.write(fd, view) :]
        posix.close(fd)
        fd = -1
        posix.rename(tmp, path)
    except OSError:
        if fd >= 0:
            posix.close(fd)
        try:
            posix.unlink(tmp)
        except OSError:
            pass


# ---- a job's VRAM peak so far (jobs/<id>/vram) -------------------------------------------

LIVE_FORMAT = "qex-vram 1"


def live_text(peaks: dict, attempt: int, at: float) -> bytes:
    """The file a GPU job's sampler keeps while it runs (``qex.supervisor.vram``)::

    qex-vram 1
    attempt <n>
    at <seconds>
    device <qex's device number, or a GPU's UUID> <bytes>
    """
    lines = [LIVE_FORMAT, f"attempt {attempt}", f"at {at!r}"]
    lines += [f"device {key} {n}" for key, n in sorted(peaks.items())]
    return ("\n".join(lines) + "\n").encode()


def read_live(data: bytes, attempt: int) -> dict | None:
    """{device: bytes} of a job's ``vram`` file for ``attempt`` (None: none, another
    attempt's, or damaged). Every number is held to its bound (``qex.base.numbers``)."""
    try:
        lines = data.decode("ascii").splitlines()
        if not lines or lines[0] != LIVE_FORMAT:
            return None
        peaks, seen_attempt = {}, None
        for line in lines[1:]:
            word, _, rest = line.partition(" ")
            if word == "attempt":
                seen_attempt = numbers.number(int(rest), numbers.SEQ)
            elif word == "device":
                key, _, n = rest.partition(" ")
                if not key or len(key) > 128 or not (key.isdigit() or uuid_ok(key)):
                    return None
                peaks[key] = numbers.number(int(n), numbers.BYTES)
            elif word != "at":
                return None
        return peaks if seen_attempt == attempt else None
    except (UnicodeDecodeError, ValueError):
        return None
