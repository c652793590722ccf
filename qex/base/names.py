"""The name of a pool or a lock: one rule for the config that declares a pool,
``--claim NAME=...`` and ``--lock NAME`` that claim one, and ``qex pause lock
NAME``. A name one of them accepts, all of them accept.

1 to 64 ASCII letters, digits, ``-`` or ``_``; not ``cpu`` or ``mem`` (in any
case: those are the budget, not pools). ASCII only, so that the same bytes name
the same pool in a file name (``pause/lock-NAME.json``), in the environment
(``QEX_CLAIM_NAME``) and on every terminal.
"""

POOL_NAME_MAX = 64
RESERVED = ("cpu", "mem")
RULE = "use 1 to 64 ASCII letters, digits, '-' or '_' (not cpu or mem)"
_ALLOWED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def is_reserved(name: str) -> bool:
    return name.lower() in RESERVED


def is_pool_name(name: object) -> bool:
    """A valid pool or lock name (``RULE``)."""
    return (
        isinstance(name, str) and 0 < len(name) <= POOL_NAME_MAX and _ALLOWED.issuperset(name) and not is_reserved(name)
    )
