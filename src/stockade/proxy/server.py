"""`ManagedProxy`: the asyncio egress proxy, one listener pair per session.

Each session gets its own loopback TCP port and its own unix socket, so every
accepted connection belongs to exactly one session and is judged by that
session's `HostPolicy`; nothing a client sends can choose the session. Each
listener speaks HTTP (CONNECT and absolute-URI forwarding) and SOCKS5, told
apart by the first byte.

Failure is closed: an error anywhere in a connection closes it, a proxy that
is not running refuses connections, and nothing here ever falls back to
letting a command reach the network some other way.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import hmac
import itertools
import logging
import os
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from ipaddress import IPv6Address, ip_address
from typing import Any, cast

from ..errors import ConfigError
from . import http, socks5
from .env import PROXY_USER, proxy_env
from .errors import InvalidHost, ProxyUnavailable
from .hosts import Host, IPAddress, normalize_address, split_authority
from .policy import HostPolicy, ProxyDecision
from .tunnel import Tunnel

log = logging.getLogger("stockade.proxy")

#: Resolve a DNS name to addresses; called once per connection, on the host.
Resolver = Callable[[str, int], Awaitable[Sequence[IPAddress]]]
#: Receives every `ProxyDecision`; called on the proxy's event loop thread.
DecisionCallback = Callable[[ProxyDecision], None]

_CHUNK = 256 * 1024
# StreamReader limit: it bounds a head before `readuntil` gives up, and the
# reader pauses its transport at twice this much buffered. At the default 64 KiB
# every 256 KiB socket read paused and resumed the transport (two epoll_ctl
# calls per read), which halved the rate of a streamed body. Heads are held to
# `max_head_bytes` separately.
_STREAM_LIMIT = 256 * 1024
#: Seconds a refused client gets to read the refusal before the socket closes.
_LINGER = 0.5


async def system_resolver(name: str, port: int) -> list[IPAddress]:
    """The host's resolver (getaddrinfo, in the loop's executor), addresses in its order."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(
        name, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP,
        flags=socket.AI_NUMERICSERV,
    )
    seen: dict[IPAddress, None] = {}
    for family, _, _, _, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            seen.setdefault(ip_address(str(sockaddr[0])), None)
    return list(seen)


