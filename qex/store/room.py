"""Room a pass keeps on the disk of the state directory (docs/reliability.md): a job's
logs stop at LOG_ROOM, a submission needs SUBMIT_ROOM, any other commit COMMIT_ROOM,
so the records of running jobs can still be written when a job's output fills the disk.

Its own tiny module: the minimal watcher (qex.supervisor.watch) needs LOG_ROOM and
nothing else of qex.store.fs."""

import posix  # not os: see the minimal watcher (qex.supervisor.watch)

LOG_ROOM = int(posix.environ.get(b"QEX_LOG_ROOM", 1 << 20))
SUBMIT_ROOM = LOG_ROOM
COMMIT_ROOM = min(64 << 10, LOG_ROOM // 4)
