"""The Python floor of a submit: the least a correct daemonless submit can do.

    python bench/floor_submit.py STATE_DIR -- COMMAND...

It takes an exclusive flock on STATE_DIR/lock, writes a small JSON record
(temp file, fsync, rename, fsync of the directory), releases the lock,
double-forks a detached child (setsid) that execs COMMAND with its output
on /dev/null, prints the id and exits. No admission, no budget, no
liveness lock: whatever qex does beyond this is the price of its features.
Only modules the interpreter has already loaded at start-up, plus fcntl
and json, are imported.
"""

import fcntl
import json
import os
import sys
import time


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: floor_submit.py STATE_DIR -- COMMAND...\n")
        return 2
    state, command = argv[0], argv[2:]
    jobs = os.path.join(state, "jobs")
    try:
        os.mkdir(state, 0o700)
    except FileExistsError:
        pass
    try:
        os.mkdir(jobs, 0o700)
    except FileExistsError:
        pass
    lock = os.open(os.path.join(state, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    job_id = f"{time.time_ns():x}-{os.getpid()}"
    record = {"id": job_id, "state": "running", "command": command, "cwd": os.getcwd(), "submitted_at": time.time()}
    tmp = os.path.join(jobs, f".{job_id}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    os.write(fd, json.dumps(record).encode())
    os.fsync(fd)
    os.close(fd)
    os.rename(tmp, os.path.join(jobs, job_id + ".json"))
    dfd = os.open(jobs, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    os.fsync(dfd)
    os.close(dfd)
    fcntl.flock(lock, fcntl.LOCK_UN)
    os.close(lock)
    sys.stdout.write(job_id + "\n")
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.setsid()
            if os.fork() == 0:
                code = 127
                null = os.open(os.devnull, os.O_RDWR)
                for target in (0, 1, 2):
                    os.dup2(null, target)
                os.execvp(command[0], command)
        finally:
            os._exit(code)
    os.waitpid(pid, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
