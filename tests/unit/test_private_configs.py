"""The private copies of the person's git config that commands write: none outlives
the stockade process that made it, even one killed before it could close them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from stockade.drivers.linux.host import gitconfig


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


def test_copies_of_a_killed_process_are_removed_by_the_next_one(tmp_path: Path) -> None:
    base = tmp_path / "gitconfig"
    base.mkdir(mode=0o700)
    dead = base / f"{_dead_pid()}.0123456789ab"
    dead.mkdir()
    (dead / "0").write_text("[user]\n\tname = the person's\n")
    alive = base / f"{os.getppid()}.0123456789ab"
    alive.mkdir()
    gitconfig._swept.discard(str(base))
    copies = gitconfig.PrivateConfigs(["/ws/.git/config"], str(tmp_path))
    try:
        assert not dead.exists()
        assert alive.exists()  # a running stockade's, still bound into its sandbox
        assert os.path.isdir(copies.dir)
    finally:
        copies.close()
    assert not os.path.exists(copies.dir)
