"""What is writing where, across every driver in this process.

No sandbox may park while a command that can write its workspace runs, and
one parked before such a command started is spoiled by it (linux/warm.py
says why). A command of any driver spoils what a pool parked beside it --
another backend's, one with parking off, or no boundary at all -- so the
registry is the process's (`WRITERS`), not a pool's, and every driver that
lets a command write counts it here.
"""

from __future__ import annotations

import threading

from ..capabilities import is_under

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ..profile import Profile
    from .base import Launch
    from .linux.warm import Parked


def overlaps(a: Sequence[str], b: Sequence[str]) -> bool:
    return any(is_under(x, y) or is_under(y, x) for x in a for y in b)


def writable_roots(profile: Profile) -> tuple[str, ...]:
    """Where a command under `profile` can rename or replace what bwrap mounts.

    The session's /tmp is left out: it is a mount point itself, which no
    command can move, and nothing is mounted beneath it.
    """
    roots = [profile.workspace] if profile.workspace_writable else []
    return (*roots, *profile.write_roots)


class Writers:
    """The writable roots of each running writer, and every parked sandbox they would spoil.

    `lock` also guards what a parked sandbox is given while it is built
    (`Parked.launch`, `proc`, `sock`, `discarded`): a writer that starts, or a
    session that closes, sees it either before or after, never half-made.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: Writable roots of each command running now, by its launch's id.
        self._running: dict[int, tuple[str, ...]] = {}
        #: Every parked sandbox (built or being built), in any pool (under `lock`).
        self.parked: set[Parked] = set()
        #: Told when a writer ends: a pool waiting to park beside it.
        self._waiting: list[Callable[[], None]] = []

    def start(self, key: int, roots: tuple[str, ...]) -> None:
        with self.lock:
            self._running[key] = roots
            for parked in self.parked:
                if overlaps(roots, parked.roots):
                    parked.tainted = True

    def end(self, key: int) -> None:
        with self.lock:
            self._running.pop(key, None)
        for woken in list(self._waiting):
            woken()

    def on_end(self, woken: Callable[[], None]) -> None:
        """Call `woken` whenever a writer ends (a pool, for the rest of the process)."""
        self._waiting.append(woken)

    def running_in(self, roots: tuple[str, ...]) -> bool:
        with self.lock:
            return self.writing_in(roots)

    def writing_in(self, roots: tuple[str, ...]) -> bool:
        """(`lock` held.)"""
        return any(overlaps(roots, other) for other in self._running.values())

    def watch(self, parked: Parked) -> bool:
        """List `parked` where a writer starting taints it, unless one runs in its roots.

        One step: a writer that started between a look for writers and the
        listing tainted nothing, and its sandbox was served.
        """
        with self.lock:
            if self.writing_in(parked.roots):
                return False
            self.parked.add(parked)
            return True

    def forget(self, parked: Parked) -> None:
        with self.lock:
            self.parked.discard(parked)

    def count(self, launch: Launch, roots: tuple[str, ...]) -> None:
        """Count `launch` as a writer of `roots` until its cleanup (nothing when empty).

        The rule "no sandbox parks while a command that can write its
        workspace runs in this process" was kept by the pools alone: a
        command of a driver with `warm_sandboxes = 0`, or one run with no
        boundary, wrote the workspace while a sandbox in the process parked
        beside it and served a command from what it bound.
        """
        if roots:
            key = id(launch)
            self.start(key, roots)
            launch.also(lambda: self.end(key))

    def running(self) -> dict[int, tuple[str, ...]]:
        """What runs now, for a test's failure message."""
        with self.lock:
            return dict(self._running)


#: The process's registry: every pool and every parking driver's cold launch use it.
WRITERS = Writers()
