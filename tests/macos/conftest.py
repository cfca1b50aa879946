"""Shared set-up for the macOS driver tests.

tests/ has no packages here, so the helper modules beside these tests
(`sbpl_eval`, `macos_fakes`) are imported through this directory on sys.path.
"""

from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


@pytest.fixture(params=["last-match", "deny-wins"])
def precedence(request: pytest.FixtureRequest) -> str:
    """Both readings of Seatbelt rule order; the profile must mean the same under each."""
    return str(request.param)
