"""SOCKS5 (RFC 1928) as far as the proxy speaks it: CONNECT only, with no
authentication or, where the listener asks for one, a password (RFC 1929).

BIND and UDP ASSOCIATE are refused with reply 0x07: UDP would carry traffic
(DNS included) that the host-name policy never sees, and BIND would accept
inbound connections into the sandbox.
"""

from __future__ import annotations

import asyncio
import hmac
import struct
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address

from .errors import InvalidHost
from .hosts import Host, canonical_host, normalize_address

VERSION = 0x05
NO_AUTH = 0x00
USER_PASSWORD = 0x02
NO_ACCEPTABLE_METHOD = 0xFF

CMD_CONNECT = 0x01
CMD_BIND = 0x02
CMD_UDP_ASSOCIATE = 0x03

ATYP_IPV4 = 0x01
ATYP_DOMAIN = 0x03
ATYP_IPV6 = 0x04

SUCCEEDED = 0x00
GENERAL_FAILURE = 0x01
NOT_ALLOWED = 0x02
NETWORK_UNREACHABLE = 0x03
HOST_UNREACHABLE = 0x04
CONNECTION_REFUSED = 0x05
TTL_EXPIRED = 0x06
COMMAND_NOT_SUPPORTED = 0x07
ADDRESS_TYPE_NOT_SUPPORTED = 0x08

REPLY_TEXT = {
    SUCCEEDED: "succeeded",
    GENERAL_FAILURE: "general SOCKS server failure",
    NOT_ALLOWED: "connection not allowed by ruleset",
    NETWORK_UNREACHABLE: "network unreachable",
    HOST_UNREACHABLE: "host unreachable",
    CONNECTION_REFUSED: "connection refused",
    TTL_EXPIRED: "TTL expired",
    COMMAND_NOT_SUPPORTED: "command not supported",
    ADDRESS_TYPE_NOT_SUPPORTED: "address type not supported",
}

#: The SOCKS4 "request rejected or failed" reply, for clients that speak version 4.
SOCKS4_REJECTED = b"\x00\x5b" + b"\x00" * 6


class SocksAuthError(Exception):
    """The client did not present the listener's password; nothing is owed to it."""


class SocksError(Exception):
    """The request is refused with reply `code`; `code` None means the method
    negotiation failed and no request reply is owed."""

    def __init__(self, code: int | None, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class SocksRequest:
    host: Host
    port: int


def reply(code: int) -> bytes:
    """A reply with BND.ADDR 0.0.0.0:0.

    The bound address would tell the sandbox the host's source address and
    port, which is the host's network layout and no use to a CONNECT client.
    """
    return bytes((VERSION, code, 0x00, ATYP_IPV4)) + b"\x00" * 6


async def negotiate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    password: str | None = None) -> SocksRequest:
    """Run the method negotiation and read one request; the version byte is already read.

    Writes the method selection itself. Raises SocksError when the request must
    be refused; the caller then sends `reply(error.code)` (if not None) and closes.
    With `password`, only RFC 1929 authentication with it is accepted (any
    user name), and anything else raises SocksAuthError.
    """
    (count,) = await reader.readexactly(1)
    methods = await reader.readexactly(count)
    if password is not None:
        await _authenticate(reader, writer, methods, password)
    elif NO_AUTH not in methods:
        writer.write(bytes((VERSION, NO_ACCEPTABLE_METHOD)))
        raise SocksError(None, "the client offered no method without authentication")
    else:
        writer.write(bytes((VERSION, NO_AUTH)))
    version, command, reserved, atyp = await reader.readexactly(4)
    if version != VERSION or reserved != 0:
        raise SocksError(GENERAL_FAILURE, "malformed SOCKS5 request header")
    if command != CMD_CONNECT:
        name = {CMD_BIND: "BIND", CMD_UDP_ASSOCIATE: "UDP ASSOCIATE"}.get(command, str(command))
        raise SocksError(COMMAND_NOT_SUPPORTED, f"SOCKS5 {name} is not supported; only CONNECT")
    host: Host
    if atyp == ATYP_IPV4:
        address = normalize_address(IPv4Address(await reader.readexactly(4)))
        host = Host(str(address), address)
    elif atyp == ATYP_IPV6:
        address = normalize_address(IPv6Address(await reader.readexactly(16)))
        host = Host(str(address), address)
    elif atyp == ATYP_DOMAIN:
        (length,) = await reader.readexactly(1)
        raw = await reader.readexactly(length)
        try:
            # Read through the same canonical form as HTTP, so "127.1" sent as
            # a domain is the address 127.0.0.1 and never reaches a resolver.
            host = canonical_host(raw.decode("utf-8"))
        except (UnicodeDecodeError, InvalidHost) as exc:
            await reader.readexactly(2)  # the port, so the reply follows a whole request
            raise SocksError(GENERAL_FAILURE, f"invalid host in SOCKS5 request: {exc}") from None
    else:
        raise SocksError(ADDRESS_TYPE_NOT_SUPPORTED, f"SOCKS5 address type {atyp} is not supported")
    (port,) = struct.unpack("!H", await reader.readexactly(2))
    if port == 0:
        raise SocksError(GENERAL_FAILURE, "port 0 is not a destination")
    return SocksRequest(host, port)


async def _authenticate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        methods: bytes, password: str) -> None:
    if USER_PASSWORD not in methods:
        writer.write(bytes((VERSION, NO_ACCEPTABLE_METHOD)))
        raise SocksAuthError("the client offered no username/password authentication")
    writer.write(bytes((VERSION, USER_PASSWORD)))
    version, ulen = await reader.readexactly(2)
    await reader.readexactly(ulen)
    (plen,) = await reader.readexactly(1)
    given = await reader.readexactly(plen)
    if version != 0x01 or not hmac.compare_digest(given, password.encode("utf-8")):
        writer.write(b"\x01\x01")
        raise SocksAuthError("wrong SOCKS5 password")
    writer.write(b"\x01\x00")
