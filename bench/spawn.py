"""The cost of spawning one job, the way a supervisor does it: before and after posix_spawn.

    python bench/spawn.py [N]      (default 300 spawns of `true` per way)

In one process that has imported what a supervisor has (the CLI, the engine, the
supervisor: ~20 MB), spawn `true` N times each way and reap it (its pipes read to
EOF, waitpid), with the job's memory cgroup where the machine allows it:

- fork: ``subprocess.Popen(..., close_fds, process_group=0, preexec_fn=...)``, the
  preexec joining the cgroup and writing the pid file in the child (qex before);
- posix_spawn: ``qex.supervisor.spawn.Child.spawn`` with what ``spawn.spawn`` does around
  it (PATH lookup, intent line, the supervisor's two cgroup moves, pid line);
- the two cgroup moves alone (``JobCgroup.join`` + ``leave``).

Prints, per way, the median and p90 wall time of one spawn and the CPU time per
spawn of this process and of its children (getrusage).
"""

import os
import resource
import statistics
import sys
import tempfile
import time

import qex.cli.submit  # noqa: F401  (what a supervisor forked by `qex submit` carries)
from qex import admit  # noqa: F401
from qex.base.machine import process_start_time
from qex.config import file as config  # noqa: F401  (loaded by every command: carried too)
from qex.jobs import learn, submit  # noqa: F401
from qex.linux import cgroup, pidfile
from qex.queue import engine  # noqa: F401
from qex.supervisor import run, spawn  # noqa: F401  (run: what a supervisor carries)


def _drain(proc) -> None:
    for stream in (proc.stdout, proc.stderr):
        while stream.read(65536):
            pass
        stream.close()
    proc.wait()


def way_fork(cg, pid_path: str, env: dict):
    import subprocess

    def preexec():
        if cg is not None:
            cg.join()
        pidfile.write(pid_path, os.getpid(), process_start_time(os.getpid()))

    proc = subprocess.Popen(
        ["true"],
        cwd="/",
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        close_fds=True,
        process_group=0,
        preexec_fn=preexec,
    )
    pidfile.write(pid_path, proc.pid, process_start_time(proc.pid))
    _drain(proc)


def way_spawn(cg, pid_path: str, env: dict):
    home = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    os.chdir("/")
    path = spawn.executable("true", env)
    pidfile.write(pid_path, "-", f"{os.getpid()} {spawn.own_start()}")
    if cg is not None:
        cg.join()
    try:
        proc = spawn.Child.spawn(path, ["true"], env)
    finally:
        if cg is not None:
            cg.leave()
        run._go_home(home)
    pidfile.write(pid_path, proc.pid, process_start_time(proc.pid))
    _drain(proc)


def way_moves(cg, pid_path: str, env: dict):
    cg.join()
    cg.leave()


def measure(name: str, fn, n: int, *args) -> None:
    for _ in range(min(20, n)):  # warm up
        fn(*args)
    walls = []
    r0, c0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(n):
        t = time.perf_counter()
        fn(*args)
        walls.append(time.perf_counter() - t)
    r1, c1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    own = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / n
    kids = (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime) / n
    walls.sort()
    print(
        f"{name:<28} wall median {statistics.median(walls) * 1e3:7.3f} ms  p90 {walls[int(0.9 * n)] * 1e3:7.3f} ms"
        f"  cpu: this process {own * 1e3:6.3f} ms, children {kids * 1e3:6.3f} ms"
    )


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    with open("/proc/self/status") as fh:
        rss = next(line.split()[1] for line in fh if line.startswith("VmRSS"))
    cg, why = cgroup.create("0193f7a2-0000-7000-8000-00000000be9c", 1)
    print(
        f"{n} spawns of `true` per way; this process holds {int(rss) // 1024} MB; "
        + (f"job cgroup {cg.path} ({cg.kind})" if cg is not None else f"no job cgroup ({why})")
    )
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        pid_path = os.path.join(tmp, "pid")
        try:
            measure("fork + preexec_fn (before)", way_fork, n, cg, pid_path, env)
            measure("posix_spawn (after)", way_spawn, n, cg, pid_path, env)
            if cg is not None:
                measure("the two cgroup moves alone", way_moves, n, cg, pid_path, env)
        finally:
            if cg is not None:
                cg.remove()


if __name__ == "__main__":
    main()
