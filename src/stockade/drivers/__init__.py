"""Drivers turn a decided `Profile` into a confined process; they never decide.

Each platform lives in its own package and is importable on any OS: nothing
platform-only is imported at module level, so the macOS profile generator is
tested on Linux and the selection logic everywhere. `select_driver` is the
one place a backend name becomes a driver.
"""

from __future__ import annotations

import sys

from ..capabilities import FULL_ACCESS
from ..command import FORBID, REQUIRE
from ..errors import ConfigError

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Protocol

    from ..profile import Profile

    class Launch(Protocol):
        argv: list[str]
        env: dict[str, str]
        cwd: str
        extra_fds: dict[int, int]
        events: list[str]
        audit: dict[str, object]

        def cleanup(self) -> None: ...

    class Driver(Protocol):
        """The seam between the pipeline and the operating system."""

        name: str

        def available(self) -> None:
            """Raise `SandboxUnavailable` naming the missing piece and its fix."""

        def prepare(self, argv: list[str], profile: Profile) -> Launch:
            """The confined argv, environment and cwd; `cleanup()` after the process ends."""


# Backend names.
AUTO = "auto"
BUBBLEWRAP = "bubblewrap"
LANDLOCK = "landlock"
SEATBELT = "seatbelt"
NONE = "none"
BACKENDS = (AUTO, BUBBLEWRAP, LANDLOCK, SEATBELT, NONE)


class PreparedLaunch:
    """A concrete launch: what to exec, with which environment, and what to undo after.

    `extra_fds` maps a child fd number to a parent fd to place there;
    `audit` is what the driver wants in the execution's audit record (the
    Landlock ABI in force, the limit mechanism); `cleanup()` runs once the
    process is gone and may leave `events` ("oom", "pids").
    """

    __slots__ = ("_cleanup", "argv", "audit", "cwd", "env", "events", "extra_fds")

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str, *,
                 extra_fds: dict[int, int] | None = None,
                 cleanup: Callable[[PreparedLaunch], None] | None = None) -> None:
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.extra_fds = extra_fds or {}
        self.events: list[str] = []
        self.audit: dict[str, object] = {}
        self._cleanup = cleanup

    def cleanup(self) -> None:
        cleanup, self._cleanup = self._cleanup, None
        if cleanup is not None:
            cleanup(self)


def should_sandbox(mode: str, preference: str) -> bool:
    """Codex's rule: Forbid turns the boundary off, Require on, Auto follows the mode.

    full-access under Auto runs without a boundary: wrapping a process in a
    sandbox that allows everything costs time and promises nothing.
    """
    if preference == FORBID:
        return False
    if preference == REQUIRE:
        return True
    return mode != FULL_ACCESS


def platform_backend() -> str:
    if sys.platform.startswith("linux"):
        return BUBBLEWRAP
    if sys.platform == "darwin":
        return SEATBELT
    return ""


def select_driver(backend: str, *, sandboxed: bool = True, **options: Any) -> Driver:
    """The driver for a backend name; `auto` means this platform's native one.

    Never downgrades: a backend that cannot start raises from `available()`,
    it is not replaced by a weaker one behind the caller's back.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    if not sandboxed or backend == NONE:
        from .none import NoneDriver

        return NoneDriver()
    if backend == AUTO:
        backend = platform_backend()
    if backend == BUBBLEWRAP:
        from .linux.bwrap import BubblewrapDriver

        return BubblewrapDriver(**options)
    if backend == SEATBELT:
        from .macos.seatbelt import SeatbeltDriver  # type: ignore[import-not-found,unused-ignore]

        return SeatbeltDriver(**options)  # type: ignore[no-any-return,unused-ignore]
    from ..errors import SandboxUnavailable

    raise SandboxUnavailable(
        f"backend {backend or 'auto'!r} is not available on {sys.platform}: "
        "stockade confines commands with bubblewrap on Linux and Seatbelt on macOS"
    )
