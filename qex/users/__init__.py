"""Claims of other users' queues: the peer directory (``QEX_PEER_DIR``,
``[peers] dir``, default ``/tmp/qex-peers``).

Each queue (a state directory + a user) publishes one record,
``u<uid>-<hash of the state directory>.json``, listing what its running jobs
hold: cores, memory, units of plain pools and the device indices it was
given. Locks are never published. Every pass reads every other record and
counts it against the budget and the pools, each job only while the lock
file its supervisor and its processes hold is held: liveness is a held lock,
never a pid. The
directory is hostile ground (``/tmp`` is world-writable): nothing in it is
followed, waited on or believed beyond what the kernel says.

This package holds several users' parts; the peer directory's each live in a
module of their own (and ``shared`` is a state directory several users share):

    peer_record     a record's format: written (``record_of``), read and checked (``parse``)
    peer_dir        the directory: where it is, this queue's names in it (``key``),
                    opening it safely (``open_dir``), the liveness lock of a job
                    (``hold_job_lock``, ``release_job_lock``), ``dir_version`` (the waker)
    peer_scan       what the other queues hold: ``scan`` (qex info), ``holdings`` (the pass)
    peer_publish    this queue's record: ``publish_locked`` (after each commit),
                    ``publish_check`` (qex info)
    peer_admission  one admission at a time across the queues: ``admission``
"""
