"""The guard's merge of a config the command changed never undoes a newer write.

Under Landlock the guard writes its merge back while the command runs, and the
command's next `git config` can land between the guard's read and its write:
a plain rename then put the older merge over it and the key was lost (the
isolation test saw it once in six runs). Each interleaving is played here
deterministically, by writing at the moment the guard swaps.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade.drivers.linux.host import guard
from stockade.drivers.linux.host.fstree import exchange

OURS, MERGED = b"ours\n", b"merged\n"


@pytest.fixture
def fd(tmp_path: Path) -> Iterator[int]:
    (tmp_path / "config").write_bytes(OURS)
    (tmp_path / "temp").write_bytes(MERGED)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def land(fd: int, body: bytes) -> None:
    """The command's git: a lock file renamed over the config."""
    with open(os.open("config.lock", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644,
                      dir_fd=fd), "wb") as fh:
        fh.write(body)
    os.rename("config.lock", "config", src_dir_fd=fd, dst_dir_fd=fd)


def writes_during_swaps(monkeypatch: pytest.MonkeyPatch, bodies: dict[int, bytes]) -> None:
    """After the guard's nth exchange, the command writes bodies[n] (bodies[0]: after
    the guard's last look, before its first exchange)."""
    calls = [0]

    def exchange_then_write(dir_fd: int, a: str, b: str) -> None:
        if calls[0] == 0 and 0 in bodies:
            land(dir_fd, bodies[0])
        exchange(dir_fd, a, b)
        calls[0] += 1
        if calls[0] in bodies:
            land(dir_fd, bodies[calls[0]])

    monkeypatch.setattr(guard, "exchange", exchange_then_write)


def config(tmp_path: Path) -> bytes:
    return (tmp_path / "config").read_bytes()


def test_an_unchanged_config_gets_the_merge(fd: int, tmp_path: Path) -> None:
    assert guard._swap_in(fd, "temp", "config", OURS)
    assert config(tmp_path) == MERGED
    assert (tmp_path / "temp").read_bytes() == OURS  # the caller removes it


