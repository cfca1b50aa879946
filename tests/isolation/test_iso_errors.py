"""Failures of stockade's own ground, as root and as an unprivileged user: one line
and a documented status, never a traceback; and a long argv that reaches the
command whole (bwrap alone stops at 9000 arguments).
"""

from __future__ import annotations

import os

import pytest

from .conftest import Box, text

pytestmark = pytest.mark.isolation


def test_a_state_directory_stockade_cannot_write_is_one_line(box: Box) -> None:
    if not box.runner.switches_user:
        pytest.skip("root writes through a mode of 0555")
    state = box.state / "state" / "stockade"
    state.mkdir(parents=True, exist_ok=True)
    box.runner.own(state.parent, state)
    os.chmod(state, 0o555)
    try:
        res = box.run(["/bin/sh", "-c", "echo ran > ran.txt"])
    finally:
        os.chmod(state, 0o700)
    out = text(res)
    assert res.returncode == 125, out
    assert "Traceback" not in out
    line = res.stderr.decode().strip().splitlines()[-1]
    assert line.startswith(f"stockade: SandboxUnavailable: stockade cannot use its state "
                           f"directory {state}: Permission denied; "), line
    assert "XDG_STATE_HOME" in line
    assert not (box.ws / "ran.txt").exists()


def test_a_state_home_that_is_a_file_is_one_line(box: Box) -> None:
    afile = box.write(box.root / "afile", "x")
    res = box.run(["/bin/true"], env=box.env(XDG_STATE_HOME=str(afile)))
    assert res.returncode == 125, text(res)
    line = res.stderr.decode().strip().splitlines()[-1]
    assert f"XDG_STATE_HOME is {afile}, which is not a directory" in line, line


@pytest.mark.parametrize("count", [20_000, 100_000])
def test_a_long_argv_reaches_the_command_whole(box: Box, count: int) -> None:
    words = [str(i) for i in range(count)]
    res = box.run(["/bin/echo", *words])
    assert res.returncode == 0, text(res)[-2000:]
    assert res.stdout.decode() == " ".join(words) + "\n"
