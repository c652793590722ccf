"""Every test in tests/vm boots throw-away guests (``harness.run_vm``): each is marked ``vm``
(left out of the README's test command; ``.ci/run`` runs ``pytest -m vm``) and skips, with
the reason, where no guest can run (``harness.skip_reason``)."""

import pytest
from harness import skip_reason


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "tests/vm/" not in str(item.fspath).replace("\\", "/"):
            continue
        item.add_marker(pytest.mark.vm)
        reason = reason or skip_reason() or ""
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"no VM here: {reason}"))
