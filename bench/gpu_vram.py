"""VRAM measured and VRAM outside qex (issue 32): what it costs.

    python bench/gpu_vram.py [--passes N] [--secs S]

On a machine with no GPU, through the fake nvidia-smi of the tests
(tests/fakes/nvidia-smi, a Python script: each call costs a Python start, ~25 ms
of CPU here; the real nvidia-smi takes ~1.5 s of wall time without persistence
mode, tens of ms with it) and the fake NVML binding (tests/fakes/nvml).

1. **A pass that admits a GPU claim**: ``engine.run_pass``, timed in a process of
   its own, on a queue whose one queued job claims two devices and a lock that a
   running job holds, so that every pass admits that claim again and it waits
   (a process outside qex holds 70GB of GPU 0 too). Four ways:
   no reader (``QEX_GPU_READER=none``: the pass as before issue 32), the reading
   kept in the state directory fresh (``[gpu] observe_every`` not reached: no
   driver call), and the reading too old at every pass (the pass reads the
   driver, under the state lock, through nvidia-smi; and through NVML).
2. **The sampler's CPU per job per minute**: a GPU job that holds VRAM and a
   job without a GPU claim run side by side for S seconds (default 60) with the
   default ``[gpu] sample_every`` (5 s); the difference of their supervisors'
   CPU (the watcher's own, and the readers it started: cutime/cstime) is the
   sampler's, scaled to a minute.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKES = os.path.join(ROOT, "tests", "fakes")
TICK = os.sysconf("SC_CLK_TCK")
GiB = 1 << 30
CONFIG = """
[budget]
cpu = 8
[defaults]
mem = "10MB"
[gpu]
observe_every = "{every}"
[[pool]]
name = "gpu"
devices = ["80GB", "80GB"]
"""


def box(root: str, every: str = "5s") -> dict:
    """A state directory, a config and the fake driver (two A100 80GB); the environment."""
    apps = os.path.join(root, "apps")
    os.makedirs(apps, exist_ok=True)
    state = os.path.join(root, "nvidia-smi.json")
    uuid = "GPU-{:08x}-1111-4222-8333-444444444444"
    with open(state, "w") as fh:
        json.dump(
            {
                "driver": "550.54.15",
                "apps_dir": apps,
                "log": os.path.join(root, "driver.log"),
                "gpus": [
                    {"uuid": uuid.format(i), "name": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920} for i in range(2)
                ],
            },
            fh,
        )
    config = os.path.join(root, "qex.toml")
    with open(config, "w") as fh:
        fh.write(CONFIG.format(every=every))
    return {
        **os.environ,
        "QEX_STATE_DIR": os.path.join(root, "state"),
        "QEX_CONFIG": config,
        "QEX_PEER_DIR": os.path.join(root, "peers"),
        "FAKE_NVIDIA_SMI_STATE": state,
        "PATH": os.path.join(FAKES) + os.pathsep + os.environ.get("PATH", ""),
        "QEX_GPU_READER": "nvidia-smi",
        "PYTHONPATH": ROOT,
        "QEX_WAKER_INTERVAL": "3600",
    }


def qex(env: dict, *args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "qex", *args], env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


# ---- 1. the pass ---------------------------------------------------------------------------


def pass_times(passes: int) -> list[tuple[str, float, float]]:
    out = []
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as root:
        env = box(root, every="1h")
        outsider = subprocess.Popen(["sleep", "3600"])
        gate = os.path.join(root, "gate")
        try:
            with open(os.path.join(root, "apps", "outside"), "w") as fh:
                fh.write(f"{outsider.pid} 0 71680\n")
            qex(env, "submit", "--lock", "hold", "--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.2; done")
            job = qex(env, "submit", "--gpu", "2", "--vram", "20GB", "--lock", "hold", "--", "true")
            for label, reader, stale in (
                ("no reader (as before)", "none", True),
                ("kept reading fresh", "nvidia-smi", False),
                ("driver read: nvidia-smi (fake)", "nvidia-smi", True),
                ("driver read: NVML (fake binding)", "nvml", True),
            ):
                times = _time_passes(env, root, reader, stale, passes)
                out.append((label, statistics.median(times), max(times)))
            with open(os.path.join(env["QEX_STATE_DIR"], "jobs", job, "status.json")) as fh:
                assert json.load(fh)["state"] == "queued"
            qex(env, "cancel", job)
        finally:
            open(gate, "w").close()
            outsider.kill()
            outsider.wait()
            time.sleep(1.0)  # (its supervisor records the end)
    return out


def _time_passes(env: dict, root: str, reader: str, stale: bool, passes: int) -> list[float]:
    """``run_pass`` timed in a child (its own environment and imports)."""
    code = f"""
