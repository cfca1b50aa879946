"""Terminal injection, working directory and refusals under the Landlock backend."""

from __future__ import annotations

import os

import pytest

from isolation import test_iso_tty as iso_tty
from isolation.conftest import Box, text

pytestmark = pytest.mark.isolation


def test_tiocsti_cannot_type_into_the_parent_terminal(box: Box) -> None:
    iso_tty.test_tiocsti_cannot_type_into_the_parent_terminal(box)


def test_control_unconfined_tiocsti_is_seen_in_the_input_queue(box: Box) -> None:
    iso_tty.test_control_unconfined_tiocsti_is_seen_in_the_input_queue(box)


def test_json_mode_gives_the_command_no_terminal(box: Box) -> None:
    iso_tty.test_json_mode_gives_the_command_no_terminal(box)


def test_command_runs_in_its_cwd_not_stockades(box: Box) -> None:
    """No bwrap --chdir here: the init changes directory, before any layer."""
    sub = box.mkdir("ws/sub/deeper")
    box.write(sub / "here.txt", "found\n")
    res = box.sh("pwd; cat here.txt; echo made > new.txt", mode="workspace-write",
                 options=["--cwd", "sub/deeper"], cwd=box.ws)
    assert res.stdout.decode().splitlines()[:2] == [str(sub), "found"], text(res)
    assert (sub / "new.txt").read_text() == "made\n"


def test_min_abi_above_the_kernel_is_refused_never_downgraded(box: Box) -> None:
    cfg = box.write(box.state / "abi.toml", "[sandbox]\nlandlock_min_abi = 99\n")
    res = box.run(["/bin/sh", "-c", "echo ran > ran.txt"], mode="workspace-write",
                  options=["--config", str(cfg)])
    assert res.returncode == 125, text(res)
    lines = res.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stockade: SandboxUnavailable:"), lines
    assert "ABI 99" in lines[0], lines
    assert not (box.ws / "ran.txt").exists()


def test_malformed_min_abi_is_a_config_error(box: Box) -> None:
    cfg = box.write(box.state / "abi.toml", '[sandbox]\nlandlock_min_abi = "three"\n')
    res = box.run(["/bin/sh", "-c", "echo ran > ran.txt"], options=["--config", str(cfg)])
    assert res.returncode == 78, text(res)
    assert "landlock_min_abi" in text(res)
    assert not (box.ws / "ran.txt").exists()


def test_audit_record_names_the_backend_and_its_layers(box: Box) -> None:
    box.sh("true", mode="workspace-write")
    res = box.runner.cli(["audit", "--last", "1", "--json"], cwd=box.ws, env=box.env())
    out = text(res)
    assert '"backend": "landlock"' in out, out
    assert "unix-no-connect" in out and "landlock_abi" in out and "reaper" in out, out
    assert os.path.isdir(box.ws)
