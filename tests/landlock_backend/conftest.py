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
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from isolation.conftest import (
    HIDDEN_DECOYS,
    MINIMAL_PATH,
    RUNNER_NAMES,
    SRC,
    SSH_KEY,
    SYSTEM_PYTHON,
    VISIBLE_DECOY,
    Box,
    Runner,
    _ensure_user,
    iso_root,
    listeners,
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


_WORKS: dict[str, str] = {}


@pytest.fixture(scope="session", params=RUNNER_NAMES)
def runner(request: pytest.FixtureRequest, iso_root: Path) -> Runner:
    name = request.param
    if name == "user":
        pw = _ensure_user()
        site = request.getfixturevalue("unpriv_site")
        r = Runner(name, pw.pw_uid, pw.pw_gid, SYSTEM_PYTHON, site)
    else:
        r = Runner(name, os.geteuid(), os.getegid(), sys.executable, str(SRC))
    _require_landlock(r, iso_root)
    return r


def _require_landlock(r: Runner, iso_root: Path) -> None:
    """FAIL, never skip, when the Landlock backend cannot run a command as this runner."""
    if r.name in _WORKS:
        if _WORKS[r.name]:
            pytest.fail(_WORKS[r.name], pytrace=False)
        return
    probe = Path(tempfile.mkdtemp(prefix="llprobe-", dir=iso_root))
    os.chmod(probe, 0o755)
    r.own(probe)
    res = r.cli(["run", *BACKEND, "--", "/bin/sh", "-c", "echo $STOCKADE_SANDBOX $(id -u)"],
                cwd=probe, env={"HOME": str(probe), "PATH": MINIMAL_PATH})
    out = res.stdout.decode(errors="replace").strip()
    if res.returncode != 0 or out != f"landlock {r.uid}":
        _WORKS[r.name] = (
            f"the landlock backend does not run as {r.name} (uid {r.uid}): exit "
            f"{res.returncode}, stdout {out!r}, stderr "
            f"{res.stderr.decode(errors='replace').strip()!r}")
        pytest.fail(_WORKS[r.name], pytrace=False)
    _WORKS[r.name] = ""


@pytest.fixture
def box(runner: Runner, iso_root: Path) -> LandlockBox:
    """The isolation suite's box (workspace, decoy HOME with every credential, sibling)."""
    root = Path(tempfile.mkdtemp(prefix="ll-", dir=iso_root))
    os.chmod(root, 0o755)
    b = LandlockBox(runner, root, root / "ws", root / "home", root / "sibling")
    for d in (b.ws, b.home, b.sibling, b.state):
        d.mkdir()
        os.chmod(d, 0o755)
        runner.own(d)
    tag = secrets.token_hex(6)
    for rel in (*HIDDEN_DECOYS, SSH_KEY, VISIBLE_DECOY):
        marker = f"DECOY-{rel.strip('.').replace('/', '_')}-{tag}"
        b.markers[rel] = marker
        b.write(b.home / rel, f"{marker}\n", 0o600)
    for dirpath, _dirs, _files in os.walk(b.home):
        os.chmod(dirpath, 0o755)
        runner.own(dirpath)
    b.write(b.sibling / "notes.txt", "sibling original\n")
    config = b.state / "config" / "stockade"
    config.mkdir(parents=True)
    for d in (b.state / "config", config):
        os.chmod(d, 0o755)
        runner.own(d)
    b.write(config / "config.toml", CONFIG)
    return b


