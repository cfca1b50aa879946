"""HostPolicy decisions (pure): order, ports, reasons, the explicit-address lift."""

from __future__ import annotations

from ipaddress import ip_address

import pytest
from proxy_testkit import spellings_of_loopback

from stockade.proxy import HostPolicy, InvalidHostEntry, ProxyDecision
from stockade.proxy.hosts import canonical_host


def target(policy: HostPolicy, host: str, port: int) -> tuple[bool, str, str]:
    v = policy.check_target(canonical_host(host), port)
    return v.allowed, v.rule, v.reason


def address(policy: HostPolicy, addr: str, port: int, host: str | None = None) -> tuple[bool, str]:
    v = policy.check_address(ip_address(addr), port,
                             host=canonical_host(host) if host else None)
    return v.allowed, v.rule


def test_exact_and_wildcard_entries_use_default_ports() -> None:
    policy = HostPolicy(allow=["pypi.org", "*.github.com"])
    assert target(policy, "pypi.org", 443)[:2] == (True, "allow pypi.org")
    assert target(policy, "PyPI.org.", 80)[0]
    assert target(policy, "api.github.com", 443)[:2] == (True, "allow *.github.com")
    assert not target(policy, "github.com", 443)[0]
    assert not target(policy, "files.pypi.org", 443)[0]


def test_port_outside_the_entry_names_the_allowed_ports() -> None:
    policy = HostPolicy(allow=["pypi.org", "git.example:22"])
    allowed, rule, reason = target(policy, "pypi.org", 22)
    assert not allowed and rule == "port not allowed"
    assert reason == "pypi.org:22 is not allowed: pypi.org is allowed on ports 80, 443 only"
    assert target(policy, "git.example", 22)[0]
    assert not target(policy, "git.example", 443)[0]


def test_deny_is_checked_first_and_carries_its_reason() -> None:
    policy = HostPolicy(allow=["*.example.com"],
                        deny={"paste.example.com": "paste sites exfiltrate code"})
    allowed, rule, reason = target(policy, "paste.example.com", 443)
    assert (allowed, rule) == (False, "deny paste.example.com")
    assert reason == "paste.example.com:443 is denied: paste sites exfiltrate code"
    assert target(policy, "docs.example.com", 443)[0]


def test_deny_without_port_covers_every_port_and_without_reason_names_the_entry() -> None:
    policy = HostPolicy(allow=["evil.test:8080"], deny=["evil.test"])
    allowed, _, reason = target(policy, "evil.test", 8080)
    assert not allowed and reason == "evil.test:8080 is denied: matches deny entry evil.test"


def test_unlisted_host_is_refused_with_a_plain_reason() -> None:
    assert target(HostPolicy(), "example.com", 443) == (
        False, "no allow entry", "example.com:443 is not on the allow list")


@pytest.mark.parametrize("spelling", spellings_of_loopback())
def test_ip_deny_entry_sees_every_spelling(spelling: str) -> None:
    policy = HostPolicy(allow=["127.0.0.0/8:8080"], deny={"127.0.0.1": "the host itself"})
    allowed, rule, reason = target(policy, spelling, 8080)
    assert (allowed, rule) == (False, "deny 127.0.0.1")
    assert reason.endswith("the host itself")


def test_resolved_special_addresses_are_refused_unless_listed_as_addresses() -> None:
    policy = HostPolicy(allow=["*.test:8080", "127.0.0.2:8080"])
    assert address(policy, "127.0.0.2", 8080, "api.test") == (True, "allow 127.0.0.2:8080")
    assert address(policy, "127.0.0.3", 8080, "api.test") == (
        False, "refused loopback 127.0.0.0/8")
    assert not address(policy, "127.0.0.2", 8081, "api.test")[0]  # the lift is per port too
    assert not address(policy, "169.254.169.254", 8080, "api.test")[0]
    assert not address(policy, "::1", 8080, "api.test")[0]
    assert not address(policy, "::ffff:127.0.0.1", 8080, "api.test")[0]
    assert address(policy, "93.184.215.14", 8080, "api.test") == (True, "public address")


def test_refusal_reason_says_how_the_address_was_reached() -> None:
    policy = HostPolicy(allow=["api.test"])
    v = policy.check_address(ip_address("127.0.0.1"), 443, host=canonical_host("api.test"))
    assert v.reason == ("api.test resolves to 127.0.0.1 (loopback 127.0.0.0/8), "
                        "refused unless allowed as an explicit address")


def test_deny_cidr_applies_to_resolved_addresses() -> None:
    policy = HostPolicy(allow=["*.corp.example", "10.0.0.0/8"], deny={"10.9.0.0/16": "hr"})
    assert address(policy, "10.1.0.1", 443, "wiki.corp.example")[0]
    allowed, rule = address(policy, "10.9.0.1", 443, "hr.corp.example")
    assert (allowed, rule) == (False, "deny 10.9.0.0/16")


def test_a_name_entry_does_not_lift_the_address_refusal() -> None:
    policy = HostPolicy(allow=["dev.test:8080", "*.test:8080"])
    assert target(policy, "dev.test", 8080)[0]
    assert not address(policy, "127.0.0.1", 8080, "dev.test")[0]
    assert not address(policy, "127.0.0.1", 8080, "a.dev.test")[0]


def test_localhost_named_in_an_entry_reaches_loopback_on_that_port_only() -> None:
    policy = HostPolicy(allow=["localhost:8080"], deny=["127.0.0.3"])
    assert target(policy, "localhost", 8080)[0]
    for loopback in ("127.0.0.1", "::1"):
        assert address(policy, loopback, 8080, "localhost") == (True, "allow localhost:8080")
    assert not address(policy, "127.0.0.1", 8081, "localhost")[0]
    assert not address(policy, "127.0.0.3", 8080, "localhost")[0]  # deny still wins
    # Only loopback: a localhost that resolves elsewhere is not what was granted.
    assert not address(policy, "10.0.0.1", 8080, "localhost")[0]
    assert not address(policy, "127.0.0.1", 8080, "other.test")[0]
    assert not address(HostPolicy(allow=["*.localhost:8080"]), "127.0.0.1", 8080,
                       "a.localhost")[0]


def test_bad_entries_raise_config_errors_naming_the_entry() -> None:
    with pytest.raises(InvalidHostEntry, match=r"'exa mple\.com'"):
        HostPolicy(allow=["exa mple.com"])
    with pytest.raises(InvalidHostEntry, match=r"10\.0\.0\.1/8"):
        HostPolicy(deny=["10.0.0.1/8"])


def test_a_single_string_is_one_entry() -> None:
    assert [r.text for r in HostPolicy(allow="example.com").allow] == ["example.com"]


def test_decision_json_has_every_field() -> None:
    d = ProxyDecision(1, "s", "connect", "a.test", 443, True, "allow a.test")
    assert set(d.to_json()) >= {"session_id", "host", "port", "address", "allowed", "rule",
                                "bytes_up", "bytes_down", "reason", "final"}
