"""`make demo`'s script, checked the way its output claims: verdicts and host-side effects."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.isolation


def test_the_demo_blocks_what_it_says_even_from_a_checkout_under_tmp(tmp_path: Path) -> None:
    """`make demo`'s script, run from a directory under /tmp (as a checkout there would be):
    every step ends as the README shows, and the host-side checks agree."""
    demo = Path(__file__).resolve().parents[2] / "examples" / "demo.py"
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    res = subprocess.run([sys.executable, str(demo)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    verdicts = [line.split(None, 1) for line in res.stdout.splitlines()
                if line.startswith(("allowed ", "BLOCKED ", "DEFUSED ", "ERROR "))]
    assert verdicts == [
        ["allowed", "write a file in the workspace"], ["BLOCKED", "append to ~/.bashrc"],
        ["BLOCKED", "read ~/.aws/credentials"],
        ["DEFUSED", "leave a git hook for your next commit"],
        ["BLOCKED", "reach a server on the host"], ["BLOCKED", "wipe the disk"]], res.stdout
    assert "the host listener received no connection" in res.stdout
    assert "~/.bashrc unchanged: True; hook left for your next commit: False" in res.stdout
