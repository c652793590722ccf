"""After a pass: fork what it admitted, start the pending stop hooks, and make
sure a waker exists while this user has work queued or running."""

from __future__ import annotations

from qex.queue import fork
from qex.queue.context import Launch, PassResult

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context


def after_pass(ctx: Context, result: PassResult, leaving: bool = False) -> Launch | None:
    """Fork the supervisors of a pass and make sure a waker exists if work waits.
    ``leaving``: the caller exits as soon as it has answered (see ``launch_all``).

    Returns a Launch only in a forked supervisor process (the caller must then
    become that supervisor and never return up its stack).
    """
    child = fork.launch_all(ctx, result.launches, leaving)
    if child is not None:
        return child
    from qex.hooks.pending import start_pending

    start_pending(ctx)  # after the launches: a hook never holds the queue
    if result.queued_mine or result.running_mine:
        from qex.queue import waker

        return waker.ensure(ctx, result.next_deadline)
    return None
