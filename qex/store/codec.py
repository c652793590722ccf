"""The two converters: tolerant for what qex wrote, strict for what people write.

Built lazily on first use: importing cattrs costs ~15 ms, paid only by the
commands that read or write a record.
"""

from __future__ import annotations

import functools

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from typing import TypeVar

    from cattrs import Converter

    R = TypeVar("R")  # the record class load makes


@functools.cache
def tolerant() -> Converter:
    """For records qex wrote: unknown keys ignored, missing ones defaulted."""
    import cattrs

    conv = cattrs.Converter(forbid_extra_keys=False)
    _tuple_hooks(conv)
    return conv


@functools.cache
def strict() -> Converter:
    """For what a person writes: an unknown key is an error."""
    import cattrs

    conv = cattrs.Converter(forbid_extra_keys=True)
    _tuple_hooks(conv)
    return conv


def _tuple_hooks(conv) -> None:
    import typing

    from cattrs.strategies import configure_union_passthrough

    # JSON gives lists where the records hold tuples; accept both.
    conv.register_unstructure_hook(tuple, list)
    # Fields a person may write as a number or a string ("2", 2, "2GB").
    configure_union_passthrough(typing.Union[str, int, float, bool, None, list, dict], conv)


def load(cls: type[R], data: dict) -> R:
    """A record of ``cls`` from a dict that qex wrote (any format version)."""
    return tolerant().structure(data, cls)


def dump(obj: object) -> dict:
    return tolerant().unstructure(obj)


def describe(exc: Exception, where: str) -> str:
    """One line for a structuring failure: 'extra fields found (gpu) @ job.toml.claim'."""
    import cattrs

    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc, path=where))
    return f"{exc} @ {where}"
