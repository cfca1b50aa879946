"""Asking a person for more: `ApprovalGate`, `ApprovalRequester` and their outcomes.

The gate never approves anything itself. It remembers what a person
approved for a session, so a later request that is the same or narrower
runs without asking again, and it turns silence into a denial.
"""

from __future__ import annotations

TYPE_CHECKING = False


if TYPE_CHECKING:
    from collections.abc import Awaitable
    from typing import Protocol

    from .capabilities import SandboxCapabilities

    class ApprovalRequester(Protocol):
        """Asks someone. May return the outcome or an awaitable of it."""

        def request(self, request: ApprovalRequest) -> str | Awaitable[str]: ...


# Outcomes.
APPROVED_ONCE = "approved-once"
APPROVED_SESSION = "approved-session"
DENIED = "denied"
TIMEOUT = "timeout"
APPROVED = (APPROVED_ONCE, APPROVED_SESSION)


class ApprovalRequest:
    """What is asked, by which session, for which command."""

    __slots__ = ("argv", "baseline", "capabilities", "cwd", "mode", "reason", "session_id")

    def __init__(self, session_id: str, argv: list[str], cwd: str, mode: str,
                 capabilities: SandboxCapabilities, baseline: SandboxCapabilities,
                 reason: str) -> None:
        self.session_id = session_id
        self.argv = argv
        self.cwd = cwd
        self.mode = mode
        self.capabilities = capabilities
        self.baseline = baseline
        self.reason = reason

    def describe(self) -> str:
        return f"session {self.session_id!r} asks to run {self.argv!r} with {self.reason}"


def exceeds(request: SandboxCapabilities, baseline: SandboxCapabilities) -> str:
    """What `request` asks beyond `baseline`, in words; empty when nothing."""
    from .capabilities import paths_within

    parts = []
    extra_read = [p for p in request.fs_read
                  if not paths_within((p,), baseline.fs_read + baseline.fs_write)]
    if extra_read:
        parts.append("read access to " + ", ".join(extra_read))
    extra_write = [p for p in request.fs_write if not paths_within((p,), baseline.fs_write)]
    if extra_write:
        parts.append("write access to " + ", ".join(extra_write))
    if not request.network.is_within(baseline.network):
        net = request.network
        parts.append("network access to " + ", ".join(net.hosts) if net.hosts
                     else "unrestricted network access")
    if request.spawn_subprocess and not baseline.spawn_subprocess:
        parts.append("permission to start subprocesses")
    return "; ".join(parts)


class ApprovalGate:
    """Per-session memory of approvals, and the requester that obtains new ones."""

    def __init__(self, requester: ApprovalRequester | None = None,
                 timeout_secs: float = 120.0) -> None:
        self.requester = requester
        self.timeout_secs = timeout_secs
        self._grants: dict[str, set[SandboxCapabilities]] = {}

    def granted(self, session_id: str, request: SandboxCapabilities) -> bool:
        """A request the same as or narrower than an earlier session approval."""
        return any(request.is_within(g) for g in self._grants.get(session_id, ()))

    def remember(self, session_id: str, outcome: str, request: SandboxCapabilities) -> None:
        if outcome == APPROVED_SESSION:
            self._grants.setdefault(session_id, set()).add(request)

    def grant(self, session_id: str, request: SandboxCapabilities) -> None:
        """Record an approval obtained elsewhere (config, a person at a prompt)."""
        self._grants.setdefault(session_id, set()).add(request)

    def forget(self, session_id: str) -> None:
        self._grants.pop(session_id, None)
