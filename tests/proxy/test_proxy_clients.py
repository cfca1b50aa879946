"""Real clients through `ProxyThread`: curl (HTTP proxy and SOCKS5) and Python's urllib
configured only by the proxy environment variables."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from proxy_testkit import (
    Backend,
    Backends,
    Decisions,
    StaticResolver,
    TlsMaterial,
    allow_for,
    make_tls_with_openssl,
    wait_until,
)

from stockade.proxy import HostPolicy, ProxyThread, SessionEndpoint

CURL = shutil.which("curl")
needs_curl = pytest.mark.skipif(CURL is None, reason="curl is not installed")


@dataclass
class Setup:
    proxy: ProxyThread
    endpoint: SessionEndpoint
    decisions: Decisions
    web: Backend
    tls_web: Backend
    tls: TlsMaterial


@pytest.fixture
def setup(backends: Backends, tls: TlsMaterial) -> Iterator[Setup]:
    web = backends.start("web")
    tls_web = backends.start("secure", tls=True)
    decisions = Decisions()
    resolver = StaticResolver({"api.test": ["127.0.0.2"], "evil.test": ["127.0.0.2"]})
    with ProxyThread(on_decision=decisions.append, resolver=resolver) as proxy:
        policy = HostPolicy(allow=[*allow_for(web.port, "api.test"),
                                   *allow_for(tls_web.port, "api.test")],
                            deny={"evil.test": "not for agents"})
        endpoint = proxy.add_session("clients", policy)
        yield Setup(proxy, endpoint, decisions, web, tls_web, tls)


def client_env(s: Setup) -> dict[str, str]:
    """A child environment with the proxy variables and the test CA, and nothing
    that could route around the proxy (no NO_PROXY)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SSL_CERT_FILE": str(s.tls.ca_path),
            **s.endpoint.env()}


def curl(s: Setup, *args: str) -> subprocess.CompletedProcess[str]:
    assert CURL is not None
    return subprocess.run([CURL, "-sS", "--max-time", "10", "--noproxy", "", *args],
                          env=client_env(s), capture_output=True, text=True, timeout=20)


@needs_curl
def test_curl_https_through_connect(setup: Setup) -> None:
    url = f"https://api.test:{setup.tls_web.port}/x"
    done = curl(setup, "--fail", "--cacert", str(setup.tls.ca_path), url)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"secure GET /x host=api.test:{setup.tls_web.port}"


@needs_curl
def test_curl_plain_http_forwarding(setup: Setup) -> None:
    done = curl(setup, "--fail", f"http://api.test:{setup.web.port}/plain")
    assert done.stdout == f"web GET /plain host=api.test:{setup.web.port}", done.stderr


@needs_curl
def test_curl_through_socks5(setup: Setup) -> None:
    done = curl(setup, "--fail", "--proxy", setup.endpoint.socks_proxy_url,
                "--cacert", str(setup.tls.ca_path), f"https://api.test:{setup.tls_web.port}/s")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("secure GET /s")
    wait_until(setup.decisions.complete)
    assert {d.protocol for d in setup.decisions} == {"socks5"}


@needs_curl
def test_curl_sees_the_denial(setup: Setup) -> None:
    port = setup.tls_web.port
    done = curl(setup, "-w", "%{http_connect}", "--cacert", str(setup.tls.ca_path),
                f"https://evil.test:{port}/")
    assert done.returncode != 0
    assert done.stdout == "403"
    assert "CONNECT tunnel failed, response 403" in done.stderr
    done = curl(setup, "-i", f"http://evil.test:{setup.web.port}/")
    assert done.stdout.startswith("HTTP/1.1 403 Forbidden")
    assert f"X-Stockade-Denied: evil.test:{setup.web.port} is denied: not for agents" in (
        done.stdout)
    assert setup.web.connections == setup.tls_web.connections == 0
    wait_until(lambda: len(setup.decisions) >= 2)
    assert [(d.host, d.rule) for d in setup.decisions] == [("evil.test", "deny evil.test")] * 2


URLOPEN = ("import sys, urllib.request\n"
           "print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode(), end='')\n")


def urlopen(s: Setup, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", URLOPEN, url], env=client_env(s),
                          capture_output=True, text=True, timeout=30)


def test_python_urllib_uses_the_env_proxies(setup: Setup) -> None:
    done = urlopen(setup, f"https://api.test:{setup.tls_web.port}/py")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"secure GET /py host=api.test:{setup.tls_web.port}"
    done = urlopen(setup, f"http://api.test:{setup.web.port}/py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("web GET /py")
    wait_until(setup.decisions.complete)
    assert {d.protocol for d in setup.decisions} == {"connect", "http"}


def test_python_urllib_sees_the_denial(setup: Setup) -> None:
    done = urlopen(setup, f"https://evil.test:{setup.tls_web.port}/")
    assert done.returncode != 0
    assert "Tunnel connection failed: 403" in done.stderr
    assert setup.tls_web.connections == 0


def test_proxy_thread_lifecycle() -> None:
    proxy = ProxyThread()
    proxy.start()
    endpoint = proxy.add_session("a", HostPolicy(["api.test"]))
    assert proxy.add_session("a", HostPolicy()) == endpoint
    proxy.set_policy("a", HostPolicy(["other.test"]))
    with socket.create_connection((endpoint.host, endpoint.port), timeout=5):
        pass
    proxy.remove_session("a")
    with pytest.raises(OSError):
        socket.create_connection((endpoint.host, endpoint.port), timeout=5)
    second = proxy.add_session("b", HostPolicy())
    proxy.close()
    proxy.close()
    with pytest.raises(OSError):
        socket.create_connection((second.host, second.port), timeout=5)
    assert not os.path.exists(second.unix_path)


def test_openssl_made_certificates_work_too(tmp_path: Path, backends: Backends) -> None:
    """The fallback used where the cryptography package is missing."""
    material = make_tls_with_openssl(tmp_path)
    server = material.server_context()
    client = material.client_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(incoming, outgoing, server_hostname="api.test")
    s = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):  # drive both ends of the handshake in memory
        for end in (c, s):
            with contextlib.suppress(ssl.SSLWantReadError):
                end.do_handshake()
        s_in.write(outgoing.read())
        incoming.write(s_out.read())
    peer = c.getpeercert()
    assert c.version() is not None and peer is not None and peer["subject"]
