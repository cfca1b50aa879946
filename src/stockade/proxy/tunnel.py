"""Relaying an open tunnel: two transports spliced together, the first flight checked.

After CONNECT (or SOCKS5 CONNECT) has been answered, the proxy only has to copy
bytes both ways. Doing that through StreamReader costs two extra copies and a
task wake-up per chunk, which held one tunnel to about half of what it reaches
here, where each transport's protocol hands what it receives straight to the
other transport. Backpressure is the same mechanism `drain()` is built on: when
one transport's write buffer passes its high-water mark it calls
`pause_writing()`, and the tunnel stops reading the other side until
`resume_writing()`, so a slow reader slows the writer instead of filling memory.

Before anything goes upstream, the client's first bytes are judged
(`judge_first_flight`): a TLS ClientHello must name the tunnel's host, and
plain HTTP is refused (it belongs on the forwarded-request path).
"""

from __future__ import annotations

import asyncio
import re
from typing import cast

from .errors import InvalidHost
from .hosts import Host, canonical_host
from .tls import MAX_CLIENT_HELLO, ClientHelloError, parse_client_hello, starts_tls

# Write-buffer marks for tunnel transports. asyncio's 64 KiB default is smaller
# than one 256 KiB read, so every read would pause and resume the other side.
HIGH_WATER = 1024 * 1024
LOW_WATER = 256 * 1024


class TunnelDenied(Exception):
    """The tunnel's first flight broke a rule; `rule` goes to the decision record."""

    def __init__(self, rule: str, reason: str) -> None:
        super().__init__(reason)
        self.rule = rule
        self.reason = reason


def judge_first_flight(
    data: bytes, host: Host, port: int, tls_ports: frozenset[int], *, ended: bool = False
) -> bool | None:
    """Decide on the client's first bytes in a tunnel: True to relay, None for "need
    more", TunnelDenied to close. `ended` means the client sent EOF after `data`.

    Only the client's first bytes are inspected, so server-first protocols work:
    the server's bytes flow while the client is silent.
    """
    if not data:
        return True if ended else None
    is_tls = starts_tls(data)
    if is_tls is None and not ended:
        return None
    if not is_tls:
        if port in tls_ports:
            raise TunnelDenied("tls required",
                               f"port {port} carries TLS only, and the tunnel to {host}:{port} "
                               "did not start with a TLS ClientHello")
        return _judge_plain(data, host, port, ended)
    try:
        hello = parse_client_hello(data)
        if hello is None:
            if ended or len(data) > 2 * MAX_CLIENT_HELLO:
                raise ClientHelloError("the ClientHello is incomplete")
            return None
    except ClientHelloError as exc:
        raise TunnelDenied("tls malformed",
                           f"the tunnel to {host}:{port} began a TLS handshake that could "
                           f"not be read: {exc}") from None
    if hello.server_name is None:
        return True
    try:
        sni = canonical_host(hello.server_name)
    except InvalidHost:
        sni = Host(hello.server_name)
    if sni != host:
        # Domain fronting: an allowed CONNECT host on a shared front end, with
        # the ClientHello asking that front end for another tenant.
        raise TunnelDenied("tls sni mismatch",
                           f"TLS SNI {hello.server_name} does not match the CONNECT host {host}")
    return True


# An HTTP/1.x (or h2c prior-knowledge) request line, and what can still grow
# into one. Servers skip empty lines before a request (RFC 9112, 2.2).
_REQUEST_LINE = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+ [^ \r\n]+ HTTP/")
_REQUEST_START = re.compile(
    rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]*\Z"
    rb"|[!#$%&'*+\-.^_`|~0-9A-Za-z]+ [^ \r\n]*\Z"
    rb"|[!#$%&'*+\-.^_`|~0-9A-Za-z]+ [^ \r\n]+ (?:H(?:T(?:T(?:P)?)?)?)?\Z")
#: A first line longer than this that could still be a request line is taken for one.
MAX_REQUEST_LINE = 64 * 1024


