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
from .base import (
    MEMORY,
    PIDS,
    Driver,
    DriverOption,
    Launch,
    LaunchReport,
    ProcessHandle,
)

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["MEMORY", "PIDS", "Driver", "DriverOption", "Launch", "LaunchReport",
           "PreparedLaunch", "ProcessHandle", "select_driver",
           "should_sandbox"]

# Backend names.
AUTO = "auto"
BUBBLEWRAP = "bubblewrap"
LANDLOCK = "landlock"
SEATBELT = "seatbelt"
NONE = "none"
BACKENDS = (AUTO, BUBBLEWRAP, LANDLOCK, SEATBELT, NONE)

#: The name drivers used before the contract lived in `base`.
PreparedLaunch = Launch


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


#: Driver options only one Linux backend takes; `select_driver` gives each its own.
_BWRAP_ONLY = ("bwrap_path", "probe", "require_landlock")
_LANDLOCK_ONLY = ("min_abi", "ledger", "workspace_root")


def _options_for(backend: str, options: dict[str, Any]) -> dict[str, Any]:
    other = _LANDLOCK_ONLY if backend == BUBBLEWRAP else _BWRAP_ONLY
    return {k: v for k, v in options.items() if k not in other}


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


def select_driver(backend: str, *, sandboxed: bool = True, **options: Any) -> Driver:
    """The driver for a backend name; `auto` means this platform's native one.

    On Linux `auto` is bubblewrap when it can build a sandbox here and the
    Landlock backend when it cannot (see `choose_linux_backend`): a choice
    made once, before anything runs, and recorded as the driver's name in
    every audit record. With a `bwrap` configured, `auto` is bubblewrap.
    Otherwise never downgrades: a backend that cannot start raises from
    `available()`, it is not replaced by a weaker one behind the caller's
    back.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    if not sandboxed or backend == NONE:
        from .none import NoneDriver

        return NoneDriver()
    if backend == AUTO:
        backend = platform_backend()
        # A bwrap the user configured by path is a choice, not a preference:
        # if it cannot start, that is an error to see, not a reason to run
        # under a weaker backend instead.
        if backend == BUBBLEWRAP and not options.get("bwrap_path"):
            from .linux.bwrap import BubblewrapDriver
            from .linux.landlock_driver import DEFAULT_MIN_ABI
            from .linux.layers import host_landlock_abi

            bwrap = BubblewrapDriver(**_options_for(BUBBLEWRAP, options))
            backend = choose_linux_backend(
                bwrap.probe, host_landlock_abi,
                int(options.get("min_abi") or DEFAULT_MIN_ABI))
            if backend == BUBBLEWRAP:
                return bwrap
    if backend == BUBBLEWRAP:
        from .linux.bwrap import BubblewrapDriver

        return BubblewrapDriver(**_options_for(BUBBLEWRAP, options))
    if backend == LANDLOCK:
        from .linux.landlock_driver import LandlockDriver

        return LandlockDriver(**_options_for(LANDLOCK, options))
    if backend == SEATBELT:
        from .macos.seatbelt import SeatbeltDriver  # type: ignore[import-not-found,unused-ignore]

        return SeatbeltDriver(**options)  # type: ignore[no-any-return,unused-ignore]
    from ..errors import SandboxUnavailable

    raise SandboxUnavailable(
        f"backend {backend or 'auto'!r} is not available on {sys.platform}: "
        "stockade confines commands with bubblewrap or Landlock on Linux and Seatbelt on macOS"
    )
