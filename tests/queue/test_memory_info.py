"""qex info's memory line (qex.queue.info._memory_lines): which accounting is in force, and
where there is none, the one-line remedy; a long path is never cut."""

from qex.linux import scope
from qex.queue.info import _memory_lines

SESSION = "/sys/fs/cgroup/user.slice/user-1001.slice/" + "x" * 150 + "/session-3.scope"


def test_no_cgroup_says_why_in_whole_words_and_the_remedy():
    mem = {
        "per_job_cgroup": False,
        "kind": "v2",
        "oom_evidence": "machine-counter",
        "peak_from": "proc-sample",
        "sample_period": 0.2,
        "remedy": scope.remedy(False),
        "why_not": f"cgroup v2: {SESSION} does not delegate the memory controller to its children",
    }
    first, second = _memory_lines(mem)
    assert SESSION in first and first.endswith("OOM evidence from the machine's oom_kill counter"), first
    assert "sampled from /proc every 0.2s" in first
    assert second.strip().startswith("for one: loginctl enable-linger ") and "Delegate=yes" in second


def test_a_scope_per_job_names_the_manager():
    mem = {"per_job_cgroup": True, "kind": "systemd-scope", "manager": "system", "parent": "qex.slice"}
    (line,) = _memory_lines(mem)
    assert "a systemd scope per job (the system manager" in line and "qex.slice" in line
