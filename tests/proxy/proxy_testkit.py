"""Local backends, TLS material, a test resolver and raw clients for the proxy tests.

Nothing here reaches beyond loopback: backends listen on 127.0.0.x or ::1,
test names use the reserved `.test` domain, and the resolver below answers
only from its own table (an unknown name is an error, never a real lookup).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from stockade.proxy import (
    HostPolicy,
    ManagedProxy,
    ProxyDecision,
    ProxyOptions,
    SessionEndpoint,
)
from stockade.proxy.hosts import IPAddress

T = TypeVar("T")


class BackgroundLoop:
    """An event loop in a thread, so backends keep serving while a test blocks (curl)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 10) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class Backend:
    """A local server that records every TCP connection it accepts.

    mode "http": answers each request with `<name> <METHOD> <path> host=<Host>`
    (keep-alive, Content-Length or chunked request bodies). mode "echo": echoes
    bytes. mode "sink": reads and counts bytes, never answers. mode "flood":
    writes as fast as its peer takes bytes, counting them. mode "banner": greets
    first, then echoes. mode "close": hangs up as soon as it accepts. With `tls`, the
    TLS handshake runs after the TCP accept is counted.
    """

    def __init__(self, name: str, host: str, mode: str, tls: ssl.SSLContext | None) -> None:
        self.name, self.host, self.mode, self.tls = name, host, mode, tls
        self.port = 0
        self.connections = 0
        self.handshakes = 0
        self.bytes_received = 0
        self.bytes_sent = 0
        self.requests: list[tuple[str, str, str, bytes]] = []
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url_host(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    async def start(self, port: int = 0) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, port, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for w in list(self._writers):
                w.transport.abort()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        try:
            if self.tls is not None:
                await writer.start_tls(self.tls)
                self.handshakes += 1
            if self.mode == "sink":
                while data := await reader.read(65536):
                    self.bytes_received += len(data)
            elif self.mode == "flood":
                chunk = b"\xab" * 65536
                while True:
                    writer.write(chunk)
                    await writer.drain()
                    self.bytes_sent += len(chunk)
            elif self.mode == "close":
                pass  # accept, then hang up at once
            elif self.mode == "banner":
                writer.write(b"220 banner\r\n")  # a server-first protocol (SMTP, FTP)
                while data := await reader.read(65536):
                    writer.write(data)
            elif self.mode == "echo":
                while data := await reader.read(262144):
                    self.bytes_received += len(data)
                    writer.write(data)
                    await writer.drain()
            else:
                await self._http(reader, writer)
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    async def _http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            self.bytes_received += len(head)
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ")
            pairs = (ln.partition(":") for ln in lines[1:] if ln)
            fields = {k.lower(): v.strip() for k, _, v in pairs}
            body = b""
            if fields.get("transfer-encoding") == "chunked":
                while True:
                    size = int((await reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
                    if size == 0:
                        await reader.readuntil(b"\r\n")
                        break
                    body += await reader.readexactly(size)
                    await reader.readexactly(2)
            elif "content-length" in fields:
                body = await reader.readexactly(int(fields["content-length"]))
            self.requests.append((method, path, fields.get("host", ""), body))
            text = f"{self.name} {method} {path} host={fields.get('host', '')}"
            if body:
                text += f" body={body.decode('latin-1')}"
            payload = text.encode()
            if path.startswith("/chunked"):
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                             + f"{len(payload):x}\r\n".encode() + payload + b"\r\n0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                             + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
            await writer.drain()
            if fields.get("connection", "").lower() == "close":
                return


class Backends:
    def __init__(self, bg: BackgroundLoop, tls: TlsMaterial) -> None:
        self.bg, self.tls_material = bg, tls
        self.started: list[Backend] = []

    def start(self, name: str, host: str = "127.0.0.2", mode: str = "http", *,
              tls: bool = False, port: int = 0) -> Backend:
        backend = Backend(name, host, mode, self.tls_material.server_context() if tls else None)
        self.bg.run(backend.start(port))
        self.started.append(backend)
        return backend

    def start_pair(self, mode_a: str = "http", mode_b: str = "http", *, tls: bool = False,
                   host_a: str = "127.0.0.2", host_b: str = "127.0.0.1") -> tuple[Backend, Backend]:
        """Two backends on the same port at two addresses (allowed, victim)."""
        for _ in range(20):
            b = self.start("victim", host_b, mode_b, tls=tls)
            try:
                a = self.start("api", host_a, mode_a, tls=tls, port=b.port)
            except OSError:
                continue
            return a, b
        raise RuntimeError("no common free port for a backend pair")

    def close(self) -> None:
        for backend in self.started:
            self.bg.run(backend.stop())


@dataclass
class TlsMaterial:
    directory: Path
    ca_path: Path
    cert_path: Path
    key_path: Path

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert_path, self.key_path)
        return ctx

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_path))


