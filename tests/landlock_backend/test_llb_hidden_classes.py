"""The hidden set by class under the Landlock backend: the isolation suite's attacks,
unchanged.

Here a hidden path is one that gets no rule, so a store the host replaces or
creates during a run is a new inode that no rule reaches; the tests prove it
for every kind of change, cold, warm and `start()`ed, and that the areas
hide the credential locations of common CLIs while toolchains keep their
settings.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from isolation import test_iso_hidden_classes as iso
from isolation.conftest import RUNNER_PARAMS, Box, Runner, make_runner, populate

from .conftest import BACKEND, CONFIG, LandlockBox

pytestmark = pytest.mark.isolation


# As in the isolation module: a fixture of this module's own name, so the warm
# runners are collected here too.
@pytest.fixture(scope="session", params=RUNNER_PARAMS)
def who(request: pytest.FixtureRequest, iso_root: Path) -> Runner:
    return make_runner(request, iso_root, backend_args=BACKEND, backend="landlock")


@pytest.fixture
def box(who: Runner, iso_root: Path) -> LandlockBox:
    b = populate(LandlockBox, who, iso_root)
    config = b.state / "config" / "stockade"
    config.mkdir(parents=True)
    for d in (b.state / "config", config):
        os.chmod(d, 0o755)
        who.own(d)
    b.write(config / "config.toml", CONFIG)
    return b


def test_stores_the_host_replaces_during_a_run_stay_hidden(box: Box) -> None:
    iso.test_stores_the_host_replaces_during_a_run_stay_hidden(box, "landlock")


def test_control_the_host_side_changes_are_readable_unconfined(box: Box) -> None:
    iso.test_control_the_host_side_changes_are_readable_unconfined(box)


def test_stores_the_host_replaces_stay_hidden_from_a_started_command(box: Box) -> None:
    iso.test_stores_the_host_replaces_stay_hidden_from_a_started_command(box, "landlock")


def test_credential_locations_of_common_clis_unreadable(box: Box) -> None:
    iso.test_credential_locations_of_common_clis_unreadable(box)


def test_control_credential_locations_readable_unconfined(box: Box) -> None:
    iso.test_control_credential_locations_readable_unconfined(box)


def test_tool_settings_in_the_areas_stay_readable(box: Box) -> None:
    iso.test_tool_settings_in_the_areas_stay_readable(box)


def test_fs_read_brings_back_exactly_the_path_it_names(box: Box) -> None:
    iso.test_fs_read_brings_back_exactly_the_path_it_names(box)


def test_unreadable_replaces_the_default(box: Box) -> None:
    iso.test_unreadable_replaces_the_default(box)
