"""Host names, IP literals and allow/deny patterns: one canonical form for all.

Everything here is pure. The proxy compares hosts only after they have been
brought to one spelling, because every mismatch between how this module reads
a host and how a resolver or a socket reads it is a way around the policy:
`0x7f.1` is 127.0.0.1 to glibc's `inet_aton`, `EXAMPLE.com.` is example.com to
DNS, and fullwidth `example.com` (U+FF45...) is example.com after IDNA mapping.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

from .errors import InvalidHost, InvalidHostEntry

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

#: Ports an allow entry without `:port` covers.
DEFAULT_PORTS: frozenset[int] = frozenset({80, 443})

_LABEL = re.compile(r"[a-z0-9_-]{1,63}\Z")
# A last label that reads as a number makes the whole host an IPv4 attempt
# (the WHATWG URL rule, and what inet_aton does): `example.123` or `1.2.3.4.5`
# must not be handed to a resolver as a "name" that it then reads as a number.
_NUMERIC_LABEL = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)\Z")
_PORT = re.compile(r"[0-9]{1,5}\Z")


@dataclass(frozen=True, slots=True)
class Host:
    """A host in canonical form: a lowercase ASCII DNS name, or one IP address.

    `name` is the DNS name, or for an address its compressed text without
    brackets; `ip` is set exactly when the host is an address. `str()` gives
    the spelling used in authorities and messages (IPv6 in brackets).
    """

    name: str
    ip: IPAddress | None = None

    def __str__(self) -> str:
        return f"[{self.name}]" if isinstance(self.ip, IPv6Address) else self.name


def normalize_address(address: IPAddress) -> IPAddress:
    """The address a connection actually reaches: `::ffff:a.b.c.d` is a.b.c.d.

    Without this, `[::ffff:127.0.0.1]` would be checked as an IPv6 address no
    IPv4 rule or range names, and then reach 127.0.0.1 through a dual-stack socket.
    """
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _ipv4_number(part: str) -> int | None:
    if part.startswith("0x"):
        return int(part[2:], 16) if part[2:] else 0
    if len(part) > 1 and part.startswith("0"):
        # Octal, as inet_aton reads it; `08` is not a number at all.
        return int(part, 8) if all(c in "01234567" for c in part) else None
    return int(part) if part.isdigit() else None


def _parse_ipv4(text: str) -> IPv4Address:
    """Read every spelling inet_aton accepts: `2130706433`, `0x7f.1`, `0177.0.0.1`, `127.1`."""
    parts = text.split(".")
    numbers = [_ipv4_number(p) if _NUMERIC_LABEL.match(p) else None for p in parts]
    if len(parts) > 4 or any(n is None for n in numbers):
        raise InvalidHost(f"{text!r} ends in a number but is not an IPv4 address")
    values = [n for n in numbers if n is not None]
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (5 - len(values)):
        raise InvalidHost(f"{text!r} is not an IPv4 address: a part is out of range")
    address = 0
    for v in head:
        address = address << 8 | v
    address = address << 8 * (5 - len(values)) | last
    return IPv4Address(address)


def _parse_ipv6(text: str) -> IPv6Address:
    if "%" in text:
        # A zone id names a local interface; it has no meaning across a proxy
        # and Python would otherwise carry it into the comparison.
        raise InvalidHost(f"{text!r}: IPv6 zone ids are not accepted")
    try:
        return IPv6Address(text)
    except ValueError:
        raise InvalidHost(f"{text!r} is not an IPv6 address") from None


def canonical_host(text: str) -> Host:
    """Parse a bare host (no port) into its canonical `Host`.

    Accepts a DNS name (Unicode is IDNA-encoded), an IPv4 address in any
    inet_aton spelling, or an IPv6 address with or without brackets. Raises
    InvalidHost for userinfo, brackets around anything but IPv6, empty labels,
    characters outside letters, digits, `-` and `_`, and numeric-looking hosts
    that are not addresses.
    """
    if not text:
        raise InvalidHost("empty host")
    if "@" in text:
        # `allowed.com@evil.com` is evil.com to a URL parser and allowed.com to
        # a careless prefix check; no host the proxy needs contains userinfo.
        raise InvalidHost(f"{text!r}: userinfo (user@host) is not accepted in a host")
    if text.startswith("[") or text.endswith("]"):
        if not (text.startswith("[") and text.endswith("]")):
            raise InvalidHost(f"{text!r}: unbalanced brackets")
        if ":" not in text:
            raise InvalidHost(f"{text!r}: brackets are only for IPv6 addresses")
        return _address_host(_parse_ipv6(text[1:-1]))
    if ":" in text:
        return _address_host(_parse_ipv6(text))
    name = (text if text.isascii() else _idna(text)).lower()
    if name.endswith("."):
        name = name[:-1]
    labels = name.split(".")
    if _NUMERIC_LABEL.match(labels[-1]):
        return _address_host(_parse_ipv4(name))
    if len(name) > 253 or not all(_LABEL.match(label) for label in labels):
        raise InvalidHost(
            f"{text!r} is not a valid host name: use letters, digits, '-' and '_' "
            "in dot-separated labels of 1 to 63 characters"
        )
    return Host(name)


def _idna(text: str) -> str:
    """A Unicode name in the A-label form resolvers, curl and browsers use: IDNA 2008
    with UTS 46 mapping, non-transitional.

    Python's own "idna" codec is IDNA 2003, which maps `faß.de` to `fass.de`:
    a different domain with a different owner, so an entry for one would
    allow the other. Loaded only for a non-ASCII name (`idna` comes with the
    base install; `stockade run` with ASCII names never imports it).
    """
    import idna

    trailing = text.endswith((".", "\u3002", "\uff0e", "\uff61"))
    try:
        ascii_name = idna.encode(text.rstrip(".\u3002\uff0e\uff61"), uts46=True,
                                 transitional=False).decode("ascii")
    except (idna.IDNAError, UnicodeError) as exc:
        raise InvalidHost(f"{text!r} is not a valid host name (IDNA 2008: {exc})") from None
    return ascii_name + "." if trailing else ascii_name


def _address_host(address: IPAddress) -> Host:
    address = normalize_address(address)
    return Host(str(address), address)


def parse_port(text: str) -> int:
    """A TCP port from decimal text: 1-65535, digits only (no sign, no spaces)."""
    if not _PORT.match(text) or not 0 < int(text) < 65536:
        raise InvalidHost(f"{text!r} is not a TCP port (1-65535)")
    return int(text)


def split_authority(text: str, default_port: int | None = None) -> tuple[Host, int]:
    """Split `host:port` or `[v6]:port` into a canonical host and a port.

    `default_port` is used when the port is absent; without one, a missing port
    is an error (CONNECT requires it). Unbracketed IPv6 is refused because it
    cannot be told apart from a port.
    """
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise InvalidHost(f"{text!r}: unbalanced brackets")
        host_text, rest = text[: close + 1], text[close + 1 :]
        if rest and not rest.startswith(":"):
            raise InvalidHost(f"{text!r}: unexpected text after ']'")
        port_text = rest[1:] if rest else None
    elif text.count(":") > 1:
        raise InvalidHost(f"{text!r}: an IPv6 address in an authority needs brackets")
    elif ":" in text:
        host_text, _, port_text = text.partition(":")
    else:
        host_text, port_text = text, None
    host = canonical_host(host_text)
    if port_text is None:
        if default_port is None:
            raise InvalidHost(f"{text!r}: a port is required (host:port)")
        return host, default_port
    return host, parse_port(port_text)


# --- allow / deny patterns -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HostPattern:
    """One allow or deny entry: an exact name, a `*.suffix`, or an address/CIDR.

    `port` is None when the entry names no port; what that means (the default
    ports for an allow entry, every port for a deny entry) is the policy's call.
    `text` is the canonical spelling, used in messages and decision records.
    """

    kind: str  # "name", "suffix" or "network"
    value: str  # the name, or the suffix without "*."; "" for a network
    network: IPNetwork | None
    port: int | None
    text: str

    def matches_host(self, host: Host) -> bool:
        if host.ip is not None:
            return self.network is not None and host.ip in self.network
        if self.kind == "name":
            return host.name == self.value
        if self.kind == "suffix":
            # Subdomains only: `*.example.com` must not quietly grant
            # example.com itself, which is often a different service.
            return host.name.endswith("." + self.value)
        return False

    def matches_address(self, address: IPAddress) -> bool:
        return self.network is not None and address in self.network


def _network_text(network: IPNetwork) -> str:
    if network.prefixlen == network.max_prefixlen:
        return str(network.network_address)
    return str(network)


def _parse_network(text: str, entry: str) -> IPNetwork:
    try:
        network = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise InvalidHostEntry(f"{entry!r}: not a valid CIDR block ({exc})") from None
    mapped = IPv6Network("::ffff:0:0/96")
    if isinstance(network, IPv6Network) and network.prefixlen >= 96 and network.subnet_of(mapped):
        # Addresses are compared after `::ffff:a.b.c.d` becomes a.b.c.d, so a
        # mapped block written as IPv6 would otherwise never match anything.
        v4 = IPv4Address(int(network.network_address) & 0xFFFFFFFF)
        return IPv4Network(f"{v4}/{network.prefixlen - 96}")
    return network


def parse_pattern(entry: str) -> HostPattern:
    """Parse one allow/deny entry.

    Forms: `example.com`, `*.example.com`, `203.0.113.7`, `203.0.113.0/24`,
    `[2001:db8::1]`, `[2001:db8::/32]`, each with an optional `:port`; bare
    IPv6 (`::1`, `2001:db8::/32`) without a port. IP literals in any spelling
    are read as the address they denote. Raises InvalidHostEntry.
    """
    text = entry.strip()
    if not text:
        raise InvalidHostEntry("empty host entry")
    port: int | None = None
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise InvalidHostEntry(f"{entry!r}: unbalanced brackets")
        rest = text[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise InvalidHostEntry(f"{entry!r}: unexpected text after ']'")
            port = _entry_port(rest[1:], entry)
        body = text[1:close]
        if ":" not in body:
            raise InvalidHostEntry(f"{entry!r}: brackets are only for IPv6 addresses")
    elif text.count(":") > 1:
        body = text  # bare IPv6, so no port can follow
    elif ":" in text:
        body, _, port_text = text.partition(":")
        port = _entry_port(port_text, entry)
    else:
        body = text
    suffix = f":{port}" if port is not None else ""

    if "/" in body:
        network = _parse_network(body, entry)
        shown = _network_text(network)
        shown = f"[{shown}]" if port is not None and network.version == 6 else shown
        return HostPattern("network", "", network, port, shown + suffix)

    if body.startswith("*."):
        try:
            base = canonical_host(body[2:])
        except InvalidHost as exc:
            raise InvalidHostEntry(f"{entry!r}: {exc}") from None
        if base.ip is not None:
            raise InvalidHostEntry(
                f"{entry!r}: a wildcard cannot cover addresses; write a CIDR block instead"
            )
        return HostPattern("suffix", base.name, None, port, f"*.{base.name}{suffix}")
    if "*" in body:
        raise InvalidHostEntry(
            f"{entry!r}: '*' is only allowed as a whole first label, as in *.example.com"
        )
    try:
        host = canonical_host(body)
    except InvalidHost as exc:
        raise InvalidHostEntry(f"{entry!r}: {exc}") from None
    if host.ip is not None:
        network = ipaddress.ip_network(host.ip)
        shown = f"[{host.name}]" if port is not None and host.ip.version == 6 else host.name
        return HostPattern("network", "", network, port, shown + suffix)
    return HostPattern("name", host.name, None, port, host.name + suffix)


def _entry_port(text: str, entry: str) -> int:
    try:
        return parse_port(text)
    except InvalidHost:
        raise InvalidHostEntry(f"{entry!r}: {text!r} is not a TCP port (1-65535)") from None


# --- address ranges refused after resolution -------------------------------------

# Each range is a way for "allow example.com" to become "reach this machine or its
# network": a name that resolves (or is rebound) to one of these would turn the
# proxy into a door to services that trust anything local.
_REFUSED_V4: tuple[tuple[IPv4Network, str], ...] = tuple(
    (IPv4Network(cidr), why)
    for cidr, why in (
        ("0.0.0.0/8", "unspecified"),  # connect() to 0.0.0.0 reaches this host on Linux
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),  # includes cloud metadata at 169.254.169.254
        ("10.0.0.0/8", "private"),
        ("172.16.0.0/12", "private"),
        ("192.168.0.0/16", "private"),
        ("100.64.0.0/10", "shared address space"),  # carrier NAT, often the host's own LAN
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),  # includes broadcast 255.255.255.255
    )
)
_REFUSED_V6: tuple[tuple[IPv6Network, str], ...] = tuple(
    (IPv6Network(cidr), why)
    for cidr, why in (
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::/96", "IPv4-compatible (deprecated)"),
        ("100::/64", "discard-only"),
        ("2001::/23", "IETF protocol assignments"),  # Teredo hides an IPv4 address here
        ("2001:db8::/32", "documentation"),
        ("fc00::/7", "unique local (private)"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated)"),
        ("ff00::/8", "multicast"),
        ("64:ff9b:1::/48", "local-use NAT64"),
    )
)
# Prefixes that carry an IPv4 address which a gateway may reach on the caller's
# behalf; the embedded address is refused on the same terms as if written plainly.
_NAT64 = IPv6Network("64:ff9b::/96")
_6TO4 = IPv6Network("2002::/16")


def refused_range(address: IPAddress) -> str | None:
    """Why `address` is refused by default (e.g. "loopback 127.0.0.0/8"), or None."""
    address = normalize_address(address)
    if isinstance(address, IPv4Address):
        for v4net, why in _REFUSED_V4:
            if address in v4net:
                return f"{why} {v4net}"
        return None
    for v6net, why in _REFUSED_V6:
        if address in v6net:
            return f"{why} {v6net}"
    embedded: IPv4Address | None = None
    if address in _NAT64:
        embedded = IPv4Address(int(address) & 0xFFFFFFFF)
    elif address in _6TO4:
        embedded = IPv4Address((int(address) >> 80) & 0xFFFFFFFF)
    if embedded is not None:
        inner = refused_range(embedded)
        if inner is not None:
            return f"embeds {embedded}, {inner}"
    return None
