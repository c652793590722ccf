"""End-to-end only: never leave a job's processes behind, even when a test fails
before it opens the gate its job waits on."""

import os
import signal

import pytest
from e2e_helpers import group_members, read_records
from multiuser_helpers import users_or_skip


@pytest.fixture(autouse=True)
def _reap_job_groups(request):
    yield
    q = getattr(request.node, "funcargs", {}).get("q")  # torn down after q: supervisors are gone
    if q is None:
        return
    for rec in read_records(q):
        pid = rec.get("pid")
        if rec.get("state") in ("starting", "running") and pid and group_members(pid):
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture(scope="module")
def users():
    """Two real users in one group (made as root, removed after the module); skips, with the reason, elsewhere."""
    yield from users_or_skip()
