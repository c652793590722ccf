"""The learner: what each command really used, and the claim for its next run.

One small JSON file, ``<state>/learn.json``, keyed by a hash of the command (a
fan-out's jobs by their template): the file never holds a command line, which
can hold a token. Each command keeps its last ``SAMPLES`` measurements:

- ``peak``: a COMPLETED attempt's peak memory (killed and timed-out attempts
  teach nothing: they reached what something stopped them at, not what they
  need);
- ``floor``: an attempt the kernel stopped for memory. Its claim was too
  small, so the next claim is at least double it (or what it reached, if more);
- ``vram`` (kept apart, in ``v``): a COMPLETED GPU attempt's VRAM peak on one
  device (``usage.vram_peak``), for ``--vram guess``: the largest x (1 +
  margin), whole MiB, at most the largest device of the pool (``vram_claim_for``).

A submission without ``--mem`` claims ``max(largest peak x (1 + margin),
largest floor)``, at least ``MIN_CLAIM`` (or the default claim, if that is
smaller: the learner is never more cautious than knowing nothing), capped at
the budget by the caller.

Every measurement is a number of this machine, so one above the machine's
memory (or not a whole number of bytes: ``qex.base.numbers``) is no
measurement: it is passed over, and the submission says so. In a state
directory its group shares, anyone of the group can write the file; a value
put there can thus make a command claim at most the machine's memory (and the
budget's, as the caller caps it), never ``1e300`` bytes.
The largest, not the average: a claim that is too small stops the job, one a
little too large only costs some capacity.

Written atomically (fsync, rename) under its own lock, ``<state>/learn.lock``, by
the supervisor after its final pass: not under the state lock, so that a drain
of short jobs does not wait on one more fsync per job. A supervisor that dies
between its final record and its lesson loses that one sample, nothing else.
Reading is for the submit path: one small file, ``json`` only, no cattrs. A
file that cannot be read gives no claim and a warning, never a crash and never
a zero claim; a damaged file is moved aside (``learn.json.corrupt-<time>``)
before the next write, so nothing is destroyed in silence.
"""

from __future__ import annotations

import json
import os
import time

from qex.base import numbers
from qex.store import layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Sequence

    from qex.config.context import Context
    from qex.config.keys import PoolDef

FILE = layout.LEARN  # (tests have it from here)
FORMAT = 1
SAMPLES = 5  # measurements kept per command: a task changes, old runs say less
MAX_COMMANDS = 1000  # the least recently taught commands go first (~120 bytes each)
MIN_CLAIM = 64 << 20  # a job may use more on another day: a tiny claim helps nobody
MAX_BYTES = 4 << 20  # a store larger than this is damage, not learning


class Unreadable(Exception):
    """The store exists and cannot be used; the message says why."""


def path_of(state_dir: str) -> str:
    return os.path.join(state_dir, layout.LEARN)


def key_of(command: Sequence[str], template: Sequence[str] | None = None) -> str:
    """The key of a command (a list of strings); a fan-out passes its template.

    BLAKE2b from CPython's built-in ``_blake2`` (0.2 ms to import; ``hashlib``
    loads OpenSSL, 2-10 ms, on every submission)."""
    try:
        from _blake2 import blake2b
    except ImportError:  # another Python implementation
        from hashlib import blake2b

    words = template if template else command
    data = json.dumps([str(w) for w in words], separators=(",", ":")).encode()
    return blake2b(data, digest_size=12).hexdigest()


