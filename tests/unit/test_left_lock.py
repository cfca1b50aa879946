"""A `config.lock` a command's git left is removed a bounded time after it is first
seen, however the command keeps touching it: the removal runs under the lock every
guard of the workspace shares, and a command renewing the lock's ctime in a loop
once held all of them (and another command's end) for as long as it ran."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from stockade.drivers.linux.host.gitconfig import LOCK_WAIT_SECONDS, clear_left_lock
from stockade.fsroot import Roots


def test_a_lock_touched_over_and_over_is_removed_in_bounded_time(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    lock = tmp_path / ".git" / "config.lock"
    since = time.time_ns() - 10**9  # the command started a moment before
    lock.write_text("")
    stop = threading.Event()

    def touch() -> None:
        while not stop.is_set():
            try:
                os.utime(lock)  # a new ctime each time
                os.chmod(lock, 0o600)
            except FileNotFoundError:
                pass
            time.sleep(0.02)

    toucher = threading.Thread(target=touch)
    toucher.start()
    fs = Roots([str(tmp_path)])
    start = time.monotonic()
    try:
        said = clear_left_lock(fs, str(tmp_path / ".git" / "config"), since)
    finally:
        stop.set()
        toucher.join()
        fs.close()
    assert time.monotonic() - start < LOCK_WAIT_SECONDS + 0.5
    assert said.startswith("removed") and not lock.exists()


def test_a_lock_from_before_the_command_is_left(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    lock = tmp_path / ".git" / "config.lock"
    lock.write_text("")
    fs = Roots([str(tmp_path)])
    try:
        later = time.time_ns() + 10**9  # the command started after it was made
        assert clear_left_lock(fs, str(tmp_path / ".git" / "config"), later) == ""
    finally:
        fs.close()
    assert lock.exists()
