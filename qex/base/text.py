"""Text made safe for a terminal: the one rule of which characters never reach
one as they are.

Unsafe: the C0 controls and DEL (escape sequences, newlines, carriage returns),
the C1 controls (U+0080-U+009F: some terminals read U+009B as an escape
sequence's start), and the bidirectional overrides and isolates (U+202A-U+202E,
U+2066-U+2069: they make a line read as something it is not). ``plain`` keeps
everything else (qex's own sentences, with their punctuation and a user's
non-ASCII words); names and commands shown go through the stricter
``qex.base.units.safe_text``.
"""


def is_unsafe(c: str) -> bool:
    o = ord(c)
    return o < 32 or 0x7F <= o < 0xA0 or 0x202A <= o <= 0x202E or 0x2066 <= o <= 0x2069


def plain(text: str, limit: int | None = 400, instead: str = "?") -> str:
    """``text`` with each unsafe character replaced by ``instead``, cut to ``limit``
    characters (the last one ``…``; None: never cut)."""
    out = "".join(instead if is_unsafe(c) else c for c in str(text))
    return out if limit is None or len(out) <= limit else out[: limit - 1] + "…"


def one_line(text: str, limit: int = 4096) -> str:
    """``text`` on one line, for an environment variable a hook may print: each
    unsafe character (newlines included) becomes a space."""
    return plain(text, limit, " ")
