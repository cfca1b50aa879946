"""The tree's watch (drivers/linux/host/treewatch.py): repositories made anywhere are found,
and where the watch cannot follow, it says so and walks the tree instead."""

from __future__ import annotations

import os
import shutil
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from stockade.drivers.linux.host import treewatch
from stockade.drivers.linux.host.treewatch import TreeWatch


def drained(tree: TreeWatch, want: str, seconds: float = 5.0,
            drain: Callable[[], list[str]] | None = None) -> list[str]:
    """Drain (`tree.drain` unless given) until `want` shows up (the event thread takes
    a moment) or time runs out."""
    got: list[str] = []
    deadline = time.monotonic() + seconds
    while want not in got and time.monotonic() < deadline:
        got += (drain or (lambda: tree.drain()[0]))()
        time.sleep(0.01)
    return got


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    for i in range(20):
        (tmp_path / "ws" / f"d{i}" / "e").mkdir(parents=True)
    (tmp_path / "ws" / ".git").mkdir()  # the person's
    (tmp_path / "ws" / "d3" / "old" / ".git").mkdir(parents=True)  # the person's too
    return tmp_path / "ws"


def test_a_repository_made_deep_in_an_existing_directory_is_found(ws: Path) -> None:
    tree = TreeWatch(str(ws))
    try:
        assert tree.drain()[0] == [] and not tree.incomplete
        (ws / "d7" / "e" / ".git").mkdir()
        assert str(ws / "d7" / "e" / ".git") in drained(tree, str(ws / "d7" / "e" / ".git"))
        # In a directory made after the start, with its content made at once.
        (ws / "new" / "a" / "b" / ".git").mkdir(parents=True)
        assert str(ws / "new" / "a" / "b" / ".git") in drained(
            tree, str(ws / "new" / "a" / "b" / ".git"))
        # A .git file (a worktree's or a submodule's pointer) counts as much.
        (ws / "d9" / ".git").write_text("gitdir: elsewhere\n")
        assert str(ws / "d9" / ".git") in drained(tree, str(ws / "d9" / ".git"))
    finally:
        tree.close()


