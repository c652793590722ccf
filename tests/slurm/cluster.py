"""A real one-node Slurm cluster on loopback for the tests, all of its state under one directory.

Debian's `slurm-wlm` and `munge`, started as root: `munged` with a key from `mungekey -c`,
`slurmctld -D` and `slurmd -D` with a generated `slurm.conf`. Every daemon is stopped by the
pid this module recorded when it started it (never by name). `python tests/slurm/cluster.py DIR`
starts one by hand and prints the environment its clients need.
"""

import os
import shutil
import socket
import subprocess
import time

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel")
GPUS = 4
SHARDS = 8  # per GPU


def why_not() -> str:
    """The reason this machine cannot run the cluster, or ''."""
    if os.geteuid() != 0:
        return "the Slurm tests start munged, slurmctld and slurmd as root; this is not root"
    missing = [
        name for name in DAEMONS if shutil.which(name) is None and not os.path.exists(os.path.join("/usr/sbin", name))
    ]
    if missing:
        return "Slurm or munge is not installed (apt-get install -y slurm-wlm munge): no " + ", ".join(missing)
    return ""


def _exe(name: str) -> str:
    return shutil.which(name) or os.path.join("/usr/sbin", name)


def _machine() -> tuple[int, int]:
    """(cpus, RealMemory in MB) as slurmd would see them, less a margin on the memory."""
    with open("/proc/meminfo") as fh:
        kb = int(next(line for line in fh if line.startswith("MemTotal:")).split()[1])
    return os.cpu_count() or 1, max(256, kb // 1024 - 512)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Cluster:
    """One cluster: `start()`, then its `env` for the clients, then `stop()`."""

    def __init__(self, root: str, licenses: str = "gate:2", min_job_age: int = 2):
        self.root = root
        self.licenses = licenses
        self.min_job_age = min_job_age
        self.pids: dict[str, int] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.host = socket.gethostname().split(".")[0]
        self.cpus, self.mem_mb = _machine()
        self.conf = os.path.join(root, "etc", "slurm.conf")
        self.munge_socket = os.path.join(root, "munge", "munge.socket")
        self.env = {"SLURM_CONF": self.conf}

    def _dir(self, *parts: str, mode: int = 0o755) -> str:
        path = os.path.join(self.root, *parts)
        os.makedirs(path, exist_ok=True)
        os.chmod(path, mode)
        return path

    def _write_conf(self) -> None:
        etc, state = self._dir("etc"), self._dir("state")
        spool, log = self._dir("spool"), self._dir("log")
        devs = self._dir("dev")
        files = []
        for i in range(GPUS):
            path = os.path.join(devs, f"gpu{i}")
            if not os.path.exists(path):
                os.mknod(path, 0o666 | 0o020000, os.makedev(1, 3))  # a character device: /dev/null's numbers
            files.append(path)
        with open(os.path.join(etc, "gres.conf"), "w") as fh:
            for path in files:
                fh.write(f"NodeName={self.host} Name=gpu File={path}\n")
            for path in files:  # (a GPU's shards: the Slurm backend's --vram with [backend] shard_size)
                fh.write(f"NodeName={self.host} Name=shard Count={SHARDS} File={path}\n")
        ctl, node = _free_port(), _free_port()
        conf = f"""ClusterName=qextest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={ctl}
SlurmdPort={node}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={state}
SlurmdSpoolDir={spool}
SlurmctldPidFile={os.path.join(self.root, "slurmctld.pid")}
SlurmdPidFile={os.path.join(self.root, "slurmd.pid")}
SlurmctldLogFile={os.path.join(log, "slurmctld.log")}
SlurmdLogFile={os.path.join(log, "slurmd.log")}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
MinJobAge={self.min_job_age}
KillWait=2
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
Licenses={self.licenses}
GresTypes=gpu,shard
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={self.mem_mb} Gres=gpu:{GPUS},shard:{GPUS * SHARDS} State=UNKNOWN
PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
"""
        with open(self.conf, "w") as fh:
            fh.write(conf)

    def _start_munge(self) -> None:
        mdir = self._dir("munge", mode=0o700)
        key = os.path.join(mdir, "munge.key")
        subprocess.run([_exe("mungekey"), "-c", "-f", "-k", key], check=True, capture_output=True)
        os.chmod(key, 0o400)
        argv = [
            _exe("munged"),
            "-F",
            "--force",
            "-S",
            self.munge_socket,
            "--key-file",
            key,
            "--pid-file",
            os.path.join(mdir, "munged.pid"),
            "--log-file",
            os.path.join(mdir, "munged.log"),
            "--seed-file",
            os.path.join(mdir, "munged.seed"),
            "--num-threads",
            "2",
        ]
        self._spawn("munged", argv)
        self._until(lambda: os.path.exists(self.munge_socket), "munged's socket", "munged")

    def _spawn(self, name: str, argv: list[str]) -> None:
        out = open(os.path.join(self.root, name + ".out"), "wb")
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
            start_new_session=True,
        )
        out.close()
        self.procs[name] = proc
        self.pids[name] = proc.pid

    def _until(self, ready, what: str, name: str, bound: float = 30.0) -> None:
        end = time.monotonic() + bound
        while time.monotonic() < end:
            if ready():
                return
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{name} exited ({proc.returncode}) before {what}: {self.tail(name)}")
            time.sleep(0.1)
        raise RuntimeError(f"no {what} after {bound:.0f} s: {self.tail(name)}")

    def tail(self, name: str) -> str:
        texts = []
        for path in (os.path.join(self.root, name + ".out"), os.path.join(self.root, "log", name + ".log")):
            if os.path.exists(path):
                with open(path, errors="replace") as fh:
                    texts.append(fh.read()[-2000:])
        return " | ".join(texts)

    def client(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env={**os.environ, **self.env}
        )

    def _node_idle(self) -> bool:
        proc = self.client("sinfo", "-h", "-o", "%t")
        return proc.returncode == 0 and proc.stdout.strip() in ("idle", "mix", "alloc")

    def start(self) -> "Cluster":
        self._write_conf()
        self._start_munge()
        self._spawn("slurmctld", [_exe("slurmctld"), "-D", "-i", "-f", self.conf])
        self._until(lambda: self.client("scontrol", "ping").returncode == 0, "slurmctld answering", "slurmctld")
        self._spawn("slurmd", [_exe("slurmd"), "-D", "-f", self.conf, "-N", self.host])
        self._until(self._node_idle, "the node idle", "slurmd")
        return self

    def stop(self) -> None:
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None:
                continue
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


if __name__ == "__main__":
    import sys

    cluster = Cluster(sys.argv[1]).start()
    print(f"export SLURM_CONF={cluster.conf}; pids {cluster.pids}")
    try:
        input("enter to stop\n")
    finally:
        cluster.stop()
