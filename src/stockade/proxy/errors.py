"""The proxy's exceptions, placed in stockade's one hierarchy."""

from __future__ import annotations

from ..errors import ConfigError, SandboxUnavailable


class InvalidHost(ValueError):
    """A host or authority from the wire cannot be read as one name or one address.

    A ValueError rather than a SandboxError: it describes a request a sandboxed
    program sent, and the proxy turns it into a refusal, not a crash.
    """


class InvalidHostEntry(ConfigError):
    """An allow or deny entry is malformed; the message quotes the entry."""


class ProxyUnavailable(SandboxUnavailable):
    """The proxy could not start or is gone.

    Whoever wires the proxy into a sandbox must treat this as "no network",
    never as "let the command reach the network directly".
    """
