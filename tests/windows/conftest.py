"""Shared set-up for the Windows driver tests (which run on any OS).

The module beside these tests (`win_fakes`) is imported through this
directory on sys.path, as the macOS tests do.
"""

from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "windows: needs a real Windows host (AppContainer, job objects, NTFS ACLs)")