def _judge_plain(data: bytes, host: Host, port: int, ended: bool) -> bool | None:
    """Refuse plain HTTP in a tunnel; relay any other protocol (ssh, SMTP, a database).

    A tunnel reaches an allowed address, and a plain HTTP request inside it
    names its own host in a `Host` header, which a server with name-based
    virtual hosts obeys: `curl -p` to an allowed `127.0.0.1:8080` read the
    page of `admin.test` on that server. The forwarded-request path checks
    every request's `Host`; a tunnel cannot without parsing each request of a
    kept-alive connection, so HTTP goes there instead. The verdict falls when
    the first line ends (its CR or LF); until then it is None, and the bytes
    before the line's end may already go upstream (`relayable_undecided`): no
    server acts on a request line it has not seen end.
    """
    text = data.lstrip(b"\r\n")
    ends = [i for i in (text.find(b"\r"), text.find(b"\n")) if i >= 0]
    line = text[:min(ends)] if ends else text
    if _REQUEST_LINE.match(line) or (len(line) > MAX_REQUEST_LINE
                                     and _REQUEST_START.match(line[:MAX_REQUEST_LINE])):
        raise TunnelDenied("http in tunnel",
                           f"plain HTTP inside the tunnel to {host}:{port} is refused: its Host "
                           "header would go unchecked; send it as a forwarded request "
                           "(HTTP_PROXY), where each request's Host is checked")
    if not ends and not ended and _REQUEST_START.match(line):
        return None  # could still become a request line
    return True


def relayable_undecided(data: bytes) -> int:
    """How much of an undecided plain first flight may go upstream now: all of it
    up to the end of its first line (which `_judge_plain` has not seen yet), none
    while it is only the empty lines a server skips."""
    if starts_tls(data) is not False or data[:1] in (b"\r", b"\n"):
        return 0
    return len(data)


class Side(asyncio.Protocol):
    """One end of the splice: what its transport receives goes to the other end."""

    def __init__(self, tunnel: Tunnel, is_client: bool) -> None:
        self.tunnel = tunnel
        self.is_client = is_client
        self.transport: asyncio.Transport | None = None
        self.peer: Side = self
        self.received = 0
        self.eof = False
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=HIGH_WATER, low=LOW_WATER)

    def data_received(self, data: bytes) -> None:
        if self.tunnel.holding(self, data):
            return
        self.received += len(data)
        self.peer.write(data)

    def write(self, data: bytes) -> None:
        transport = self.transport
        # Bytes for a side that has already gone have nowhere to go; writing
        # them anyway only makes asyncio log a warning per write.
        if transport is not None and not transport.is_closing():
            transport.write(data)

    def eof_received(self) -> bool:
        self.tunnel.side_eof(self)
        return True  # keep the other direction open: a half-close is not the end

    def pause_writing(self) -> None:
        if self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer.transport is not None and not self.peer.eof:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.tunnel.side_lost(self, exc)


