"""One exception hierarchy, one CLI exit status per kind.

Every message names what failed, why, and what to do next: the person reading
it is usually looking at an agent's transcript, not at this code.
"""

from __future__ import annotations


class SandboxError(Exception):
    """Base of everything stockade raises on purpose."""

    #: The CLI's exit status for this kind (125 is "the sandbox itself failed").
    exit_status = 125


class InvalidCommand(SandboxError):
    """The request itself is malformed: NUL in a path, empty argv, an unknown mode."""

    exit_status = 64  # EX_USAGE


class ConfigError(SandboxError):
    """A configuration file or option is wrong; the message names the key and the file."""

    exit_status = 78  # EX_CONFIG


class CapabilityDenied(SandboxError):
    """The command asked for more than the session may have, and nobody approved it."""

    exit_status = 77  # EX_NOPERM

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SandboxUnavailable(SandboxError):
    """The boundary cannot be established on this machine.

    Never downgraded into running without one: a harness that silently drops the
    sandbox is worse than one that never had it, because it promises what it
    does not deliver.
    """

    exit_status = 125


class SandboxDisabled(SandboxUnavailable):
    """`enabled = false` in the config: a deliberate fail-fast, never a bypass."""


class MissingDependency(SandboxError, ModuleNotFoundError):
    """An optional part of stockade is not installed; the message names the extra.

    A ModuleNotFoundError too, so a caller that already caught the raw one
    (`except ImportError`) keeps working.
    """

    exit_status = 69  # EX_UNAVAILABLE

    def __init__(self, message: str, *, extra: str) -> None:
        super().__init__(message)
        #: The extra that provides it: `pip install 'stockade[<extra>]'`.
        self.extra = extra


class CommandTimeout(SandboxError):
    """The command ran past its deadline; its whole process tree was killed."""

    exit_status = 124

    def __init__(self, message: str, *, output: object = None) -> None:
        super().__init__(message)
        #: The SandboxOutput collected before the kill, when there was one.
        self.output = output
