"""The whole suite's own setup: Ctrl-C as a terminal would send it, whatever started
the run, and the run's unprivileged user removed at its end.

Its directory (tests/) is on sys.path for every test module, so suites import
shared harness code as `isolation.…` wherever they live.
"""

from __future__ import annotations

import signal

import pytest

from isolation import users


def pytest_configure(config: pytest.Config) -> None:
    # A suite started as a background job of a shell without job control (`make
    # test &`, nohup) inherits SIGINT and SIGQUIT ignored, and so would every
    # command it starts: the tests of Ctrl-C would test nothing and fail.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Not a fixture's teardown: the user is made on first use by suites in
    # several directories, and removed once, after the last of them.
    users.remove_made()
