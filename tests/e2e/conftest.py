"""The end-to-end tests' collection: the walkthrough runs once a session.

``test_wheel_in_a_fresh_venv`` runs ``test_walkthrough.py`` itself, from the installed
wheel, and fails with its output when it fails.  When both are selected, the walkthrough
is not run a second time from the checkout (the same scenario, some 20 s); selected alone
(``-k walkthrough``, ``-m "not slow"`` leaving neither, a path), it runs as usual.
"""

from __future__ import annotations

import pytest

WHEEL = "test_wheel.py::test_wheel_in_a_fresh_venv"
WALKTHROUGH = "test_walkthrough.py::test_walkthrough"


@pytest.hookimpl(trylast=True)  # after -k / -m chose what runs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    twice = [item for item in items if item.nodeid.endswith(WALKTHROUGH)]
    if not twice or not any(item.nodeid.endswith(WHEEL) for item in items):
        return
    items[:] = [item for item in items if item not in twice]
    config.hook.pytest_deselected(items=twice)
