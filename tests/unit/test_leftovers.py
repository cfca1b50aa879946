"""What stockade makes in its state directory for a session or a command (the
session's /tmp and caches, a command's scratch, copies of the person's git
config) never outlives the process that made it, even one SIGKILLed before it
could remove them: the next process to make one removes them, and never what a
live process still holds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from stockade.drivers import session
from stockade.drivers.linux.host import gitconfig

SRC = Path(__file__).resolve().parents[2] / "src"

# A process that opens a session, runs one command so that its caches exist,
# writes what a command could leave in its /tmp, says where, and waits.
HOLDER = r"""
import json, os, sys
sys.path.insert(0, {src!r})
from stockade import SandboxCommand, SandboxConfig, SyncWorkspaceSandbox
sb = SyncWorkspaceSandbox(SandboxConfig(backend="none", mode="full-access"))
ws = sb.session("s", {ws!r})
sb.execute(SandboxCommand("/bin/true", [], session_id="s"))
tmp = ws.session.tmp
os.makedirs(os.path.join(tmp, "deep", "er"))
os.symlink({outside!r}, os.path.join(tmp, "link"))
os.chmod(os.path.join(tmp, "deep"), 0)
print(json.dumps([tmp, ws.cache_dir]), flush=True)
sys.stdin.read()
"""


def _holder(tmp_path: Path, name: str, outside: Path) -> tuple[subprocess.Popen[str], list[str]]:
    ws = tmp_path / name
    ws.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    proc = subprocess.Popen(
        [sys.executable, "-I", "-c",
         HOLDER.format(src=str(SRC), ws=str(ws), outside=str(outside))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "the holder did not start"
    return proc, json.loads(line)


def test_a_killed_stockades_session_dirs_are_removed_by_the_next_one(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("the person's\n")
    killed, dead_dirs = _holder(tmp_path, "a", outside)
    alive, live_dirs = _holder(tmp_path, "b", outside)
    try:
        assert all(dead_dirs) and all(live_dirs), (dead_dirs, live_dirs)
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert all(os.path.isdir(d) for d in dead_dirs)  # what a kill leaves
        nxt, _ = _holder(tmp_path, "c", outside)
        nxt.kill()
        nxt.wait()
        assert not any(os.path.lexists(d) for d in dead_dirs), dead_dirs
        assert all(os.path.isdir(d) for d in live_dirs), live_dirs  # a live one's stay
        assert (outside / "keep").read_text() == "the person's\n"  # never followed
    finally:
        for proc in (killed, alive):
            proc.kill()
            proc.wait()


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


def test_git_config_copies_of_a_killed_process_are_removed_by_the_next_one(
        tmp_path: Path) -> None:
    base = tmp_path / "gitconfig"
    base.mkdir(mode=0o700)
    here = session._host()
    dead = base / f"{_dead_pid()}.{here}.0123456789ab"
    dead.mkdir()
    (dead / "0").write_text("[user]\n\tname = the person's\n")
    alive = base / f"{os.getppid()}.{here}.0123456789ab"
    alive.mkdir()
    elsewhere = base / f"{_dead_pid()}.beef.0123456789ab"  # another machine's
    elsewhere.mkdir()
    session._swept.discard(str(base))
    copies = gitconfig.PrivateConfigs(["/ws/.git/config"], str(tmp_path))
    try:
        assert not dead.exists()
        assert alive.exists()  # a running stockade's, still bound into its sandbox
        assert elsewhere.exists()
        assert os.path.isdir(copies.dir)
    finally:
        copies.close()
    assert not os.path.exists(copies.dir)


@pytest.mark.parametrize("name", ["notapid.x", "12abc", "pid.link"])
def test_only_names_a_process_was_given_are_swept(tmp_path: Path, name: str) -> None:
    """A name this module did not give stays; a dead process's that is a link is
    removed as a link, never followed."""
    base = tmp_path / "tmp"
    base.mkdir()
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("kept\n")
    if name == "pid.link":
        name = f"{_dead_pid()}.{session._host()}.link"
        os.symlink(target, base / name)
    else:
        (base / name).mkdir()
    session.sweep_dead(str(base))
    assert (target / "keep").read_text() == "kept\n"
    assert os.path.lexists(base / name) == (not name.endswith(".link"))