@dataclass(frozen=True, slots=True)
class ProxyOptions:
    """Limits and timeouts shared by every session of one proxy (seconds, counts)."""

    #: Resolution plus TCP connect to the chosen address.
    connect_timeout: float = 10.0
    #: A tunnel or keep-alive connection with no byte either way for this long is closed.
    idle_timeout: float = 300.0
    #: Time a client has to send its request head, SOCKS request or ClientHello.
    handshake_timeout: float = 10.0
    #: Concurrent client connections per session; more are refused, not queued.
    max_connections: int = 256
    #: Tunnels to these ports must start with a TLS ClientHello.
    tls_ports: frozenset[int] = frozenset({443})
    #: Largest request or response head accepted.
    max_head_bytes: int = 64 * 1024
    #: Must be a loopback address.
    listen_host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        for name in ("connect_timeout", "idle_timeout", "handshake_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"ProxyOptions.{name} must be positive, got "
                                  f"{getattr(self, name)!r}")
        if self.max_connections < 0 or self.max_head_bytes < 1024:
            raise ConfigError("ProxyOptions.max_connections must be >= 0 and "
                              "max_head_bytes >= 1024")
        try:
            loopback = ip_address(self.listen_host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            # A listener beyond loopback would hand each session's network
            # grant to every machine that can reach this host.
            raise ConfigError(f"ProxyOptions.listen_host must be a loopback address such as "
                              f"127.0.0.1, got {self.listen_host!r}")


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class SessionEndpoint:
    """Where one session's clients reach the proxy.

    `port` is 0 and `unix_path` "" for a listener the session was opened
    without. With `secret`, every request must carry it as the proxy
    password (user `stockade`), which the URLs here include.
    """

    session_id: str
    host: str
    port: int
    unix_path: str
    secret: str | None = field(default=None, repr=False)

    @property
    def _auth(self) -> str:
        return f"{PROXY_USER}:{self.secret}@" if self.secret else ""

    @property
    def http_proxy_url(self) -> str:
        return f"http://{self._auth}{_authority(self.host, self.port)}"

    @property
    def socks_proxy_url(self) -> str:
        return f"socks5h://{self._auth}{_authority(self.host, self.port)}"

    def env(self, grants: Sequence[str] = ()) -> dict[str, str]:
        return proxy_env(self.host, self.port, socks_port=self.port, secret=self.secret,
                         grants=grants)


class _Refusal(Exception):
    """A connection attempt ends here, answered with `status` (HTTP) or `socks_code`."""

    def __init__(
        self,
        status: int,
        socks_code: int,
        rule: str,
        reason: str,
        *,
        policy_allowed: bool = False,
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.socks_code = socks_code
        self.rule = rule
        self.reason = reason
        # True when the policy allowed the target and the network failed it,
        # so the ledger can tell "blocked" from "unreachable".
        self.policy_allowed = policy_allowed


@dataclass(slots=True)
class _Session:
    session_id: str
    policy: HostPolicy
    max_connections: int
    endpoint: SessionEndpoint | None = None
    secret: str | None = None
    servers: list[asyncio.Server] = field(default_factory=list)
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)


@dataclass(slots=True)
class _Record:
    """The mutable state behind one decision record."""

    connection_id: int
    session_id: str
    protocol: str
    started: float
    clock: float
    host: str = ""
    port: int = 0
    rule: str = ""
    address: str | None = None
    bytes_up: int = 0
    bytes_down: int = 0
    #: Nothing is recorded for a client that has not shown the session's
    #: secret: it is not the session's command, and must not be blamed on it.
    anonymous: bool = False

    def decision(
        self, allowed: bool, *, reason: str = "", final: bool = True, error: str | None = None,
        rule: str | None = None,
    ) -> ProxyDecision:
        return ProxyDecision(
            connection_id=self.connection_id,
            session_id=self.session_id,
            protocol=self.protocol,
            host=self.host,
            port=self.port,
            allowed=allowed,
            rule=self.rule if rule is None else rule,
            reason=reason,
            address=self.address,
            bytes_up=self.bytes_up,
            bytes_down=self.bytes_down,
            final=final,
            error=error,
            started=self.started,
            duration=round(time.monotonic() - self.clock, 6) if final else 0.0,
        )


def _session_file(session_id: str) -> str:
    # Session ids are arbitrary text; a digest is short, fixed-length and safe
    # as a file name, so no id can escape the socket directory, and the name
    # fits in sun_path after /proc/self/fd/N/ (see _bind_unix).
    from ..paths import sha256_hex

    return sha256_hex(session_id.encode("utf-8"))[:32] + ".sock"


def _connect_refusal(host: Host, port: int, address: IPAddress, exc: OSError) -> _Refusal:
    target = f"{host}:{port} ({address})" if host.ip is None else f"{host}:{port}"
    code = {
        errno.ECONNREFUSED: socks5.CONNECTION_REFUSED,
        errno.ENETUNREACH: socks5.NETWORK_UNREACHABLE,
        errno.EHOSTUNREACH: socks5.HOST_UNREACHABLE,
    }.get(exc.errno or 0, socks5.GENERAL_FAILURE)
    why = exc.strerror or type(exc).__name__
    return _Refusal(502, code, "connect failed", f"could not connect to {target}: {why}",
                    policy_allowed=True)


class ManagedProxy:
    """The egress proxy: sessions, listeners and the decision stream.

    `on_decision` receives every `ProxyDecision`; if it raises on the record
    that opens an allowed connection, that connection is closed before a byte
    is relayed, so no traffic flows unaudited. `resolver` replaces DNS
    resolution (tests map names to local servers with it); it is only ever
    called with a name the policy allowed.
    """

    def __init__(
        self,
        *,
        on_decision: DecisionCallback | None = None,
        resolver: Resolver | None = None,
        options: ProxyOptions | None = None,
        socket_dir: str | None = None,
    ) -> None:
        self.options = options or ProxyOptions()
        self._on_decision = on_decision
        self._resolver: Resolver = resolver or system_resolver
        self._socket_dir = socket_dir
        self._own_socket_dir = False
        self._sessions: dict[str, _Session] = {}
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()
        self._started = False
        self._closed = False

    # --- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Prepare the socket directory. Idempotent; `add_session` calls it."""
        if self._closed:
            raise ProxyUnavailable("this proxy was closed; create a new ManagedProxy")
        if self._started:
            return
        if self._socket_dir is None:
            # mkdtemp makes the directory 0700: other users on the host cannot
            # connect to a session's socket and borrow its network grant.
            self._socket_dir = tempfile.mkdtemp(prefix="stockade-proxy-")
            self._own_socket_dir = True
        self._started = True

    async def add_session(
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
        """Open the session's listeners (loopback TCP `port`, 0 for any, and a
        unix socket; `tcp`/`unix` False leaves one out) and return where they are.

        Any local user can connect to a loopback port, so a TCP listener is
        only safe for a grant with `secret`: requests without it get 407 (HTTP)
        or a failed authentication (SOCKS5), and no decision record. The unix
        socket sits in a 0700 directory and needs none.

        Calling it again for a live session replaces its policy and limit and
        returns the same endpoint, so a caller can invoke it before every command.
        """
        async with self._lock:
            await self.start()
            limit = self.options.max_connections if max_connections is None else max_connections
            existing = self._sessions.get(session_id)
            if existing is not None and existing.endpoint is not None:
                existing.policy = policy
                existing.max_connections = limit
                return existing.endpoint
            assert self._socket_dir is not None
            if not (tcp or unix):
                raise ConfigError("a proxy session needs a TCP or a unix listener")
            path = unix_path or os.path.join(self._socket_dir, _session_file(session_id))
            session = _Session(session_id, policy, limit, secret=secret)
            handler = partial(self._serve, session)

            def factory() -> _EofTracking:
                return _EofTracking(asyncio.StreamReader(limit=_STREAM_LIMIT), handler)

            loop = asyncio.get_running_loop()
            bound: tuple[str, int] = (self.options.listen_host, 0)
            try:
                if tcp:
                    server = await loop.create_server(factory, host=self.options.listen_host,
                                                      port=port, backlog=1024)
                    session.servers.append(server)
                    name = server.sockets[0].getsockname()
                    bound = (str(name[0]), int(name[1]))
                if unix:
                    await _refuse_live_socket(path)
                    if os.path.lexists(path) and stat.S_ISSOCK(os.lstat(path).st_mode):
                        os.unlink(path)  # stale: nobody answered on it
                    server = await loop.create_unix_server(factory, sock=_bind_unix(path),
                                                           backlog=1024)
                    session.servers.append(server)
            except OSError as exc:
                for server in session.servers:
                    server.close()
                wanted = ([f"tcp {self.options.listen_host}:{port}"] if tcp else []) + (
                    [f"unix {path}"] if unix else [])
                raise ProxyUnavailable(
                    f"the proxy could not listen for session {session_id!r} "
                    f"({', '.join(wanted)}): {exc}. "
                    "Free the port or path, or pass port=0 and no unix_path."
                ) from exc
            session.endpoint = SessionEndpoint(session_id, bound[0], bound[1],
                                               path if unix else "", secret)
            self._sessions[session_id] = session
            return session.endpoint

    def set_policy(self, session_id: str, policy: HostPolicy) -> None:
        """Replace a session's policy; connections accepted from now on use it."""
        self._session(session_id).policy = policy

    def endpoint(self, session_id: str) -> SessionEndpoint:
        endpoint = self._session(session_id).endpoint
        assert endpoint is not None
        return endpoint

    @property
    def session_ids(self) -> tuple[str, ...]:
        return tuple(self._sessions)

    def _session(self, session_id: str) -> _Session:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise KeyError(f"the proxy has no session {session_id!r}") from None

    async def remove_session(self, session_id: str) -> None:
        """Close the session's listeners and every connection it has open.

        Open tunnels are cut too: once a session is gone its grant is gone,
        and a long-lived tunnel must not outlive it.
        """
        async with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is None:
            return
        for server in session.servers:
            server.close()
        tasks = list(session.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for server in session.servers:
            await server.wait_closed()
        if session.endpoint is not None and session.endpoint.unix_path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(session.endpoint.unix_path)

    async def aclose(self) -> None:
        """Remove every session and the socket directory this proxy created."""
        self._closed = True
        for session_id in list(self._sessions):
            await self.remove_session(session_id)
        if self._own_socket_dir and self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)

    async def __aenter__(self) -> ManagedProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- decisions ---------------------------------------------------------------

    def _emit(self, decision: ProxyDecision) -> bool:
        if self._on_decision is None:
            return True
        try:
            self._on_decision(decision)
        except Exception:
            log.exception("the decision callback failed for connection %s",
                          decision.connection_id)
            return False
        return True

    def _deny(self, rec: _Record, rule: str, reason: str, *, policy_allowed: bool = False,
              error: str | None = None) -> None:
        if rec.anonymous:
            log.warning("proxy session %r: refused a client without its secret (%s)",
                        rec.session_id, reason)
            return
        self._emit(rec.decision(policy_allowed, reason=reason, rule=rule, error=error))

    # --- connections -------------------------------------------------------------

    def _new_record(self, session: _Session, protocol: str) -> _Record:
        return _Record(next(self._ids), session.session_id, protocol, time.time(),
                       time.monotonic(), anonymous=session.secret is not None)

    async def _serve(
        self, session: _Session, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        session.tasks.add(task)
        over_cap = len(session.tasks) > session.max_connections
        try:
            await self._dispatch(session, reader, writer, over_cap)
        except asyncio.CancelledError:
            writer.transport.abort()  # the session was removed or the proxy closed
            return
        except Exception:
            log.exception("proxy connection for session %r failed", session.session_id)
            writer.transport.abort()
        finally:
            session.tasks.discard(task)
        await _close_gently(reader, writer)

    async def _dispatch(
        self, session: _Session, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
        over_cap: bool,
    ) -> None:
        rec = self._new_record(session, "unknown")
        try:
            async with asyncio.timeout(self.options.handshake_timeout):
                first = await reader.read(1)
        except TimeoutError:
            self._deny(rec, "handshake timeout", "the client sent nothing")
            return
        if not first:
            return  # connected and left without asking for anything
        if first == b"\x05":
            rec.protocol = "socks5"
            await self._socks5(session, rec, reader, writer, over_cap)
        elif first == b"\x04":
            rec.protocol = "socks4"
            writer.write(socks5.SOCKS4_REJECTED)
            self._deny(rec, "unsupported protocol", "SOCKS4 is not supported; use SOCKS5")
        elif b"A" <= first <= b"Z":
            await self._http(session, rec, reader, writer, first, over_cap)
        else:
            self._deny(rec, "unsupported protocol",
                       f"first byte {first!r} is neither HTTP nor SOCKS5")

    def _over_cap(self, session: _Session) -> _Refusal:
        limit = session.max_connections
        return _Refusal(429, socks5.NOT_ALLOWED, "connection limit",
                        f"session {session.session_id} already has {limit} connections open "
                        f"(the limit is {limit})")

    async def _open(self, session: _Session, rec: _Record, host: Host, port: int) -> socket.socket:
        """Check, resolve, re-check and connect; raise _Refusal at the first failure."""
        rec.host, rec.port = str(host), port
        policy = session.policy
        verdict = policy.check_target(host, port)
        rec.rule = verdict.rule
        if not verdict.allowed:
            raise _Refusal(403, socks5.NOT_ALLOWED, verdict.rule, verdict.reason)
        opts = self.options
        loop = asyncio.get_running_loop()
        deadline = loop.time() + opts.connect_timeout
        if host.ip is not None:
            candidates: list[IPAddress] = [host.ip]
        else:
            try:
                async with asyncio.timeout_at(deadline):
                    resolved = await self._resolver(host.name, port)
            except TimeoutError:
                raise _Refusal(504, socks5.TTL_EXPIRED, verdict.rule,
                               f"resolving {host} timed out", policy_allowed=True) from None
            except Exception as exc:
                # OSError from getaddrinfo, or anything an injected resolver
                # raises: either way the connection ends with a record.
                raise _Refusal(502, socks5.HOST_UNREACHABLE, verdict.rule,
                               f"{host} could not be resolved: {exc}",
                               policy_allowed=True) from None
            candidates = list(dict.fromkeys(normalize_address(a) for a in resolved))
            if not candidates:
                raise _Refusal(502, socks5.HOST_UNREACHABLE, verdict.rule,
                               f"{host} has no addresses", policy_allowed=True)
        # Every address is checked and the socket goes to a checked address:
        # the name is never looked up again, so rebinding it cannot redirect us.
        permitted: list[tuple[IPAddress, str]] = []
        refused: tuple[IPAddress, str, str] | None = None
        for address in candidates:
            check = policy.check_address(address, port, host=host)
            if check.allowed:
                permitted.append((address, check.rule))
            elif refused is None:
                refused = (address, check.rule, check.reason)
        if not permitted:
            assert refused is not None
            rec.address = str(refused[0])
            raise _Refusal(403, socks5.NOT_ALLOWED, refused[1], refused[2])
        last_error: _Refusal | None = None
        try:
            async with asyncio.timeout_at(deadline):
                for address, address_rule in permitted:
                    try:
                        sock = await _connect(address, port)
                    except OSError as exc:
                        last_error = _connect_refusal(host, port, address, exc)
                        continue
                    rec.address = str(address)
                    if address_rule not in ("public address", verdict.rule):
                        rec.rule = f"{verdict.rule}; {address_rule}"
                    return sock
        except TimeoutError:
            raise _Refusal(504, socks5.TTL_EXPIRED, "connect timeout",
                           f"connecting to {host}:{port} timed out after "
                           f"{opts.connect_timeout:g}s", policy_allowed=True) from None
        assert last_error is not None
        raise last_error

    def _refused(self, rec: _Record, refusal: _Refusal) -> None:
        self._deny(rec, refusal.rule, refusal.reason, policy_allowed=refusal.policy_allowed,
                   error=refusal.reason if refusal.policy_allowed else None)

    def _audit_open(self, rec: _Record, upstream: socket.socket) -> None:
        if not self._emit(rec.decision(True, final=False)):
            upstream.close()
            raise _Refusal(503, socks5.GENERAL_FAILURE, "audit unavailable",
                           "the audit ledger did not accept the decision, so the "
                           "connection was not opened", policy_allowed=True)

    # --- SOCKS5 ------------------------------------------------------------------

    async def _socks5(
        self, session: _Session, rec: _Record, reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter, over_cap: bool,
    ) -> None:
        try:
            async with asyncio.timeout(self.options.handshake_timeout):
                request = await socks5.negotiate(reader, writer, session.secret)
        except socks5.SocksAuthError as exc:
            self._deny(rec, "proxy authentication", str(exc))
            return
        except socks5.SocksError as exc:
            if exc.code is not None:
                writer.write(socks5.reply(exc.code))
            self._deny(rec, "socks5 request refused", exc.message)
            return
        except (asyncio.IncompleteReadError, TimeoutError):
            self._deny(rec, "socks5 request incomplete",
                       "the client did not finish its SOCKS5 request")
            return
        rec.anonymous = False
        try:
            if over_cap:
                rec.host, rec.port = str(request.host), request.port
                raise self._over_cap(session)
            upstream = await self._open(session, rec, request.host, request.port)
            self._audit_open(rec, upstream)
        except _Refusal as refusal:
            writer.write(socks5.reply(refusal.socks_code))
            self._refused(rec, refusal)
            return
        await self._tunnel(rec, reader, writer, upstream, request.host, request.port,
                           socks5.reply(socks5.SUCCEEDED))

    # --- HTTP --------------------------------------------------------------------

    async def _http(
        self, session: _Session, rec: _Record | None, reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter, first: bytes, over_cap: bool,
    ) -> None:
        prefix = first
        while True:
            timeout = self.options.handshake_timeout if prefix else self.options.idle_timeout
            try:
                try:
                    raw = await http.read_head(reader, timeout, self.options.max_head_bytes)
                except TimeoutError:
                    if not prefix:
                        return  # an idle keep-alive connection, not a request
                    raise http.HttpError(408, "the request head did not arrive in time") from None
                if not raw and not prefix:
                    return
                if rec is None:
                    rec = self._new_record(session, "http")
                rec.protocol = "http"
                head = http.parse_request_head(prefix + raw)
                prefix = b""
                if session.secret is not None:
                    if not _authorized(head, session.secret):
                        raise http.HttpError(407, "this proxy needs the command's credentials "
                                                  "(the user and password in HTTP_PROXY)")
                    rec.anonymous = False
                if head.method == "CONNECT":
                    await self._connect_method(session, rec, reader, writer, head, over_cap)
                    return
                if not await self._forward(session, rec, reader, writer, head, over_cap):
                    return
            except http.HttpError as exc:
                writer.write(http.error_response(exc.status, exc.message))
                self._deny(rec or self._new_record(session, "http"), exc.rule, exc.message)
                return
            except _Refusal as refusal:
                writer.write(http.error_response(refusal.status, refusal.reason))
                self._refused(rec or self._new_record(session, "http"), refusal)
                return
            rec = None  # each further request on the connection is its own decision

    async def _connect_method(
        self, session: _Session, rec: _Record, reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter, head: http.Head, over_cap: bool,
    ) -> None:
        rec.protocol = "connect"
        try:
            host, port = split_authority(head.target)
        except InvalidHost as exc:
            raise http.HttpError(400, f"bad CONNECT target: {exc}") from None
        if over_cap:
            rec.host, rec.port = str(host), port
            raise self._over_cap(session)
        upstream = await self._open(session, rec, host, port)
        self._audit_open(rec, upstream)
        await self._tunnel(rec, reader, writer, upstream, host, port,
                           b"HTTP/1.1 200 Connection established\r\n\r\n")

    async def _forward(
        self, session: _Session, rec: _Record, reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter, head: http.Head, over_cap: bool,
    ) -> bool:
        """Forward one absolute-URI request; True when the client connection may carry another."""
        host, port, path = http.parse_proxy_target(head.target)
        rec.host, rec.port = str(host), port
        http.check_host_header(head, host, port)
        framing = http.request_framing(head)
        if over_cap:
            raise self._over_cap(session)
        upstream = await self._open(session, rec, host, port)
        self._audit_open(rec, upstream)
        u_reader, u_writer = await asyncio.open_connection(sock=upstream, limit=_STREAM_LIMIT)
        idle = self.options.idle_timeout
        error: str | None = None
        keep_alive = head.version == "HTTP/1.1" and "close" not in head.tokens("connection")
        body_task: asyncio.Task[int] | None = None
        try:
            request_head = http.serialize_request(head, path)
            u_writer.write(request_head)
            rec.bytes_up += len(request_head)
            # The body is sent while the response is awaited, so a server that
            # answers `Expect: 100-continue` is heard before the client gives up.
            body_task = asyncio.ensure_future(http.relay_body(reader, u_writer, framing, idle))
            while True:
                raw = await _unless_failed(
                    http.read_head(u_reader, idle, self.options.max_head_bytes), body_task)
                if not raw:
                    raise http.HttpError(502, f"{host}:{port} closed the connection "
                                              "without a response")
                response = http.parse_response_head(raw)
                if response.status == 101:
                    raise http.HttpError(502, "protocol upgrades are not forwarded")
                body = http.response_framing(response, head.method)
                keep_alive = keep_alive and body.kind != "close"
                out = http.serialize_response(response, close=not keep_alive)
                writer.write(out)
                rec.bytes_down += len(out)
                if response.status >= 200:
                    rec.bytes_down += await http.relay_body(u_reader, writer, body, idle)
                    await writer.drain()
                    break
            if body_task.done() and not body_task.cancelled() and body_task.exception() is None:
                rec.bytes_up += body_task.result()
            else:
                # The server answered before the whole request body was read;
                # where the client's next request starts is now unknown.
                keep_alive = False
        except (http.HttpError, OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            message = exc.message if isinstance(exc, http.HttpError) else (
                f"forwarding to {host}:{port} failed: {exc or type(exc).__name__}")
            error, keep_alive = message, False
            if rec.bytes_down == 0:
                # Nothing of a response has reached the client: answer it
                # properly. Later, all that is left is to cut the connection.
                status = exc.status if isinstance(exc, http.HttpError) else 502
                writer.write(http.error_response(status, message))
        finally:
            if body_task is not None and not body_task.done():
                body_task.cancel()
            if body_task is not None:
                with contextlib.suppress(BaseException):
                    await body_task
            u_writer.transport.abort()
            self._emit(rec.decision(True, error=error))
        return keep_alive

    # --- tunnels -----------------------------------------------------------------

    async def _tunnel(
        self, rec: _Record, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
        upstream: socket.socket, host: Host, port: int, reply: bytes,
    ) -> None:
        """Answer the client, then splice its transport to the upstream socket."""
        opts = self.options
        loop = asyncio.get_running_loop()
        tunnel = Tunnel(host, port, opts.tls_ports, opts.handshake_timeout, opts.idle_timeout)
        try:
            await loop.create_connection(lambda: tunnel.upstream, sock=upstream)
            writer.write(reply)
            client = writer.transport
            if client.is_closing():
                tunnel.error = "the client went away before the tunnel opened"
                return
            # Leave stream mode: whatever the client sent after its request is
            # still in the StreamReader. With EOF fed, read() hands all of it
            # back without waiting, and `eof_seen` says whether the client's own
            # EOF had already arrived, so none is lost and none invented.
            protocol = client.get_protocol()
            client_eof = isinstance(protocol, _EofTracking) and protocol.eof_seen
            reader.feed_eof()
            leftover = await reader.read()
            tunnel.start(cast(asyncio.Transport, client), leftover, client_eof)
            await tunnel.done
        except asyncio.CancelledError:
            tunnel.error = "the session was closed"
            raise
        except OSError as exc:
            tunnel.error = str(exc) or type(exc).__name__
        finally:
            if not tunnel.done.done():
                tunnel.abort()
            rec.bytes_up, rec.bytes_down = tunnel.bytes_up, tunnel.bytes_down
            if tunnel.timed_out:
                tunnel.error = f"idle for {opts.idle_timeout:g}s"
            if tunnel.denied is not None:
                self._emit(rec.decision(False, reason=tunnel.denied.reason,
                                        rule=tunnel.denied.rule))
            else:
                self._emit(rec.decision(True, error=tunnel.error))


class _EofTracking(asyncio.StreamReaderProtocol):
    """A client connection's protocol while it is read as a stream.

    It remembers whether the client's EOF has arrived, because once a tunnel
    takes the transport over, the StreamReader can no longer say whether its
    EOF came from the client or from the handover.
    """

    eof_seen = False

    def eof_received(self) -> bool:
        self.eof_seen = True
        return bool(super().eof_received())


async def _unless_failed(awaitable: Awaitable[bytes], body: asyncio.Task[int]) -> bytes:
    """Await `awaitable`, unless the request body relay fails first.

    A client that sends a malformed body leaves the server waiting for the
    rest of it; without this the proxy would wait for a response that never
    comes until the idle timeout.
    """
    main = asyncio.ensure_future(awaitable)
    await asyncio.wait({main, body}, return_when=asyncio.FIRST_COMPLETED)
    if not main.done():
        failure = body.exception() if not body.cancelled() else None
        if failure is not None:
            main.cancel()
            raise failure
    return await main


async def _close_gently(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Close so that a refusal just written is actually read.

    Closing a socket that still has unread input makes the kernel send a reset,
    and a client that pipelined bytes after its request would then see
    "connection reset" instead of the 403 and its reason. So: send FIN, read
    and discard briefly, then close.
    """
    transport = writer.transport
    if transport.is_closing():
        return
    try:
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(_LINGER):
            while await reader.read(_CHUNK):
                pass
    except (OSError, TimeoutError):
        pass
    finally:
        if transport.get_write_buffer_size():
            transport.close()
            # A client that neither reads nor closes must not hold the socket.
            asyncio.get_running_loop().call_later(_LINGER, transport.abort)
        else:
            transport.abort()


def _authorized(head: http.Head, secret: str) -> bool:
    """Whether a Proxy-Authorization field carries `secret` as its Basic password.

    The user name is not checked, as in SOCKS5: the password alone is the
    grant, and clients differ in the name they send when told none.
    """
    for value in head.get_all("proxy-authorization"):
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() != "basic":
            continue
        try:
            decoded = base64.b64decode(token.strip(), validate=True)
        except ValueError:
            continue
        password = decoded.partition(b":")[2]
        if hmac.compare_digest(password, secret.encode("utf-8")):
            return True
    return False


def _bind_unix(path: str) -> socket.socket:
    """A unix socket bound at `path`, however long the path.

    sun_path holds 107 bytes, less than many a home directory plus the state
    path under it. Binding through /proc/self/fd/N of the directory, opened
    first, reaches the same directory by a short name, and since the bind is
    relative to that open directory, a rename of any parent cannot redirect it.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with _short_path(path) as short:
            sock.bind(short)
    except BaseException:
        sock.close()
        raise
    return sock


@contextlib.contextmanager
def _short_path(path: str) -> Iterator[str]:
    if len(os.fsencode(path)) < 100:
        yield path
        return
    fd = os.open(os.path.dirname(path) or ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{os.path.basename(path)}"
    finally:
        os.close(fd)


async def _connect(address: IPAddress, port: int) -> socket.socket:
    """A TCP socket connected to exactly `address`: no name, so no second lookup."""
    family = socket.AF_INET6 if isinstance(address, IPv6Address) else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (str(address), port))
    except BaseException:
        sock.close()
        raise
    return sock


async def _refuse_live_socket(path: str) -> None:
    """Refuse a unix socket path another process is serving.

    asyncio deletes an existing socket file before binding; without this check
    a second proxy would silently steal a live proxy's path.
    """
    if not os.path.exists(path):
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.setblocking(False)
        with _short_path(path) as short:
            await asyncio.get_running_loop().sock_connect(probe, short)
    except OSError:
        return  # stale: nobody is listening
    finally:
        probe.close()
    raise OSError(errno.EADDRINUSE, f"{path} is in use by a running server")
