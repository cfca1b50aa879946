"""SOCKS5 through the proxy: address types, refusals with the protocol's own codes."""

from __future__ import annotations

import asyncio

import pytest
from proxy_testkit import (
    Backends,
    allow_for,
    closed_by_peer,
    open_proxy,
    proxied,
    run,
    settle,
    socks_connect,
    spellings_of_loopback,
)


@pytest.mark.parametrize("target", ["api.test", "127.0.0.2"])
def test_socks5_connect_reaches_allowed_target(backends: Backends, target: str) -> None:
    api = backends.start("api", mode="echo")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            code, (reader, writer) = await socks_connect(h.endpoint, target, api.port)
            assert code == 0x00
            writer.write(b"hello")
            assert await reader.readexactly(5) == b"hello"
            writer.close()
            await settle(h.decisions)
            assert [(d.protocol, d.allowed, d.final) for d in h.decisions] == [
                ("socks5", True, False), ("socks5", True, True)]
            assert h.decisions[-1].bytes_up == h.decisions[-1].bytes_down == 5

    run(main())


def test_socks5_ipv6_address_type(backends: Backends) -> None:
    api = backends.start("api6", host="::1", mode="echo")

    async def main() -> None:
        async with proxied([f"[::1]:{api.port}"]) as h:
            code, (reader, writer) = await socks_connect(h.endpoint, "::1", api.port)
            assert code == 0x00
            writer.write(b"v6")
            assert await reader.readexactly(2) == b"v6"
            writer.close()

    run(main())


def test_socks5_denials_use_code_2_and_leave_backends_alone(backends: Backends) -> None:
    api, victim = backends.start_pair()
    targets = [*spellings_of_loopback(), "127.0.0.1", "::1", "::ffff:127.0.0.1",
               "evil.test", "loop.test"]

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test", "loop.test"),
                           deny={"evil.test": "no"},
                           names={"loop.test": ["127.0.0.1"], "evil.test": ["127.0.0.2"]}) as h:
            for target in targets:
                code, (_, writer) = await socks_connect(h.endpoint, target, api.port)
                writer.close()
                assert code == 0x02, target
            assert h.resolver.calls == ["loop.test"]
            await settle(h.decisions)
            assert all(not d.allowed for d in h.decisions)

    run(main())
    assert victim.connections == api.connections == 0


@pytest.mark.parametrize(("command", "name"), [(0x02, "BIND"), (0x03, "UDP ASSOCIATE"),
                                                (0x09, "9")])
def test_socks5_other_commands_are_not_supported(backends: Backends, command: int,
                                                 name: str) -> None:
    api = backends.start("api")

    async def main() -> None:
        async with proxied(allow_for(api.port)) as h:
            code, (_, writer) = await socks_connect(h.endpoint, "127.0.0.2", api.port,
                                                    command=command)
            writer.close()
            assert code == 0x07
            await settle(h.decisions)
            assert h.decisions[0].reason == f"SOCKS5 {name} is not supported; only CONNECT"

    run(main())
    assert api.connections == 0


def test_socks5_unknown_address_type_is_code_8() -> None:
    async def main() -> None:
        async with proxied(["api.test"]) as h:
            code, (_, writer) = await socks_connect(h.endpoint, "", 80,
                                                    address=b"\x05\x00\x00\x00\x00")
            writer.close()
            assert code == 0x08

    run(main())


def test_socks5_invalid_domain_is_a_general_failure() -> None:
    async def main() -> None:
        async with proxied(["api.test"]) as h:
            code, (_, writer) = await socks_connect(h.endpoint, "a b.test", 80)
            writer.close()
            assert code == 0x01
            assert h.resolver.calls == []

    run(main())


def test_socks5_without_a_no_auth_method_is_refused() -> None:
    async def main() -> None:
        async with proxied(["api.test"]) as h:
            reader, writer = await open_proxy(h.endpoint)
            writer.write(b"\x05\x01\x02")  # username/password only
            assert await reader.readexactly(2) == b"\x05\xff"
            assert await closed_by_peer(reader)
            writer.close()

    run(main())


def test_socks4_gets_the_socks4_rejection() -> None:
    async def main() -> None:
        async with proxied(["api.test"]) as h:
            reader, writer = await open_proxy(h.endpoint)
            writer.write(b"\x04\x01\x00\x50\x7f\x00\x00\x01user\x00")
            async with asyncio.timeout(5):
                assert await reader.readexactly(8) == b"\x00\x5b" + b"\x00" * 6
            writer.close()
            await settle(h.decisions)
            assert h.decisions[0].protocol == "socks4"

    run(main())


def test_socks5_unreachable_port_is_connection_refused(backends: Backends) -> None:
    api = backends.start("api")
    port = api.port
    backends.bg.run(api.stop())

    async def main() -> None:
        async with proxied(allow_for(port, "api.test"), names={"api.test": ["127.0.0.2"]}) as h:
            code, (_, writer) = await socks_connect(h.endpoint, "api.test", port)
            writer.close()
            assert code == 0x05
            await settle(h.decisions)
            d = h.decisions[0]
            assert d.allowed and d.final and d.error and "could not connect" in d.error

    run(main())
