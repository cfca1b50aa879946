"""Read the server name (SNI) out of a TLS ClientHello, without TLS.

Pure byte parsing, following RFC 8446 section 4.1.2 (ClientHello), RFC 5246
section 6.2 (records) and RFC 6066 section 3 (server_name). The proxy needs
only one field, but it reads the whole structure strictly: a lenient parser
that picked "the first thing that looks like a name" is exactly what an
attacker would steer toward one name while the server reads another.
"""

from __future__ import annotations

from dataclasses import dataclass

_HANDSHAKE_RECORD = 0x16
_CLIENT_HELLO = 0x01
_SERVER_NAME_EXTENSION = 0x0000
_HOST_NAME = 0x00

#: A ClientHello bigger than this is refused rather than buffered without end.
MAX_CLIENT_HELLO = 64 * 1024


class ClientHelloError(ValueError):
    """The bytes cannot be a well-formed TLS ClientHello."""


@dataclass(frozen=True, slots=True)
class ClientHello:
    """What the proxy needs from a ClientHello: the SNI host name, if sent."""

    server_name: str | None


def starts_tls(data: bytes) -> bool | None:
    """Whether a stream opens with a TLS handshake record; None until 2 bytes are known.

    The record type (0x16) and the major version (3) are both required: a binary
    protocol whose first byte merely happens to be 0x16 is not TLS, while any
    minor version is accepted because servers accept any in a first record.
    """
    if not data:
        return None
    if data[0] != _HANDSHAKE_RECORD:
        return False
    if len(data) < 2:
        return None
    return data[1] == 0x03


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ClientHelloError("ClientHello is truncated")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def vector(self, length_bytes: int) -> _Reader:
        return _Reader(self.take(self.uint(length_bytes)))

    def done(self) -> bool:
        return self.pos == len(self.data)


def _handshake_bytes(data: bytes) -> bytes | None:
    """Concatenate handshake record fragments until one whole message is there.

    A ClientHello may be split over several records (and TCP over several
    reads); None means "not enough bytes yet".
    """
    message = bytearray()
    pos = 0
    while True:
        if len(data) - pos < 5:
            return None
        if data[pos] != _HANDSHAKE_RECORD:
            raise ClientHelloError(f"record type {data[pos]:#04x} where a handshake was expected")
        if data[pos + 1] != 0x03:
            raise ClientHelloError("record does not carry a TLS version")
        length = int.from_bytes(data[pos + 3 : pos + 5], "big")
        if length == 0 or length > 16384 + 2048:
            raise ClientHelloError(f"record length {length} is out of range")
        if len(data) - pos - 5 < length:
            return None
        message += data[pos + 5 : pos + 5 + length]
        pos += 5 + length
        if len(message) >= 4:
            if message[0] != _CLIENT_HELLO:
                raise ClientHelloError(f"handshake type {message[0]} is not ClientHello")
            needed = 4 + int.from_bytes(message[1:4], "big")
            if needed > MAX_CLIENT_HELLO:
                raise ClientHelloError(f"ClientHello of {needed} bytes exceeds the limit")
            if len(message) >= needed:
                if len(message) > needed:
                    # Nothing may follow the ClientHello before the server answers.
                    raise ClientHelloError("unexpected handshake data after the ClientHello")
                return bytes(message[4:needed])


def parse_client_hello(data: bytes) -> ClientHello | None:
    """Parse the ClientHello at the start of `data`.

    Returns None when more bytes are needed, a ClientHello when complete, and
    raises ClientHelloError when the bytes cannot be one. Records after the
    ClientHello (TLS 1.3 early data) are ignored; the caller bounds how much it
    buffers while None comes back.
    """
    body = _handshake_bytes(data)
    if body is None:
        return None
    r = _Reader(body)
    r.take(2)  # legacy_version
    r.take(32)  # random
    session_id = r.vector(1)
    if len(session_id.data) > 32:
        raise ClientHelloError("session id longer than 32 bytes")
    suites = r.vector(2)
    if not suites.data or len(suites.data) % 2:
        raise ClientHelloError("malformed cipher suite list")
    if not r.vector(1).data:
        raise ClientHelloError("empty compression method list")
    if r.done():
        return ClientHello(None)  # TLS 1.2 and older may omit extensions
    extensions = r.vector(2)
    if not r.done():
        raise ClientHelloError("trailing bytes after the extensions")
    seen: set[int] = set()
    server_name: str | None = None
    while not extensions.done():
        ext_type = extensions.uint(2)
        ext = extensions.vector(2)
        if ext_type in seen:
            # RFC 8446 4.2: at most one of each; two server_name extensions
            # would let the proxy and the server each read a different one.
            raise ClientHelloError(f"extension {ext_type} appears twice")
        seen.add(ext_type)
        if ext_type == _SERVER_NAME_EXTENSION:
            server_name = _server_name(ext)
    return ClientHello(server_name)


def _server_name(ext: _Reader) -> str:
    names = ext.vector(2)
    if not ext.done() or names.done():
        raise ClientHelloError("malformed server_name extension")
    host: str | None = None
    while not names.done():
        name_type = names.uint(1)
        name = names.vector(2).data
        if name_type != _HOST_NAME:
            raise ClientHelloError(f"unknown server name type {name_type}")
        if host is not None:
            raise ClientHelloError("more than one host_name in server_name")
        if not name or not name.isascii():
            raise ClientHelloError("server name is empty or not ASCII")
        host = name.decode("ascii")
    assert host is not None  # the loop ran at least once
    return host
