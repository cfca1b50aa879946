"""The whole suite's own setup: the run's unprivileged user is removed at its end.

Its directory (tests/) is on sys.path for every test module, so suites import
shared harness code as `isolation.…` wherever they live.
"""

from __future__ import annotations

import pytest

from isolation import users


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Not a fixture's teardown: the user is made on first use by suites in
    # several directories, and removed once, after the last of them.
    users.remove_made()
