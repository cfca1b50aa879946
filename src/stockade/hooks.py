"""Before-hooks: checks that run in front of the driver and may deny a command.

The command-policy filter is installed first, then the rate limit. A hook
sees the command after session and cwd are resolved, so it can be precise,
and before anything runs, so a denial costs nothing.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False


if TYPE_CHECKING:
    from typing import Protocol

    from .command import SandboxCommand

    class BeforeHook(Protocol):
        """`before` returns a `HookDecision`; raising is a bug, not a denial."""

        name: str

        def before(self, command: SandboxCommand, session_id: str) -> HookDecision: ...


class HookDecision:
    """Allow (with optional audit-only warnings) or deny with a reason the caller is shown."""

    __slots__ = ("allowed", "reason", "warnings")

    def __init__(self, allowed: bool, reason: str = "", warnings: tuple[str, ...] = ()) -> None:
        self.allowed = allowed
        self.reason = reason
        self.warnings = warnings

    @classmethod
    def allow(cls, warnings: tuple[str, ...] = ()) -> HookDecision:
        return cls(True, "", warnings)

    @classmethod
    def deny(cls, reason: str) -> HookDecision:
        return cls(False, reason)


class RateLimitHook:
    """At most `per_minute` commands per session in any sliding 60-second window.

    An agent stuck in a loop can issue hundreds of commands a minute; each one
    is cheap alone and the sum is a runaway. The limit turns that into a
    denial the agent sees, instead of a machine that is slowly filled.
    """

    name = "rate_limit"

    def __init__(self, per_minute: int, clock: object = time.monotonic) -> None:
        if per_minute <= 0:
            raise ValueError("per_minute must be positive")
        self.per_minute = per_minute
        self._clock = clock
        self._seen: dict[str, list[float]] = {}

    def before(self, command: SandboxCommand, session_id: str) -> HookDecision:
        now: float = self._clock()  # type: ignore[operator]
        window = [t for t in self._seen.get(session_id, ()) if now - t < 60.0]
        if len(window) >= self.per_minute:
            self._seen[session_id] = window
            return HookDecision.deny(
                f"rate limit: session {session_id!r} ran {len(window)} commands in the last "
                f"minute (limit {self.per_minute}; raise [sandbox] commands_per_minute)"
            )
        window.append(now)
        self._seen[session_id] = window
        return HookDecision.allow()


def run_before_hooks(
    hooks: list[BeforeHook] | tuple[BeforeHook, ...], command: SandboxCommand, session_id: str
) -> tuple[HookDecision | None, tuple[str, ...]]:
    """Run hooks in order; the first denial stops the chain. Returns (denial, warnings)."""
    warnings: list[str] = []
    for hook in hooks:
        decision = hook.before(command, session_id)
        warnings.extend(decision.warnings)
        if not decision.allowed:
            return decision, tuple(warnings)
    return None, tuple(warnings)
