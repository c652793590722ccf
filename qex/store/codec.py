"""The strict converter, for the files people write (job files, pipeline files): an
unknown key is an error, and ``describe`` says where in the file. (The records qex
writes are ``Plain`` records read from their dicts: ``qex.store.records.load``.)

Built lazily on first use: importing cattrs costs ~15 ms, paid only by the
commands that read such a file.
"""

from __future__ import annotations

import functools

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from cattrs import Converter


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


def describe(exc: Exception, where: str) -> str:
    """One line for a structuring failure: 'extra fields found (gpu) @ job.toml.claim'."""
    import cattrs

    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc, path=where))
    return f"{exc} @ {where}"
