"""HTTP/1.1 pieces the proxy needs: request heads, framing, refusals (RFC 9110, 9112).

The parsing is deliberately strict. A forwarding proxy and the server behind
it must agree on where one request ends and the next begins; every leniency
(a bare LF, a space before the colon, both Content-Length and
Transfer-Encoding) is a place where they could disagree, and a smuggled second
request would reach the server without passing the policy.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

from .hosts import Host, split_authority

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_VERSION = re.compile(rb"HTTP/1\.[01]\Z")
_TARGET = re.compile(rb"[\x21-\x7e]+\Z")
_FIELD_VALUE_BAD = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_STATUS = re.compile(rb"(HTTP/1\.[01]) ([0-9]{3})(?: (.*))?\Z")
_CHUNK_SIZE = re.compile(rb"([0-9a-fA-F]{1,15})(?:[ \t]*;[^\r\n]*)?\Z")

#: Headers that describe one hop, not the message; RFC 9110 7.6.1.
HOP_BY_HOP = frozenset({
    "connection", "proxy-connection", "keep-alive", "te", "upgrade",
    "proxy-authorization", "proxy-authenticate",
})

CHUNK = 256 * 1024

REASONS = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    405: "Method Not Allowed",
    407: "Proxy Authentication Required",
    408: "Request Timeout",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    505: "HTTP Version Not Supported",
}

#: Header naming why the proxy refused; its value is the same sentence as the body.
DENIED_HEADER = "X-Stockade-Denied"


class HttpError(Exception):
    """A request the proxy refuses, with the status to answer it with."""

    def __init__(self, status: int, message: str, rule: str = "bad request") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        #: What decided, for the decision record.
        self.rule = rule


@dataclass(slots=True)
class Head:
    """A request or response head. For requests `method` and `target` are set;
    for responses `status` is."""

    version: str
    headers: list[tuple[str, str]] = field(default_factory=list)
    method: str = ""
    target: str = ""
    status: int = 0
    reason: str = ""

    def get_all(self, name: str) -> list[str]:
        name = name.lower()
        return [v for k, v in self.headers if k.lower() == name]

    def tokens(self, name: str) -> list[str]:
        """Comma-separated values of every `name` field, lowercased."""
        return [t.strip().lower() for v in self.get_all(name) for t in v.split(",") if t.strip()]


def _split_lines(data: bytes) -> list[bytes]:
    if not data.endswith(b"\r\n\r\n"):
        raise HttpError(400, "the message head does not end with an empty line")
    lines = data[:-4].split(b"\r\n")
    for line in lines:
        if b"\n" in line or b"\r" in line:
            raise HttpError(400, "bare CR or LF in the message head")
    return lines


def _parse_fields(lines: list[bytes]) -> list[tuple[str, str]]:
    headers: list[tuple[str, str]] = []
    for line in lines:
        if line[:1] in (b" ", b"\t"):
            raise HttpError(400, "obsolete line folding in a header field")
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.match(name):
            # Covers "Name : value" too: RFC 9112 5.1 requires rejecting it,
            # since some servers strip the space and others keep the field apart.
            raise HttpError(400, f"malformed header field {line[:60]!r}")
        value = value.strip(b" \t")
        if _FIELD_VALUE_BAD.search(value):
            raise HttpError(400, f"control character in header field {name.decode()!r}")
        headers.append((name.decode("ascii"), value.decode("latin-1")))
    return headers


def parse_request_head(data: bytes) -> Head:
    """Parse `METHOD target HTTP/1.x` plus fields, up to and including the empty line."""
    lines = _split_lines(data)
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or not _TARGET.match(parts[1]):
        raise HttpError(400, f"malformed request line {lines[0][:80]!r}")
    if not _VERSION.match(parts[2]):
        raise HttpError(505, f"unsupported protocol version {parts[2][:20]!r}")
    return Head(
        version=parts[2].decode("ascii"),
        headers=_parse_fields(lines[1:]),
        method=parts[0].decode("ascii"),
        target=parts[1].decode("ascii"),
    )


def parse_response_head(data: bytes) -> Head:
    lines = _split_lines(data)
    match = _STATUS.match(lines[0])
    if match is None:
        raise HttpError(502, "the upstream server sent a malformed status line")
    return Head(
        version=match.group(1).decode("ascii"),
        headers=_parse_fields(lines[1:]),
        status=int(match.group(2)),
        reason=(match.group(3) or b"").decode("latin-1"),
    )


def parse_proxy_target(target: str) -> tuple[Host, int, str]:
    """Split an absolute `http://` request target into host, port and origin-form path.

    Raises HttpError (400) for anything else: origin-form requests are for a
    server, not a proxy, and `https://` targets must use CONNECT so the TLS
    session stays end to end.
    """
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() != "http":
        if scheme.lower() == "https":
            raise HttpError(400, "https:// targets must use CONNECT")
        raise HttpError(400, "a proxy request needs an absolute http:// URI")
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:]
    if "@" in authority:
        raise HttpError(400, "userinfo (user@host) in the request target is not accepted")
    try:
        host, port = split_authority(authority, default_port=80)
    except ValueError as exc:
        raise HttpError(400, f"bad host in request target: {exc}") from None
    path = path.partition("#")[0]
    if not path.startswith("/"):
        path = "/" + path
    return host, port, path


def check_host_header(head: Head, host: Host, port: int) -> None:
    """The Host field must name the request target, or be absent in HTTP/1.0.

    Raises HttpError 403: a different Host on an allowed connection is how a
    shared front end is steered to a tenant the policy never allowed.
    """
    values = head.get_all("host")
    if not values:
        if head.version == "HTTP/1.1":
            raise HttpError(400, "HTTP/1.1 request without a Host header")
        return
    if len(values) > 1:
        raise HttpError(400, "more than one Host header")
    try:
        named = split_authority(values[0], default_port=80)
    except ValueError:
        raise HttpError(403, f"Host header {values[0][:80]!r} is not a valid host",
                        "host header mismatch") from None
    if named != (host, port):
        raise HttpError(
            403, f"Host header {named[0]}:{named[1]} does not match request target {host}:{port}",
            "host header mismatch",
        )


@dataclass(frozen=True, slots=True)
class Framing:
    """How a message body ends: "none", "length" (with `length`), "chunked" or "close"."""

    kind: str
    length: int = 0


def _content_length(head: Head) -> int | None:
    values = head.tokens("content-length")
    if not values:
        return None
    if len(set(values)) != 1 or not values[0].isdigit() or len(values[0]) > 18:
        raise HttpError(400, "invalid or conflicting Content-Length")
    return int(values[0])


def request_framing(head: Head) -> Framing:
    codings = head.tokens("transfer-encoding")
    length = _content_length(head)
    if codings:
        if length is not None:
            # Both present is the classic smuggling setup; RFC 9112 6.3 lets a
            # proxy reject it, and rejecting is the only choice that cannot be
            # read two ways.
            raise HttpError(400, "both Transfer-Encoding and Content-Length")
        if codings != ["chunked"]:
            raise HttpError(501, f"unsupported Transfer-Encoding {', '.join(codings)!r}")
        return Framing("chunked")
    if length:
        return Framing("length", length)
    return Framing("none")


def response_framing(head: Head, request_method: str) -> Framing:
    if request_method == "HEAD" or head.status in (204, 304) or head.status < 200:
        return Framing("none")
    codings = head.tokens("transfer-encoding")
    if codings:
        return Framing("chunked") if codings[-1] == "chunked" else Framing("close")
    length = _content_length(head)
    if length is not None:
        return Framing("length", length) if length else Framing("none")
    return Framing("close")


def without_hop_by_hop(head: Head) -> list[tuple[str, str]]:
    named = set(head.tokens("connection"))
    return [(k, v) for k, v in head.headers if k.lower() not in HOP_BY_HOP | named]


def serialize_request(head: Head, path: str) -> bytes:
    """The head sent upstream: origin-form target, this hop's fields removed, one request."""
    lines = [f"{head.method} {path} {head.version}"]
    lines += [f"{k}: {v}" for k, v in without_hop_by_hop(head)]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def serialize_response(head: Head, *, close: bool) -> bytes:
    lines = [f"{head.version} {head.status} {head.reason}".rstrip()]
    lines += [f"{k}: {v}" for k, v in without_hop_by_hop(head)]
    if close and head.status >= 200:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def header_safe(text: str) -> str:
    """`text` as a header value: printable ASCII only, bounded, no CR/LF to inject fields."""
    cleaned = "".join(c if " " <= c <= "~" else "?" for c in text)
    return cleaned[:512]


