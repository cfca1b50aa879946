"""The proxy package's public surface, pinned: the integrator builds on exactly this."""

from __future__ import annotations

import stockade.proxy as proxy


def test_exports_are_pinned() -> None:
    assert sorted(proxy.__all__) == [
        "DecisionCallback", "Host", "HostPattern", "HostPolicy", "HostRule", "InvalidHost",
        "InvalidHostEntry", "ManagedProxy", "ProxyDecision", "ProxyOptions", "ProxyThread",
        "ProxyUnavailable", "Resolver", "SessionEndpoint", "Verdict", "canonical_host",
        "parse_pattern", "proxy_env", "refused_range", "split_authority", "system_resolver",
    ]
    for name in proxy.__all__:
        assert getattr(proxy, name) is not None


def test_errors_sit_in_the_stockade_hierarchy() -> None:
    from stockade.errors import ConfigError, SandboxUnavailable

    assert issubclass(proxy.InvalidHostEntry, ConfigError)
    assert issubclass(proxy.ProxyUnavailable, SandboxUnavailable)
    assert issubclass(proxy.InvalidHost, ValueError)
