"""Job and group ids: random UUIDs.

A time prefix would sort ids by submission, but every job of one session
would then share its first ten characters and a short prefix would name
nothing. Order comes from the ``seq`` each job gets under the state lock;
a prefix of 4-8 characters names a job.
"""

import os


def new_id() -> str:
    """A version-4 UUID (without importing the uuid module)."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def short(job_id: str) -> str:
    return job_id[:8]