def error_response(status: int, reason: str) -> bytes:
    """A refusal the client can act on: status, the X-Stockade-Denied reason, same text as body."""
    safe = header_safe(reason)
    body = f"stockade proxy: {safe}\n".encode("ascii")
    challenge = 'Proxy-Authenticate: Basic realm="stockade"\r\n' if status == 407 else ""
    head = (
        f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\n"
        f"{DENIED_HEADER}: {safe}\r\n{challenge}"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


# --- relaying bodies -------------------------------------------------------------


async def _read(reader: asyncio.StreamReader, n: int, idle: float) -> bytes:
    async with asyncio.timeout(idle):
        return await reader.read(n)


async def _readline(reader: asyncio.StreamReader, idle: float) -> bytes:
    async with asyncio.timeout(idle):
        try:
            return await reader.readuntil(b"\r\n")
        except asyncio.IncompleteReadError as exc:
            raise HttpError(502, "the connection closed inside a chunked body") from exc
        except asyncio.LimitOverrunError as exc:
            raise HttpError(400, "a chunk header is too long") from exc


async def read_head(reader: asyncio.StreamReader, timeout: float, max_bytes: int) -> bytes:
    """Read one message head of at most `max_bytes`; b"" on a clean EOF before any byte."""
    async with asyncio.timeout(timeout):
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                return b""
            raise HttpError(400, "the connection closed inside a message head") from exc
        except asyncio.LimitOverrunError as exc:
            raise HttpError(431, "the message head is too large") from exc
    if len(head) > max_bytes:
        raise HttpError(431, "the message head is too large")
    return head


async def relay_body(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    framing: Framing,
    idle: float,
) -> int:
    """Copy one body from `reader` to `writer` as framed; return the bytes copied.

    Copies exactly the framed body and no further, so bytes a client sends
    after it are read as the next request (and checked), never forwarded as
    part of this one.
    """
    if framing.kind == "none":
        return 0
    if framing.kind == "length":
        return await _copy_exact(reader, writer, framing.length, idle)
    if framing.kind == "close":
        total = 0
        while data := await _read(reader, CHUNK, idle):
            total += len(data)
            writer.write(data)
            await writer.drain()
        return total
    total = 0
    while True:
        line = await _readline(reader, idle)
        match = _CHUNK_SIZE.match(line[:-2])
        if match is None:
            raise HttpError(400, "malformed chunk size line")
        size = int(match.group(1), 16)
        writer.write(line)
        total += len(line)
        if size == 0:
            while True:  # trailer fields, then the empty line
                line = await _readline(reader, idle)
                writer.write(line)
                total += len(line)
                if line == b"\r\n":
                    await writer.drain()
                    return total
        total += await _copy_exact(reader, writer, size, idle)
        end = await _readline(reader, idle)
        if end != b"\r\n":
            raise HttpError(400, "chunk data is not followed by CRLF")
        writer.write(end)
        total += 2


async def _copy_exact(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int, idle: float
) -> int:
    left = n
    while left:
        data = await _read(reader, min(left, CHUNK), idle)
        if not data:
            raise HttpError(502, "the connection closed before the body was complete")
        left -= len(data)
        writer.write(data)
        await writer.drain()
    return n
