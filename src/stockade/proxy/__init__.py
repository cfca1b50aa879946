"""The managed egress proxy: the only way a sandboxed command reaches the network.

A `ManagedProxy` (or its thread-hosted twin `ProxyThread`) gives each session
its own listeners and judges every connection by that session's `HostPolicy`,
reporting each `ProxyDecision` to a callback. See docs/proxy.md.
"""

from __future__ import annotations

from .env import proxy_env
from .errors import InvalidHost, InvalidHostEntry, ProxyUnavailable
from .hosts import Host, HostPattern, canonical_host, parse_pattern, refused_range, split_authority
from .policy import HostPolicy, HostRule, ProxyDecision, Verdict
from .server import (
    DecisionCallback,
    ManagedProxy,
    ProxyOptions,
    Resolver,
    SessionEndpoint,
    system_resolver,
)
from .thread import ProxyThread

__all__ = [
    "DecisionCallback",
    "Host",
    "HostPattern",
    "HostPolicy",
    "HostRule",
    "InvalidHost",
    "InvalidHostEntry",
    "ManagedProxy",
    "ProxyDecision",
    "ProxyOptions",
    "ProxyThread",
    "ProxyUnavailable",
    "Resolver",
    "SessionEndpoint",
    "Verdict",
    "canonical_host",
    "parse_pattern",
    "proxy_env",
    "refused_range",
    "split_authority",
    "system_resolver",
]
