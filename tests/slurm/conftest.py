"""The Slurm backend's tests: a real one-node Slurm on loopback (tests/slurm/cluster.py),
started once for the session as root and stopped by the pids it recorded. Where root,
Slurm or munge is missing, every test here skips and says why. Under the ``slurm``
marker: the README's test command leaves them out (pyproject's addopts), ``.ci/run``
runs them on their own (``pytest -m slurm tests/slurm``)."""

import os
import tempfile

import pytest
from cluster import Cluster, why_not

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def cluster():
    reason = why_not()
    if reason:
        pytest.skip(reason)
    root = tempfile.mkdtemp(prefix="qex-slurm-")
    os.chmod(root, 0o755)
    made = Cluster(root)
    try:
        made.start()
    except Exception as exc:
        made.stop()
        pytest.skip(f"the test cluster did not start: {exc}")
    yield made
    made.stop()
    import shutil

    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def sq(q, cluster):
    """A queue (tests/conftest.py's ``q``) whose config says [backend] kind = "slurm", with the
    clients' environment of the test cluster; the qex step on the node finds this checkout."""
    q.env.update(cluster.env)
    q.env["PYTHONPATH"] = REPO + (os.pathsep + q.env["PYTHONPATH"] if q.env.get("PYTHONPATH") else "")
    q.env.pop("QEX_BACKEND", None)
    q.write_config('[backend]\nkind = "slurm"\n')
    q.cluster = cluster
    yield q
    ids = [
        r["slurm_job_id"]
        for r in q.records()
        if r.get("slurm_job_id") and r["state"] in ("queued", "running", "starting")
    ]
    if ids:
        cluster.client("scancel", *ids)
