"""`proxy_env`: the variables that send ordinary tools through the managed proxy.

One function for every backend, so a client that works under one works under
the others. Each ecosystem reads its own names; see docs/proxy.md for the
table of clients and the few that read none.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from .hosts import Host, canonical_host, parse_pattern

#: Loopback spellings clients are told to reach directly, unless a grant names them.
_LOOPBACK = ("localhost", "127.0.0.1", "::1")
#: The same for the JVM's `http.nonProxyHosts`, in its own glob syntax.
_JVM_LOOPBACK = {"localhost": "localhost", "127.0.0.1": "127.0.0.1", "::1": "[::1]"}
#: The user name in the proxy URL; only the password is checked.
PROXY_USER = "stockade"


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _granted_loopback(grants: Iterable[str]) -> set[str]:
    """The loopback spellings some grant covers; those must go through the proxy.

    Direct, they would reach the sandbox's own loopback (bubblewrap) or a
    Landlock-refused port, never the host's server the grant was for.
    """
    patterns = [parse_pattern(g) for g in grants]
    hosts: dict[str, Host] = {name: canonical_host(name) for name in _LOOPBACK}
    return {name for name, host in hosts.items() if any(p.matches_host(host) for p in patterns)}


def proxy_env(host: str, port: int, *, socks_port: int | None = None,
              secret: str | None = None, grants: Iterable[str] = ()) -> dict[str, str]:
    """Variables pointing tools at the proxy on host:port (HTTP and, on `socks_port`, SOCKS5).

    ALL_PROXY is the http:// URL too, not socks5h://: httpx builds a transport
    for every proxy variable when a client is created, and a socks URL makes it
    fail outright when its optional SOCKS package is missing. `secret` goes
    into the URL as the password the proxy asks for on a TCP listener other
    local users can reach.
    """
    auth = f"{PROXY_USER}:{secret}@" if secret else ""
    url = f"http://{auth}{_authority(host, port)}"
    names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
    env = {n: url for n in names} | {n.lower(): url for n in names}
    routed = _granted_loopback(grants)
    direct = [name for name in _LOOPBACK if name not in routed]
    env["NO_PROXY"] = env["no_proxy"] = ",".join(direct)
    env.update(npm_config_proxy=url, npm_config_https_proxy=url, PIP_PROXY=url,
               YARN_HTTP_PROXY=url, YARN_HTTPS_PROXY=url, CARGO_HTTP_PROXY=url,
               NODE_USE_ENV_PROXY="1")
    # An empty nonProxyHosts is not "none": the JVM then falls back to its
    # default, which bypasses every loopback name.
    jvm_direct = "|".join(_JVM_LOOPBACK[n] for n in direct) or "none.invalid"
    env["JAVA_TOOL_OPTIONS"] = (
        f"-Dhttp.proxyHost={host} -Dhttp.proxyPort={port} -Dhttps.proxyHost={host} "
        f"-Dhttps.proxyPort={port} -Dhttp.nonProxyHosts={jvm_direct}")
    if socks_port is not None and not secret and (
            os.path.exists("/usr/bin/nc") or os.path.exists("/bin/nc")):
        # ssh has no proxy variable; OpenBSD netcat speaks SOCKS5 for it (but
        # sends no password, so not where the proxy asks for one).
        env["GIT_SSH_COMMAND"] = (
            f"ssh -o ProxyCommand='nc -X 5 -x {_authority(host, socks_port)} %h %p'")
    return env
