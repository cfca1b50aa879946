"""Benchmark the managed proxy against direct connections, in one run, on loopback.

    .venv/bin/python bench/proxy.py [--mib 1024] [--rounds 3] [--latency-samples 400]

Three processes: the proxy (as stockade runs it: its own event loop), local
backends (threaded, blocking sockets), and this client. Measured:

* throughput of one CONNECT tunnel, upload and download (target >= 500 MB/s);
* added latency per connection: connect + CONNECT + one echoed byte, median,
  minus the same for a direct connection (target <= 2 ms);
* 200 concurrent tunnels, each echoing 256 KiB, wall time vs direct.

Nothing leaves loopback: the proxy resolves the bench name through a static
table, and the policy allows the backend's explicit address.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import multiprocessing
import os
import socket
import socketserver
import statistics
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from multiprocessing.connection import Connection

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

BACKEND_HOST = "127.0.0.2"
NAME = "bench.test"
BUFFER = 1 << 20


# --- backends (own process) --------------------------------------------------------


class _Sink(socketserver.BaseRequestHandler):
    """Read to EOF, then report the byte count: the client's clock stops on the report."""

    def handle(self) -> None:
        buf = bytearray(BUFFER)
        view = memoryview(buf)
        total = 0
        while n := self.request.recv_into(view):
            total += n
        self.request.sendall(total.to_bytes(8, "big"))


class _Source(socketserver.BaseRequestHandler):
    """Send the number of bytes asked for, then close."""

    def handle(self) -> None:
        want = int.from_bytes(_recv_exactly(self.request, 8), "big")
        chunk = memoryview(bytes(BUFFER))
        while want > 0:
            self.request.sendall(chunk[: min(want, BUFFER)])
            want -= min(want, BUFFER)
        self.request.shutdown(socket.SHUT_WR)


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(262144):
            self.request.sendall(data)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        more = sock.recv(n - len(data))
        if not more:
            raise ConnectionError("closed early")
        data += more
    return data


