"""Harness for the core escape suite under `backend = "landlock"`.

The same root/unprivileged runners, decoys and host-side observers as
tests/isolation (imported from there, not copied), with two changes: every
`stockade run` of a test box selects the Landlock backend, both on its
command line and in the box's user config (tests that call the CLI
directly, or pass their own `--config`, still get it), and the runner probe
requires that backend to work, as the bwrap suite requires bwrap. A runner
that cannot run it fails the suite: a skipped suite proves nothing.

Tests that are the isolation suite's own are re-run by calling them with a
box from here; cases out of this backend's reach are strict xfails whose
reasons are listed in docs/landlock-backend.md.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from isolation.conftest import (
    RUNNER_PARAMS,
    Box,
    Runner,
    deselect_warm,
    discard,
    iso_root,
    listeners,
    make_runner,
    populate,
    unpriv_site,
)

__all__ = ["box", "iso_root", "listeners", "runner", "unpriv_site"]

BACKEND = ["--backend", "landlock"]
CONFIG = '[sandbox]\nbackend = "landlock"\n'


def pytest_report_header(config: pytest.Config) -> str:
    who = "as root and as unprivileged user" if os.geteuid() == 0 else "as the current user only"
    return f"landlock backend: the core escape suite runs {who}"


@dataclass
class LandlockBox(Box):
    """A `Box` whose runs use the Landlock backend."""

    def run(self, cmd: Sequence[str], *, mode: str | None = None,  # type: ignore[override]
            options: Sequence[str] = (), **kw: object) -> subprocess.CompletedProcess[bytes]:
        return super().run(cmd, mode=mode, options=[*BACKEND, *options],
                           **kw)  # type: ignore[arg-type]

    def user_config(self, sandbox: str) -> None:
        """As the isolation suite's, selecting this backend: library code the test
        runs reads only the file."""
        conf = self.mkdir("state/config/stockade")
        self.write(conf / "config.toml", f"{CONFIG}{sandbox}\n")


#: As in the isolation suite: these also run through a parked sandbox (the
#: terminal and input suite starts cold by design).
WARM_SUITES = ("test_llb_fs.py", "test_llb_secrets.py", "test_llb_git.py", "test_llb_net.py",
               "test_llb_proc.py")


@pytest.fixture(scope="session", params=RUNNER_PARAMS)
def runner(request: pytest.FixtureRequest, iso_root: Path) -> Runner:
    return make_runner(request, iso_root, backend_args=BACKEND, backend="landlock")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect_warm(config, items, Path(__file__).parent, WARM_SUITES)


@pytest.fixture
def box(runner: Runner, iso_root: Path) -> Iterator[LandlockBox]:
    """The isolation suite's box, plus a user config that selects this backend."""
    b = populate(LandlockBox, runner, iso_root)
    config = b.state / "config" / "stockade"
    config.mkdir(parents=True)
    for d in (b.state / "config", config):
        os.chmod(d, 0o755)
        runner.own(d)
    b.write(config / "config.toml", CONFIG)
    yield b
    discard(b)


