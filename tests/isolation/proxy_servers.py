"""Loopback servers for the managed-network isolation tests; each counts what reaches it.

Everything here binds to 127.0.0.0/8 or ::1 and never connects anywhere: the
tests prove a denial by what these servers did NOT receive, so each one
records every TCP connection it accepted (before any byte is read), every
byte or datagram, and every request line.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

#: Bound on every blocking call a server makes, so a stuck peer cannot hang a test.
IO_TIMEOUT = 5.0


def bind_same_port(addresses: Sequence[str], *, kind: int = socket.SOCK_STREAM,
                   port: int = 0) -> list[socket.socket]:
    """One socket per address, all on the same port (the first address picks it when 0).

    Lets a decoy sit on 127.0.0.1:P beside the real backend on 127.0.0.2:P, so
    a request that is wrongly steered to another address lands on the decoy.
    """
    for _ in range(50):
        socks: list[socket.socket] = []
        try:
            chosen = port
            for address in addresses:
                family = socket.AF_INET6 if ":" in address else socket.AF_INET
                s = socket.socket(family, kind)
                socks.append(s)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                s.bind((address, chosen))
                chosen = s.getsockname()[1]
            return socks
        except OSError as exc:
            for s in socks:
                s.close()
            if exc.errno != errno.EADDRINUSE or port:
                raise
    raise OSError(errno.EADDRINUSE, f"no common free port on {addresses}")


class Closer:
    """Servers a test started, closed when the test ends."""

    def __init__(self) -> None:
        self.items: list[object] = []

    def add(self, item: object) -> object:
        self.items.append(item)
        return item

    def close(self) -> None:
        for item in reversed(self.items):
            with contextlib.suppress(Exception):
                item.close()  # type: ignore[attr-defined]


# -- HTTP (optionally TLS), with git smart-HTTP ----------------------------------------


@dataclass
class Request:
    method: str
    path: str
    host: str | None
    peer: str


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 512
    backend: HttpBackend

    def get_request(self) -> tuple[socket.socket, object]:
        conn, peer = super().get_request()
        with self.backend.lock:
            self.backend.connections += 1
        conn.settimeout(IO_TIMEOUT)
        if self.backend.tls is not None:
            conn = self.backend.tls.wrap_socket(conn, server_side=True,
                                                do_handshake_on_connect=False)
        return conn, peer

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a refused or reset client is the point of most tests, not an error


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IO_TIMEOUT
    server: _HttpServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        b = self.server.backend
        with b.lock:
            b.requests.append(Request(self.command, self.path, self.headers.get("Host"),
                                      str(self.client_address[0])))
        if self.path.startswith("/git/") and b.git_root is not None:
            self._git(b.git_root)
            return
        status = 200
        if self.path.startswith("/hold") and b.barrier is not None:
            try:
                b.barrier.wait()
            except threading.BrokenBarrierError:
                status = 503
        body = f"{b.greeting} {self.path}\n".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _git(self, root: Path) -> None:
        """git smart-HTTP: the request handed to `git http-backend` as CGI."""
        path, _, query = self.path[len("/git"):].partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin", "GIT_PROJECT_ROOT": str(root),
            "GIT_HTTP_EXPORT_ALL": "1", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(root),
            "REQUEST_METHOD": self.command, "PATH_INFO": path, "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(length), "REMOTE_ADDR": str(self.client_address[0]),
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        res = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True,
                             timeout=IO_TIMEOUT * 2, check=False)
        head, _, payload = res.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = res.stdout.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode(errors="replace").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class HttpBackend:
    """An HTTP/1.1 server on a pre-bound socket: `/hello`, `/hold` (waits at a barrier),
    `/git/...` (smart-HTTP) and, with `tls`, HTTPS."""

    def __init__(self, sock: socket.socket, *, greeting: str, tls: ssl.SSLContext | None = None,
                 git_root: Path | None = None, barrier: int = 0,
                 barrier_timeout: float = 20.0) -> None:
        self.lock = threading.Lock()
        self.connections = 0
        self.requests: list[Request] = []
        self.greeting = greeting
        self.tls = tls
        self.git_root = git_root
        self.barrier = threading.Barrier(barrier, timeout=barrier_timeout) if barrier else None
        self.address, self.port = sock.getsockname()[:2]
        server = _HttpServer(sock.getsockname()[:2], _Handler, bind_and_activate=False)
        server.socket.close()
        server.socket = sock
        server.server_activate()
        server.backend = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    @property
    def authority(self) -> str:
        return f"{self.address}:{self.port}"

    def close(self) -> None:
        if self.barrier is not None:
            self.barrier.abort()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=2)


# -- TLS recorder --------------------------------------------------------------------


@dataclass
class TlsConnection:
    """What one accepted connection brought: any byte at all, the SNI, a handshake."""

    got_bytes: bool = False
    sni: str | None = None
    handshake: bool = False
    error: str = ""


class TlsRecorder:
    """Accepts TCP, records whether any byte arrived before the peer closed, and only
    then speaks TLS (answering one HTTP request with `hello tls <sni>`)."""

    def __init__(self, sock: socket.socket, cert: Path, key: Path) -> None:
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(str(cert), str(key))
        self.ctx.sni_callback = _record_sni
        self.conns: list[TlsConnection] = []
        self.lock = threading.Lock()
        self.sock = sock
        self.address, self.port = sock.getsockname()[:2]
        sock.listen(64)
        sock.settimeout(0.05)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, BlockingIOError):
                continue
            except OSError:
                return
            rec = TlsConnection()
            with self.lock:
                self.conns.append(rec)
            t = threading.Thread(target=self._handle, args=(conn, rec), daemon=True)
            self._threads.append(t)
            t.start()

    def _handle(self, conn: socket.socket, rec: TlsConnection) -> None:
        conn.settimeout(IO_TIMEOUT)
        with conn:
            try:
                rec.got_bytes = bool(conn.recv(1, socket.MSG_PEEK))
            except OSError as exc:
                rec.error = f"peek: {exc}"
                return
            if not rec.got_bytes:
                return
            try:
                with self.ctx.wrap_socket(conn, server_side=True) as tls:
                    rec.sni = getattr(tls, "seen_sni", None)
                    rec.handshake = True
                    data = b""
                    while b"\r\n\r\n" not in data and len(data) < 8192:
                        chunk = tls.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                    body = f"hello tls {rec.sni}\n".encode()
                    tls.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: "
                                + str(len(body)).encode() + b"\r\n\r\n" + body)
            except (OSError, ssl.SSLError) as exc:
                rec.error = str(exc)

    def settle(self) -> list[TlsConnection]:
        """The records, once every connection handler has finished (bounded)."""
        for t in list(self._threads):
            t.join(timeout=IO_TIMEOUT + 1)
        with self.lock:
            return list(self.conns)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


def _record_sni(sock: ssl.SSLObject | ssl.SSLSocket, name: str | None,
                ctx: ssl.SSLContext) -> None:
    sock.seen_sni = name  # type: ignore[union-attr]


# -- UDP: a sink and a DNS server ------------------------------------------------------


class UdpServer:
    """Records every datagram; as a DNS server (`dns=True`) answers each query with an
    A record for 127.0.0.2, and also accepts DNS over TCP on the same port."""

    def __init__(self, udp: socket.socket, tcp: socket.socket | None = None, *,
                 dns: bool = False) -> None:
        self.udp = udp
        self.tcp = tcp
        self.dns = dns
        self.datagrams: list[bytes] = []
        self.tcp_connections = 0
        self.address, self.port = udp.getsockname()[:2]
        udp.settimeout(0.05)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._udp_loop, daemon=True)]
        if tcp is not None:
            tcp.listen(16)
            tcp.settimeout(0.05)
            self._threads.append(threading.Thread(target=self._tcp_loop, daemon=True))
        for t in self._threads:
            t.start()

    def _udp_loop(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self.udp.recvfrom(4096)
            except (TimeoutError, BlockingIOError):
                continue
            except OSError:
                return
            self.datagrams.append(data)
            if self.dns:
                with contextlib.suppress(OSError, ValueError):
                    self.udp.sendto(dns_answer(data), peer)

    def _tcp_loop(self) -> None:
        assert self.tcp is not None
        while not self._stop.is_set():
            try:
                conn, _ = self.tcp.accept()
            except (TimeoutError, BlockingIOError):
                continue
            except OSError:
                return
            self.tcp_connections += 1
            with conn, contextlib.suppress(OSError, ValueError):
                conn.settimeout(1.0)
                head = conn.recv(2)
                query = conn.recv(int.from_bytes(head, "big")) if len(head) == 2 else b""
                if query:
                    answer = dns_answer(query)
                    conn.sendall(len(answer).to_bytes(2, "big") + answer)

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=2)
        self.udp.close()
        if self.tcp is not None:
            self.tcp.close()


def dns_answer(query: bytes) -> bytes:
    """A response to a one-question query: the question echoed, one A record 127.0.0.2."""
    if len(query) < 12:
        raise ValueError("short DNS query")
    end = 12
    while query[end] != 0:
        end += 1 + query[end]
    question = query[12:end + 5]
    header = query[:2] + b"\x81\x80" + b"\x00\x01\x00\x01\x00\x00\x00\x00"
    answer = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04" + bytes([127, 0, 0, 2])
    return header + question + answer


def dns_server(addresses: Sequence[str] = ("127.0.0.53", "127.0.0.54", "127.0.0.153")
               ) -> UdpServer:
    """A DNS server on port 53 of the first free loopback address (53 if it can, else
    any port: the query is what matters, not the number)."""
    for port in (53, 0):
        for address in addresses:
            try:
                udp, = bind_same_port([address], kind=socket.SOCK_DGRAM, port=port)
            except OSError:
                continue
            try:
                tcp, = bind_same_port([address], port=udp.getsockname()[1])
            except OSError:
                udp.close()
                continue
            return UdpServer(udp, tcp, dns=True)
    raise OSError("no loopback address free for a DNS server")


# -- certificates and repositories ---------------------------------------------------


@dataclass
class Cert:
    cert: Path
    key: Path
    names: tuple[str, ...] = field(default=())


def make_cert(directory: Path, names: Sequence[str], ips: Sequence[str]) -> Cert:
    """A self-signed certificate (its own CA) for the names and addresses, made now."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "cert.pem", directory / "key.pem"
    san = ",".join([*(f"DNS:{n}" for n in names), *(f"IP:{i}" for i in ips)])
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "2", "-subj", "/CN=stockade isolation test", "-addext",
         f"subjectAltName={san}", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=30)
    os.chmod(cert, 0o644)
    os.chmod(key, 0o600)
    return Cert(cert, key, tuple(names))


def make_git_repo(root: Path) -> str:
    """`root/repo.git`, a bare repository with one commit on main; returns its id."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(root),
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "iso",
           "GIT_AUTHOR_EMAIL": "iso@x.invalid", "GIT_COMMITTER_NAME": "iso",
           "GIT_COMMITTER_EMAIL": "iso@x.invalid"}
    work = root / "work"
    work.mkdir(parents=True)
    (work / "README").write_text("served over smart HTTP through the proxy\n")

    def git(*args: str, cwd: Path = work) -> str:
        return subprocess.run(["git", *args], cwd=cwd, env=env, check=True,
                              capture_output=True, timeout=30).stdout.decode().strip()

    git("init", "-q", "-b", "main")
    git("add", "README")
    git("commit", "-q", "-m", "isolation fixture")
    git("init", "-q", "--bare", "-b", "main", str(root / "repo.git"), cwd=root)
    git("push", "-q", str(root / "repo.git"), "main")
    return git("rev-parse", "HEAD")


def iter_lines(path: Path) -> Iterator[str]:
    if path.exists():
        yield from path.read_text().splitlines()
