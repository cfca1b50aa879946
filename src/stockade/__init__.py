"""stockade: run the commands an AI agent writes inside a boundary the kernel enforces.

The public surface is re-exported here lazily (PEP 562): `import stockade`
must stay cheap because the CLI imports this package on every command, and
most commands need a handful of these names, not all of them.
"""

from __future__ import annotations

TYPE_CHECKING = False


__version__ = "0.1.0"

_EXPORTS = {
    "ApprovalGate": "approval",
    "ApprovalRequest": "approval",
    "BackgroundProcess": "process",
    "CapabilityDenied": "errors",
    "CommandTimeout": "errors",
    "ConfigError": "errors",
    "InvalidCommand": "errors",
    "NetworkPolicy": "capabilities",
    "NoopSandbox": "workspace",
    "Profile": "profile",
    "Sandbox": "workspace",
    "SandboxCapabilities": "capabilities",
    "SandboxCommand": "command",
    "SandboxConfig": "config",
    "SandboxDisabled": "errors",
    "SandboxError": "errors",
    "SandboxOutput": "command",
    "SandboxUnavailable": "errors",
    "SessionWorkspace": "core",
    "SyncWorkspaceSandbox": "sync",
    "WorkspaceSandbox": "workspace",
    "build_sandbox": "workspace",
    "capabilities_for_mode": "capabilities",
    "current_session": "context",
    "load_config": "config",
    "run": "simple",
    "session_scope": "context",
    "namespace_argv": "simple",
}

__all__ = [
    "ApprovalGate",
    "ApprovalRequest",
    "BackgroundProcess",
    "CapabilityDenied",
    "CommandTimeout",
    "ConfigError",
    "InvalidCommand",
    "NetworkPolicy",
    "NoopSandbox",
    "Profile",
    "Sandbox",
    "SandboxCapabilities",
    "SandboxCommand",
    "SandboxConfig",
    "SandboxDisabled",
    "SandboxError",
    "SandboxOutput",
    "SandboxUnavailable",
    "SessionWorkspace",
    "SyncWorkspaceSandbox",
    "WorkspaceSandbox",
    "build_sandbox",
    "capabilities_for_mode",
    "current_session",
    "load_config",
    "namespace_argv",
    "run",
    "session_scope",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'stockade' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from typing import Any

    from .approval import ApprovalGate, ApprovalRequest
    from .capabilities import NetworkPolicy, SandboxCapabilities, capabilities_for_mode
    from .command import SandboxCommand, SandboxOutput
    from .config import SandboxConfig, load_config
    from .context import current_session, session_scope
    from .core import SessionWorkspace
    from .errors import (
        CapabilityDenied,
        CommandTimeout,
        ConfigError,
        InvalidCommand,
        SandboxDisabled,
        SandboxError,
        SandboxUnavailable,
    )
    from .process import BackgroundProcess
    from .profile import Profile
    from .simple import namespace_argv, run
    from .sync import SyncWorkspaceSandbox
    from .workspace import NoopSandbox, Sandbox, WorkspaceSandbox, build_sandbox
