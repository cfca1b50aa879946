"""Drivers turn a decided `Profile` into a confined process; they never decide.

Each platform lives in its own package and is importable on any OS: nothing
platform-only is imported at module level, so the macOS profile generator is
tested on Linux and the selection logic everywhere. `registry` is the one
place a backend name becomes a driver.
"""

from __future__ import annotations

from .base import (
    MEMORY,
    PIDS,
    Driver,
    DriverOption,
    Launch,
    LaunchReport,
    ProcessHandle,
    StartFailure,
)

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["MEMORY", "PIDS", "Driver", "DriverOption", "Launch", "LaunchReport",
           "ProcessHandle", "StartFailure", "should_sandbox"]

# Backend names the selection logic itself speaks of; every backend is in
# `registry.REGISTRY`, and `registry.names()` lists them.
BUBBLEWRAP = "bubblewrap"
LANDLOCK = "landlock"


def should_sandbox(mode: str, preference: str) -> bool:
    """Codex's rule: Forbid turns the boundary off, Require on, Auto follows the mode.

    full-access under Auto runs without a boundary: wrapping a process in a
    sandbox that allows everything costs time and promises nothing.
    """
    from ..capabilities import FULL_ACCESS
    from ..command import FORBID, REQUIRE

    if preference == FORBID:
        return False
    if preference == REQUIRE:
        return True
    return mode != FULL_ACCESS


def choose_linux_backend(bwrap_check: Callable[[], None], landlock_abi: Callable[[], int],
                         min_abi: int) -> str:
    """`auto` on Linux: bubblewrap if its probe passes, else Landlock at `min_abi` or newer.

    Neither: `SandboxUnavailable` with both reasons. Never "no sandbox":
    that is only ever `backend = "none"`, chosen by name.
    """
    from ..errors import SandboxUnavailable

    try:
        bwrap_check()
        return BUBBLEWRAP
    except SandboxUnavailable as exc:
        bwrap_reason = str(exc)
    abi = landlock_abi()
    if abi >= min_abi:
        return LANDLOCK
    have = f"Landlock ABI {abi}" if abi else "no Landlock"
    raise SandboxUnavailable(
        f"no sandbox backend works here. bubblewrap: {bwrap_reason}. landlock: this kernel has "
        f"{have}, and the landlock backend needs ABI {min_abi} or newer (landlock_min_abi)")
