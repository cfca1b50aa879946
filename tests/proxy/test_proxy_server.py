"""The proxy against local servers: HTTP CONNECT, plain forwarding, and attacks on both.

Every denial is observed from outside: the backend that would have been reached
counts its TCP connections, and the test checks the count stayed at zero.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from proxy_testkit import (
    Backends,
    TlsMaterial,
    allow_for,
    client_hello,
    closed_by_peer,
    http_connect,
    http_exchange,
    open_proxy,
    proxied,
    read_head,
    run,
    settle,
    socks_connect,
    spellings_of_loopback,
)

from stockade.proxy import ProxyOptions


def test_connect_reaches_allowed_name_over_tls(backends: Backends, tls: TlsMaterial) -> None:
    api = backends.start("api", tls=True)

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            status, _, (reader, writer) = await http_connect(h.endpoint, f"api.test:{api.port}")
            assert status == 200
            await writer.start_tls(tls.client_context(), server_hostname="api.test")
            writer.write(b"GET /hello HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n")
            status, headers = await read_head(reader)
            body = await reader.readexactly(int(headers["content-length"]))
            assert (status, body) == (200, b"api GET /hello host=api.test")
            writer.close()
            await settle(h.decisions)
            opened, closed = h.decisions
            assert (opened.final, opened.allowed, opened.address) == (False, True, "127.0.0.2")
            assert opened.rule == f"allow api.test:{api.port}; allow 127.0.0.2:{api.port}"
            assert closed.final and closed.allowed and closed.connection_id == opened.connection_id
            assert closed.bytes_up > 0 and closed.bytes_down > 0
            assert (closed.session_id, closed.protocol) == ("s1", "connect")
            assert closed.host == "api.test"

    run(main())
    assert api.handshakes == 1


def test_connect_through_the_unix_socket(backends: Backends) -> None:
    api = backends.start("api", mode="echo")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            status, _, (reader, writer) = await http_connect(
                h.endpoint, f"api.test:{api.port}", via="unix")
            assert status == 200
            writer.write(b"ping")
            assert await reader.readexactly(4) == b"ping"
            writer.close()

    run(main())


def test_denied_name_gets_403_with_reason_and_is_never_resolved(backends: Backends) -> None:
    api = backends.start("api")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           deny={"evil.test": "known exfiltration endpoint"},
                           names={"evil.test": ["127.0.0.2"]}) as h:
            status, headers, (_, writer) = await http_connect(h.endpoint, f"evil.test:{api.port}")
            writer.close()
            assert status == 403
            assert headers["x-stockade-denied"] == (
                f"evil.test:{api.port} is denied: known exfiltration endpoint")
            status, headers, body = await http_exchange(
                h.endpoint, f"GET http://evil.test:{api.port}/ HTTP/1.1\r\n"
                            f"Host: evil.test:{api.port}\r\n\r\n".encode())
            assert status == 403
            assert body == f"stockade proxy: {headers['x-stockade-denied']}\n".encode()
            await settle(h.decisions)
            assert h.resolver.calls == []  # no DNS leak for a denied name
            assert [(d.allowed, d.rule, d.host) for d in h.decisions] == [
                (False, "deny evil.test", "evil.test")] * 2

    run(main())
    assert api.connections == 0


def test_unlisted_name_is_refused_before_resolution(backends: Backends) -> None:
    api = backends.start("api")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"unlisted.test": ["127.0.0.2"]}) as h:
            status, headers, (_, writer) = await http_connect(
                h.endpoint, f"unlisted.test:{api.port}")
            writer.close()
            assert status == 403
            assert headers["x-stockade-denied"] == (
                f"unlisted.test:{api.port} is not on the allow list")
            assert h.resolver.calls == []

    run(main())
    assert api.connections == 0


@pytest.mark.parametrize("spelling", [*spellings_of_loopback(), "[::ffff:127.0.0.1]"])
def test_every_loopback_spelling_is_denied(backends: Backends, spelling: str) -> None:
    api, victim = backends.start_pair()

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            status, headers, (_, writer) = await http_connect(
                h.endpoint, f"{spelling}:{victim.port}")
            writer.close()
            assert status == 403, headers
            status, _, _ = await http_exchange(
                h.endpoint, f"GET http://{spelling}:{victim.port}/ HTTP/1.1\r\n"
                            f"Host: {spelling}:{victim.port}\r\n\r\n".encode())
            assert status == 403
            await settle(h.decisions)
            assert {(d.host, d.allowed) for d in h.decisions} == {("127.0.0.1", False)}
            assert h.resolver.calls == []  # a numeric host is parsed, never looked up

    run(main())
    assert victim.connections == 0


@pytest.mark.parametrize("spelling", spellings_of_loopback())
def test_loopback_spellings_meet_the_deny_entry(backends: Backends, spelling: str) -> None:
    """With all of 127/8 allowed on the port, only reading the spelling as
    127.0.0.1 can make the deny entry for 127.0.0.1 apply."""
    _, victim = backends.start_pair()

    async def main() -> None:
        async with proxied([f"127.0.0.0/8:{victim.port}"],
                           deny={"127.0.0.1": "the host's own services"}) as h:
            status, headers, (_, writer) = await http_connect(
                h.endpoint, f"{spelling}:{victim.port}")
            writer.close()
            assert status == 403
            assert headers["x-stockade-denied"].endswith("is denied: the host's own services")

    run(main())
    assert victim.connections == 0


def test_every_spelling_reaches_an_explicitly_allowed_address(backends: Backends) -> None:
    _, victim = backends.start_pair(mode_b="echo")
    spellings = spellings_of_loopback()

    async def main() -> None:
        async with proxied([f"127.0.0.1:{victim.port}"]) as h:
            for spelling in spellings:
                status, _, (reader, writer) = await http_connect(
                    h.endpoint, f"{spelling}:{victim.port}")
                assert status == 200, spelling
                writer.write(b"x")
                assert await reader.readexactly(1) == b"x"
                writer.close()

    run(main())
    assert victim.connections == len(spellings)


def test_names_resolving_to_special_addresses_are_refused(backends: Backends) -> None:
    api, victim = backends.start_pair()
    victim6 = backends.start("victim6", host="::1", port=api.port)

    async def main() -> None:
        names = {"loop.test": ["127.0.0.1"], "v6.test": ["::1"],
                 "meta.test": ["169.254.169.254"], "mapped.test": ["::ffff:127.0.0.1"],
                 "near.test": ["127.0.0.3"], "private.test": ["10.0.0.1"]}
        async with proxied(allow_for(api.port, "*.test"), names=names) as h:
            for name, kind in [("loop.test", "loopback"), ("v6.test", "loopback"),
                               ("meta.test", "link-local"), ("mapped.test", "loopback"),
                               ("near.test", "loopback"), ("private.test", "private")]:
                status, headers, (_, writer) = await http_connect(
                    h.endpoint, f"{name}:{api.port}")
                writer.close()
                assert status == 403, name
                reason = headers["x-stockade-denied"]
                assert reason.startswith(f"{name} resolves to ") and kind in reason, reason
            await settle(h.decisions)
            assert [d.rule.split(" ")[0] for d in h.decisions] == ["refused"] * 6
            assert h.decisions[2].address == "169.254.169.254"

    run(main())
    assert victim.connections == victim6.connections == api.connections == 0


def test_literal_special_addresses_are_refused(backends: Backends) -> None:
    api, victim = backends.start_pair()
    victim6 = backends.start("victim6", host="::1", port=api.port)

    async def main() -> None:
        async with proxied(allow_for(api.port, "*.test")) as h:
            for authority in [f"127.0.0.1:{api.port}", f"[::1]:{api.port}",
                              "169.254.169.254:80", f"[::ffff:169.254.169.254]:{api.port}",
                              f"0.0.0.0:{api.port}", f"[::]:{api.port}"]:
                status, _, (_, writer) = await http_connect(h.endpoint, authority)
                writer.close()
                assert status == 403, authority

    run(main())
    assert victim.connections == victim6.connections == 0


def test_rebinding_cannot_switch_the_address(backends: Backends) -> None:
    api, victim = backends.start_pair()
    answers = iter([["127.0.0.2"], ["127.0.0.1"], ["127.0.0.1"]])

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": lambda: next(answers)}) as h:
            status, _, (_, writer) = await http_connect(h.endpoint, f"api.test:{api.port}")
            assert status == 200
            writer.close()
            status, headers, (_, writer) = await http_connect(h.endpoint, f"api.test:{api.port}")
            writer.close()
            assert status == 403
            assert headers["x-stockade-denied"].startswith("api.test resolves to 127.0.0.1")
            status, _, _ = await http_exchange(
                h.endpoint, f"GET http://api.test:{api.port}/ HTTP/1.1\r\n"
                            f"Host: api.test:{api.port}\r\n\r\n".encode())
            assert status == 403
            # One lookup per connection, and the socket goes to what was checked.
            assert h.resolver.calls == ["api.test"] * 3

    run(main())
    assert api.connections == 1
    assert victim.connections == 0


def test_mixed_answers_connect_only_to_a_checked_address(backends: Backends) -> None:
    api, victim = backends.start_pair(mode_a="echo")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.1", "127.0.0.2"]}) as h:
            status, _, (reader, writer) = await http_connect(h.endpoint, f"api.test:{api.port}")
            assert status == 200
            writer.write(b"x")
            assert await reader.readexactly(1) == b"x"
            writer.close()
            assert h.decisions[0].address == "127.0.0.2"

    run(main())
    assert victim.connections == 0


def test_sni_mismatch_closes_the_tunnel_before_a_byte_is_relayed(backends: Backends) -> None:
    api = backends.start("api", mode="sink")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            status, _, (reader, writer) = await http_connect(h.endpoint, f"api.test:{api.port}")
            assert status == 200
            writer.write(client_hello("other.test"))
            assert await closed_by_peer(reader)
            writer.close()
            await settle(h.decisions)
            final = h.decisions.final()[-1]
            assert (final.allowed, final.rule) == (False, "tls sni mismatch")
            assert final.reason == "TLS SNI other.test does not match the CONNECT host api.test"
            assert final.bytes_up == 0

    run(main())
    assert api.bytes_received == 0


def test_matching_or_absent_sni_is_relayed(backends: Backends) -> None:
    api = backends.start("api", mode="sink")
    hellos = [client_hello("API.test."), client_hello(None)]

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            for hello in hellos:
                status, _, (_, writer) = await http_connect(h.endpoint, f"api.test:{api.port}")
                assert status == 200
                writer.write(hello[:10])  # a ClientHello split over TCP writes
                await writer.drain()
                await asyncio.sleep(0.02)
                writer.write(hello[10:])
                await writer.drain()
                await asyncio.sleep(0.1)
                writer.close()

    run(main())
    assert api.bytes_received == sum(len(h) for h in hellos)


def test_sni_naming_a_host_on_an_address_tunnel_is_refused(backends: Backends) -> None:
    api = backends.start("api", mode="sink")

    async def main() -> None:
        async with proxied(allow_for(api.port)) as h:
            status, _, (reader, writer) = await http_connect(h.endpoint, f"127.0.0.2:{api.port}")
            assert status == 200
            writer.write(client_hello("evil.test"))
            assert await closed_by_peer(reader)
            writer.close()

    run(main())
    assert api.bytes_received == 0


def test_tls_ports_carry_tls_only(backends: Backends) -> None:
    api = backends.start("api", mode="sink")
    options = ProxyOptions(tls_ports=frozenset({api.port}))

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"), names={"api.test": ["127.0.0.2"]},
                           options=options) as h:
            status, _, (reader, writer) = await http_connect(h.endpoint, f"api.test:{api.port}")
            assert status == 200
            writer.write(b"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
            assert await closed_by_peer(reader)
            writer.close()
            await settle(h.decisions)
            assert h.decisions.final()[-1].rule == "tls required"

    run(main())
    assert api.bytes_received == 0


def test_plain_http_is_forwarded(backends: Backends) -> None:
    api = backends.start("api")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            status, headers, body = await http_exchange(
                h.endpoint, f"GET http://api.test:{api.port}/x?y=1 HTTP/1.1\r\n"
                            f"Host: api.test:{api.port}\r\nProxy-Authorization: secret\r\n"
                            "Connection: close\r\n\r\n".encode())
            assert status == 200
            assert body == f"api GET /x?y=1 host=api.test:{api.port}".encode()
            assert headers["connection"] == "close"
            await settle(h.decisions)
            assert [(d.protocol, d.final) for d in h.decisions] == [("http", False),
                                                                     ("http", True)]

    run(main())
    assert api.requests[0][:3] == ("GET", "/x?y=1", f"api.test:{api.port}")


def test_a_unicode_allow_entry_reaches_its_own_domain_only(backends: Backends) -> None:
    """`faß.de` is `xn--fa-hia.de` (IDNA 2008, as curl and browsers send it), never
    `fass.de`: a tunnel and a forwarded request to the A-label get through, the
    IDNA 2003 spelling is refused before it is resolved."""
    api = backends.start("api")

    async def main() -> None:
        names = {"xn--fa-hia.de": ["127.0.0.2"], "fass.de": ["127.0.0.2"]}
        async with proxied(allow_for(api.port, "fa\u00df.de"), names=names) as h:
            status, _, (_, writer) = await http_connect(h.endpoint, f"xn--fa-hia.de:{api.port}")
            assert status == 200
            writer.close()
            status, _, body = await http_exchange(
                h.endpoint, f"GET http://xn--fa-hia.de:{api.port}/ HTTP/1.1\r\n"
                            f"Host: xn--fa-hia.de:{api.port}\r\nConnection: close\r\n\r\n"
                            .encode())
            assert (status, body) == (200, f"api GET / host=xn--fa-hia.de:{api.port}".encode())
            status, _, (_, writer) = await http_connect(h.endpoint, f"fass.de:{api.port}")
            assert status == 403
            writer.close()
            await settle(h.decisions)
            refused = h.decisions.denied()
            assert [d.host for d in refused] == ["fass.de"]
            assert refused[0].rule == "no allow entry"
            assert f"allow xn--fa-hia.de:{api.port}" in h.decisions[0].rule
        assert "fass.de" not in h.resolver.calls

    run(main())
    assert api.connections == 2


def test_host_header_mismatch_is_rejected(backends: Backends) -> None:
    api = backends.start("api")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test", "other.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            status, headers, _ = await http_exchange(
                h.endpoint, f"GET http://api.test:{api.port}/ HTTP/1.1\r\n"
                            f"Host: other.test:{api.port}\r\n\r\n".encode())
            assert status == 403
            assert headers["x-stockade-denied"] == (
                f"Host header other.test:{api.port} does not match request target "
                f"api.test:{api.port}")
            await settle(h.decisions)
            assert h.decisions[0].rule == "host header mismatch"

    run(main())
    assert api.connections == 0


def test_request_bodies_and_chunked_responses(backends: Backends) -> None:
    api = backends.start("api")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            base = f"http://api.test:{api.port}"
            host = f"Host: api.test:{api.port}\r\n"
            status, _, body = await http_exchange(
                h.endpoint, f"POST {base}/p HTTP/1.1\r\n{host}Content-Length: 5\r\n"
                            "Connection: close\r\n\r\nhello".encode())
            assert (status, body.split(b" ")[-1]) == (200, b"body=hello")
            status, _, body = await http_exchange(
                h.endpoint, f"POST {base}/c HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n"
                            "Connection: close\r\n\r\n"
                            "3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n".encode())
            assert (status, body.split(b" ")[-1]) == (200, b"body=abcde")
            status, headers, body = await http_exchange(
                h.endpoint, f"GET {base}/chunked HTTP/1.1\r\n{host}Connection: close\r\n\r\n"
                .encode())
            assert headers["transfer-encoding"] == "chunked"
            size, _, rest = body.partition(b"\r\n")
            assert rest == rest[: int(size, 16)] + b"\r\n0\r\n\r\n"
            assert rest.startswith(b"api GET /chunked")

    run(main())


def test_each_request_on_a_kept_alive_connection_is_checked(backends: Backends) -> None:
    api = backends.start("api")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.2"], "evil.test": ["127.0.0.2"]}) as h:
            # One write: a request with a body, then a second request the
            # first one's body framing must not swallow.
            smuggle = (f"POST http://api.test:{api.port}/a HTTP/1.1\r\n"
                       f"Host: api.test:{api.port}\r\nContent-Length: 5\r\n\r\nhello"
                       f"GET http://evil.test:{api.port}/b HTTP/1.1\r\n"
                       f"Host: evil.test:{api.port}\r\n\r\n").encode()
            reader, writer = await asyncio.open_connection(h.endpoint.host, h.endpoint.port)
            writer.write(smuggle)
            status, headers = await read_head(reader)
            body = await reader.readexactly(int(headers["content-length"]))
            assert status == 200 and body.endswith(b"body=hello")
            status, headers = await read_head(reader)
            assert status == 403
            assert headers["x-stockade-denied"] == f"evil.test:{api.port} is not on the allow list"
            writer.close()
            await settle(h.decisions)
            assert [(d.host, d.allowed, d.final) for d in h.decisions] == [
                ("api.test", True, False), ("api.test", True, True), ("evil.test", False, True)]

    run(main())
    assert [r[1] for r in api.requests] == ["/a"]


def test_second_request_to_a_denied_host_gets_its_own_403(backends: Backends) -> None:
    api = backends.start("api")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            reader, writer = await asyncio.open_connection(h.endpoint.host, h.endpoint.port)
            writer.write(f"GET http://api.test:{api.port}/1 HTTP/1.1\r\n"
                         f"Host: api.test:{api.port}\r\n\r\n".encode())
            status, headers = await read_head(reader)
            await reader.readexactly(int(headers["content-length"]))
            assert status == 200
            writer.write(f"GET http://evil.test:{api.port}/2 HTTP/1.1\r\n"
                         f"Host: evil.test:{api.port}\r\n\r\n".encode())
            status, headers = await read_head(reader)
            assert status == 403
            writer.close()
            assert h.resolver.calls == ["api.test"]

    run(main())
    assert len(api.requests) == 1


@pytest.mark.parametrize(("raw", "status"), [
    (b"GET / HTTP/1.1\r\nHost: api.test\r\n\r\n", 400),
    (b"GET https://api.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n", 400),
    (b"GET http://user@api.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n", 400),
    (b"GET http://api.test/ HTTP/1.1\r\n\r\n", 400),
    (b"CONNECT api.test HTTP/1.1\r\n\r\n", 400),
    (b"CONNECT [api.test]:443 HTTP/1.1\r\n\r\n", 400),
    (b"GET http://api.test/ HTTP/3.0\r\n\r\n", 505),
    (b"GET http://api.test/ HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", 431),
])
def test_malformed_requests_get_the_protocol_error(raw: bytes, status: int) -> None:
    async def main() -> None:
        async with proxied(["api.test"], names={"api.test": ["127.0.0.2"]}) as h:
            got, headers, _ = await http_exchange(h.endpoint, raw)
            assert got == status
            assert headers["x-stockade-denied"]
            assert h.resolver.calls == []

    run(main())


def test_unknown_protocols_are_closed() -> None:
    async def main() -> None:
        async with proxied(["api.test"]) as h:
            for opener in (b"\x16\x03\x01\x00\x05hello", b"\x00\x01"):
                reader, writer = await asyncio.open_connection(h.endpoint.host, h.endpoint.port)
                writer.write(opener)
                assert await closed_by_peer(reader)
                writer.close()
            await settle(h.decisions)
            assert [d.rule for d in h.decisions] == ["unsupported protocol"] * 2

    run(main())


def test_refusal_survives_pipelined_bytes() -> None:
    """A client still writing after its request (an upload, say) reads the 403
    rather than failing its write with a reset."""

    def client(port: int) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"POST http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n"
                         b"Content-Length: 4000000\r\n\r\n" + b"u" * 4_000_000)
            return sock.recv(65536)

    async def main() -> None:
        async with proxied(["api.test"]) as h:
            reply = await asyncio.to_thread(client, h.endpoint.port)
            assert reply.startswith(b"HTTP/1.1 403 Forbidden\r\nX-Stockade-Denied: ")

    run(main())


def test_malformed_request_body_is_answered_without_waiting(backends: Backends) -> None:
    api = backends.start("api")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            status, headers, _ = await http_exchange(
                h.endpoint, f"POST http://api.test:{api.port}/ HTTP/1.1\r\n"
                            f"Host: api.test:{api.port}\r\nTransfer-Encoding: chunked\r\n\r\n"
                            "zz\r\n".encode())
            assert status == 400
            assert headers["x-stockade-denied"] == "malformed chunk size line"

    run(main(), timeout=5)
    assert api.requests == []


def test_tls_lookalike_that_is_not_a_client_hello_is_closed(backends: Backends) -> None:
    api = backends.start("api", mode="sink")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            status, _, (reader, writer) = await http_connect(h.endpoint, f"api.test:{api.port}")
            assert status == 200
            writer.write(b"\x16\x03\x01\x00\x05\x02\x00\x00\x01\x00")  # a ServerHello
            assert await closed_by_peer(reader)
            writer.close()
            status, _, (reader, writer) = await http_connect(h.endpoint, f"api.test:{api.port}")
            writer.write(b"\x16binary protocol")  # 0x16 without a TLS version is not TLS
            await writer.drain()
            await asyncio.sleep(0.1)
            writer.close()
            await settle(h.decisions)
            assert h.decisions.final()[0].rule == "tls malformed"

    run(main())
    assert api.bytes_received == len(b"\x16binary protocol")


def test_bytes_pipelined_after_connect_are_judged_too(backends: Backends) -> None:
    api = backends.start("api", mode="sink")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            for name in ("other.test", "api.test"):
                reader, writer = await open_proxy(h.endpoint)
                writer.write(f"CONNECT api.test:{api.port} HTTP/1.1\r\n\r\n".encode()
                             + client_hello(name))
                status, _ = await read_head(reader)
                assert status == 200
                if name == "other.test":
                    assert await closed_by_peer(reader)
                else:
                    await asyncio.sleep(0.1)
                writer.close()

    run(main())
    assert api.bytes_received == len(client_hello("api.test"))


@pytest.mark.parametrize("request_bytes", [
    b"GET / HTTP/1.1\r\nHost: admin.test\r\n\r\n",
    b"\r\nGET /admin HTTP/1.0\r\nHost: admin.test\r\n\r\n",  # servers skip empty lines
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",  # h2c prior knowledge: :authority unchecked too
    b"GET /" + b"a" * 70_000,  # a request line too long to wait for
])
def test_plain_http_inside_a_tunnel_is_refused(backends: Backends, request_bytes: bytes) -> None:
    """Name-based virtual hosts on an allowed address: a forwarded request naming
    admin.test is refused, so the same request inside a CONNECT tunnel must be too;
    it is closed before the request line ends, so the server never serves it."""
    api = backends.start("api")

    async def main() -> None:
        async with proxied([f"127.0.0.2:{api.port}"]) as h:
            status, _, (reader, writer) = await http_connect(h.endpoint, f"127.0.0.2:{api.port}")
            assert status == 200
            for i in range(0, len(request_bytes), 7):  # dribbled, as a slow client sends it
                writer.write(request_bytes[i:i + 7])
                await asyncio.sleep(0)
            assert await closed_by_peer(reader)
            writer.close()
            await settle(h.decisions)
            final = h.decisions.final()[-1]
            assert final.rule == "http in tunnel" and not final.allowed
            assert "forwarded request" in final.reason

    run(main())
    assert api.requests == []


def test_plain_http_inside_a_socks_tunnel_is_refused(backends: Backends) -> None:
    api = backends.start("api")

    async def main() -> None:
        async with proxied([f"127.0.0.2:{api.port}"]) as h:
            code, (reader, writer) = await socks_connect(h.endpoint, "127.0.0.2", api.port)
            assert code == 0
            writer.write(b"GET / HTTP/1.1\r\nHost: admin.test\r\n\r\n")
            assert await closed_by_peer(reader)
            writer.close()
            await settle(h.decisions)
            assert h.decisions.final()[-1].rule == "http in tunnel"

    run(main())
    assert api.requests == []


@pytest.mark.parametrize("first", [b"SSH-2.0-OpenSSH_9.6\r\n", b"EHLO mail.test\r\n", b"ping",
                                   b"GET /" + b"a" * 64,  # a line not ended is relayed as it comes
                                   b"\x00\x00\x00\x08\x04\xd2\x16\x2f", b"*1\r\n$4\r\nPING\r\n"])
def test_other_protocols_in_a_tunnel_are_relayed(backends: Backends, first: bytes) -> None:
    api = backends.start("api", mode="echo")

    async def main() -> None:
        async with proxied([f"127.0.0.2:{api.port}"]) as h:
            status, _, (reader, writer) = await http_connect(h.endpoint, f"127.0.0.2:{api.port}")
            assert status == 200
            writer.write(first)
            async with asyncio.timeout(5):
                assert await reader.readexactly(len(first)) == first
            writer.close()

    run(main())


def test_the_virtual_host_is_reached_through_forwarding_only_when_allowed(
        backends: Backends) -> None:
    """The other half of the report: a forwarded request with `Host: admin.test` to
    the allowed address was refused already, and one naming the address still works."""
    api = backends.start("api")

    async def main() -> None:
        async with proxied([f"127.0.0.2:{api.port}"]) as h:
            status, _, _ = await http_exchange(
                h.endpoint, f"GET http://127.0.0.2:{api.port}/ HTTP/1.1\r\n"
                            "Host: admin.test\r\nConnection: close\r\n\r\n".encode())
            assert status == 403
            status, _, body = await http_exchange(
                h.endpoint, f"GET http://127.0.0.2:{api.port}/ HTTP/1.1\r\n"
                            f"Host: 127.0.0.2:{api.port}\r\nConnection: close\r\n\r\n"
                            .encode())
            assert (status, body) == (200, f"api GET / host=127.0.0.2:{api.port}".encode())

    run(main())
    assert [r[2] for r in api.requests] == [f"127.0.0.2:{api.port}"]


def test_pipelined_bytes_and_eof_are_relayed_in_order(backends: Backends) -> None:
    api = backends.start("api", mode="echo")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            reader, writer = await open_proxy(h.endpoint)
            writer.write(f"CONNECT api.test:{api.port} HTTP/1.1\r\n\r\n".encode()
                         + b"early bytes")
            writer.write_eof()
            status, _ = await read_head(reader)
            assert status == 200
            async with asyncio.timeout(5):
                assert await reader.read() == b"early bytes"
            writer.close()

    run(main())


def test_server_first_protocols_work(backends: Backends) -> None:
    api = backends.start("api", mode="banner")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            status, _, (reader, writer) = await http_connect(h.endpoint, f"api.test:{api.port}")
            assert status == 200
            async with asyncio.timeout(5):
                assert await reader.readuntil(b"\r\n") == b"220 banner\r\n"
            writer.write(b"EHLO\r\n")
            async with asyncio.timeout(5):
                assert await reader.readuntil(b"\r\n") == b"EHLO\r\n"
            writer.close()

    run(main())


def test_upstream_hanging_up_at_once_ends_the_tunnel(backends: Backends) -> None:
    api = backends.start("api", mode="close")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            status, _, (reader, writer) = await http_connect(h.endpoint, f"api.test:{api.port}")
            assert status == 200
            assert await closed_by_peer(reader)
            writer.close()
            await settle(h.decisions)
            assert h.decisions.final()[0].allowed

    run(main())
