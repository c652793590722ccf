"""A job whose memory is in its tree, not in one process: a parent and three forked
children each touch 50MB, wait until all four hold it, hold it for HOLD seconds (so that
a sampler every 0.2 s sees it), and exit. argv[1]: an empty folder for the ready marks.
Used by tests/e2e/test_proc_sample.py and the VM scenario (tests/vm/scenarios/memory.py)."""

import os
import sys
import time

MB = 1 << 20
HOLD = float(os.environ.get("TREE_HOLD", "1.0"))


def hold(ready: str, tag: str) -> bytes:
    data = b"x" * (50 * MB)  # touched: every page written
    open(os.path.join(ready, tag), "w").close()
    deadline = time.monotonic() + 60
    while len(os.listdir(ready)) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(HOLD)
    return data


def main() -> None:
    ready = sys.argv[1]
    kids = []
    for i in range(3):
        pid = os.fork()
        if pid == 0:
            hold(ready, f"child{i}")
            os._exit(0)
        kids.append(pid)
    hold(ready, "parent")
    for pid in kids:
        os.waitpid(pid, 0)
    with open("/proc/self/cgroup") as fh:
        print("cgroup:", fh.read().strip())


main()
