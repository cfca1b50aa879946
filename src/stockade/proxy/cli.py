"""`stockade proxy`: run the proxy alone in the foreground, printing each decision.

For debugging a policy: point curl or any tool at the printed address and watch
what is allowed, what is denied and why. It uses the host's real resolver.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from typing import TextIO

from ..errors import SandboxError
from .policy import HostPolicy, ProxyDecision
from .server import ManagedProxy, ProxyOptions

_SESSION = "cli"


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stockade proxy",
        description="Run the managed egress proxy in the foreground with a live decision log. "
        "One port serves HTTP CONNECT, plain HTTP forwarding and SOCKS5.",
    )
    parser.add_argument("--allow-host", action="append", default=[], metavar="H[:P]",
                        help="allow a name, *.suffix, IP or CIDR; without :P, ports 80 and 443")
    parser.add_argument("--deny-host", action="append", default=[], metavar="H[=REASON]",
                        help="deny a host (every port unless :P is given), checked first; "
                        "REASON is shown to the client")
    parser.add_argument("--listen-port", type=int, default=0, metavar="N",
                        help="loopback TCP port to listen on (default: any free port)")
    parser.add_argument("--unix", metavar="PATH", help="unix socket path to listen on too")
    parser.add_argument("--json", action="store_true", help="print decisions as JSON lines")
    parser.add_argument("--connect-timeout", type=float, default=10.0, metavar="S",
                        help="seconds for resolving a host and connecting to it (default 10)")
    parser.add_argument("--idle-timeout", type=float, default=300.0, metavar="S",
                        help="close a tunnel or kept-alive connection that carried no byte "
                        "for S seconds (default 300)")
    parser.add_argument("--max-connections", type=int, default=256, metavar="N",
                        help="client connections at once; more are refused, not queued "
                        "(default 256)")
    return parser


def format_decision(d: ProxyDecision) -> str:
    """One human line per record: ALLOW when a connection opens, DENY, or CLOSE/FAIL at the end."""
    clock = time.strftime("%H:%M:%S", time.localtime(d.started))
    target = f"{d.host}:{d.port}" if d.host else "-"
    via = f" -> {d.address}" if d.address else ""
    if not d.allowed:
        return f"{clock} DENY  #{d.connection_id} {d.protocol} {target}{via} [{d.rule}] {d.reason}"
    if not d.final:
        return f"{clock} ALLOW #{d.connection_id} {d.protocol} {target}{via} [{d.rule}]"
    word = "FAIL " if d.error and d.bytes_up == d.bytes_down == 0 else "CLOSE"
    tail = f" error: {d.error}" if d.error else ""
    return (f"{clock} {word} #{d.connection_id} {d.protocol} {target}{via} "
            f"up {_human(d.bytes_up)} down {_human(d.bytes_down)} {d.duration:.2f}s{tail}")


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


async def _serve(args: argparse.Namespace, policy: HostPolicy, out: TextIO) -> None:
    def show(decision: ProxyDecision) -> None:
        line = json.dumps(decision.to_json()) if args.json else format_decision(decision)
        print(line, file=out, flush=True)

    options = ProxyOptions(connect_timeout=args.connect_timeout, idle_timeout=args.idle_timeout,
                           max_connections=args.max_connections)
    async with ManagedProxy(on_decision=show, options=options) as proxy:
        endpoint = await proxy.add_session(_SESSION, policy, port=args.listen_port,
                                           unix_path=args.unix)
        print(f"stockade proxy: listening on {endpoint.host}:{endpoint.port} "
              f"and unix:{endpoint.unix_path}", file=out)
        print(f"  export HTTPS_PROXY={endpoint.http_proxy_url} "
              f"HTTP_PROXY={endpoint.http_proxy_url}   (SOCKS5: {endpoint.socks_proxy_url})",
              file=out)
        for rule in policy.allow:
            print(f"  allow {rule.text}", file=out)
        for rule in policy.deny:
            print(f"  deny  {rule.text}" + (f"  ({rule.reason})" if rule.reason else ""), file=out)
        if not policy.allow:
            print("  (no --allow-host given: every connection will be denied)", file=out)
        print("  Ctrl-C to stop", file=out, flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)


def main(argv: list[str], *, out: TextIO | None = None) -> int:
    """Entry point for `stockade proxy ...`; `argv` excludes the word "proxy"."""
    args = argument_parser().parse_args(argv)
    out = out or sys.stdout
    try:
        deny: dict[str, str] = {}
        for entry in args.deny_host:
            host, _, reason = entry.partition("=")
            deny[host] = reason
        policy = HostPolicy(allow=args.allow_host, deny=deny)
        asyncio.run(_serve(args, policy, out))
    except SandboxError as exc:
        print(f"stockade proxy: {exc}", file=sys.stderr)
        return exc.exit_status
    return 0


if __name__ == "__main__":  # pragma: no cover - manual debugging convenience
    sys.exit(main(sys.argv[1:]))
