"""Claims of other users' queues, read from the peer directory.

Publishing and reading peer records lands with the multi-user work (issue 3);
until then a queue sees no peers, and ``holdings`` says so by returning none.
"""


def holdings(ctx) -> list:
    return []
