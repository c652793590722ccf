"""Issue 28, a shared box's manners: every job runs at ``[politeness]``'s niceness, I/O
class and oom_score_adj (nice 10, best-effort 7, 500), each overridable per job
(``--nice``, ``--io-class``, ``--oom-score-adj``, a job file's keys), ``--nice``
absolute whatever the niceness of the qex that started it. Read back from the kernel:
``/proc/PID/stat`` (field 19), ``/proc/PID/oom_score_adj`` and ``ioprio_get``, while the
job runs (a gate holds it); the niceness also from the job's own first instruction."""

import ctypes
import json
import os
import shutil
import subprocess
import sys

import pytest
from e2e_helpers import gated, open_gate

QEX = [sys.executable, "-m", "qex"]  # (as tests/conftest.py: the qex of PYTHONPATH)

SYSCALL_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}.get(os.uname().machine)
BEST_EFFORT_7, IDLE = (2 << 13) | 7, 3 << 13


def ioprio_get(pid: int) -> int:
    if SYSCALL_IOPRIO_GET is None:
        pytest.skip(f"no ioprio_get number known for {os.uname().machine}")
    libc = ctypes.CDLL(None, use_errno=True)
    got = libc.syscall(SYSCALL_IOPRIO_GET, ctypes.c_int(1), ctypes.c_int(pid))  # IOPRIO_WHO_PROCESS
    assert got >= 0, os.strerror(ctypes.get_errno())
    return got


def kernel_view(pid: int) -> tuple[int, int, int]:
    """(niceness, oom_score_adj, ioprio) of a live process, from the kernel."""
    with open(f"/proc/{pid}/stat") as fh:
        stat = fh.read()
    nice = int(stat[stat.rindex(")") + 2 :].split()[16])  # field 19
    with open(f"/proc/{pid}/oom_score_adj") as fh:
        oom = int(fh.read())
    return nice, oom, ioprio_get(pid)


def running(q, *options: str, job: list | None = None) -> tuple[str, tuple[int, int, int]]:
    """A gated job submitted with ``options``: its id and what the kernel says of it."""
    gate = f"g{len(os.listdir(q.root))}"
    job_id = q.submit(*options, "--", *(job or gated(q, gate)))
    rec = q.wait_state(job_id, "running")
    seen = kernel_view(rec["pid"])
    open_gate(q, gate)
    q.wait_state(job_id, "completed")
    return job_id, seen


def test_every_job_runs_at_the_defaults_read_back_from_the_kernel(q):
    job_id, seen = running(q)
    assert seen == (10, 500, BEST_EFFORT_7)
    rec = q.record(job_id)
    assert (rec["nice"], rec["io_class"], rec["oom_score_adj"]) == (10, "best-effort", 500)
    status = q.run("status", job_id).stdout
    assert "manners  nice 10, I/O best-effort 7, oom_score_adj 500" in status
    info = json.loads(q.run("info", "--json").stdout)
    assert info["manners"] == {"nice": 10, "io_class": "best-effort", "oom_score_adj": 500}
    assert "manners   every job: nice 10, I/O best-effort 7, oom_score_adj 500" in q.run("info").stdout
    shown = json.loads(q.run("config", "show", "--json").stdout)["values"]
    assert [shown[f"politeness.{k}"]["value"] for k in ("nice", "io_class", "oom_score_adj")] == [
        10,
        "best-effort",
        500,
    ]
    assert qex_test_own_values_unchanged()


def qex_test_own_values_unchanged() -> bool:
    """The test (which ran the qex that started the jobs) keeps its own values."""
    return kernel_view(os.getpid())[:2] == (os.getpriority(os.PRIO_PROCESS, 0), _own_oom())


def _own_oom() -> int:
    with open("/proc/self/oom_score_adj") as fh:
        return int(fh.read())


def test_options_a_job_file_and_the_config_override_each_value(q):
    _, seen = running(q, "--nice", "3", "--io-class", "idle", "--oom-score-adj", "700")
    assert seen == (3, 700, IDLE)

    path = os.path.join(q.root, "job.toml")
    with open(path, "w") as fh:
        fh.write(f'command = {json.dumps(gated(q, "filegate"))}\nnice = 15\nio_class = "idle"\noom_score_adj = 900\n')
    job_id = q.submit("--job", path)
    rec = q.wait_state(job_id, "running")
    assert kernel_view(rec["pid"]) == (15, 900, IDLE)
    open_gate(q, "filegate")
    q.wait_state(job_id, "completed")

    q.write_config('[politeness]\nnice = 19\nio_class = "none"\noom_score_adj = 100\n')
    job_id, seen = running(q)
    assert seen == (19, 100, ioprio_get(os.getpid())), "none: the I/O class of the qex that started it"
    assert "manners  nice 19, I/O as its starter's, oom_score_adj 100" in q.run("status", job_id).stdout


def test_nice_is_absolute_under_a_niced_caller_from_the_first_instruction(q):
    probe = ["sh", "-c", "cut -d' ' -f19 /proc/self/stat"]  # (no parenthesis in sh's name: field 19 is nice)
    lowers = _has_cap(23)  # CAP_SYS_NICE: root may lower a niceness; anyone else gets the caller's
    for caller, option, expected in (
        (5, ["--nice", "7"], "7"),
        (5, [], "10"),
        (15, ["--nice", "12"], "12" if lowers else "15"),
    ):
        done = subprocess.run(
            ["nice", "-n", str(caller), *QEX, "run", *option, "--", *probe],
            env=q.env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=q.root,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == expected, (caller, option, done.stdout, done.stderr)
        if caller == 15 and not lowers:
            assert "runs at 15" in done.stderr


def _has_cap(bit: int) -> bool:
    with open("/proc/self/status") as fh:
        return any(line.startswith("CapEff:") and int(line.split()[1], 16) >> bit & 1 for line in fh)


def test_a_user_without_privilege_is_told_what_the_job_gets_instead(q):
    """Lowering a niceness, or an oom_score_adj below the floor, needs CAP_SYS_NICE and
    CAP_SYS_RESOURCE: without them (here root without the two, as setpriv drops them),
    the submission says in a sentence what the job runs at, and it runs at that."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    out = os.path.join(q.root, "seen")
    probe = ["sh", "-c", f"cut -d' ' -f19 /proc/self/stat > {out}; cat /proc/self/oom_score_adj >> {out}"]
    done = subprocess.run(
        [
            "setpriv",
            "--bounding-set",
            "-sys_nice,-sys_resource",
            "nice",
            "-n",
            "12",
            *QEX,
            "run",
            "--nice",
            "4",
            "--oom-score-adj",
            "-100",
            "--",
            *probe,
        ],
        env=q.env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=q.root,
    )
    assert done.returncode == 0, done.stderr
    assert "niceness 4 is below 12" in done.stderr and "the job runs at 12" in done.stderr, done.stderr
    assert "oom_score_adj -100 is below what this user may set" in done.stderr, done.stderr
    with open(out) as fh:
        nice, oom = fh.read().split()
    assert int(nice) == 12 and int(oom) == _own_oom(), "the nearest it may have, as said"