class Tunnel:
    """The state of one tunnel: both sides, the first-flight check, idleness, the outcome."""

    def __init__(
        self, host: Host, port: int, tls_ports: frozenset[int], handshake_timeout: float,
        idle_timeout: float,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.host, self.port, self.tls_ports = host, port, tls_ports
        self.handshake_timeout = handshake_timeout
        self.idle_timeout = idle_timeout
        self.client = Side(self, is_client=True)
        self.upstream = Side(self, is_client=False)
        self.client.peer, self.upstream.peer = self.upstream, self.client
        self.done: asyncio.Future[None] = self.loop.create_future()
        self.denied: TunnelDenied | None = None
        self.error: str | None = None
        self.timed_out = False
        # Until `start`, upstream bytes wait here (the client has not had its
        # reply yet); until the first flight is judged, client bytes wait here.
        self._started = False
        self._judging = True
        self._held_upstream: list[bytes] = []
        self._first_flight = bytearray()
        self._flight_sent = 0  # of an undecided plain first line, already relayed
        self._hello_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None

    # --- counters --------------------------------------------------------------

    @property
    def bytes_up(self) -> int:
        return self.client.received

    @property
    def bytes_down(self) -> int:
        return self.upstream.received

    # --- the start -------------------------------------------------------------

    def start(self, client_transport: asyncio.Transport, leftover: bytes, client_eof: bool) -> None:
        """Take over the client transport (the reply has been written to it).

        `leftover` is what the client had sent beyond its request, and
        `client_eof` whether its EOF had already arrived.
        """
        client_transport.set_protocol(self.client)
        self.client.connection_made(client_transport)
        self._started = True
        held, self._held_upstream = self._held_upstream, []
        for data in held:
            self.upstream.received += len(data)
            self.client.write(data)
        self._idle_timer = self.loop.call_later(self.idle_timeout / 4, self._tick, -1, 0)
        # What happened upstream while the client was being answered is passed
        # on now that there is someone to pass it to.
        if self.upstream.lost:
            client_transport.close()
            return
        if self.upstream.eof:
            self.upstream.eof = False
            self.side_eof(self.upstream)
        elif self.upstream.transport is not None:
            self.upstream.transport.resume_reading()
        if leftover:
            self._judge(leftover)
        if client_eof:
            self.side_eof(self.client)
        elif not client_transport.is_closing():
            client_transport.resume_reading()

    def holding(self, side: Side, data: bytes) -> bool:
        """True when `data` must wait instead of being relayed now."""
        if not side.is_client:
            if self._started:
                return False
            self._held_upstream.append(data)
            if side.transport is not None:
                side.transport.pause_reading()
            return True
        if not self._judging:
            return False
        self._judge(data)
        return True

    def _judge(self, data: bytes, ended: bool = False) -> None:
        self._first_flight += data
        try:
            verdict = judge_first_flight(bytes(self._first_flight), self.host, self.port,
                                         self.tls_ports, ended=ended)
        except TunnelDenied as exc:
            self.deny(exc)
            return
        if verdict is None:
            ready = relayable_undecided(bytes(self._first_flight))
            if ready:
                # A plain first line not yet ended: it goes upstream as it
                # comes (an interactive protocol gets its answers), all but
                # the line's end, which is judged first.
                self._send_flight(ready)
            elif self._hello_timer is None:
                self._hello_timer = self.loop.call_later(self.handshake_timeout, self._slow_hello)
            return
        self._judging = False
        if self._hello_timer is not None:
            self._hello_timer.cancel()
        self._send_flight(len(self._first_flight))
        self._first_flight = bytearray()

    def _send_flight(self, upto: int) -> None:
        """Write the first flight's bytes up to `upto` that have not gone yet."""
        chunk = bytes(self._first_flight[self._flight_sent:upto])
        self._flight_sent = max(self._flight_sent, upto)
        if chunk:
            self.client.received += len(chunk)
            self.upstream.write(chunk)

    def _slow_hello(self) -> None:
        if not self._judging:
            return
        if starts_tls(bytes(self._first_flight)) is not False:
            self.deny(TunnelDenied("tls malformed",
                                   f"the tunnel to {self.host}:{self.port} began a TLS handshake "
                                   f"that did not finish within {self.handshake_timeout:g}s"))
        else:
            self.deny(TunnelDenied("http in tunnel",
                                   f"the tunnel to {self.host}:{self.port} began what may be an "
                                   "HTTP request line and did not finish it within "
                                   f"{self.handshake_timeout:g}s"))

    # --- the end ---------------------------------------------------------------

    def deny(self, denied: TunnelDenied) -> None:
        if self.denied is None:
            self.denied = denied
        self.abort()

    def abort(self) -> None:
        for side in (self.client, self.upstream):
            if side.transport is not None:
                side.transport.abort()

    def side_eof(self, side: Side) -> None:
        if side.eof:
            return
        if side.is_client and self._judging:
            self._judge(b"", ended=True)
            if self.denied is not None:
                return
        side.eof = True
        peer = side.peer.transport
        if peer is not None and not peer.is_closing():
            if peer.can_write_eof():
                peer.write_eof()
            if side.peer.eof:
                # Both directions are finished; close() still flushes what is buffered.
                peer.close()
                if side.transport is not None:
                    side.transport.close()

    def side_lost(self, side: Side, exc: Exception | None) -> None:
        side.lost = True
        if exc is not None and self.error is None and self.denied is None:
            self.error = str(exc) or type(exc).__name__
        other = side.peer.transport
        if not side.peer.lost and other is not None:
            if exc is not None:
                other.abort()  # a reset on one side is passed on as a reset
            else:
                other.close()  # deliver what is buffered, then close
        if self.client.lost and (self.upstream.lost or self.upstream.transport is None):
            self._finish()

    def _finish(self) -> None:
        for timer in (self._idle_timer, self._hello_timer):
            if timer is not None:
                timer.cancel()
        if not self.done.done():
            self.done.set_result(None)

    def _tick(self, last_total: int, idle_ticks: int) -> None:
        # Idleness is measured by sampling the byte counts on a timer, so the
        # relay itself never reads a clock; a tunnel closes between 1 and 1.25
        # idle periods after its last byte.
        total = self.bytes_up + self.bytes_down
        idle_ticks = idle_ticks + 1 if total == last_total else 0
        if idle_ticks >= 4:
            self.timed_out = True
            self.abort()
            return
        self._idle_timer = self.loop.call_later(self.idle_timeout / 4, self._tick, total,
                                                idle_ticks)
