"""`HostPolicy` decides; `ProxyDecision` records what was decided.

The policy is pure: it never resolves a name or opens a socket. The server asks
it twice per connection, once about the host the client named
(`check_target`, before any DNS lookup) and once about each address that host
resolved to (`check_address`), and connects only to an address that passed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .hosts import DEFAULT_PORTS, Host, HostPattern, IPAddress, normalize_address, parse_pattern
from .hosts import refused_range as _refused_range


@dataclass(frozen=True, slots=True)
class HostRule:
    """A parsed allow or deny entry and, for deny entries, the reason shown to the caller."""

    pattern: HostPattern
    reason: str = ""

    @property
    def text(self) -> str:
        return self.pattern.text


@dataclass(frozen=True, slots=True)
class Verdict:
    """One answer of the policy.

    `rule` names what decided, for the audit ledger (`allow *.example.com`,
    `deny evil.example`, `no allow entry`, `refused loopback 127.0.0.0/8`);
    `reason` is the sentence shown to the denied caller, empty when allowed.
    """

    allowed: bool
    rule: str
    reason: str = ""


class HostPolicy:
    """Allow and deny entries for one session.

    `allow` entries are exact names, `*.suffix` wildcards, IP literals or CIDR
    blocks, each with an optional `:port`; without one they cover ports 80 and
    443 only. `deny` entries have the same syntax (without a port they cover
    every port) and are checked first; pass a mapping to give each a reason.

    An IP literal or CIDR in `allow` is also the only way to reach a loopback,
    link-local, private or otherwise special address: such addresses are
    refused after resolution unless an allow entry names them explicitly. The
    one name that counts as explicit is `localhost`, for loopback addresses.
    """

    __slots__ = ("allow", "default_ports", "deny")

    def __init__(
        self,
        allow: Iterable[str] = (),
        deny: Mapping[str, str] | Iterable[str] = (),
        *,
        default_ports: Iterable[int] = DEFAULT_PORTS,
    ) -> None:
        if isinstance(allow, str):
            # A bare string would be read one character at a time.
            allow = (allow,)
        if isinstance(deny, str):
            deny = (deny,)
        deny_items = deny.items() if isinstance(deny, Mapping) else ((e, "") for e in deny)
        self.allow: tuple[HostRule, ...] = tuple(HostRule(parse_pattern(e)) for e in allow)
        self.deny: tuple[HostRule, ...] = tuple(
            HostRule(parse_pattern(e), str(reason).strip()) for e, reason in deny_items
        )
        self.default_ports: frozenset[int] = frozenset(default_ports)

    def __repr__(self) -> str:
        allow = [r.text for r in self.allow]
        deny = {r.text: r.reason for r in self.deny}
        return f"HostPolicy(allow={allow!r}, deny={deny!r})"

    def _allow_port(self, rule: HostRule, port: int) -> bool:
        if rule.pattern.port is None:
            return port in self.default_ports
        return port == rule.pattern.port

    @staticmethod
    def _deny_port(rule: HostRule, port: int) -> bool:
        return rule.pattern.port is None or port == rule.pattern.port

    def _denied(self, rule: HostRule, what: str) -> Verdict:
        why = rule.reason or f"matches deny entry {rule.text}"
        return Verdict(False, f"deny {rule.text}", f"{what} is denied: {why}")

    def check_target(self, host: Host, port: int) -> Verdict:
        """Decide on the host and port the client named, before any lookup.

        A name refused here is never resolved, so a denied name leaks nothing
        to DNS. An allowed IP literal still goes through `check_address`.
        """
        target = f"{host}:{port}"
        for rule in self.deny:
            if rule.pattern.matches_host(host) and self._deny_port(rule, port):
                return self._denied(rule, target)
        host_matches = [r for r in self.allow if r.pattern.matches_host(host)]
        for rule in host_matches:
            if self._allow_port(rule, port):
                return Verdict(True, f"allow {rule.text}")
        if host_matches:
            ports = sorted({p for r in host_matches for p in self._rule_ports(r)})
            return Verdict(
                False,
                "port not allowed",
                f"{target} is not allowed: {host} is allowed on port"
                f"{'s' if len(ports) > 1 else ''} {', '.join(map(str, ports))} only",
            )
        return Verdict(False, "no allow entry", f"{target} is not on the allow list")

    def _rule_ports(self, rule: HostRule) -> frozenset[int]:
        return self.default_ports if rule.pattern.port is None else frozenset({rule.pattern.port})

    def check_address(self, address: IPAddress, port: int, *, host: Host | None = None) -> Verdict:
        """Decide on one address a connection would go to, after resolution.

        Deny CIDRs apply here too, so `deny 10.0.0.0/8` also stops a permitted
        name that resolves into that block. Special-purpose ranges (loopback,
        link-local, private, multicast, unspecified, ...) are refused unless an
        allow entry that is itself an address or CIDR covers the address and port.
        """
        address = normalize_address(address)
        via = f"{host} resolves to {address}" if host and host.ip is None else f"{address}"
        for rule in self.deny:
            if rule.pattern.matches_address(address) and self._deny_port(rule, port):
                return self._denied(rule, via)
        special = _refused_range(address)
        if special is None:
            return Verdict(True, "public address")
        for rule in self.allow:
            if rule.pattern.matches_address(address) and self._allow_port(rule, port):
                return Verdict(True, f"allow {rule.text}")
        if host is not None and address.is_loopback and _is_localhost(host):
            # `localhost` is a name for loopback, not a name that might land
            # there by accident (or by rebinding): an entry that spells it out
            # is as explicit as 127.0.0.1, and covers exactly its own port.
            for rule in self.allow:
                if (rule.pattern.kind == "name" and rule.pattern.matches_host(host)
                        and self._allow_port(rule, port)):
                    return Verdict(True, f"allow {rule.text}")
        return Verdict(
            False,
            f"refused {special}",
            f"{via} ({special}), refused unless allowed as an explicit address",
        )


def _is_localhost(host: Host) -> bool:
    return host.ip is None and host.name == "localhost"


@dataclass(frozen=True, slots=True)
class ProxyDecision:
    """One record for the audit ledger.

    Allowed connections produce two records sharing `connection_id`: one when
    the decision is made (`final=False`, zero bytes) and one when the
    connection ends (`final=True`, with byte counts and any `error`). A denied
    attempt produces one final record. A final record may deny what the first
    allowed, when the TLS ClientHello names a different server than the target.

    `protocol` is "connect" (HTTP CONNECT), "http" (absolute-URI forwarding)
    or "socks5". `host` is canonical ("" when the request could not be read);
    `address` is the resolved address connected to, or the one refused.
    """

    connection_id: int
    session_id: str
    protocol: str
    host: str
    port: int
    allowed: bool
    rule: str
    reason: str = ""
    address: str | None = None
    bytes_up: int = 0
    bytes_down: int = 0
    final: bool = True
    error: str | None = None
    started: float = 0.0
    duration: float = 0.0

    def to_json(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}
