"""stockade over a Ray cluster: one sandbox actor per node, sessions pinned to nodes.

Needs the `[ray]` extra. See docs/cluster.md for what runs where and how a
lost node is reported.
"""

from __future__ import annotations

from .pool import RemoteProcess, SandboxPool, SessionInfo
from .routing import NodeLost, PoolBusy

__all__ = ["NodeLost", "PoolBusy", "RemoteProcess", "SandboxPool", "SessionInfo"]