SERVER_NAMES = ("api.test", "other.test", "*.wild.test")


def make_tls(directory: Path) -> TlsMaterial:
    """A throwaway CA and a server certificate for the test names and 127.0.0.2.

    Made with the `cryptography` package when it is installed, else with the
    openssl command; the tests that need TLS are skipped when neither exists.
    """
    try:
        import cryptography  # noqa: F401
    except ImportError:
        return make_tls_with_openssl(directory)
    return _make_tls_with_cryptography(directory)


def make_tls_with_openssl(directory: Path) -> TlsMaterial:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("neither the cryptography package nor the openssl command is available")
    material = TlsMaterial(directory, directory / "ca.pem", directory / "cert.pem",
                           directory / "key.pem")
    ca_key, csr, ext = directory / "ca.key", directory / "leaf.csr", directory / "leaf.ext"
    curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    sans = ",".join([f"DNS:{n}" for n in SERVER_NAMES] + ["IP:127.0.0.2"])
    ext.write_text(f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\n"
                   "authorityKeyIdentifier=keyid\n")
    for argv in (
        ["req", "-x509", *curve, "-keyout", ca_key, "-out", material.ca_path, "-days", "2",
         "-subj", "/CN=stockade test CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ["req", *curve, "-keyout", material.key_path, "-out", csr, "-subj", "/CN=api.test"],
        ["x509", "-req", "-in", csr, "-CA", material.ca_path, "-CAkey", ca_key,
         "-CAcreateserial", "-out", material.cert_path, "-days", "2", "-extfile", ext],
    ):
        subprocess.run([openssl, *map(str, argv)], check=True, capture_output=True, timeout=30)
    return material


def _make_tls_with_cryptography(directory: Path) -> TlsMaterial:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "stockade test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in SERVER_NAMES]
    names.append(x509.IPAddress(ipaddress.ip_address("127.0.0.2")))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "api.test")]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    material = TlsMaterial(directory, directory / "ca.pem", directory / "cert.pem",
                           directory / "key.pem")
    material.ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    material.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    material.key_path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return material


class StaticResolver:
    """The test-only resolver hook: a table of names, and a record of every lookup.

    A value may be a list of addresses or a callable returning one, so a test
    can make a name answer differently on each call (DNS rebinding).
    """

    def __init__(self, table: dict[str, Sequence[str] | Callable[[], Sequence[str]]]) -> None:
        self.table = table
        self.calls: list[str] = []

    async def __call__(self, name: str, port: int) -> list[IPAddress]:
        self.calls.append(name)
        entry = self.table.get(name)
        if entry is None:
            raise socket.gaierror(socket.EAI_NONAME, f"{name} is not in the test table")
        answers = entry() if callable(entry) else entry
        return [ipaddress.ip_address(a) for a in answers]


class Decisions(list[ProxyDecision]):
    def final(self) -> list[ProxyDecision]:
        return [d for d in self if d.final]

    def denied(self) -> list[ProxyDecision]:
        return [d for d in self if not d.allowed]

    def complete(self) -> bool:
        """Every connection that produced an opening record also has its final one."""
        snapshot = list(self)
        opened = {d.connection_id for d in snapshot if not d.final}
        return opened <= {d.connection_id for d in snapshot if d.final}




# --- raw clients -----------------------------------------------------------------

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def open_proxy(endpoint: SessionEndpoint, via: str = "tcp") -> Stream:
    if via == "unix":
        return await asyncio.open_unix_connection(endpoint.unix_path)
    return await asyncio.open_connection(endpoint.host, endpoint.port)


def parse_head(raw: bytes) -> tuple[int, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (ln.partition(":") for ln in lines[1:] if ln)}
    return status, headers


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    async with asyncio.timeout(10):
        return parse_head(await reader.readuntil(b"\r\n\r\n"))


