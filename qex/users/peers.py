"""Claims of other users' queues: the peer directory (``QEX_PEER_DIR``,
``[peers] dir``, default ``/tmp/qex-peers``).

Each queue (a state directory + a user) publishes one record,
``u<uid>-<hash of the state directory>.json``, listing what its running jobs
hold: cores, memory, units of plain pools and the device indices it was
given. Locks are never published. Every pass reads every other record and
counts it against the budget and the pools, each job only while the lock
file its supervisor holds is held: liveness is a held lock, never a pid. The
directory is hostile ground (``/tmp`` is world-writable): nothing in it is
followed, waited on or believed beyond what the kernel says.

This module names the peer directory's parts in one place; each lives in its
own module, which the rest of qex imports:

    peer_record     a record's format: written (``record_of``), read and checked (``parse``)
    peer_dir        the directory: where it is, this queue's names in it (``key``),
                    opening it safely (``open_dir``), the liveness lock of a job
                    (``hold_job_lock``, ``release_job_lock``), ``dir_version`` (the waker)
    peer_scan       what the other queues hold: ``scan`` (qex info), ``holdings`` (the pass)
    peer_publish    this queue's record: ``publish_locked`` (after each commit),
                    ``publish_check`` (qex info)
    peer_admission  one admission at a time across the queues: ``admission``
"""

from qex.users.peer_admission import ADMIT_WAIT, admission
from qex.users.peer_dir import (
                                ADMIT_LOCK,
                                dir_version,
                                directory,
                                hold_job_lock,
                                key,
                                key_for,
                                open_dir,
                                release_job_lock,
)
from qex.users.peer_publish import own_jobs, publish_check, publish_locked
from qex.users.peer_record import (
                                FORMAT,
                                KIND,
                                MAX_BYTES,
                                MAX_CORES,
                                MAX_JOBS,
                                MAX_LIST,
                                MAX_RECORD,
                                BadRecord,
                                parse,
                                record_of,
                                state_identity,
)
from qex.users.peer_scan import Ignored, Peer, Scan, holdings, scan

__all__ = [
    "ADMIT_LOCK", "ADMIT_WAIT", "BadRecord", "FORMAT", "Ignored", "KIND", "MAX_BYTES", "MAX_CORES", "MAX_JOBS",
    "MAX_LIST", "MAX_RECORD", "Peer", "Scan", "admission", "dir_version", "directory", "hold_job_lock", "holdings",
    "key", "key_for", "open_dir", "own_jobs", "parse", "publish_check", "publish_locked", "record_of",
    "release_job_lock", "scan", "state_identity",
]
