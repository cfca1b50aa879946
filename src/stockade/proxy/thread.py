"""`ProxyThread`: a `ManagedProxy` on its own event loop in a daemon thread.

For synchronous callers (the CLI's run path) that must not run an event loop
themselves. Each method blocks until the loop has done the work; the proxy's
callbacks (`on_decision`, `resolver`) run on the proxy thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from .errors import ProxyUnavailable
from .policy import HostPolicy
from .server import DecisionCallback, ManagedProxy, ProxyOptions, Resolver, SessionEndpoint

T = TypeVar("T")


class ProxyThread:
    """Sync twin of `ManagedProxy`: `start()`, `add_session()`, `remove_session()`, `close()`."""

    def __init__(
        self,
        *,
        on_decision: DecisionCallback | None = None,
        resolver: Resolver | None = None,
        options: ProxyOptions | None = None,
        socket_dir: str | None = None,
        call_timeout: float = 30.0,
    ) -> None:
        self._kwargs: dict[str, Any] = {
            "on_decision": on_decision, "resolver": resolver, "options": options,
            "socket_dir": socket_dir,
        }
        self._call_timeout = call_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._proxy: ManagedProxy | None = None

    def start(self) -> None:
        """Start the loop thread and the proxy. Idempotent."""
        if self._thread is not None:
            return
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="stockade-proxy", daemon=True)
        self._thread.start()
        ready.wait()

        async def make() -> ManagedProxy:
            proxy = ManagedProxy(**self._kwargs)
            await proxy.start()
            return proxy

        self._proxy = self._call(make())

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self._loop
        if loop is None or not loop.is_running():
            coro.close()
            raise ProxyUnavailable("the proxy thread is not running; call start() first")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        return future.result(self._call_timeout)

    @property
    def proxy(self) -> ManagedProxy:
        if self._proxy is None:
            raise ProxyUnavailable("the proxy thread is not running; call start() first")
        return self._proxy

    def add_session(
        self,
        session_id: str,
        policy: HostPolicy,
        *,
        port: int = 0,
        unix_path: str | None = None,
        max_connections: int | None = None,
        tcp: bool = True,
        unix: bool = True,
        secret: str | None = None,
    ) -> SessionEndpoint:
        self.start()
        return self._call(self.proxy.add_session(
            session_id, policy, port=port, unix_path=unix_path, max_connections=max_connections,
            tcp=tcp, unix=unix, secret=secret,
        ))

    def set_policy(self, session_id: str, policy: HostPolicy) -> None:
        async def apply() -> None:
            self.proxy.set_policy(session_id, policy)

        self._call(apply())

    def remove_session(self, session_id: str) -> None:
        self._call(self.proxy.remove_session(session_id))

    def close(self) -> None:
        """Close every session and stop the thread. Safe to call twice."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            if self._proxy is not None and loop.is_running():
                self._call(self._proxy.aclose())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(self._call_timeout)
            self._loop = self._thread = self._proxy = None

    def __enter__(self) -> ProxyThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
