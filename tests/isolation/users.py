"""The unprivileged user of this test run: made for it, used by it alone, removed after it.

Every suite that runs something as an ordinary user (the isolation and
Landlock suites, the guard's property test, the init's depth tests, the
cluster) shares this one user per pytest process. It used to be one fixed
`stockade-test` for every run on the machine: two suites at once then shared
its RLIMIT_NPROC count (the kernel counts a limit per user), and one suite's
fork bomb made the other's commands fail with "Cannot fork"; a run killed
half-way left processes of that user that the next run's limits counted.
A name of its own per run gives each run a count of its own.
"""

from __future__ import annotations

import os
import pwd
import secrets
import signal
import subprocess
import time

#: Unique per pytest process, and short: useradd takes at most 32 characters.
PREFIX = "stockade-t"
RUN_USER = f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}"

_MADE: list[str] = []


def _useradd_or_userdel(argv: list[str]) -> None:
    """useradd and userdel lock /etc/passwd: a concurrent run makes them fail at once
    ("cannot lock /etc/passwd"), so they are retried for a while."""
    deadline = time.monotonic() + 60
    while True:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode == 0:
            return
        if time.monotonic() > deadline or "lock" not in done.stderr:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): "
                               f"{done.stderr.strip()}")
        time.sleep(0.2)


def ensure_user(name: str = RUN_USER) -> pwd.struct_passwd:
    """The run's user, created on first use (root only)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    _remove_stale()
    _useradd_or_userdel(["useradd", "--system", "--no-create-home", "--shell",
                         "/usr/sbin/nologin", name])
    _MADE.append(name)
    return pwd.getpwnam(name)


def user_tasks(uid: int) -> list[int]:
    """Processes of `uid` now (by their /proc entry's owner)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    found.append(int(entry))
            except OSError:
                pass  # exited meanwhile
    return found


def wait_idle(uid: int, within: float = 30.0) -> list[int]:
    """Wait until `uid` runs nothing; what it still runs after `within` s.

    A test whose bound counts every task of its user (RLIMIT_NPROC without a
    user namespace of its own) starts from here, not from whatever an earlier
    test left exiting: otherwise the headroom stockade computes includes tasks
    that are gone by the time the command forks.
    """
    deadline = time.monotonic() + within
    while (left := user_tasks(uid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def remove_user(name: str, within: float = 30.0) -> None:
    """Remove `name` once its processes are gone, killing what outlived `within` s:
    every process of a user made for one run is that run's."""
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return
    for pid in wait_idle(uid, within):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    wait_idle(uid, 10.0)
    _useradd_or_userdel(["userdel", name])


def remove_made() -> None:
    """At the end of the run: remove the user this process made."""
    while _MADE:
        remove_user(_MADE.pop())


def _remove_stale() -> None:
    """Users of runs that were killed before their end (their pytest is gone)."""
    for entry in pwd.getpwall():
        name = entry.pw_name
        pid = name[len(PREFIX):].partition("-")[0]
        if not name.startswith(PREFIX) or not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        try:
            remove_user(name, within=0.0)
        except RuntimeError:
            pass  # another run removed it first, or cannot yet: the next run tries again