import os, sys, time, json
sys.path.insert(0, {ROOT!r}); sys.path.insert(0, {os.path.join(FAKES, "nvml")!r})
from qex.config.context import Context
from qex.queue import engine
from qex.store import layout
ctx = Context.load()
seen = os.path.join(ctx.store.root, layout.GPU_SEEN)
engine.run_pass(ctx)  # (imports, and the kept reading made)
out = []
for _ in range({passes}):
    if {stale!r} and os.path.exists(seen):
        os.unlink(seen)
    t = time.perf_counter()
    engine.run_pass(ctx)
    out.append(time.perf_counter() - t)
print(json.dumps(out))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], env={**env, "QEX_GPU_READER": reader}, check=True, capture_output=True, text=True
    )
    return json.loads(proc.stdout.splitlines()[-1])


# ---- 2. the sampler ------------------------------------------------------------------------


def cpu_of(pid: int) -> tuple[float, float]:
    """(own, reaped children's) CPU seconds of a process: its own from schedstat (ns),
    its children's from stat (clock ticks: the readers are whole programs)."""
    with open(f"/proc/{pid}/stat") as fh:
        f = fh.read().rsplit(")", 1)[1].split()
    with open(f"/proc/{pid}/schedstat") as fh:
        own = int(fh.read().split()[0]) / 1e9
    return own, (int(f[13]) + int(f[14])) / TICK


def driver_calls(root: str) -> int:
    try:
        with open(os.path.join(root, "driver.log")) as fh:
            return len(fh.read().splitlines())
    except FileNotFoundError:
        return 0


def sampler_cpu(secs: float, reader: str) -> dict:
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as root:
        env = box(root)
        if reader == "nvml":
            env.update(QEX_GPU_READER="nvml", PYTHONPATH=os.path.join(FAKES, "nvml") + os.pathsep + ROOT)
        gate = os.path.join(root, "gate")
        wait = f"while [ ! -e {gate} ]; do sleep 0.2; done"
        gpu = qex(env, "submit", "--vram", "10GB", "--", "sh", "-c", f'echo "$$ 0 4096" > {root}/apps/job; {wait}')
        plain = qex(env, "submit", "--", "sh", "-c", wait)
        sups = {}
        for job in (gpu, plain):
            status = os.path.join(env["QEX_STATE_DIR"], "jobs", job, "status.json")
            while not (os.path.exists(status) and json.load(open(status)).get("supervisor_pid")):
                time.sleep(0.05)
            sups[job] = json.load(open(status))["supervisor_pid"]
        time.sleep(2.0)  # both watchers exec'd, the first samples taken
        before, calls = {j: cpu_of(p) for j, p in sups.items()}, driver_calls(root)
        time.sleep(secs)
        after, calls = {j: cpu_of(p) for j, p in sups.items()}, driver_calls(root) - calls
        open(gate, "w").close()
        time.sleep(1.0)  # (their supervisors record the ends)
        per_min = 60.0 / secs
        own = [(after[j][0] - before[j][0]) * per_min for j in (gpu, plain)]
        kids = [(after[j][1] - before[j][1]) * per_min for j in (gpu, plain)]
        return {
            "reader": reader,
            "gpu_own": own[0],
            "plain_own": own[1],
            "gpu_children": kids[0],
            "plain_children": kids[1],
            "driver_calls": calls,
        }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--passes", type=int, default=30)
    ap.add_argument("--secs", type=float, default=60.0)
    ap.add_argument("--only", choices=("pass", "sampler"), help="one of the two measures")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    if args.only != "sampler":
        print(f"\n1. a pass that admits a GPU claim ({args.passes} passes each; median, max)")
        for label, median, worst in pass_times(args.passes):
            print(f"   {label:<36}{median * 1000:>8.2f} ms{worst * 1000:>9.2f} ms")
    if args.only == "pass":
        return
    print(f"\n2. the sampler's CPU per job per minute ([gpu] sample_every = 5s, {args.secs:g} s measured)")
    for reader in ("nvidia-smi", "nvml"):
        r = sampler_cpu(args.secs, reader)
        print(
            f"   {reader:<11} GPU job's watcher {r['gpu_own'] * 1000:7.1f} ms + readers {r['gpu_children'] * 1000:7.1f}"
            f" ms; a job without a GPU claim {r['plain_own'] * 1000:6.1f} ms + {r['plain_children'] * 1000:5.1f} ms"
            f"  ({r['driver_calls']} nvidia-smi calls in {args.secs:g} s)"
        )


if __name__ == "__main__":
    main()