def test_past_the_watch_limit_it_says_so_and_walks(ws: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    calls = [0]
    real = treewatch.inotify_add_watch

    def limited(fd: int, path: str, mask: int) -> int:
        calls[0] += 1
        if calls[0] > 5:
            raise OSError(28, "No space left on device")
        return real(fd, path, mask)

    monkeypatch.setattr(treewatch, "inotify_add_watch", limited)
    tree = TreeWatch(str(ws))
    try:
        assert "max_user_watches" in tree.incomplete
        (ws / "d19" / "e" / ".git").mkdir()  # under no watch: only the walk finds it
        assert tree.drain()[0] == [str(ws / "d19" / "e" / ".git")]
    finally:
        tree.close()


def test_an_overflowed_queue_makes_the_next_drain_walk(ws: Path) -> None:
    tree = TreeWatch(str(ws))
    try:
        with tree._lock:
            tree._events(struct.pack("iIII", -1, treewatch.IN_Q_OVERFLOW, 0, 0))
        assert "overflowed" in tree.incomplete
        os.makedirs(ws / "d2" / "e" / "x" / ".git")
        assert str(ws / "d2" / "e" / "x" / ".git") in drained(
            tree, str(ws / "d2" / "e" / "x" / ".git"))
        # What the person had is never reported, walk or not.
        assert str(ws / "d3" / "old" / ".git") not in tree.drain()[0]
    finally:
        tree.close()


def test_without_inotify_the_names_are_polled(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Another program can use up the user's inotify instances: the watch falls back to a
    timer rather than leaving a created name live for the command's life."""
    from stockade.drivers.linux.host import watch

    def exhausted() -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(watch, "inotify_init", exhausted)
    seen: list[str] = []
    w = watch.Watch({str(tmp_path): {".vscode"}}, set(), seen.append)
    try:
        assert "polled" in w.failed
        (tmp_path / ".vscode").mkdir()
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert seen == [str(tmp_path / ".vscode")]
    finally:
        w.close()


def test_a_directory_shaped_as_a_git_directory_counts_as_a_repository(ws: Path) -> None:
    """`git init --bare a/b`: no `.git` name, yet git takes `a/b` for a git directory."""
    (ws / "d4" / "e" / "fixture.git" / "objects").mkdir(parents=True)  # the person's
    (ws / "d4" / "e" / "fixture.git" / "refs").mkdir()
    (ws / "d4" / "e" / "fixture.git" / "HEAD").write_text("ref: refs/heads/main\n")
    tree = TreeWatch(str(ws))
    try:
        assert tree.held() == (str(ws / "d3" / "old" / ".git"),
                               str(ws / "d4" / "e" / "fixture.git"))
        bare = ws / "d5" / "b"
        (bare / "objects").mkdir(parents=True)
        (bare / "refs").mkdir()
        (bare / "HEAD").write_text("ref: refs/heads/main\n")
        assert str(bare) in drained(tree, str(bare))
        # Half the shape is no repository: git would not take it for one.
        (ws / "d6" / "objects").mkdir()
        (ws / "d6" / "HEAD").write_text("x\n")
        time.sleep(0.2)
        assert str(ws / "d6") not in tree.drain()[0]
    finally:
        tree.close()


def test_what_appeared_stays_made_and_is_never_held(ws: Path) -> None:
    """A repository a command made is made inert after every later command, and never
    taken for the person's (held read-only) while the watch lives."""
    tree = TreeWatch(str(ws))
    try:
        (ws / "d8" / ".git").mkdir()
        drained(tree, str(ws / "d8" / ".git"))
        assert tree.drain()[0] == [str(ws / "d8" / ".git")]  # again, until it is gone
        assert str(ws / "d8" / ".git") not in tree.held()
        tree.adopt([str(ws / "d3" / "old" / ".git")])  # a killed run's, by its record
        assert tree.held() == ()
        (ws / "d8" / ".git").rmdir()
        assert tree.drain()[0] == [str(ws / "d3" / "old" / ".git")]
    finally:
        tree.close()


def test_a_file_saved_just_before_the_question_is_matched(tmp_path: Path) -> None:
    """The thread reads events only under the lock that `matched()` holds. When it
    read a batch first and handled it after, a `.env` saved just before the next
    command was in neither the queue nor the matches, and that command saw it."""
    from stockade.patterns import Matcher, expand

    (tmp_path / "deep").mkdir()
    tree = TreeWatch(str(tmp_path), Matcher(expand(["dotenv"])))
    try:
        with tree._lock:  # the question's side: the thread must not take the batch now
            (tmp_path / "deep" / ".env").write_text("TOKEN=x\n")
            time.sleep(0.2)  # time enough for a thread reading outside the lock to read it
            tree._catch_up()
            assert str(tmp_path / "deep" / ".env") in tree._matched
    finally:
        tree.close()


def configs_drained(tree: TreeWatch, want: str) -> list[str]:
    return drained(tree, want, drain=lambda: tree.drain()[1])


def test_an_agent_or_editor_config_made_below_the_top_is_found(ws: Path) -> None:
    """A tool started in that directory (or an agent reading a file there) loads it:
    `sub/.claude/skills/x/SKILL.md` ran its inline command and hooks on the host."""
    (ws / "keep" / ".vscode").mkdir(parents=True)  # the person's, before the watch
    tree = TreeWatch(str(ws))
    try:
        assert tree.drain()[1] == []
        skill = ws / "d2" / "e" / ".claude" / "skills" / "x"
        skill.mkdir(parents=True)
        (skill / "SKILL.md").write_text("x\n")
        want = str(ws / "d2" / "e" / ".claude")
        assert want in configs_drained(tree, want)
        # Made with its content elsewhere and moved in; a file config; deep in a new tree.
        (ws / "aside" / "c").mkdir(parents=True)
        os.rename(ws / "aside" / "c", ws / "d4" / ".cursor")
        (ws / "d5" / ".mcp.json").write_text("{}")
        (ws / "n" / "m" / ".envrc").parent.mkdir(parents=True)
        (ws / "n" / "m" / ".envrc").write_text("x")
        got = set(configs_drained(tree, str(ws / "n" / "m" / ".envrc")))
        got |= set(tree.drain()[1])
        assert {str(ws / p) for p in ("d4/.cursor", "d5/.mcp.json", "n/m/.envrc")} <= got
        # Moved away (as the guard does), then neither the person's nor the top's
        # own (the profile holds those) is found.
        for path in got:
            shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)
        (ws / ".vscode").mkdir()
        time.sleep(0.2)
        assert tree.drain()[1] == []
    finally:
        tree.close()


def test_what_appeared_while_no_command_ran_is_the_persons(ws: Path) -> None:
    tree = TreeWatch(str(ws))
    try:
        (ws / "d1" / ".idea").mkdir()
        time.sleep(0.2)
        tree.settle_configs()  # a guard starting with no other alive
        (ws / "d1" / ".zed").mkdir()
        got = configs_drained(tree, str(ws / "d1" / ".zed"))
        assert str(ws / "d1" / ".zed") in got and str(ws / "d1" / ".idea") not in got
    finally:
        tree.close()
