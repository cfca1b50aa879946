"""The current session id, threaded through a context variable.

Tools that run commands rarely carry the session id in their signatures; a
context variable lets a harness set it once around a tool call (task-local
under asyncio, thread-local in plain threads) without touching every tool.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_SESSION_ID: ContextVar[str | None] = ContextVar("stockade_session_id", default=None)


def current_session() -> str | None:
    """The session id set by the innermost `session_scope`, or None outside any."""
    return _SESSION_ID.get()


@contextmanager
def session_scope(session_id: str) -> Iterator[str]:
    """Run a block with `current_session()` returning `session_id`."""
    token = _SESSION_ID.set(session_id)
    try:
        yield session_id
    finally:
        _SESSION_ID.reset(token)
