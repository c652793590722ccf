"""The VRAM each process holds (qex.base.gpu_use, qex.base.gpu_files) and whose
process it is (qex.linux.whose): pure parsing, the kept files, and the rule on a
/proc made by hand."""

import os
import subprocess
import sys
import time

import pytest

from qex.base import gpu_files, gpu_use
from qex.linux import whose

U0, U1 = "GPU-00000000-1111-4222-8333-444444444444", "GPU-00000001-1111-4222-8333-444444444444"
MiB = 1 << 20


# ---- nvidia-smi's answers -----------------------------------------------------------------


def test_the_apps_query_is_read_as_nvidia_smi_writes_it():
    text = f"4242, 71680, {U0}\n77, [N/A], {U1}\n78, 10, {U1}\n"
    assert gpu_use.parse_apps(text) == [(4242, U0, 71680 * MiB), (78, U1, 10 * MiB)]
    assert gpu_use.parse_apps("No running processes found\n") == []
    assert gpu_use.parse_apps("") == []


@pytest.mark.parametrize(
    "bad",
    [
        "pid, used_memory [MiB], gpu_uuid\n",
        "1, 2\n",
        f"0, 10, {U0}\n",
        f"1, -5, {U0}\n",
        "1, 10, not-a-uuid\n",
        f"x, 10, {U0}\n",
    ],
)
def test_an_answer_qex_cannot_read_is_no_reading(bad):
    assert gpu_use.parse_apps(bad) is None


def test_the_indices_answer_maps_each_uuid_to_its_index_or_is_no_reading():
    assert gpu_use.parse_indices(f"0, {U0}\n1, {U1}\n") == {U0: 0, U1: 1}
    assert gpu_use.parse_indices("zero, GPU-x\n") is None


def test_no_reader_is_chosen_where_none_is_asked_or_found():
    assert gpu_use.reader_for({"QEX_GPU_READER": "none", "PATH": "/nowhere"}, True) == ""
    assert gpu_use.reader_for({"PATH": "/nowhere"}, False) == ""
    assert gpu_use.reader_for({"PATH": "/nowhere"}, True) == gpu_use.NVML
    assert gpu_use.reader_for({"QEX_GPU_READER": "nvidia-smi", "PATH": "/nowhere"}, True) == ""
    assert gpu_use.read_now({"QEX_GPU_READER": "none"}, True) is None


def test_a_reader_that_does_not_answer_is_let_go_at_its_deadline(tmp_path):
    slow = tmp_path / "nvidia-smi"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    seen = gpu_use.read_now({"PATH": f"{tmp_path}:/usr/bin:/bin", "QEX_GPU_READER": "nvidia-smi"}, True, wait=0.3)
    assert seen is not None and "did not answer within" in seen.error and seen.apps == ()


# ---- the kept files ------------------------------------------------------------------------


def test_a_reading_is_kept_and_read_back_for_its_boot_only(tmp_path):
    seen = gpu_use.Seen(1e9, gpu_use.SMI, ((4242, U0, 70 * 1024 * MiB),), {U0: 0, U1: 1})
    path = str(tmp_path / "gpu-seen")
    gpu_files.keep(path, seen, "boot-a", 0o600)
    got = gpu_files.load(path, "boot-a")
    assert (got.at, got.source, got.apps, got.indices) == (seen.at, seen.source, seen.apps, seen.indices)
    assert gpu_files.load(path, "boot-b") is None  # another boot's pids name other processes
    assert os.stat(path).st_mode & 0o777 == 0o600 and os.listdir(tmp_path) == ["gpu-seen"]


@pytest.mark.parametrize(
    "line",
    ["app 0 GPU-x 5", f"app 1 {U0} {1 << 63}", "at nan", "at 1e308", f"index {U0} 99999", "what 1", f"app 1 {U0} 1.5"],
)
def test_a_damaged_kept_reading_is_none(line):
    text = f"{gpu_files.FORMAT}\nboot b\nat 1\nsource nvidia-smi\n{line}\n".encode()
    assert gpu_files.decode(text, "b") is None


def test_a_jobs_live_peak_is_read_for_its_attempt():
    data = gpu_files.live_text({"0": 3 * MiB, U1: MiB}, 2, 5.0)
    assert gpu_files.read_live(data, 2) == {"0": 3 * MiB, U1: MiB}
    assert gpu_files.read_live(data, 1) is None
    assert gpu_files.read_live(data.replace(b"device 0", b"device ../x"), 2) is None


# ---- whose is a process --------------------------------------------------------------------


def fake_proc(
    root,
    pid: int,
    ppid: int = 1,
    environ: bytes = b"",
    cgroup: str = "0::/user.slice\n",
    cmdline: bytes = b"python\0train.py\0",
    comm: str = "python",
):
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "environ").write_bytes(environ)
    (d / "cgroup").write_text(cgroup)
    (d / "cmdline").write_bytes(cmdline)
    (d / "comm").write_text(comm + "\n")
    (d / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 0\n")


def test_the_environment_names_the_job_first(tmp_path):
    fake_proc(tmp_path, 10, environ=b"HOME=/h\0QEX_JOB_ID=abc-1\0", cgroup="0::/x/qex-other-1\n")
    w = whose.whose(10, str(tmp_path))
    assert (w.job, w.via, w.comm) == ("abc-1", "env", "python")


def test_a_job_cgroup_names_the_job_of_any_user(tmp_path):
    fake_proc(tmp_path, 11, environ=b"", cgroup="0::/user.slice/qex-abc-2-3\n")
    assert (whose.whose(11, str(tmp_path)).job, whose.whose(11, str(tmp_path)).via) == ("abc-2", "cgroup")


def test_a_process_under_a_qex_supervisor_is_a_qex_job(tmp_path):
    watcher = b"/usr/bin/python3\0-I\0-S\0-c\0import sys;from qex.supervisor.watch import main;main()\0qex-watch\0abc-3\x007\0"
    fake_proc(tmp_path, 20, ppid=1, cmdline=watcher)
    fake_proc(tmp_path, 21, ppid=20, comm="torchrun")
    fake_proc(tmp_path, 22, ppid=21)  # a worker in its own session: its parents still lead to the watcher
    w = whose.whose(22, str(tmp_path))
    assert (w.job, w.via, w.supervisor) == (None, "supervisor", 20)


def test_anything_else_is_nobodys_job(tmp_path):
    fake_proc(tmp_path, 30, ppid=31)
    fake_proc(tmp_path, 31, ppid=1, cmdline=b"qex\0submit\0--\0qex-watch\0x\0y\0")  # a word is no supervisor
    w = whose.whose(30, str(tmp_path))
    assert (w.job, w.via) == (None, "")
    assert whose.whose(99, str(tmp_path)) is None  # gone


def test_a_real_child_is_known_by_its_environment():
    env = {**os.environ, "QEX_JOB_ID": "job-xyz"}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"], env=env)
    try:
        deadline = time.monotonic() + 5
        while not (w := whose.whose(child.pid)).job and time.monotonic() < deadline:
            time.sleep(0.01)  # (a process that has just exec'd shows no environment for an instant)
        assert w.job == "job-xyz" and w.uid == os.getuid()
    finally:
        child.kill()
        child.wait()


def test_a_process_under_a_supervisor_by_its_name_is_a_qex_job(tmp_path):
    fake_proc(tmp_path, 40, ppid=1, comm="qex: supervisor", cmdline=b"qex: supervisor of abc-4 (watching)\0")
    fake_proc(tmp_path, 41, ppid=40)
    w = whose.whose(41, str(tmp_path))
    assert (w.job, w.via, w.supervisor) == (None, "supervisor", 40)
