"""Sizes, durations, cores and names: parsing user text and showing values.

Imported by every command, so it imports only ``re`` (and qex's own errors).
Every parser raises ``SpecError`` (exit 121) with one sentence that names the
option, the value as given (in a terminal-safe form) and the accepted forms.

Sizes are powers of 1024 for every unit spelling (``K``, ``KB`` and ``KiB`` are
all 1024 bytes), as ``free`` and Slurm read them. Cores are counted in whole
millicores (1 core = 1000), so arithmetic on claims stays exact.
"""

from __future__ import annotations

import re

from qex.base import numbers
from qex.base.errors import SpecError


class _Lazy:
    """A pattern compiled on first use (through ``re``'s own cache), so that
    importing this module, which every command does, compiles nothing."""

    __slots__ = ("pattern", "flags")

    def __init__(self, pattern: str, flags: int = 0):
        self.pattern, self.flags = pattern, flags

    def fullmatch(self, text: str) -> re.Match[str] | None:
        return re.fullmatch(self.pattern, text, self.flags)

    def findall(self, text: str) -> list:
        return re.findall(self.pattern, text, self.flags)

    def sub(self, repl: str, text: str) -> str:
        return re.sub(self.pattern, repl, text, flags=self.flags)


_UNITS = {"": 1, "b": 1}
for _i, _letter in enumerate("kmgt", start=1):
    for _spelling in (_letter, _letter + "b", _letter + "ib"):
        _UNITS[_spelling] = 1024**_i
del _i, _letter, _spelling

_SIZE_RE = _Lazy(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-z]*)\s*", re.ASCII | re.IGNORECASE)
_SIZE_FORMS = "use a number of bytes or a number with K, M, G or T (KB/KiB...), e.g. 512MB, 2GB, 1.5GiB"
_MAX_SIZE = numbers.BYTES  # the largest size qex accepts: beyond that no machine has it (nor reads it back)

_SECONDS = {"": 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "h": 3600.0, "d": 86400.0}
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_DURATION_RE = _Lazy(rf"\s*({_NUMBER})\s*(ms|[smhd]?)\s*", re.ASCII | re.IGNORECASE)
_DURATION_PART_RE = _Lazy(rf"({_NUMBER})(ms|[smhd])", re.ASCII | re.IGNORECASE)
_COMPOUND_RE = _Lazy(rf"\s*(?:{_NUMBER}(?:ms|[smhd]))+\s*", re.ASCII | re.IGNORECASE)
_DURATION_FORMS = "use a number of seconds or a number with ms, s, m, h or d, e.g. 90s, 30m, 1.5h, 7d"

WORDS = ("guess", "half", "full", "max")
_CPU_RE = _Lazy(r"\s*([0-9]+)(?:\.([0-9]*))?\s*|\s*\.([0-9]+)\s*", re.ASCII)
_CPU_FORMS = "use a positive number (e.g. 1, 0.5, 4) or guess, half, full, max"

_NAME_RE = _Lazy(r"[A-Za-z0-9_.][A-Za-z0-9_.-]{0,127}", re.ASCII)
_NAME_RULE = "use 1 to 128 letters, digits, '-', '_' or '.', not starting with '-'"
_SAFE_TEXT_RE = _Lazy(r"[^A-Za-z0-9\-_.:/@+=, ]")
_UNSAFE_NAME_RUN_RE = _Lazy(r"[^A-Za-z0-9._-]+")


def safe_text(s: str, limit: int = 200) -> str:
    """``s`` in a form safe to print on a terminal: ASCII letters, digits,
    space and ``-_.:/@+=,`` are kept, every other character becomes ``?``; a
    text longer than ``limit`` is cut to ``limit`` characters ending in ``…``."""
    s = str(s)
    if len(s) > limit:
        return _SAFE_TEXT_RE.sub("?", s[: max(limit - 1, 0)]) + "…"
    return _SAFE_TEXT_RE.sub("?", s)