async def http_connect(
    endpoint: SessionEndpoint, authority: str, via: str = "tcp"
) -> tuple[int, dict[str, str], Stream]:
    """Send CONNECT; return status, headers and the (possibly tunnelled) stream."""
    reader, writer = await open_proxy(endpoint, via)
    writer.write(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
    status, headers = await read_head(reader)
    return status, headers, (reader, writer)


async def http_exchange(endpoint: SessionEndpoint, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw request bytes; read one response (up to Content-Length, or to EOF)."""
    reader, writer = await open_proxy(endpoint)
    try:
        writer.write(raw)
        status, headers = await read_head(reader)
        async with asyncio.timeout(10):
            if "content-length" in headers:
                body = await reader.readexactly(int(headers["content-length"]))
            else:
                body = await reader.read()
        return status, headers, body
    finally:
        writer.close()


def socks_address(host: str) -> bytes:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raw = host.encode()
        return bytes((0x03, len(raw))) + raw
    return (b"\x01" if address.version == 4 else b"\x04") + address.packed


async def socks_connect(
    endpoint: SessionEndpoint, host: str, port: int, *, command: int = 1,
    address: bytes | None = None, auth: tuple[bytes, bytes] | None = None,
) -> tuple[int, Stream]:
    """SOCKS5 CONNECT (or `command`), with RFC 1929 `auth` (user, password) if given;
    return the reply code and the stream."""
    reader, writer = await open_proxy(endpoint)
    writer.write(b"\x05\x01\x02" if auth else b"\x05\x01\x00")
    async with asyncio.timeout(10):
        assert await reader.readexactly(2) == (b"\x05\x02" if auth else b"\x05\x00")
        if auth:
            user, password = auth
            writer.write(bytes((1, len(user))) + user + bytes((len(password),)) + password)
            assert await reader.readexactly(2) == b"\x01\x00"
        addr = address if address is not None else socks_address(host)
        writer.write(bytes((5, command, 0)) + addr + port.to_bytes(2, "big"))
        reply = await reader.readexactly(10)
    assert reply[0] == 5
    return reply[1], (reader, writer)


async def closed_by_peer(reader: asyncio.StreamReader, timeout: float = 5) -> bool:
    """True when the stream ends (EOF or reset) within `timeout` without data."""
    try:
        async with asyncio.timeout(timeout):
            data = await reader.read(65536)
    except (ConnectionError, OSError):
        return True
    return data == b""


def spellings_of_loopback() -> list[str]:
    """127.0.0.1 as the request says it; every entry must be read as that one address."""
    return ["127.0.0.1", "2130706433", "0x7f000001", "0x7f.1", "0177.0.0.1", "127.1",
            "127.0.1", "0x7F.0.0.1", "127.0.0.1.", "017700000001"]


def run(coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
    """asyncio.run with a deadline, so a hung proxy fails the test instead of stalling it."""

    async def bounded() -> T:
        async with asyncio.timeout(timeout):
            return await coro

    return asyncio.run(bounded())


@dataclass
class Harness:
    proxy: ManagedProxy
    endpoint: SessionEndpoint
    decisions: Decisions
    resolver: StaticResolver


@contextlib.asynccontextmanager
async def proxied(
    allow: Sequence[str] = (), deny: dict[str, str] | Sequence[str] = (), *,
    names: Mapping[str, Sequence[str] | Callable[[], Sequence[str]]] | None = None,
    options: ProxyOptions | None = None, max_connections: int | None = None,
) -> AsyncIterator[Harness]:
    """A proxy with one session, the test resolver and a decision list."""
    decisions = Decisions()
    resolver = StaticResolver(dict(names or {}))
    async with ManagedProxy(on_decision=decisions.append, resolver=resolver,
                            options=options) as proxy:
        endpoint = await proxy.add_session("s1", HostPolicy(allow=allow, deny=deny),
                                           max_connections=max_connections)
        yield Harness(proxy, endpoint, decisions, resolver)


async def settle(decisions: Decisions | None = None, timeout: float = 5) -> None:
    """Let the proxy finish connections it is closing.

    With `decisions`, wait until every connection that opened has its final
    record (a loaded machine can take a while); then give closes a moment.
    """
    if decisions is not None:
        async with asyncio.timeout(timeout):
            while not decisions.complete():
                await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)


def wait_until(predicate: Callable[[], bool], timeout: float = 5) -> None:
    """Poll from a plain thread until `predicate()` holds (decisions arrive on the proxy thread)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def client_hello(server_hostname: str | None) -> bytes:
    """The bytes of a real ClientHello (made in memory, sent nowhere)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def allow_for(port: int, *names: str, address: str = "127.0.0.2") -> list[str]:
    """Allow entries for test names on `port`, plus the explicit backend address.

    The address entry is what lets a test reach a loopback backend at all: the
    default refusal of loopback stays in force for every other address.
    """
    return [f"{n}:{port}" for n in names] + [f"{address}:{port}"]
