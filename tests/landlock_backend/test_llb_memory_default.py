"""The default memory bound under the Landlock backend: the same cgroup, the same report.

The isolation suite's tests, run with a Landlock box (see conftest.py).
"""

from __future__ import annotations

import pytest

from isolation import test_iso_memory_default as iso
from isolation.conftest import Box

pytestmark = pytest.mark.isolation


def test_the_default_bounds_the_commands_cgroup_and_is_audited(box: Box) -> None:
    iso.test_the_default_bounds_the_commands_cgroup_and_is_audited(box)


def test_a_memory_bomb_under_the_default_is_stopped_and_reported(
        box: Box, request: pytest.FixtureRequest) -> None:
    iso.test_a_memory_bomb_under_the_default_is_stopped_and_reported(
        box, request, backend=', backend="landlock"')


def test_the_default_is_no_address_space_limit(box: Box) -> None:
    iso.test_the_default_is_no_address_space_limit(box)


def test_control_an_address_space_limit_breaks_the_same_program(box: Box) -> None:
    iso.test_control_an_address_space_limit_breaks_the_same_program(box)


def test_npm_install_runs_under_the_default(box: Box) -> None:
    iso.test_npm_install_runs_under_the_default(box)