def safe_name(s: str) -> str:
    """A name qex derives (from a program path, a fan-out line) in the safe
    form: runs of characters outside ``[A-Za-z0-9._-]`` become ``-``, leading
    ``-`` are dropped, at most 128 characters; nothing left gives ``job``."""
    name = _UNSAFE_NAME_RUN_RE.sub("-", str(s)).lstrip("-")[:128]
    return name or "job"


def check_name(name: str, option: str) -> str:
    """Return ``name`` if it is a valid user-chosen name, else raise SpecError."""
    if isinstance(name, str) and _NAME_RE.fullmatch(name):
        return name
    shown = _escaped(str(name), 60)
    bad = sorted({c for c in str(name) if not c.isascii()})
    why = (
        f" ({', '.join(_escaped(c, 12) for c in bad[:5])}: only ASCII letters, a name is typed "
        "in shells and crontabs everywhere)"
        if bad
        else ""
    )
    raise SpecError(f"{option}: {shown} is not a valid name{why}; {_NAME_RULE}")


def _escaped(text: str, limit: int) -> str:
    """``text`` quoted with every character outside printable ASCII written as its
    code (``'caf\\xe9'``, as Python's ``ascii`` does): a refusal names what it refused,
    never a ``?``."""
    if len(text) > limit:
        text = text[: limit - 1] + "\u2026"
    return ascii(text)


def _shown(text) -> str:
    return "'" + safe_text(str(text), 60) + "'"


def _scaled(whole: str, frac: str, multiplier: int) -> int:
    """``whole.frac * multiplier`` rounded down, in exact integer arithmetic."""
    frac = frac or ""
    return (int(whole or "0") * 10 ** len(frac) + int(frac or "0")) * multiplier // 10 ** len(frac)


def parse_size(text: str, option: str) -> int:
    """Bytes from ``512MB``, ``2GB``, ``1.5GiB``, ``10g``, ``100`` (bare =
    bytes). Zero is accepted (callers decide); a fraction of a byte is dropped."""
    m = _SIZE_RE.fullmatch(text) if isinstance(text, str) else None
    unit = m and _UNITS.get(m.group(2).lower())
    if not unit:
        raise SpecError(f"{option}: {_shown(text)} is not a size; {_SIZE_FORMS}")
    whole, _, frac = m.group(1).partition(".")
    value = _scaled(whole, frac, unit)
    if value > _MAX_SIZE:
        raise SpecError(f"{option}: {_shown(text)} is too large a size; {_SIZE_FORMS}")
    return value


BARE_SIZE_WARN = 1024**2  # a size given as a bare number below this is bytes, as written, with a warning


def bare_size_warning(text: str | int, option: str) -> str | None:
    """A sentence for a size given as a bare number under 1MiB (``--mem 100``): bytes,
    as the forms say, but most likely a unit left out; None for any other size."""
    m = _SIZE_RE.fullmatch(str(text)) if isinstance(text, (str, int)) and not isinstance(text, bool) else None
    if m is None or m.group(2):
        return None
    whole, _, frac = m.group(1).partition(".")
    value = _scaled(whole, frac, 1)
    if value >= BARE_SIZE_WARN:
        return None
    number = m.group(1)
    return (
        f"{option} {number} is {value} byte{'' if value == 1 else 's'} (a bare number is bytes); "
        f"did you mean {number}MB?"
    )


def parse_duration(text: str, option: str) -> float:
    """Seconds from ``90s``, ``30m``, ``4h``, ``7d``, ``1.5h``, ``250ms``,
    ``1h30m`` (the form ``format_duration`` prints), bare = seconds."""
    if not isinstance(text, str):
        raise SpecError(f"{option}: {_shown(text)} is not a duration; {_DURATION_FORMS}")
    m = _DURATION_RE.fullmatch(text)
    if m:
        parts = [(m.group(1), m.group(2))]
    elif _COMPOUND_RE.fullmatch(text):
        parts = _DURATION_PART_RE.findall(text.strip())
    else:
        raise SpecError(f"{option}: {_shown(text)} is not a duration; {_DURATION_FORMS}")
    seconds = sum(float(number) * _SECONDS[unit.lower()] for number, unit in parts)
    if not seconds <= numbers.DURATION:  # also catches inf from an absurdly long number
        raise SpecError(f"{option}: {_shown(text)} is too long a duration; {_DURATION_FORMS}")
    return seconds


