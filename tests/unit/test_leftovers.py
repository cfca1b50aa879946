"""What stockade makes in its state directory for a session or a command (the
session's /tmp and caches, a command's scratch, copies of the person's git
config) never outlives the process that made it, even one SIGKILLed before it
could remove them: the next process to make one removes them, and never what a
live process still holds."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stockade.drivers import owned
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


def _holder(tmp_path: Path, name: str, outside: Path, *, prefix: tuple[str, ...] = ()
            ) -> tuple[subprocess.Popen[str], list[str]]:
    ws = tmp_path / name
    ws.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    proc = subprocess.Popen(
        [*prefix, sys.executable, "-I", "-c",
         HOLDER.format(src=str(SRC), ws=str(ws), outside=str(outside))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "the holder did not start"
    return proc, json.loads(line)


def _gone(paths: list[str], within: float = 10.0) -> bool:
    """Whether every path is gone within `within` s (the sweep runs in the background)."""
    deadline = time.monotonic() + within
    while any(os.path.lexists(p) for p in paths):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# Another PID namespace sharing the state directory (a container on a shared
# volume): its pids mean nothing here, its locks do.
OTHER_PID_NAMESPACE = ("unshare", "--user", "--map-root-user", "--pid", "--fork", "--")


@pytest.mark.parametrize("live", ["this PID namespace", "another PID namespace"])
def test_a_killed_stockades_session_dirs_are_removed_by_the_next_one(
        tmp_path: Path, live: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("the person's\n")
    prefix: tuple[str, ...] = ()
    if live == "another PID namespace":
        prefix = OTHER_PID_NAMESPACE
        if subprocess.run([*prefix, "/bin/true"], capture_output=True).returncode != 0:
            pytest.skip("this machine lets no user make a user and PID namespace (unshare)")
    killed, dead_dirs = _holder(tmp_path, "a", outside)
    alive, live_dirs = _holder(tmp_path, "b", outside, prefix=prefix)
    try:
        assert all(dead_dirs) and all(live_dirs), (dead_dirs, live_dirs)
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert all(os.path.isdir(d) for d in dead_dirs)  # what a kill leaves
        nxt, _ = _holder(tmp_path, "c", outside)
        nxt.kill()
        nxt.wait()
        assert _gone(dead_dirs), dead_dirs
        assert all(os.path.isdir(d) for d in live_dirs), live_dirs  # a live one's stay
        assert (outside / "keep").read_text() == "the person's\n"  # never followed
    finally:
        for proc in (killed, alive):
            proc.kill()
            proc.wait()


def _sweep(base: Path) -> None:
    thread = owned.sweep(str(base))
    if thread is not None:
        thread.join(30)


def test_git_config_copies_of_a_killed_process_are_removed_by_the_next_one(
        tmp_path: Path) -> None:
    base = tmp_path / "gitconfig"
    base.mkdir(mode=0o700)
    here = owned.boot()
    dead = base / f"{here}.0123456789"
    dead.mkdir()
    (dead / "0").write_text("[user]\n\tname = the person's\n")
    alive = base / f"{here}.abcdef0123"
    alive.mkdir()
    held = os.open(alive, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_EX)  # as a live stockade, its copies bound into a sandbox
    try:
        owned._swept.discard(str(base))
        copies = gitconfig.PrivateConfigs(["/ws/.git/config"], str(tmp_path))
        try:
            assert _gone([str(dead)])
            assert alive.exists()
            assert os.path.isdir(copies.dir)
        finally:
            copies.close()
        assert not os.path.exists(copies.dir)
    finally:
        os.close(held)


@pytest.mark.parametrize("where", ["local", "shared"])
def test_another_boots_directories_are_removed_only_from_a_local_filesystem(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """Another boot on a local filesystem is this machine's past; on a shared one it
    may be a live process on another machine, whose lock this kernel cannot see."""
    base = tmp_path / "tmp"
    base.mkdir()
    other = base / f"{'0' * len(owned.boot())}.cmd-0123456789"
    other.mkdir()
    assert owned._local(str(base)), "the test's own filesystem is local"
    if where == "shared":
        monkeypatch.setattr(owned, "_local", lambda path: False)
    _sweep(base)
    assert other.exists() == (where == "shared")


def test_a_directory_its_maker_could_not_lock_is_never_swept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where flock fails for the maker (no locks on that filesystem), anyone else's
    sweep would find the directory unlocked and take it while in use."""
    base = tmp_path / "tmp"
    owned._swept.add(str(base))

    def no_locks(fd: int, op: int) -> None:
        raise OSError(37, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    made = owned.owned_dir(str(base), "cmd-")
    monkeypatch.undo()
    try:
        _sweep(base)
        assert os.path.isdir(made), made
    finally:
        owned.remove_owned(made)
    assert not os.path.exists(made)


def test_a_thousand_leftovers_take_no_descriptors_from_the_next_command(
        tmp_path: Path) -> None:
    """Each leftover was opened and locked before any was removed: with 1,100 of
    them and a limit of 1,024 open files, the next command failed with EMFILE."""
    base = tmp_path / "state" / "stockade" / "tmp"
    base.mkdir(parents=True)
    stale = [base / f"{owned.boot()}.cmd-{n:010d}" for n in range(1100)]
    for d in stale:
        d.mkdir()
    code = (f"import resource, sys; sys.path.insert(0, {str(SRC)!r}); "
            "resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)); "
            "from stockade.drivers import owned; "
            f"t = owned.sweep({str(base)!r}); "
            f"d = owned.owned_dir({str(base)!r}, 'cmd-'); owned.remove_owned(d); "
            "t.join(60); print('ok')")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "ok", out.stderr
    assert os.listdir(base) == []


@pytest.mark.parametrize("name", ["notours.x", "link", "fresh", "old"])
def test_only_what_a_process_made_and_left_is_swept(tmp_path: Path, name: str) -> None:
    """A name this module did not give stays, a link is never followed, and a
    directory still being made is left to its maker."""
    base = tmp_path / "tmp"
    base.mkdir()
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("kept\n")
    path = base / {"notours.x": "notours.x", "link": f"{owned.boot()}.link",
                   "fresh": ".new-0123456789", "old": ".new-abcdef0123"}[name]
    if name == "link":
        os.symlink(target, path)
    else:
        path.mkdir()
    if name == "old":
        os.utime(path, (time.time() - 120, time.time() - 120))
    _sweep(base)
    assert (target / "keep").read_text() == "kept\n"
    assert os.path.lexists(path) == (name != "old")
