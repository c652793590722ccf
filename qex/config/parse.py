"""Checking one value of the config file: one parser per kind of value.

Values are checked here, by hand rather than through cattrs, because each key
takes several input shapes (``"75%"``, ``2``, ``"1.5"``) and each refusal needs
its own remedy. Each parser takes ``(where, value)``, ``where`` being the key
as a refusal names it (``[budget] cpu``), and returns the value qex holds; the
table of keys (qex/config/keys.py) names a parser for each key.
"""

from __future__ import annotations

import os

from qex.base import numbers, units
from qex.base.errors import ConfigError, SpecError
from qex.base.states import FINAL
from qex.config.keys import Percent
from qex.config.text import printable

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import NoReturn, TypeVar

    R = TypeVar("R")  # what a parser of qex.base.units gives

FINAL_STATES = FINAL  # the order of the sentence that lists them (qex.base.states)
MIN_LOG_LIMIT = 4096  # qex.supervisor.logs.MIN_LIMIT


def fail(path: str, message: str) -> NoReturn:
    """Refuse the file over a key: ``PATH: [budget] cpu = ...; remedy``."""
    raise ConfigError(f"{path}: {message}")


def type_name(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number with a fraction"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return "a date or time"


def shown(value: object) -> str:
    """A value from the file, quoted, in printable ASCII, at most 60 characters."""
    text = printable(value if isinstance(value, str) else repr(value))
    text = text if len(text) <= 60 else text[:59] + "…"
    return f"'{text}'" if isinstance(value, str) else text


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    return is_int(value) or isinstance(value, float)


_PERCENT_FORM = r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*%\s*"


def percent_number(value: object) -> float | None:
    """The number in ``"75%"``, or None when ``value`` is not a percentage."""
    import re

    m = re.fullmatch(_PERCENT_FORM, value, re.ASCII) if isinstance(value, str) else None
    return float(m.group(1)) if m else None


def is_none_word(value: object) -> bool:
    return isinstance(value, str) and value.strip().lower() == "none"


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    import difflib

    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


class Checks:
    """The parsers of the values of one file (``path``, which each refusal names)."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, key: str, message: str) -> NoReturn:
        fail(self.path, f"{key} {message}")

    def units_call(self, parse: Callable[[str, str], R], value: str, key: str) -> R:
        try:
            return parse(value, key)
        except SpecError as e:
            fail(self.path, str(e))

    def want(self, key: str, value: object, ok: bool, expected: str) -> None:
        if not ok:
            self.fail(key, f"must be {expected}, not {type_name(value)} ({shown(value)})")

    # -- one parser per kind of value; each returns the value qex holds --

    def budget_cpu(self, key: str, value: object) -> int | Percent:
        forms = 'use a percentage like "75%" or a number of cores like 2 or "1.5"'
        if (pct := percent_number(value)) is not None:
            return self.percent(key, value, pct, "an absolute number of cores")
        self.want(key, value, is_number(value) or isinstance(value, str), forms[4:])
        try:
            millicores = self.cores(key, value)
        except ConfigError:
            millicores = None
        if not isinstance(millicores, int):
            self.fail(key, f"= {shown(value)} is not a percentage or a positive number of cores; {forms}")
        return millicores

    def budget_mem(self, key: str, value: object) -> int | Percent:
        forms = 'use a percentage like "75%" or a size like "16GB" (or a number of bytes)'
        if (pct := percent_number(value)) is not None:
            return self.percent(key, value, pct, 'an absolute size like "64GB"')
        self.want(key, value, is_int(value) or isinstance(value, str), forms[4:])
        try:
            return self.positive_size(key, value)
        except ConfigError:
            self.fail(key, f"= {shown(value)} is not a percentage or a positive size; {forms}")

    def percent(self, key: str, value: object, pct: float, absolute: str) -> Percent:
        if pct > 100:
            self.fail(key, f'= {shown(value)} is above 100%; use at most "100%", or {absolute} to go above the machine')
        if pct <= 0:
            self.fail(key, f'= {shown(value)} is not above 0%; use a percentage like "75%", or remove the key')
        return Percent(pct)

    def cores(self, key: str, value: object) -> str | int:
        """A number of cores (int, float or string) or a claim word -> millicores or word."""
        if isinstance(value, float):
            if not numbers.ok(value, numbers.CORES):  # (NaN, the infinities, a negative: units says a huge one)
                self.fail(key, f"= {shown(value)} is not a number of cores; use a positive number like 1, 0.5 or 4")
            value = repr(value)
        return self.units_call(units.parse_cpu, str(value), key)

    def cpu_claim(self, key: str, value: object) -> str | int:
        forms = 'a number of cores like 1 or "0.5", or one of "guess", "half", "full", "max"'
        self.want(key, value, is_number(value) or isinstance(value, str), forms)
        return self.cores(key, value)

    def mem_claim(self, key: str, value: object) -> str | int:
        forms = 'a size like "2GB" or one of "guess", "half", "full", "max"'
        self.want(key, value, is_int(value) or isinstance(value, str), forms)
        return self.units_call(units.parse_mem, str(value), key)

    def size(self, key: str, value: object) -> int:
        self.want(key, value, is_int(value) or isinstance(value, str), 'a size like "512MB" or a number of bytes')
        if is_int(value) and value < 0:
            self.fail(key, f'= {value} is negative; use a size like "512MB" or 0')
        return self.units_call(units.parse_size, str(value), key)

    def positive_size(self, key: str, value: object) -> int:
        n = self.size(key, value)
        if n <= 0:
            self.fail(key, f'= {shown(value)} is zero; use a positive size like "512MB", or remove the key')
        return n

    def optional_positive_size(self, key: str, value: object) -> int | None:
        return None if is_none_word(value) else self.positive_size(key, value)

    def log_limit(self, key: str, value: object) -> int | None:
        if isinstance(value, str) and value.strip().lower() in ("none", "unlimited"):
            return None
        n = self.size(key, value) or None
        if n is not None and n < MIN_LOG_LIMIT:
            self.fail(
                key,
                f"= {shown(value)} is below 4KB, the least that holds the head, the marker line "
                'and a tail; use at least "4KB", or 0 for no limit',
            )
        return n

    def duration(self, key: str, value: object) -> float:
        forms = 'a duration like "90s", "30m", "4h", "7d" or a number of seconds'
        self.want(key, value, is_number(value) or isinstance(value, str), forms)
        if is_number(value) and not numbers.ok(value, numbers.DURATION):  # also NaN and inf
            self.fail(key, f"= {shown(value)} is not {forms}; use one")
        seconds = float(value) if is_number(value) else self.units_call(units.parse_duration, value, key)
        if seconds <= 0:
            self.fail(key, f'= {shown(value)} is zero; use a positive duration like "30m", or remove the key')
        return seconds

    def optional_duration(self, key: str, value: object) -> float | None:
        return None if is_none_word(value) else self.duration(key, value)

    def count(self, key: str, value: object, minimum: int) -> int:
        self.want(key, value, is_int(value), f"an integer of at least {minimum}")
        if value < minimum:
            self.fail(key, f"= {value} is below {minimum}; use an integer of at least {minimum}")
        if value > numbers.COUNT:
            self.fail(
                key, f"= {shown(value)} is above {numbers.COUNT}; use an integer from {minimum} to {numbers.COUNT}"
            )
        return value

    def nonneg_int(self, key: str, value: object) -> int:
        return self.count(key, value, 0)

    def positive_int(self, key: str, value: object) -> int:
        return self.count(key, value, 1)

    def boolean(self, key: str, value: object) -> bool:
        self.want(key, value, isinstance(value, bool), "true or false")
        return value

    def choice(self, key: str, value: object, options: tuple[str, ...]) -> str:
        listed = ", ".join(f'"{o}"' for o in options)
        self.want(key, value, isinstance(value, str), f"one of {listed}")
        if value not in options:
            self.fail(key, f"= {shown(value)} is not one of {listed}; use one of them")
        return value

    def margin(self, key: str, value: object) -> float:
        pct = percent_number(value)
        if pct is None or pct > 100:
            self.fail(key, f'= {shown(value)} is not a percentage from 0% to 100%; use one like "20%"')
        return pct / 100

    def bounded_int(self, key: str, value: object, least: int, most: int) -> int:
        self.want(key, value, is_int(value), f"an integer from {least} to {most}")
        if not least <= value <= most:
            self.fail(key, f"= {value} is not from {least} to {most}; use an integer from {least} to {most}")
        return value

    def niceness(self, key: str, value: object) -> int:
        return self.bounded_int(key, value, -20, 19)

    def oom_score_adj(self, key: str, value: object) -> int:
        return self.bounded_int(key, value, -1000, 1000)

    def pressure(self, key: str, value: object) -> float | None:
        """A percentage above 0 and below 100 (``20``, ``"20%"``), or "none"; refused where
        the kernel gives no memory pressure (``qex.base.machine.memory_pressure``)."""
        if is_none_word(value) or (isinstance(value, str) and value.strip().lower() == "off"):
            return None
        pct = percent_number(value) if isinstance(value, str) else float(value) if is_number(value) else None
        if pct is None or not 0 < pct < 100:
            self.fail(
                key,
                f'= {shown(value)} is not a percentage above 0% and below 100%; use one like "20%", or "none" (off)',
            )
        from qex.base import machine

        try:
            machine.memory_pressure()
        except (OSError, ValueError) as exc:
            self.fail(
                key,
                f"= {shown(value)} needs the kernel's memory pressure, which this machine does not "
                f"give ({machine.psi_path()}: {getattr(exc, 'strerror', None) or exc}; it needs Linux 4.20 "
                "or later with CONFIG_PSI, and psi=1 on the kernel command line where it is off by "
                "default); remove the key",
            )
        return pct

    def argv(self, key: str, value: object) -> tuple[str, ...]:
        example = 'a list of strings, the command and its arguments, e.g. ["notify-send", "qex"]'
        self.want(key, value, isinstance(value, list), example)
        if not value:
            self.fail(key, f"is an empty list; give the command to run ({example}), or remove the key")
        for item in value:
            self.want(key, item, isinstance(item, str), "a list of strings")
            if "\0" in item:
                self.fail(key, "holds a NUL character, which no command line can carry; remove it")
        if not value[0]:
            self.fail(key, "starts with an empty program name; put the program first")
        return tuple(value)

    def optional_word(self, key: str, value: object) -> str | None:
        self.want(key, value, isinstance(value, str), 'a word, e.g. "gpu"')
        if not value or any(c.isspace() or not c.isprintable() for c in value):
            self.fail(key, f"= {shown(value)} is not one word; give the name without spaces, or remove the key")
        return value

    def arg_list(self, key: str, value: object) -> tuple[str, ...]:
        self.want(key, value, isinstance(value, list), 'a list of strings, e.g. ["--exclusive"]')
        for item in value:
            self.want(key, item, isinstance(item, str), "a list of strings")
            if "\0" in item or "\n" in item:
                self.fail(key, "holds a NUL or a newline, which no command line option carries; remove it")
        return tuple(value)

    def states(self, key: str, value: object) -> tuple[str, ...]:
        self.want(key, value, isinstance(value, list), 'a list of state names, e.g. ["failed", "oom"]')
        for item in value:
            self.want(key, item, isinstance(item, str), "a list of state names")
            if item not in FINAL_STATES:
                listed = ", ".join(FINAL_STATES)
                self.fail(key, f"names {shown(item)}, which is not a final state; use some of {listed}")
        return tuple(dict.fromkeys(value))

    def abs_dir(self, key: str, value: object) -> str:
        self.want(key, value, isinstance(value, str), "an absolute directory path")
        if not os.path.isabs(value) or "\0" in value:
            self.fail(key, f"= {shown(value)} is not an absolute path; give a path that starts with /")
        return value