def parse_cpu(text: str, option: str) -> str | int:
    """``guess``/``half``/``full``/``max`` (lowercased) or a positive number of
    cores as millicores (``0.5`` -> 500); more than 3 decimals is refused."""
    if isinstance(text, str) and text.strip().lower() in WORDS:
        return text.strip().lower()
    m = _CPU_RE.fullmatch(text) if isinstance(text, str) else None
    if m:
        whole, frac = (m.group(1), m.group(2)) if m.group(1) is not None else ("0", m.group(3))
        if len(frac or "") > 3:
            raise SpecError(f"{option}: {_shown(text)} is finer than a thousandth of a core; {_CPU_FORMS}")
        millicores = _scaled(whole, frac, 1000)
        if 0 < millicores <= numbers.MILLICORES:
            return millicores
        if millicores > numbers.MILLICORES:
            raise SpecError(
                f"{option}: {_shown(text)} is more cores than any machine has (at most {numbers.CORES}); {_CPU_FORMS}"
            )
    raise SpecError(f"{option}: {_shown(text)} is not a number of cores; {_CPU_FORMS}")


def parse_mem(text: str, option: str) -> str | int:
    """``guess``/``half``/``full``/``max`` (lowercased) or a size in bytes > 0."""
    if isinstance(text, str) and text.strip().lower() in WORDS:
        return text.strip().lower()
    try:
        value = parse_size(text, option)
    except SpecError:
        value = None
    if not value:
        raise SpecError(
            f"{option}: {_shown(text)} is not a memory size; use a positive size "
            f"(e.g. 512MB, 2GB, 1.5GiB) or guess, half, full, max"
        )
    return value


def format_size(n: int) -> str:
    """``512MB``, ``1.5GB``, ``12GB``, ``900B``: binary units up to TB, at most
    one decimal, no ``.0``."""
    n = int(n)
    if n < 0:
        return "-" + format_size(-n)
    if n < 1024:
        return f"{n}B"
    for power, unit in enumerate(("KB", "MB", "GB", "TB"), start=1):
        scale = 1024**power
        tenths = (n * 20 + scale) // (2 * scale)  # tenths of a unit, half rounds up
        if tenths < 10240 or unit == "TB":  # no PB: parse_size reads what this prints
            whole, tenth = divmod(tenths, 10)
            return f"{whole}.{tenth}{unit}" if tenth else f"{whole}{unit}"
    raise AssertionError("unreachable")


def format_cores(millicores: int) -> str:
    """``1``, ``1.5``, ``0.25``: cores from millicores, without trailing zeros."""
    millicores = int(millicores)
    sign = "-" if millicores < 0 else ""
    whole, rest = divmod(abs(millicores), 1000)
    return f"{sign}{whole}.{rest:03d}".rstrip("0") if rest else f"{sign}{whole}"


def format_duration(secs: float) -> str:
    """``0.3s``, ``45s``, ``3m20s``, ``2h05m``, ``3d4h``: two units at most,
    the smaller one dropped when it is zero."""
    secs = float(secs)
    if secs != secs:
        return "?"
    if secs < 0:
        return "-" + format_duration(-secs)
    if secs == float("inf"):
        return "forever"
    if secs < 1 and round(secs * 1000) < 1000:
        return f"{round(secs * 1000) / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    total = int(secs + 0.5)
    minutes, s = divmod(total, 60)
    hours, m = divmod(minutes, 60)
    days, h = divmod(hours, 24)
    if days:
        return f"{days}d{h}h" if h else f"{days}d"
    if hours:
        return f"{hours}h{m:02d}m" if m else f"{hours}h"
    if minutes:
        return f"{minutes}m{s:02d}s" if s else f"{minutes}m"
    return f"{s}s"