def load(state_dir: str) -> dict:
    """The store ({} when there is none); raises Unreadable for a damaged or unreadable file."""
    from qex.store import fs

    path = path_of(state_dir)
    try:
        data = fs.read_bytes(path, MAX_BYTES)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise Unreadable(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise Unreadable(f"{path} is larger than {MAX_BYTES} bytes")
    try:
        store = json.loads(data)
    except ValueError as exc:
        raise Unreadable(f"{path} is not JSON ({exc})") from None
    if not isinstance(store, dict) or not isinstance(store.get("commands", {}), dict):
        raise Unreadable(f"{path} is not a learner store")
    return store


# The file: {"format": 1, "commands": {key: {"n": name, "at": secs, "s": [[kind, bytes], ...]}}},
# compact so that a full store stays near 100KB and parses in about a millisecond.


def _samples(store: dict, key: str, most: int | None = numbers.BYTES) -> list[list]:
    """The usable [kind, bytes] samples of a command, each a whole number of bytes from 1 to
    ``most``; anything else in the file is passed over (``most`` None: every sample of a kind)."""
    entry = (store.get("commands") or {}).get(key)
    if not isinstance(entry, dict) or not isinstance(entry.get("s"), list):
        return []
    return [
        [s[0], s[1]]
        for s in entry["s"]
        if isinstance(s, list)
        and len(s) >= 2
        and isinstance(s[0], str)
        and (most is None or numbers.ok(s[1], most, 1, whole=True))
    ]


def suggest(
    store: dict, key: str, margin: float, minimum: int = MIN_CLAIM, most: int = numbers.BYTES
) -> tuple[int, str] | None:
    """(bytes, words for claim_source) for a command, or None when nothing is known.
    ``most``: the machine's memory; a sample above it is no measurement."""
    from qex.base.units import format_size

    samples = _samples(store, key, most)
    peaks = [n for kind, n in samples if kind == "peak"]
    floors = [n for kind, n in samples if kind == "floor"]
    if not peaks and not floors:
        return None
    from_peaks = int(max(peaks) * (1 + max(0.0, margin))) if peaks else 0
    claim = max(from_peaks, max(floors, default=0), max(1, minimum))
    claim = -(-claim // (1 << 20)) * (1 << 20)  # whole MiB
    runs = f"{len(peaks)} run{'s' if len(peaks) != 1 else ''}"
    if peaks and from_peaks >= max(floors, default=0):
        words = f"learned from {runs} (peak {format_size(max(peaks))})"
    elif peaks:
        words = (
            f"learned from {runs} (peak {format_size(max(peaks))}; at least "
            f"{format_size(max(floors))} after an out-of-memory kill)"
        )
    else:
        words = f"learned: at least {format_size(max(floors))} after an out-of-memory kill"
    return claim, words


def claim_for(
    state_dir: str,
    command: Sequence[str],
    template: Sequence[str] | None,
    margin: float,
    minimum: int = MIN_CLAIM,
    most: int | None = None,
) -> tuple[tuple[int, str] | None, str | None]:
    """For the submit path: ((bytes, words) or None, warning or None). Never raises.
    ``most``: the machine's memory (None or 0: not known); a learned value above it is
    passed over, with a warning."""
    try:
        store = load(state_dir)
    except Unreadable as exc:
        return None, (
            f"the learner store cannot be used ({exc}); this job claims the default memory. "
            "qex moves the file aside when the next job ends"
        )
    most = min(most or numbers.BYTES, numbers.BYTES)
    try:
        key = key_of(command, template)
        found, warning = suggest(store, key, margin, minimum, most), None
        if any(type(n) is int and n > most for _kind, n in _samples(store, key, None)):  # (words only)
            from qex.base.units import format_size

            warning = (
                f"the learner store {path_of(state_dir)} holds values for this command above the "
                f"machine's memory ({format_size(most)}), which no run here can have used: "
                "they are passed over"
            )
        return found, warning
    except Exception as exc:  # a shape we did not foresee: a claim is an estimate, never a crash
        return None, f"the learner store gave no claim ({type(exc).__name__}); this job claims the default memory"


def teach(state_dir: str, lessons: list, mode: int = 0o600) -> str | None:
    """``teach_locked`` under ``learn.lock`` (``mode``: that of the state directory's files).
    ``lessons``: (command, template, kind, nbytes, name) each, taught in one write."""
    import fcntl

    lock = os.path.join(state_dir, layout.LEARN_LOCK)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        return f"learner: cannot open {lock} ({exc.strerror}); not taught"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return teach_locked(state_dir, lessons)
    finally:
        os.close(fd)


def teach_locked(state_dir: str, lessons: list, now: float | None = None) -> str | None:
    """Add measurements, (command, template, kind "peak" or "floor", nbytes, name)
    each, in one write of the store; ``learn.lock`` must be held.

    Returns a note for the supervisor's log when something was off, else None.
    """
    from qex.store import fs

    lessons = [
        lesson
        for lesson in lessons
        if lesson[2] in ("peak", "floor", "vram") and numbers.ok(lesson[3], numbers.BYTES, 1, whole=True)
    ]
    if not lessons:
        return None
    now = time.time() if now is None else now
    path = path_of(state_dir)
    note = None
    try:
        store = load(state_dir)
    except Unreadable as exc:
        aside = os.path.join(state_dir, layout.learn_aside(int(now)))
        try:
            os.rename(path, aside)
        except OSError as err:
            return f"learner: {exc}; cannot move it aside ({err.strerror}); this measurement is not kept"
        store, note = {}, f"learner: {exc}; moved it to {aside} and started a new store"
    commands = store.get("commands")
    if not isinstance(commands, dict):
        commands = {}
    for command, template, kind, nbytes, name in lessons:
        key = key_of(command, template)
        samples = _samples({"commands": commands}, key)
        vram = _vram_samples({"commands": commands}, key, numbers.BYTES)
        if kind == "vram":
            vram.append(nbytes)
        else:
            samples.append([kind, nbytes])
        commands[key] = {"n": str(name)[:40], "at": int(now), "s": samples[-SAMPLES:]}
        if vram:
            commands[key]["v"] = vram[-SAMPLES:]
    if len(commands) > MAX_COMMANDS:
        oldest = sorted(commands, key=lambda k: _when(commands[k]))[: len(commands) - MAX_COMMANDS]
        for k in oldest:
            del commands[k]
    data = json.dumps({"format": FORMAT, "commands": commands}, separators=(",", ":")).encode() + b"\n"
    fs.write_atomic(path, data, mode=0o644, sync_dir=False)  # unsorted: sorting a full store costs ~10x
    return note


def _vram_samples(store: dict, key: str, most: int) -> list[int]:
    """The usable VRAM peaks of a command: whole numbers of bytes from 1 to ``most``."""
    entry = (store.get("commands") or {}).get(key)
    if not isinstance(entry, dict) or not isinstance(entry.get("v"), list):
        return []
    return [n for n in entry["v"] if numbers.ok(n, most, 1, whole=True)]


def vram_claim_for(
    state_dir: str, command: Sequence[str], template: Sequence[str] | None, margin: float, most: int
) -> tuple[tuple[int, str] | None, str | None]:
    """For ``--vram guess``: ((bytes per device, words for claim_source) or None, warning
    or None). ``most``: the largest device of the pool (a peak above it is no
    measurement of this machine). Never raises."""
    from qex.base.units import format_size

    try:
        store = load(state_dir)
    except Unreadable as exc:
        return None, f"the learner store cannot be used ({exc}); --vram guess takes whole devices"
    try:
        peaks = _vram_samples(store, key_of(command, template), min(most, numbers.BYTES))
    except Exception as exc:  # a shape we did not foresee: a claim is an estimate, never a crash
        return None, f"the learner store gave no VRAM claim ({type(exc).__name__}); --vram guess takes whole devices"
    if not peaks:
        return None, None
    claim = -(-int(max(peaks) * (1 + max(0.0, margin))) // (1 << 20)) * (1 << 20)  # whole MiB
    runs = f"{len(peaks)} run{'s' if len(peaks) != 1 else ''}"
    words = f"learned from {runs} (VRAM peak {format_size(max(peaks))})"
    if claim > most:
        return (most, f"{words}, capped at the largest device"), None
    return (claim, words), None


def vram_guess(
    ctx: Context,
    command: Sequence[str],
    template: Sequence[str] | None,
    pool: PoolDef | None,
    sources: dict,
    warnings: list,
) -> int | None:
    """``--vram guess`` (``qex.jobs.claims.pool_claims``): the largest VRAM peak the
    learner knows of this command on one device, with its margin (at most the largest
    device); else ``[defaults] vram`` (unset: whole devices). ``sources["vram"]``
    says which; a store that cannot be used adds a warning."""
    from qex.base.units import format_size

    default = ctx.config.default_vram
    if pool is None or not pool.indexed:
        return default  # (the claim is refused with its reason: no pool gpu of devices)
    found, warning = (
        vram_claim_for(
            ctx.store.root,
            () if template else tuple(command),
            tuple(template) if template else None,
            ctx.config.learn_margin,
            max(pool.devices),
        )
        if ctx.config.learn_enabled
        else (None, None)
    )
    if warning:
        warnings.append(warning)
    if found is None:
        sources["vram"] = "guess: nothing learned of this command yet, " + (
            f"[defaults] vram {format_size(default)}" if default else "whole devices"
        )
        return default
    sources["vram"] = found[1]
    return found[0]


def _when(entry) -> float:
    at = entry.get("at") if isinstance(entry, dict) else None
    return at if numbers.ok(at, numbers.TIME) else 0.0
