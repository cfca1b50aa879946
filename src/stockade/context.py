"""The current session id, threaded through a context variable.

Tools that run commands rarely carry the session id in their signatures; a
context variable lets a harness set it once around a tool call (task-local
under asyncio, thread-local in plain threads) without touching every tool.
"""

from __future__ import annotations

from contextvars import ContextVar, Token

_SESSION_ID: ContextVar[str | None] = ContextVar("stockade_session_id", default=None)


def current_session() -> str | None:
    """The session id set by the innermost `session_scope`, or None outside any."""
    return _SESSION_ID.get()


class session_scope:
    """Run a block (sync or async) with `current_session()` returning `session_id`."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self._token: Token[str | None] | None = None

    def __enter__(self) -> str:
        self._token = _SESSION_ID.set(self.session_id)
        return self.session_id

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        _SESSION_ID.reset(self._token)
        self._token = None

    async def __aenter__(self) -> str:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__()