def test_a_write_seen_before_the_swap_moves_nothing(fd: int, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    land(fd, b"newer\n")
    writes_during_swaps(monkeypatch, {})
    assert not guard._swap_in(fd, "temp", "config", OURS)
    assert config(tmp_path) == b"newer\n"
    assert (tmp_path / "temp").read_bytes() == MERGED


def test_a_write_just_before_the_swap_is_given_back(fd: int, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    writes_during_swaps(monkeypatch, {0: b"newer\n"})
    assert not guard._swap_in(fd, "temp", "config", OURS)
    assert config(tmp_path) == b"newer\n"


def test_a_write_landing_on_the_merge_stays(fd: int, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    writes_during_swaps(monkeypatch, {0: b"newer\n", 1: b"newest\n"})
    assert not guard._swap_in(fd, "temp", "config", OURS)
    assert config(tmp_path) == b"newest\n"


def test_writes_landing_after_every_swap_leave_the_last(fd: int, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    writes_during_swaps(monkeypatch, {0: b"newer\n", 1: b"second\n", 2: b"third\n"})
    assert not guard._swap_in(fd, "temp", "config", OURS)
    assert config(tmp_path) == b"third\n"


def test_a_plain_rename_would_have_lost_the_write(tmp_path: Path) -> None:
    """Control: the check-then-rename the guard did before loses the write that lands
    between the two."""
    (tmp_path / "config").write_bytes(OURS)
    (tmp_path / "temp").write_bytes(MERGED)
    assert (tmp_path / "config").read_bytes() == OURS  # the check passes
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        land(fd, b"newer\n")
    finally:
        os.close(fd)
    os.rename(tmp_path / "temp", tmp_path / "config")
    assert config(tmp_path) == MERGED


def test_a_git_mid_write_is_waited_for(fd: int, tmp_path: Path) -> None:
    """Its rename lands before the guard looks: nothing is swapped, nothing exposed."""
    import threading
    import time

    (tmp_path / "config.lock").write_bytes(b"newer\n")
    finish = threading.Timer(0.01, os.rename, (tmp_path / "config.lock",
                                               tmp_path / "config"))
    finish.start()
    start = time.monotonic()
    assert not guard._swap_in(fd, "temp", "config", OURS)
    finish.join()
    assert config(tmp_path) == b"newer\n" and time.monotonic() - start < 1


def test_a_lock_the_command_keeps_only_delays_the_merge(fd: int, tmp_path: Path) -> None:
    (tmp_path / "config.lock").write_bytes(b"stalling\n")
    assert guard._swap_in(fd, "temp", "config", OURS)
    assert config(tmp_path) == MERGED


def test_a_file_that_grows_while_it_is_read_is_not_read_whole(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """The read stops at the budget, not at EOF: a gibibyte appears after the stat."""
    from stockade.drivers.linux.host import fstree

    (tmp_path / "f").write_bytes(b"x")
    real_open = os.open

    def open_then_grow(path: str, flags: int, *args: object, **kw: object) -> int:
        fd = real_open(path, flags, *args, **kw)  # type: ignore[arg-type]
        with open(tmp_path / "f", "ab") as fh:
            fh.truncate(1 << 30)  # sparse: a gibibyte the guard must not read
        return fd

    monkeypatch.setattr(fstree.os, "open", open_then_grow)
    fd = real_open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(fstree.TooLarge):
            fstree.read_tree(fd, "f")
    finally:
        os.close(fd)


def test_what_cannot_be_copied_across_file_systems_is_removed(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """A workspace on another file system than the quarantine: a hook directory the
    command made unreadable inside failed the copy, and the hook stayed where git runs
    it."""
    import errno

    from stockade import fsroot
    from stockade.drivers.linux.host import fstree

    (tmp_path / "ws" / "hooks").mkdir(parents=True)
    (tmp_path / "ws" / "hooks" / "pre-commit").write_text("#!/bin/sh\nevil\n")
    (tmp_path / "q").mkdir()

    def across(*args: object, **kw: object) -> None:
        raise OSError(errno.EXDEV, "cross-device")

    def unreadable(*args: object, **kw: object) -> object:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(fsroot.os, "rename", across)
    monkeypatch.setattr(fstree, "read_tree", unreadable)
    with fsroot.Root(str(tmp_path / "ws")) as ws, fsroot.Root(str(tmp_path / "q")) as q:
        assert ws.move_to("hooks/pre-commit", q, "item") is False
    assert not (tmp_path / "ws" / "hooks" / "pre-commit").exists()


def test_a_file_renamed_over_between_the_look_and_the_read_is_read_as_it_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """git's own writes rename a new config in: one larger than the file the stat saw
    was taken for too large, and the guard restored the person's config over the
    command's `git remote add` while the command ran."""
    from stockade.drivers.linux.host import fstree

    (tmp_path / "config").write_bytes(b"[core]\n")
    (tmp_path / "config.lock").write_bytes(b"[core]\n[remote \"origin\"]\n\turl = x\n")
    real_open = os.open

    def renamed_first(path: str, flags: int, *args: object, **kw: object) -> int:
        if path == "config":
            os.rename(tmp_path / "config.lock", tmp_path / "config")
        return real_open(path, flags, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(fstree.os, "open", renamed_first)
    fd = real_open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        tree = fstree.read_tree(fd, "config")
    finally:
        os.close(fd)
    assert tree is not None and tree[0] == "f" and b"origin" in tree[5]


def test_a_state_directory_without_locks_refuses_with_a_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """flock's ENOLCK (a state directory on NFS without a lock manager) came out of
    the guard as a bare OSError traceback."""
    import fcntl

    from stockade.drivers.linux.host import guard
    from stockade.errors import SandboxUnavailable

    def no_locks(fd: int, op: int) -> None:
        raise OSError(37, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with pytest.raises(SandboxUnavailable, match="filesystem with locks"), \
            guard._FileLock(str(tmp_path / "x.lock")):
        pass
