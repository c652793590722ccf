"""Two installs of qex side by side: idle `qex submit` wall time and import time,
interleaved so that the machine's noise hits both alike.

    .venv/bin/python bench/ab.py OLD_VENV/bin/qex NEW_VENV/bin/qex [--n 40]

For a change that moves code (a refactor, a split module), where the full
bench/run.py's between-run noise (a few percent on this kind of machine) would
hide what the change costs: each sample of one install is followed by one of
the other, each on its own fresh state directory, waiting for the job to end
and its processes to leave before the next. Prints the medians and minimums.
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import tempfile
import time

ENDED = ("completed", "failed")
SHARED = False  # --shared


def env_for(root: str, qex: str | None = None) -> dict:
    config = os.path.join(root, "qex.toml")
    with open(config, "w") as fh:
        fh.write('[budget]\ncpu = 2\n[defaults]\nmem = "64MB"\n')
    env = {
        **os.environ,
        "QEX_STATE_DIR": os.path.join(root, "state"),
        "QEX_CONFIG": config,
        "QEX_PEER_DIR": os.path.join(root, "peers"),
        # a cache of parsed configs of its own: two versions sharing one would each miss
        # on the other's entries (an older qex reads no entry of a newer one's file)
        "XDG_CACHE_HOME": os.path.join(root, "cache"),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if SHARED and qex is not None:  # --shared: a state directory made by `qex init --shared`
        subprocess.run([qex, "init", "--shared", env["QEX_STATE_DIR"]], env=env, capture_output=True, check=True)
    return env


def wait_idle(env: dict, limit: float = 10.0) -> None:
    """Every job ended and no process of this queue left (bounded)."""
    state, end = env["QEX_STATE_DIR"], time.monotonic() + limit
    while time.monotonic() < end:
        states = []
        for path in glob.glob(os.path.join(state, "jobs", "*", "status.json")) + glob.glob(
            os.path.join(state, "member-*", "jobs", "*", "status.json")
        ):
            try:
                with open(path) as fh:
                    states.append(json.load(fh).get("state"))
            except (OSError, ValueError):
                states.append(None)
        if all(s in ENDED for s in states) and not _processes_of(state):
            return
        time.sleep(0.01)
    raise SystemExit(f"the queue in {state} did not go idle in {limit}s")


def _processes_of(state: str) -> bool:
    """Is any process of this queue (its environment names the state directory) alive?
    (By its environment: a supervisor or a waker names itself `qex: ...` in ps.)"""
    needle = f"QEX_STATE_DIR={state}".encode()
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    if needle in fh.read().split(b"\0"):
                        with open(f"/proc/{pid}/stat", "rb") as st:
                            if b") Z" not in st.read():
                                return True
            except OSError:
                continue
    return False


def submit_once(qex: str, env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run([qex, "submit", "--", "true"], env=env, capture_output=True, check=True)
    took = time.perf_counter() - t0
    wait_idle(env)
    return took


def import_ms(qex: str, env: dict, args: list[str]) -> tuple[float, float]:
    """(all imports, qex's own) in ms, from -X importtime of one `qex ARGS`."""
    with open(qex) as fh:
        python = fh.readline()[2:].strip()  # the console script's interpreter
    err = subprocess.run(
        [python, "-X", "importtime", "-m", "qex", *args], env=env, capture_output=True, text=True
    ).stderr
    total = own = 0
    for line in err.splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            self_us, _, name = line[len("import time:") :].split("|")
            total += int(self_us)
            own += int(self_us) if name.strip().startswith("qex") else 0
    if args[0] == "submit":
        wait_idle(env)
    return total / 1000, own / 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--n", type=int, default=40)
    p.add_argument("--shared", action="store_true", help="state directories made with `qex init --shared`")
    a = p.parse_args()
    global SHARED
    SHARED = a.shared
    tools = {"old": a.old, "new": a.new}
    envs = {k: env_for(tempfile.mkdtemp(prefix=f"qex-ab-{k}-"), tools[k]) for k in tools}
    for k in tools:  # warm: bytecode, the config cache
        submit_once(tools[k], envs[k])
    walls = {k: [] for k in tools}
    imports = {(k, what): [] for k in tools for what in ("version", "submit")}
    for i in range(a.n):
        for k in ("old", "new") if i % 2 == 0 else ("new", "old"):
            walls[k].append(submit_once(tools[k], envs[k]))
            imports[k, "version"].append(import_ms(tools[k], envs[k], ["version"]))
            imports[k, "submit"].append(import_ms(tools[k], envs[k], ["submit", "--", "true"]))
    for k in tools:
        w = walls[k]
        print(
            f"{k}: idle submit median {statistics.median(w) * 1000:.1f} ms, min {min(w) * 1000:.1f} ms "
            f"(n={len(w)}; {tools[k]})"
        )
        for what in ("version", "submit"):
            got = imports[k, what]
            print(
                f"{k}:   -X importtime qex {what}: all imports {statistics.median(t for t, _ in got):.2f} ms, "
                f"qex's own {statistics.median(o for _, o in got):.2f} ms (medians)"
            )


if __name__ == "__main__":
    main()
