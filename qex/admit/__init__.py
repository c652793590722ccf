"""Pure scheduling: claims, pools and devices, queue order, bypass, reasons.

No I/O, no clock, no os calls: a Snapshot in, a Plan out (see ``admit``).
"""

from .admit import admit, order_key
from .model import (
    FINAL_STATES,
    Claim,
    Dep,
    DeviceUse,
    Expire,
    Pause,
    PeerHold,
    Plan,
    PoolSpec,
    Queued,
    Running,
    Seen,
    Skip,
    Snapshot,
    Start,
    Wait,
)
from .words import cores, size

__all__ = [
    "FINAL_STATES",
    "Claim",
    "Dep",
    "DeviceUse",
    "Expire",
    "Pause",
    "PeerHold",
    "Plan",
    "PoolSpec",
    "Queued",
    "Running",
    "Seen",
    "Skip",
    "Snapshot",
    "Start",
    "Wait",
    "admit",
    "cores",
    "order_key",
    "size",
]
