"""A protected file held by a mount is judged by whether its name was replaced, not
by its inode number: a file of the command's can get the number the held file had.

The kernel hands a freed number out again, so a command whose mount the person's
`git config` detached can make files until one gets it and rename that over the
config: device and inode then match the baseline. This plays that outcome
directly, on the host, through the guard the bubblewrap driver uses.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from stockade.boundary import build_profile
from stockade.capabilities import capabilities_for_mode
from stockade.command import Neutralised
from stockade.drivers.linux.host.guard import MetadataGuard

PAYLOAD = '[core]\n\tfsmonitor = "touch pwned"\n'


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    return ws


def _guard(ws: Path, state: Path, content: bool = False) -> MetadataGuard:
    caps = capabilities_for_mode("workspace-write", str(ws))
    profile = build_profile(mode="workspace-write", workspace=str(ws), cwd=str(ws),
                            capabilities=caps, read_scope="host",
                            host_env={"HOME": "/nonexistent"}, use_scratch=False)
    return MetadataGuard(profile, str(state), restore_content=content)


def _same_number_renamed_over(config: Path) -> None:
    """What the command's winning file amounts to: a new file renamed over the name,
    which then carries the number the baseline recorded (the guard's own test of
    the name is by device, inode and type)."""
    st = config.stat()
    new = config.with_name("config.new")
    new.write_text(config.read_text() + PAYLOAD)
    now = new.stat()  # a rename keeps it: the guard sees the recorded number from the start
    guard_dir = next(p for p in config.parents if p.name == "ws").parent / "state" / "guard"
    was = f" {st.st_dev}:{st.st_ino}:{st.st_mode & 0o170000}\n".encode()
    (marks,) = guard_dir.glob("*/marks")
    assert was in marks.read_bytes()
    marks.write_bytes(marks.read_bytes().replace(
        was, f" {now.st_dev}:{now.st_ino}:{now.st_mode & 0o170000}\n".encode()))
    os.rename(new, config)


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def test_a_replaced_held_config_is_cut_whatever_its_inode_number(ws: Path,
                                                                  tmp_path: Path) -> None:
    config = ws / ".git" / "config"
    guard = _guard(ws, tmp_path / "state")
    try:
        _same_number_renamed_over(config)
        deadline = time.monotonic() + 5
        # The guard moves the command's file aside before it writes its own: the
        # name is missing for that moment.
        while ("fsmonitor" in _text(config) or not config.exists()) \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "fsmonitor" not in config.read_text()  # while the command still runs
        config.write_text(config.read_text() + PAYLOAD)  # written again, by name
    finally:
        done = guard.release()
    assert "fsmonitor" not in config.read_text()
    assert any("core.fsmonitor" in n.what for n in done), done


@pytest.mark.parametrize("content", [False, True])
def test_files_a_mount_holds_are_armed_only_once_replaced(ws: Path, tmp_path: Path,
                                                          content: bool) -> None:
    """A held file cannot be linked (EXDEV) until its name is replaced, so bubblewrap's
    guard arms no per-file watch up front (its cost is per command); Landlock's, whose
    files the command can link at any time, arms them all."""
    guard = _guard(ws, tmp_path / "state", content)
    config = str(ws / ".git" / "config")
    try:
        assert guard.watch is not None
        assert (config in guard.watch._armed) is content
        os.rename(ws / ".git" / "config", ws / ".git" / "config.old")
        os.rename(ws / ".git" / "config.old", ws / ".git" / "config")
        deadline = time.monotonic() + 5
        while config not in guard.watch._armed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert config in guard.watch._armed  # armed by the event on its name
    finally:
        guard.release()


def test_a_config_rewritten_in_a_loop_keeps_a_bounded_quarantine(ws: Path,
                                                                 tmp_path: Path) -> None:
    """Under Landlock each rewrite with a key git acts on is merged and the command's
    version copied aside: a loop once left thousands of copies a second."""
    from stockade.drivers.linux.host.guard import QUARANTINE_PER_PATH

    config = ws / ".git" / "config"
    guard = _guard(ws, tmp_path / "state", content=True)
    try:
        for n in range(QUARANTINE_PER_PATH + 30):
            new = config.with_name("config.new")
            new.write_text(f"[core]\n\tbare = false\n\tfsmonitor = touch pwned-{n}\n")
            os.rename(new, config)
            deadline = time.monotonic() + 5
            while ("fsmonitor" in _text(config) or not config.exists()) \
                    and time.monotonic() < deadline:
                time.sleep(0.002)
    finally:
        guard.release()
    assert "fsmonitor" not in config.read_text()
    kept = [p for p in (tmp_path / "state").rglob("origin")
            if p.read_text().strip() == str(config)]
    assert 10 < len(kept) <= QUARANTINE_PER_PATH


def test_one_hook_that_cannot_be_moved_leaves_none_of_the_others(
        ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A repository the command made, its hooks taken out one by one: one it made
    impossible to move (an unreadable directory sorted first) left the rest live."""
    from stockade.fsroot import Roots

    guard = _guard(ws, tmp_path / "state")
    hooks = ws / "sub" / ".git" / "hooks"
    hooks.mkdir(parents=True)
    for name in ("a", "pre-commit", "pre-push"):
        (hooks / name).write_text("#!/bin/sh\nevil\n")
    real = guard._quarantine

    def stuck(path: str) -> str:
        if path.endswith("/hooks/a"):
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(guard, "_quarantine", stuck)
    done: list[Neutralised] = []
    guard.fs = Roots([str(ws)])  # as the sweep opens it
    try:
        guard._inert_hooks(str(hooks), done)
    finally:
        guard.fs.close()
        guard.release()
    assert sorted(p.name for p in hooks.iterdir()) == ["a"], done
    assert any("COULD NOT" in n.what for n in done), done


def test_a_config_read_while_it_is_rewritten_loses_none_of_the_persons_keys(
        ws: Path, tmp_path: Path) -> None:
    """Under Landlock the watch reads the file as the command rewrites it in place; a
    read between the truncation and the write saw every key removed, and merging that
    took the person's `filemode` and `logallrefupdates` away for good."""
    config = ws / ".git" / "config"
    before = config.read_text()
    guard = _guard(ws, tmp_path / "state", content=True)
    try:
        with open(config, "w") as fh:  # truncated, and left so for a moment
            fh.flush()
            time.sleep(0.3)
            fh.write(before)
        time.sleep(0.3)
    finally:
        guard.release()
    assert config.read_text() == before


def test_a_path_gone_before_its_move_leaves_no_entry_in_the_quarantine(
        ws: Path, tmp_path: Path) -> None:
    """Two sweeps can both take out one name; the one that finds it gone once left an
    entry with an `origin` and no `item`, naming a file the quarantine lacks."""
    from stockade.fsroot import Roots

    guard = _guard(ws, tmp_path / "state")
    try:
        guard.fs = Roots(guard.roots)
        with pytest.raises(FileNotFoundError):
            guard._quarantine(str(ws / ".envrc"))  # never there: gone before the move
        guard.fs.close()
    finally:
        guard.release()
    assert not list((tmp_path / "state").rglob("origin"))
