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
)

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["MEMORY", "PIDS", "Driver", "DriverOption", "Launch", "LaunchReport",
           "PreparedLaunch", "ProcessHandle", "select_driver",
           "should_sandbox"]

# Backend names the selection logic itself speaks of; every backend is in
# `registry.REGISTRY`, and `registry.names()` lists them.
AUTO = "auto"
BUBBLEWRAP = "bubblewrap"
LANDLOCK = "landlock"
SEATBELT = "seatbelt"
NONE = "none"

#: The name drivers used before the contract lived in `base`.
PreparedLaunch = Launch


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


def platform_backend() -> str:
    from .registry import platform_backend as native

    return native()


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
    """The driver for a backend name, built from keyword arguments; `auto` means this
    platform's native one (see `registry.resolve_auto`).

    Each backend's constructor takes the options it knows and ignores the
    rest, so one set of options serves whichever backend `auto` becomes.
    The pipeline builds its driver from config (`registry.from_config`);
    this is the same selection for callers that hold options, not a config.
    Never downgrades: a backend that cannot start raises from `available()`,
    it is not replaced by a weaker one behind the caller's back.
    """
    from .registry import accepted, lookup, resolve_auto

    if backend != AUTO:
        lookup(backend)  # unknown: ConfigError naming the choices
    if not sandboxed or backend == NONE:
        from .none import NoneDriver

        return NoneDriver()

    def make(name: str) -> Driver:
        cls = lookup(name).load()
        return cls(**accepted(cls, options))

    if backend == AUTO:
        from .linux.options import DEFAULT_MIN_ABI

        return resolve_auto(make, min_abi=int(options.get("min_abi") or DEFAULT_MIN_ABI),
                            configured_bwrap=bool(options.get("bwrap_path")))
    return make(backend)
