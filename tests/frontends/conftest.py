"""The isolation suite's runners (root, an unprivileged user) for the front-end tests
that run stockade's command line as the person would (a test module's own `box`
fixture takes precedence)."""

from __future__ import annotations

from pathlib import Path

import pytest

from isolation.conftest import (
    RUNNER_NAMES,
    Box,
    Runner,
    iso_root,  # noqa: F401  (fixture)
    make_runner,
    populate,
    unpriv_site,  # noqa: F401  (fixture)
)


@pytest.fixture(scope="module", params=RUNNER_NAMES)
def runner(request: pytest.FixtureRequest, iso_root: Path) -> Runner:  # noqa: F811
    return make_runner(request, iso_root)


@pytest.fixture
def box(runner: Runner, iso_root: Path) -> Box:  # noqa: F811
    return populate(Box, runner, iso_root)
