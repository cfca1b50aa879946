"""Concurrency, the per-session cap, timeouts, backpressure, audit and lifecycle."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path

import pytest
from proxy_testkit import (
    Backends,
    Decisions,
    StaticResolver,
    allow_for,
    closed_by_peer,
    http_connect,
    http_exchange,
    open_proxy,
    proxied,
    read_head,
    run,
    settle,
    socks_connect,
)

from stockade.errors import ConfigError
from stockade.proxy import (
    HostPolicy,
    ManagedProxy,
    ProxyDecision,
    ProxyOptions,
    ProxyUnavailable,
    SessionEndpoint,
    proxy_env,
)


async def wait_for_final(decisions: Decisions, count: int) -> None:
    async with asyncio.timeout(5):
        while len([d for d in decisions if d.final and d.allowed]) < count:
            await asyncio.sleep(0.01)


def test_200_concurrent_tunnels_through_one_session(backends: Backends) -> None:
    api = backends.start("api", mode="echo")

    async def one(endpoint: SessionEndpoint, i: int) -> None:
        status, _, (reader, writer) = await http_connect(endpoint, f"api.test:{api.port}")
        assert status == 200
        payload = b"data" + os.urandom(16384) + i.to_bytes(4, "big")
        writer.write(payload)
        assert await reader.readexactly(len(payload)) == payload
        writer.close()

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            await asyncio.gather(*(one(h.endpoint, i) for i in range(200)))
            await settle(h.decisions, timeout=20)
            final = h.decisions.final()
            assert len(final) == 200 and all(d.allowed and d.error is None for d in final)
            assert len({d.connection_id for d in final}) == 200

    run(main(), timeout=60)
    assert api.connections == 200


def test_connection_cap_refuses_with_the_protocols_error(backends: Backends) -> None:
    api = backends.start("api", mode="echo")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"), names={"api.test": ["127.0.0.2"]},
                           max_connections=3) as h:
            open_tunnels = []
            for _ in range(3):
                status, _, stream = await http_connect(h.endpoint, f"api.test:{api.port}")
                assert status == 200
                open_tunnels.append(stream)
            status, headers, (_, writer) = await http_connect(h.endpoint, f"api.test:{api.port}")
            writer.close()
            assert status == 429
            assert headers["x-stockade-denied"] == (
                "session s1 already has 3 connections open (the limit is 3)")
            code, (_, writer) = await socks_connect(h.endpoint, "api.test", api.port)
            writer.close()
            assert code == 0x02
            open_tunnels[0][1].close()
            await wait_for_final(h.decisions, 1)
            status, _, (_, writer) = await http_connect(h.endpoint, f"api.test:{api.port}")
            assert status == 200
            writer.close()
            for _, w in open_tunnels[1:]:
                w.close()

    run(main())
    assert api.connections == 4


def test_silent_client_is_dropped_after_the_handshake_timeout() -> None:
    async def main() -> None:
        async with proxied(["api.test"], options=ProxyOptions(handshake_timeout=0.3)) as h:
            reader, writer = await open_proxy(h.endpoint)
            assert await closed_by_peer(reader, timeout=3)
            writer.close()
            reader, writer = await open_proxy(h.endpoint)
            writer.write(b"GET http://api.test/ HTTP/1.1\r\n")  # never finishes the head
            status, _ = await read_head(reader)
            assert status == 408
            writer.close()
            await settle(h.decisions)
            assert [d.rule for d in h.decisions] == ["handshake timeout", "bad request"]

    run(main())


def test_idle_tunnel_is_closed_and_busy_tunnel_is_not(backends: Backends) -> None:
    api = backends.start("api", mode="echo")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"), names={"api.test": ["127.0.0.2"]},
                           options=ProxyOptions(idle_timeout=0.4)) as h:
            _, _, (busy_r, busy_w) = await http_connect(h.endpoint, f"api.test:{api.port}")
            _, _, (idle_r, idle_w) = await http_connect(h.endpoint, f"api.test:{api.port}")
            for _ in range(10):  # 1 s of traffic on one tunnel, none on the other
                # Not a token character: a first flight of "." could still grow
                # into an HTTP request line, which a tunnel refuses, so it waits.
                busy_w.write(b"\x00")
                assert await busy_r.readexactly(1) == b"\x00"
                await asyncio.sleep(0.1)
            assert await closed_by_peer(idle_r, timeout=0.5)
            busy_w.write(b"!")
            assert await busy_r.readexactly(1) == b"!"
            busy_w.close()
            idle_w.close()
            await settle(h.decisions)
            errors = [d.error for d in h.decisions.final()]
            assert "idle for 0.4s" in errors

    run(main())


def test_slow_resolution_is_a_gateway_timeout() -> None:
    async def slow(name: str, port: int) -> list[object]:
        await asyncio.sleep(10)
        return []

    async def main() -> None:
        decisions = Decisions()
        async with ManagedProxy(on_decision=decisions.append, resolver=slow,  # type: ignore[arg-type]
                                options=ProxyOptions(connect_timeout=0.3)) as proxy:
            endpoint = await proxy.add_session("s", HostPolicy(["api.test"]))
            status, headers, (_, writer) = await http_connect(endpoint, "api.test:443")
            writer.close()
            assert status == 504
            assert headers["x-stockade-denied"] == "resolving api.test timed out"
            await settle(decisions)
            assert decisions[0].allowed and decisions[0].error

    run(main())


def test_unresolvable_name_is_a_bad_gateway() -> None:
    async def main() -> None:
        async with proxied(["api.test"]) as h:
            status, headers, (_, writer) = await http_connect(h.endpoint, "api.test:443")
            writer.close()
            assert status == 502
            assert headers["x-stockade-denied"].startswith("api.test could not be resolved")

    run(main())


def test_slow_reader_holds_back_the_sender(backends: Backends) -> None:
    flood = backends.start("flood", mode="flood")

    async def main() -> None:
        async with proxied(allow_for(flood.port, "api.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            _, _, (reader, writer) = await http_connect(h.endpoint, f"api.test:{flood.port}")
            await asyncio.sleep(1.0)  # the client reads nothing
            held = flood.bytes_sent
            # Kernel socket buffers on both hops hold some megabytes; without
            # drain() the proxy would have read hundreds more into memory.
            assert held < 64 * 1024 * 1024, held
            got = 0
            while got < held + 1024 * 1024:
                got += len(await reader.read(1 << 20))
            writer.close()

    run(main())


def test_half_close_is_passed_on(backends: Backends) -> None:
    api = backends.start("api", mode="echo")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            _, _, (reader, writer) = await http_connect(h.endpoint, f"api.test:{api.port}")
            writer.write(b"last words")
            writer.write_eof()
            async with asyncio.timeout(5):
                assert await reader.read() == b"last words"
            writer.close()

    run(main())


def test_a_failing_audit_callback_fails_closed(backends: Backends) -> None:
    api = backends.start("api", mode="sink")

    def ledger(decision: ProxyDecision) -> None:
        raise OSError("disk full")

    async def main() -> None:
        async with ManagedProxy(on_decision=ledger, resolver=StaticResolver(
                {"api.test": ["127.0.0.2"]})) as proxy:
            endpoint = await proxy.add_session("s", HostPolicy(allow_for(api.port, "api.test")))
            status, headers, (reader, writer) = await http_connect(
                endpoint, f"api.test:{api.port}")
            assert status == 503
            assert "audit ledger" in headers["x-stockade-denied"]
            await reader.readexactly(int(headers["content-length"]))
            writer.write(b"payload")
            assert await closed_by_peer(reader)
            writer.close()

    run(main())
    assert api.bytes_received == 0


def test_sessions_have_their_own_policies_and_listeners(backends: Backends) -> None:
    api = backends.start("api", mode="echo")

    async def main() -> None:
        decisions = Decisions()
        resolver = StaticResolver({"api.test": ["127.0.0.2"]})
        async with ManagedProxy(on_decision=decisions.append, resolver=resolver) as proxy:
            one = await proxy.add_session("one", HostPolicy(allow_for(api.port, "api.test")))
            two = await proxy.add_session("two", HostPolicy())
            assert one.port != two.port and one.unix_path != two.unix_path
            assert (await http_connect(one, f"api.test:{api.port}"))[0] == 200
            assert (await http_connect(two, f"api.test:{api.port}"))[0] == 403
            again = await proxy.add_session("two", HostPolicy(allow_for(api.port, "api.test")))
            assert again == two  # same endpoint, new policy
            assert (await http_connect(two, f"api.test:{api.port}"))[0] == 200
            assert sorted(proxy.session_ids) == ["one", "two"]
            await settle(decisions)
            by_session = {(d.session_id, d.allowed) for d in decisions}
            assert by_session == {("one", True), ("two", False), ("two", True)}

    run(main())


def test_removing_a_session_cuts_its_tunnels_and_closes_its_listeners(
        backends: Backends) -> None:
    api = backends.start("api", mode="echo")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"),
                           names={"api.test": ["127.0.0.2"]}) as h:
            _, _, (reader, writer) = await http_connect(h.endpoint, f"api.test:{api.port}")
            await h.proxy.remove_session("s1")
            assert await closed_by_peer(reader)
            writer.close()
            with pytest.raises(OSError):
                await open_proxy(h.endpoint)
            with pytest.raises(OSError):
                await open_proxy(h.endpoint, via="unix")
            assert not os.path.exists(h.endpoint.unix_path)
            await settle(h.decisions)
            assert h.decisions.final()[-1].error == "the session was closed"

    run(main())


def test_a_closed_proxy_refuses_everything() -> None:
    async def main() -> None:
        proxy = ManagedProxy()
        endpoint = await proxy.add_session("s", HostPolicy(["api.test"]))
        socket_dir = os.path.dirname(endpoint.unix_path)
        await proxy.aclose()
        with pytest.raises(OSError):
            await open_proxy(endpoint)
        assert not os.path.exists(socket_dir)
        with pytest.raises(ProxyUnavailable):
            await proxy.add_session("s2", HostPolicy())

    run(main())


def test_a_live_unix_path_is_not_stolen(tmp_path: object) -> None:
    async def main() -> None:
        path = os.path.join(str(tmp_path), "p.sock")
        async with ManagedProxy() as first, ManagedProxy() as second:
            await first.add_session("s", HostPolicy(), unix_path=path)
            with pytest.raises(ProxyUnavailable, match="in use"):
                await second.add_session("s", HostPolicy(), unix_path=path)

    run(main())


def test_proxy_env_points_every_proxy_variable_at_one_http_url() -> None:
    env = proxy_env("127.0.0.1", 3128)
    urls = {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
            "npm_config_proxy", "npm_config_https_proxy", "PIP_PROXY", "YARN_HTTP_PROXY",
            "YARN_HTTPS_PROXY", "CARGO_HTTP_PROXY"}
    assert urls <= set(env)
    assert {env[n] for n in urls} == {"http://127.0.0.1:3128"}
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1,::1"
    assert env["NODE_USE_ENV_PROXY"] == "1"
    assert "-Dhttps.proxyPort=3128" in env["JAVA_TOOL_OPTIONS"]
    assert "-Dhttp.nonProxyHosts=localhost|127.0.0.1|[::1]" in env["JAVA_TOOL_OPTIONS"]
    assert proxy_env("::1", 1)["ALL_PROXY"] == "http://[::1]:1"


@pytest.mark.parametrize(("grants", "direct", "jvm"), [
    (["localhost:8000"], "127.0.0.1,::1", "127.0.0.1|[::1]"),
    (["127.0.0.1:8000"], "localhost,::1", "localhost|[::1]"),
    (["127.0.0.0/8:8000", "[::1]:9"], "localhost", "localhost"),
    (["localhost:1", "127.0.0.1:1", "[::1]:1"], "", "none.invalid"),
    (["example.com", "*.localhost"], "localhost,127.0.0.1,::1", "localhost|127.0.0.1|[::1]"),
])
def test_proxy_env_routes_a_granted_loopback_host_through_the_proxy(
        grants: list[str], direct: str, jvm: str) -> None:
    env = proxy_env("127.0.0.1", 3128, grants=grants)
    assert env["NO_PROXY"] == env["no_proxy"] == direct
    assert f"-Dhttp.nonProxyHosts={jvm}" in env["JAVA_TOOL_OPTIONS"]


def test_proxy_env_puts_the_secret_in_every_url_and_drops_the_ssh_route() -> None:
    env = proxy_env("127.0.0.1", 4000, socks_port=4000, secret="s3cr3t")
    assert env["HTTPS_PROXY"] == env["ALL_PROXY"] == "http://stockade:s3cr3t@127.0.0.1:4000"
    assert "GIT_SSH_COMMAND" not in env


@pytest.mark.parametrize("options", [
    {"listen_host": "0.0.0.0"}, {"listen_host": "192.168.1.5"}, {"listen_host": "localhost"},
    {"idle_timeout": 0}, {"connect_timeout": -1}, {"max_connections": -1},
])
def test_options_refuse_non_loopback_listeners_and_nonsense(options: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        ProxyOptions(**options)  # type: ignore[arg-type]
    assert ProxyOptions(listen_host="::1").listen_host == "::1"


def test_an_ipv6_loopback_listener_works(backends: Backends) -> None:
    api = backends.start("api", mode="echo")

    async def main() -> None:
        async with proxied(allow_for(api.port, "api.test"), names={"api.test": ["127.0.0.2"]},
                           options=ProxyOptions(listen_host="::1")) as h:
            assert h.endpoint.http_proxy_url == f"http://[::1]:{h.endpoint.port}"
            status, _, (reader, writer) = await http_connect(h.endpoint, f"api.test:{api.port}")
            assert status == 200
            writer.write(b"6")
            assert await reader.readexactly(1) == b"6"
            writer.close()

    run(main())


def test_listeners_can_be_left_out_and_a_long_socket_path_binds(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120)
    deep.mkdir(mode=0o700)

    async def main() -> None:
        async with ManagedProxy(socket_dir=str(deep)) as proxy:
            unix_only = await proxy.add_session("u", HostPolicy(), tcp=False)
            assert unix_only.port == 0 and len(unix_only.unix_path) > 107
            assert os.path.exists(unix_only.unix_path)
            tcp_only = await proxy.add_session("t", HostPolicy(), unix=False, secret="pw")
            assert tcp_only.port and tcp_only.unix_path == ""
            assert tcp_only.http_proxy_url == f"http://stockade:pw@127.0.0.1:{tcp_only.port}"
            with pytest.raises(ConfigError):
                await proxy.add_session("n", HostPolicy(), tcp=False, unix=False)
            await proxy.remove_session("u")
            assert not os.path.exists(unix_only.unix_path)

    run(main())


def test_a_session_secret_is_asked_of_every_protocol_and_anonymous_tries_leave_no_record(
        backends: Backends) -> None:
    api = backends.start("api")

    async def main() -> None:
        decisions = Decisions()
        resolver = StaticResolver({"api.test": ["127.0.0.2"]})
        async with ManagedProxy(on_decision=decisions.append, resolver=resolver) as proxy:
            ep = await proxy.add_session("s1", HostPolicy(allow_for(api.port, "api.test")),
                                         unix=False, secret="pw")
            target = f"http://api.test:{api.port}/x"
            get = f"GET {target} HTTP/1.1\r\nHost: api.test:{api.port}\r\n"
            status, headers, _ = await http_exchange(ep, f"{get}\r\n".encode())
            assert status == 407
            assert headers["proxy-authenticate"] == 'Basic realm="stockade"'
            wrong = base64.b64encode(b"stockade:nope").decode()
            status, _, _ = await http_exchange(
                ep, f"{get}Proxy-Authorization: Basic {wrong}\r\n\r\n".encode())
            assert status == 407
            reader, writer = await open_proxy(ep)
            writer.write(b"\x16\x03\x01garbage")
            assert await reader.read() == b""
            writer.close()
            reader, writer = await open_proxy(ep)
            writer.write(b"\x05\x01\x00")
            assert await reader.read() == b"\x05\xff"
            writer.close()
            await settle(decisions)
            assert list(decisions) == [] and api.connections == 0
            # Any user name, any case of the scheme: the password is the grant.
            right = base64.b64encode(b"anyone:pw").decode()
            status, _, body = await http_exchange(
                ep, f"{get}proxy-authorization: basic {right}\r\n\r\n".encode())
            assert status == 200 and body.startswith(b"api GET /x"), body
            code, (reader, writer) = await socks_connect(
                ep, "api.test", api.port, auth=(b"stockade", b"pw"))
            writer.close()
            assert code == 0
            await settle(decisions)
            assert [d.allowed for d in decisions.final()] == [True, True]

    run(main())
