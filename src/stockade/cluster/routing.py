"""Which node a session goes to, and how many commands a node runs at once.

Backpressure lives with the caller: a command that would only wait in a
node's queue is held here, where its wait is bounded and its refusal is an
error the caller can act on, instead of a thread parked on a remote machine.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..errors import SandboxError, SandboxUnavailable

if TYPE_CHECKING:
    from collections.abc import Callable


class PoolBusy(SandboxError):
    """A node already runs its limit of commands and its queue is full."""

    exit_status = 75  # EX_TEMPFAIL: try again later


class NodeLost(SandboxUnavailable):
    """The node holding the session went away; its command was not re-run."""


class Cancelled(Exception):
    """The caller cancelled a pool command: it was not started, or its tree was killed.

    Not a `SandboxError`: nobody is told it as a result. It only unwinds the
    thread that carried the command, the way `CancelledError` unwinds a
    cancelled local `execute`.
    """


class NodeSlot:
    """One node as the caller sees it: its limit, its load, whether it is still there."""

    def __init__(self, node_id: str, limit: int, max_queue: int) -> None:
        self.node_id = node_id
        self.limit = max(1, limit)
        self.max_queue = max(0, max_queue)
        self.running = 0
        self.waiting = 0
        self.sessions = 0
        self.lost: str | None = None
        self._cond = threading.Condition()

    def lost_error(self, session_id: str | None = None) -> NodeLost:
        where = f"session {session_id!r} lived there; " if session_id else ""
        return NodeLost(f"node {self.node_id} lost: {self.lost}; {where}open a new session "
                        "(its workspace and processes went with the node)")

    def acquire(self, session_id: str | None,
                abandoned: Callable[[], bool] | None = None) -> None:
        """A place among the node's running commands, waiting in its queue for one.

        `abandoned` is asked whenever the waiter is woken (see `wake`): a command
        cancelled while it queued would otherwise start, unwanted, the moment
        a place came free, and hold a queue place until then.
        """
        with self._cond:
            if self.lost is not None:
                raise self.lost_error(session_id)
            if self.running >= self.limit:
                if self.waiting >= self.max_queue:
                    raise PoolBusy(
                        f"node {self.node_id} is busy: {self.running} commands running (limit "
                        f"{self.limit}) and {self.waiting} waiting (max_queue {self.max_queue}); "
                        "retry later, or raise max_concurrent_per_node / max_queue_per_node")
                self.waiting += 1
                try:
                    while self.running >= self.limit and self.lost is None:
                        if abandoned is not None and abandoned():
                            raise Cancelled("cancelled while waiting for a place on node "
                                            f"{self.node_id}; it was never started")
                        self._cond.wait()
                finally:
                    self.waiting -= 1
                if self.lost is not None:
                    raise self.lost_error(session_id)
            if abandoned is not None and abandoned():
                self._cond.notify()  # the place it leaves is the next waiter's
                raise Cancelled(f"cancelled before it was sent to node {self.node_id}")
            self.running += 1

    def wake(self) -> None:
        """Have every waiter look again whether it was abandoned."""
        with self._cond:
            self._cond.notify_all()

    def release(self) -> None:
        with self._cond:
            self.running -= 1
            self._cond.notify()

    def mark_lost(self, why: str) -> None:
        with self._cond:
            if self.lost is None:
                self.lost = why
            self._cond.notify_all()

    def load(self) -> tuple[int, int, int]:
        with self._cond:
            return self.sessions, self.running, self.waiting


def least_loaded(slots: list[NodeSlot]) -> NodeSlot:
    """The healthy node with the fewest sessions, then the fewest commands in flight."""
    healthy = [s for s in slots if s.lost is None]
    if not healthy:
        raise SandboxUnavailable("no healthy node is left in the pool: every node was lost "
                                 "or could not build a boundary (see SandboxPool.unusable)")
    return min(healthy, key=lambda s: (s.sessions / s.limit, s.running, s.waiting))
