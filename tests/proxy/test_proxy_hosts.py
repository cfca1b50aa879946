"""Canonical hosts, IP-literal spellings, patterns and refused ranges (pure)."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, ip_address

import pytest
from hypothesis import given
from hypothesis import strategies as st
from proxy_testkit import spellings_of_loopback

from stockade.proxy import InvalidHost, InvalidHostEntry
from stockade.proxy.hosts import (
    Host,
    canonical_host,
    parse_pattern,
    parse_port,
    refused_range,
    split_authority,
)

LOOPBACK = IPv4Address("127.0.0.1")


@pytest.mark.parametrize("spelling", [*spellings_of_loopback(), "[::ffff:127.0.0.1]",
                                      "::ffff:7f00:1", "\uff11\uff12\uff17.0.0.1"])
def test_every_spelling_of_loopback_is_one_address(spelling: str) -> None:
    assert canonical_host(spelling) == Host("127.0.0.1", LOOPBACK)


@pytest.mark.parametrize(("text", "name"), [
    ("EXAMPLE.com", "example.com"),
    ("example.com.", "example.com"),
    ("B\u00fccher.DE", "xn--bcher-kva.de"),
    ("\uff45xample.com", "example.com"),  # fullwidth e, folded by IDNA mapping
    ("example\u3002com", "example.com"),  # ideographic full stop is a label separator
    ("_srv.example.com", "_srv.example.com"),
    ("localhost", "localhost"),
    ("0xg.example", "0xg.example"),  # looks hex, is a name: the last label decides
])
def test_names_are_canonicalised(text: str, name: str) -> None:
    assert canonical_host(text) == Host(name)


@pytest.mark.parametrize(("text", "name"), [
    ("fa\u00df.de", "xn--fa-hia.de"),  # IDNA 2003 made this fass.de, another owner's domain
    ("FA\u00df.DE.", "xn--fa-hia.de"),
    ("\u03c2.gr", "xn--3xa.gr"),  # final sigma kept, not folded to sigma
    ("\u0dc1\u0dca\u200d\u0dbb\u0dd3.lk", "xn--10cl1a0b660p.lk"),  # ZWJ kept where it belongs
])
def test_unicode_names_get_the_idna_2008_form_clients_resolve(text: str, name: str) -> None:
    assert canonical_host(text) == Host(name)
    assert canonical_host(text) != Host("fass.de")


@pytest.mark.parametrize("text", ["\u2603.net", "a\u200db.de", "\u00df\u2028.de"])
def test_names_idna_2008_disallows_are_rejected(text: str) -> None:
    with pytest.raises(InvalidHost, match="IDNA 2008"):
        canonical_host(text)


@pytest.mark.parametrize("text", [
    "", ".", "a..b", ".a", "a b.com", "a/b", "a%2eb", "user@example.com", "exa\x00mple.com",
    "[example.com]", "[1.2.3.4]", "[::1", "::1]", "fe80::1%eth0", "1.2.3.4.5", "example.123",
    "08.0.0.1", "256.0.0.1", "1.2.3.65536", "1.16777216", "4294967296", "0x100000000",
    "*.example.com", "a" * 64 + ".com", ("a." * 127) + "com",
])
def test_hosts_that_are_neither_name_nor_address_are_rejected(text: str) -> None:
    with pytest.raises(InvalidHost):
        canonical_host(text)


def test_ipv6_is_compressed_and_shown_in_brackets() -> None:
    host = canonical_host("[2001:DB8:0:0::1]")
    assert host == Host("2001:db8::1", IPv6Address("2001:db8::1"))
    assert str(host) == "[2001:db8::1]"
    assert canonical_host("2001:db8::1") == host


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_inet_aton_forms_agree(value: int) -> None:
    a, b, c, d = IPv4Address(value).packed
    expected = IPv4Address(value)
    forms = [
        str(value), hex(value), f"0{value:o}" if value else "0",
        f"{a}.{b}.{c}.{d}", f"{a:#x}.{b:#o}.{c}.{d:#X}".replace("0o", "0"),
        f"{a}.{value & 0xFFFFFF}", f"{a}.{b}.{value & 0xFFFF}", f"{a}.{b}.{c}.{d}.",
    ]
    for form in forms:
        assert canonical_host(form).ip == expected, form


@pytest.mark.parametrize(("text", "host", "port"), [
    ("example.com:443", "example.com", 443),
    ("[::1]:8080", "[::1]", 8080),
    ("0x7f.1:22", "127.0.0.1", 22),
    ("Example.COM.:80", "example.com", 80),
])
def test_split_authority(text: str, host: str, port: int) -> None:
    parsed, parsed_port = split_authority(text)
    assert (str(parsed), parsed_port) == (host, port)


@pytest.mark.parametrize("text", [
    "example.com", "example.com:", "example.com:0", "example.com:65536", "example.com:+80",
    "example.com: 80", "::1:80", "[::1]80", "[::1]:", "user@example.com:443",
    "example.com:80:80",
])
def test_bad_authorities_are_rejected(text: str) -> None:
    with pytest.raises(InvalidHost):
        split_authority(text)


def test_default_port_applies_only_when_absent() -> None:
    assert split_authority("example.com", default_port=80)[1] == 80
    assert split_authority("example.com:8080", default_port=80)[1] == 8080
    assert parse_port("65535") == 65535


# --- patterns --------------------------------------------------------------------


@pytest.mark.parametrize(("entry", "text", "port"), [
    ("example.com", "example.com", None),
    ("Example.COM.:8443", "example.com:8443", 8443),
    ("*.example.com", "*.example.com", None),
    ("10.0.0.0/8", "10.0.0.0/8", None),
    ("0x0a.1", "10.0.0.1", None),
    ("[::1]:443", "[::1]:443", 443),
    ("::1", "::1", None),
    ("2001:db8::/32", "2001:db8::/32", None),
    ("[2001:db8::/32]:22", "[2001:db8::/32]:22", 22),
    ("::ffff:10.0.0.0/104", "10.0.0.0/8", None),
    ("  spaced.example  ", "spaced.example", None),
])
def test_patterns_parse_to_canonical_text(entry: str, text: str, port: int | None) -> None:
    pattern = parse_pattern(entry)
    assert (pattern.text, pattern.port) == (text, port)


@pytest.mark.parametrize("entry", [
    "", "*", "*.", "a*.example.com", "*.*.example.com", "example.*", "*.10.0.0.1",
    "10.0.0.1/8", "10.0.0.0/33", "[example.com]", "[1.2.3.4]:80", "example.com:http",
    "user@example.com", "example.com:0",
])
def test_malformed_entries_are_config_errors(entry: str) -> None:
    with pytest.raises(InvalidHostEntry) as info:
        parse_pattern(entry)
    assert info.value.exit_status == 78


def test_wildcard_covers_subdomains_only() -> None:
    pattern = parse_pattern("*.example.com")
    assert pattern.matches_host(canonical_host("a.example.com"))
    assert pattern.matches_host(canonical_host("A.B.Example.com."))
    assert not pattern.matches_host(canonical_host("example.com"))
    assert not pattern.matches_host(canonical_host("badexample.com"))
    assert not pattern.matches_host(canonical_host("example.com.evil.test"))


def test_name_patterns_never_match_addresses() -> None:
    assert not parse_pattern("localhost").matches_host(canonical_host("127.0.0.1"))
    assert not parse_pattern("*.in-addr.arpa").matches_host(canonical_host("127.1"))


def test_network_patterns_match_every_spelling() -> None:
    pattern = parse_pattern("127.0.0.0/8")
    for spelling in spellings_of_loopback():
        assert pattern.matches_host(canonical_host(spelling))
    assert not pattern.matches_host(canonical_host("128.0.0.1"))


@given(st.from_regex(r"[a-z0-9][a-z0-9-]{0,10}(\.[a-z][a-z0-9-]{0,10}){1,3}", fullmatch=True))
def test_canonical_names_are_fixed_points(name: str) -> None:
    host = canonical_host(name)
    assert canonical_host(str(host)) == host
    assert canonical_host(name.upper() + ".") == host
    assert not parse_pattern("*." + host.name).matches_host(host)


# --- refused ranges --------------------------------------------------------------


@pytest.mark.parametrize(("address", "kind"), [
    ("127.0.0.1", "loopback"), ("127.255.255.254", "loopback"), ("::1", "loopback"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
    ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("192.168.1.1", "private"),
    ("fd00::1", "unique local"), ("100.64.0.1", "shared address space"),
    ("224.0.0.1", "multicast"), ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"), ("::", "unspecified"), ("255.255.255.255", "reserved"),
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:169.254.169.254", "link-local"),
    ("64:ff9b::7f00:1", "embeds 127.0.0.1"), ("2002:a9fe:a9fe::", "embeds 169.254.169.254"),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "IETF"),
])
def test_special_addresses_are_refused(address: str, kind: str) -> None:
    reason = refused_range(ip_address(address))
    assert reason is not None and reason.startswith(kind), reason


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "2606:4700::1111",
                                     "64:ff9b::808:808", "2002:808:808::"])
def test_public_addresses_pass(address: str) -> None:
    assert refused_range(ip_address(address)) is None


def test_mapped_cidr_entry_is_an_ipv4_network() -> None:
    assert parse_pattern("::ffff:127.0.0.0/104").network == IPv4Network("127.0.0.0/8")
