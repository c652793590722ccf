"""Issue 28, memory pressure: with ``[system] max_pressure`` set, no job starts while the
machine's memory pressure (PSI ``some avg10`` of /proc/pressure/memory) is above it; the
waiting reason says so with the number, and the waker starts the job once it drops.
The PSI file is injected (``QEX_PSI_FILE``, a file the test writes) to raise the
pressure at will; one more test reads the kernel's own file."""

import json
import os

import pytest

from qex.base import machine

PSI = "some avg10={some:.2f} avg60=1.00 avg300=0.50 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1\n"


def write_psi(path: str, some: float) -> None:
    with open(path + ".tmp", "w") as fh:
        fh.write(PSI.format(some=some))
    os.replace(path + ".tmp", path)


def test_a_job_waits_under_pressure_with_the_number_then_starts_when_it_drops(q):
    psi = os.path.join(q.root, "psi")
    write_psi(psi, 42.5)
    q.env["QEX_PSI_FILE"] = psi
    q.write_config('[system]\nmax_pressure = "20%"\n')
    job_id = q.submit("--", "true")
    rec = q.wait_for(lambda: (r := q.record(job_id)).get("blocked_holder") == "pressure" and r, what="a pressure wait")
    assert rec["state"] == "queued"
    status = q.run("status", job_id).stdout
    assert "under memory pressure: 42.5%" in status and "[system] max_pressure 20%" in status, status
    info = json.loads(q.run("info", "--json").stdout)
    assert info["pressure"] == {"some_avg10": 42.5, "max": 20.0}
    assert info["queue"]["health"].startswith("held while the machine is under memory pressure: 42.5%")

    write_psi(psi, 3.0)  # the pressure drops: the waker's next pass starts it, no command typed
    q.wait_state(job_id, "completed", timeout=20)


def test_the_kernels_own_pressure_is_read_and_the_key_refused_where_there_is_none(q):
    if not os.path.exists(machine.PSI_MEMORY):
        pytest.skip(f"{machine.PSI_MEMORY} is absent: this kernel gives no memory pressure")
    now = machine.memory_pressure(machine.PSI_MEMORY)
    assert 0.0 <= now <= 100.0
    q.write_config("[system]\nmax_pressure = 99.9\n")  # (far above what this machine has: nothing waits)
    assert q.run("run", "--", "true").returncode == 0
    shown = json.loads(q.run("config", "show", "--json").stdout)["values"]["system.max_pressure"]
    assert shown["value"] == 99.9
    q.write_config('[system]\nmax_pressure = "30%"\n')  # (another file: not the cached parse)
    refused = q.run("config", "show", env={"QEX_PSI_FILE": os.path.join(q.root, "no-psi")})
    assert refused.returncode != 0
    assert "[system] max_pressure" in refused.stderr and "remove the key" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
