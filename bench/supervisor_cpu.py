"""The supervisor's CPU time per MB of job output, with and without the output limit.

    python bench/supervisor_cpu.py [MB ...]

Runs real jobs through qex in a private state directory. Each job writes its
output (text lines, 1MB per write) and then waits on a gate file; the bench
waits until the log stops changing, reads the supervisor's utime+stime from
/proc, and opens the gate. So the number is what copying the output cost the
supervisor (the pipe reads, the file writes, the cuts and slides), not its
start or its final pass. Target: <= 5 ms/MB.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

TICK = os.sysconf("SC_CLK_TCK")
LIMITS = [("none", "0"), ("32MB (default)", '"32MB"'), ("64KB", '"64KB"')]


def cpu_secs(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def run_one(root: str, label: str, limit: str, megabytes: int) -> dict:
    state = os.path.join(root, f"state-{label.split()[0]}-{megabytes}")
    config = os.path.join(root, "qex.toml")
    with open(config, "w") as fh:
        fh.write(f'[logs]\nmax_bytes = {limit}\n[defaults]\nmem = "10MB"\n')
    env = {**os.environ, "QEX_STATE_DIR": state, "QEX_CONFIG": config, "QEX_PEER_DIR": os.path.join(root, "peers")}
    gate, written = os.path.join(root, f"gate-{label}-{megabytes}"), os.path.join(root, f"written-{label}-{megabytes}")
    script = (
        "import os, sys, time\n"
        "block = b''.join(b'line %08d of some output a job might write\\n' % i for i in range(23832))[:1 << 20]\n"
        f"for _ in range({megabytes}):\n"
        "    sys.stdout.buffer.write(block)\n"
        "sys.stdout.flush()\n"
        f"open({written!r}, 'w').close()\n"
        f"while not os.path.exists({gate!r}):\n"
        "    time.sleep(0.01)\n"
    )
    qex = [sys.executable, "-m", "qex"]
    job = subprocess.run(
        qex + ["submit", "--", sys.executable, "-c", script], env=env, check=True, capture_output=True, text=True
    ).stdout.strip()
    status = os.path.join(state, "jobs", job, "status.json")
    log = os.path.join(state, "jobs", job, "stdout.log")
    t0 = time.monotonic()
    while not os.path.exists(written):
        time.sleep(0.01)
    wall = time.monotonic() - t0
    with open(status) as fh:
        sup = json.load(fh)["supervisor_pid"]
    last, same = None, 0
    while same < 5:  # the pipe may still hold up to 64KB: wait until the supervisor is idle
        now = (cpu_secs(sup), os.path.getsize(log))
        same = same + 1 if now == last else 0
        last = now
        time.sleep(0.02)
    used = cpu_secs(sup)
    open(gate, "w").close()
    while json.load(open(status))["state"] not in ("completed", "failed"):
        time.sleep(0.02)
    rec = json.load(open(status))
    return {
        "limit": label,
        "mb": megabytes,
        "cpu_ms": used * 1000,
        "ms_per_mb": used * 1000 / megabytes,
        "wall_s": wall,
        "dropped": rec["logs_dropped"]["stdout_bytes"],
        "file": os.path.getsize(log),
    }


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [200]
    print(f"supervisor CPU per MB of output (clock tick {1000 / TICK:.0f} ms; python {sys.version.split()[0]})")
    print(f"{'limit':<16}{'MB':>6}{'cpu ms':>10}{'ms/MB':>8}{'log file':>12}{'left out':>14}")
    with tempfile.TemporaryDirectory() as root:
        for label, limit in LIMITS:
            for mb in sizes:
                r = run_one(root, label, limit, mb)
                print(
                    f"{r['limit']:<16}{r['mb']:>6}{r['cpu_ms']:>10.0f}{r['ms_per_mb']:>8.2f}"
                    f"{r['file']:>12}{r['dropped']:>14}"
                )


if __name__ == "__main__":
    main()