def run_backends(conn: Connection) -> None:
    servers = [_Server((BACKEND_HOST, 0), handler) for handler in (_Sink, _Source, _Echo)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    conn.send([s.server_address[1] for s in servers])
    conn.recv()  # block until told to stop


# --- the proxy (own process) ------------------------------------------------------


def run_proxy(conn: Connection, ports: list[int]) -> None:
    from stockade.proxy import HostPolicy, ManagedProxy, ProxyOptions

    async def resolve(name: str, port: int) -> list[ipaddress.IPv4Address]:
        if name != NAME:
            raise socket.gaierror(socket.EAI_NONAME, name)
        return [ipaddress.IPv4Address(BACKEND_HOST)]

    async def main() -> None:
        decisions = 0

        def count(_: object) -> None:
            nonlocal decisions
            decisions += 1

        allow = [f"{NAME}:{p}" for p in ports] + [f"{BACKEND_HOST}:{p}" for p in ports]
        async with ManagedProxy(on_decision=count, resolver=resolve,
                                options=ProxyOptions(max_connections=1024)) as proxy:
            endpoint = await proxy.add_session("bench", HostPolicy(allow))
            conn.send(endpoint.port)
            await asyncio.get_running_loop().run_in_executor(None, conn.recv)
            await asyncio.sleep(0.5)  # let the last tunnels report their final records
        conn.send(decisions)

    asyncio.run(main())


# --- the client -------------------------------------------------------------------


def open_tunnel(proxy_port: int | None, port: int) -> socket.socket:
    """A connected socket to the backend port, directly or through a CONNECT tunnel."""
    if proxy_port is None:
        sock = socket.create_connection((BACKEND_HOST, port))
    else:
        sock = socket.create_connection(("127.0.0.1", proxy_port))
        sock.sendall(f"CONNECT {NAME}:{port} HTTP/1.1\r\nHost: {NAME}:{port}\r\n\r\n".encode())
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            more = sock.recv(1)
            if not more:
                raise ConnectionError("proxy closed the connection")
            head += more
        if not head.startswith(b"HTTP/1.1 200"):
            raise ConnectionError(head.decode(errors="replace"))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def upload(proxy_port: int | None, sink_port: int, total: int) -> float:
    sock = open_tunnel(proxy_port, sink_port)
    chunk = memoryview(bytes(BUFFER))
    start = time.perf_counter()
    left = total
    while left > 0:
        sock.sendall(chunk[: min(left, BUFFER)])
        left -= BUFFER
    sock.shutdown(socket.SHUT_WR)
    received = int.from_bytes(_recv_exactly(sock, 8), "big")
    elapsed = time.perf_counter() - start
    sock.close()
    assert received == total, (received, total)
    return total / elapsed


def download(proxy_port: int | None, source_port: int, total: int) -> float:
    sock = open_tunnel(proxy_port, source_port)
    buf = memoryview(bytearray(BUFFER))
    start = time.perf_counter()
    sock.sendall(total.to_bytes(8, "big"))
    got = 0
    while n := sock.recv_into(buf):
        got += n
    elapsed = time.perf_counter() - start
    sock.close()
    assert got == total, (got, total)
    return total / elapsed


def connect_latency(proxy_port: int | None, echo_port: int) -> float:
    start = time.perf_counter()
    sock = open_tunnel(proxy_port, echo_port)
    sock.sendall(b"x")
    _recv_exactly(sock, 1)
    elapsed = time.perf_counter() - start
    sock.close()
    return elapsed


async def concurrent_tunnels(proxy_port: int | None, echo_port: int, count: int,
                             per_tunnel: int) -> float:
    async def one(i: int) -> None:
        if proxy_port is None:
            reader, writer = await asyncio.open_connection(BACKEND_HOST, echo_port)
        else:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
            writer.write(f"CONNECT {NAME}:{echo_port} HTTP/1.1\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head
        block = bytes([i % 251]) * 65536
        for _ in range(per_tunnel // len(block)):
            writer.write(block)
            assert await reader.readexactly(len(block)) == block
        writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    return time.perf_counter() - start


def best_and_median(fn: Callable[[], float], rounds: int) -> tuple[float, float]:
    values = [fn() for _ in range(rounds)]
    return max(values), statistics.median(values)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--mib", type=int, default=1024, help="bytes per throughput run, MiB")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-samples", type=int, default=400)
    parser.add_argument("--tunnels", type=int, default=200)
    args = parser.parse_args(argv)

    ctx = multiprocessing.get_context("spawn")
    backend_conn, backend_child = ctx.Pipe()
    backends = ctx.Process(target=run_backends, args=(backend_child,), daemon=True)
    backends.start()
    sink_port, source_port, echo_port = backend_conn.recv()
    proxy_conn, proxy_child = ctx.Pipe()
    proxy = ctx.Process(target=run_proxy, args=(proxy_child, [sink_port, source_port, echo_port]),
                        daemon=True)
    proxy.start()
    proxy_port = proxy_conn.recv()

    total = args.mib * 1024 * 1024
    mb = 1e6
    print(f"stockade proxy benchmark: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
          f"{args.mib} MiB per throughput run, best/median of {args.rounds}")
    print(f"{'':34}{'direct':>16}{'proxied':>16}")

    results: dict[str, float] = {}
    for label, fn, port in (("one tunnel, upload (MB/s)", upload, sink_port),
                            ("one tunnel, download (MB/s)", download, source_port)):
        direct = best_and_median(partial(fn, None, port, total), args.rounds)
        proxied = best_and_median(partial(fn, proxy_port, port, total), args.rounds)
        results[label] = proxied[1]
        print(f"{label:34}{direct[0] / mb:8.0f}/{direct[1] / mb:<7.0f}"
              f"{proxied[0] / mb:8.0f}/{proxied[1] / mb:<7.0f}")

    for _ in range(20):  # warm both paths
        connect_latency(None, echo_port)
        connect_latency(proxy_port, echo_port)
    direct_lat = [connect_latency(None, echo_port) for _ in range(args.latency_samples)]
    proxied_lat = [connect_latency(proxy_port, echo_port) for _ in range(args.latency_samples)]
    d_med, p_med = statistics.median(direct_lat), statistics.median(proxied_lat)
    d_p90 = statistics.quantiles(direct_lat, n=10)[-1]
    p_p90 = statistics.quantiles(proxied_lat, n=10)[-1]
    added = (p_med - d_med) * 1000
    print(f"{'connect + 1 byte, median (ms)':34}{d_med * 1000:16.3f}{p_med * 1000:16.3f}")
    print(f"{'connect + 1 byte, p90 (ms)':34}{d_p90 * 1000:16.3f}{p_p90 * 1000:16.3f}")

    per_tunnel = 256 * 1024
    direct_wall = asyncio.run(concurrent_tunnels(None, echo_port, args.tunnels, per_tunnel))
    proxied_wall = asyncio.run(concurrent_tunnels(proxy_port, echo_port, args.tunnels,
                                                  per_tunnel))
    moved = 2 * args.tunnels * per_tunnel / mb
    print(f"{f'{args.tunnels} concurrent tunnels, wall (s)':34}"
          f"{direct_wall:16.3f}{proxied_wall:16.3f}")
    print(f"{f'{args.tunnels} concurrent tunnels (MB/s)':34}"
          f"{moved / direct_wall:16.0f}{moved / proxied_wall:16.0f}")

    proxy_conn.send("stop")
    decisions = proxy_conn.recv()
    backend_conn.send("stop")
    proxy.join(10)
    backends.join(10)

    up = results["one tunnel, upload (MB/s)"] / mb
    down = results["one tunnel, download (MB/s)"] / mb
    print()
    print(f"decision records received by the callback: {decisions} "
          "(two per connection: opened, closed)")
    print(f"target: one tunnel >= 500 MB/s   upload {up:.0f}, download {down:.0f} (median): "
          f"{'PASS' if min(up, down) >= 500 else 'FAIL'}")
    print(f"target: added latency <= 2 ms     {added:.3f} ms (median): "
          f"{'PASS' if added <= 2 else 'FAIL'}")
    return 0 if min(up, down) >= 500 and added <= 2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
