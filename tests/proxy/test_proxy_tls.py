"""ClientHello SNI parsing against real ClientHellos made by the ssl module (no network)."""

from __future__ import annotations

import ssl

import pytest

from stockade.proxy.tls import ClientHelloError, parse_client_hello, starts_tls


def client_hello(server_hostname: str | None, *, tls12: bool = False) -> bytes:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


def refragment(data: bytes, size: int) -> bytes:
    """Re-split one handshake record into records carrying `size` bytes each."""
    assert data[0] == 0x16
    length = int.from_bytes(data[3:5], "big")
    body = data[5 : 5 + length]
    out = b""
    for i in range(0, len(body), size):
        piece = body[i : i + size]
        out += data[:3] + len(piece).to_bytes(2, "big") + piece
    return out + data[5 + length :]


@pytest.mark.parametrize("tls12", [False, True])
def test_sni_is_read(tls12: bool) -> None:
    hello = parse_client_hello(client_hello("api.example.test", tls12=tls12))
    assert hello is not None and hello.server_name == "api.example.test"


def test_hello_without_sni() -> None:
    hello = parse_client_hello(client_hello(None))
    assert hello is not None and hello.server_name is None


def test_every_prefix_asks_for_more() -> None:
    data = client_hello("api.test")
    for cut in range(len(data)):
        assert parse_client_hello(data[:cut]) is None
    assert parse_client_hello(data) is not None


def test_hello_split_over_records() -> None:
    data = refragment(client_hello("split.test"), 7)
    hello = parse_client_hello(data)
    assert hello is not None and hello.server_name == "split.test"
    assert parse_client_hello(data[:-1]) is None


def test_early_data_after_the_hello_is_ignored() -> None:
    data = client_hello("api.test") + b"\x17\x03\x03\x00\x05hello"
    hello = parse_client_hello(data)
    assert hello is not None and hello.server_name == "api.test"


def _with_extra_extension(data: bytes, extension: bytes) -> bytes:
    """Append an extension to a single-record ClientHello, fixing every length."""
    record_len = int.from_bytes(data[3:5], "big")
    body = bytearray(data[5 : 5 + record_len])
    pos = 4 + 2 + 32
    pos += 1 + body[pos]
    pos += 2 + int.from_bytes(body[pos : pos + 2], "big")
    pos += 1 + body[pos]
    ext_len = int.from_bytes(body[pos : pos + 2], "big")
    body[pos : pos + 2] = (ext_len + len(extension)).to_bytes(2, "big")
    body += extension
    body[1:4] = (len(body) - 4).to_bytes(3, "big")
    return data[:3] + len(body).to_bytes(2, "big") + bytes(body)


def test_a_second_server_name_extension_is_malformed() -> None:
    name = b"evil.test"
    entry = b"\x00" + len(name).to_bytes(2, "big") + name
    ext_data = len(entry).to_bytes(2, "big") + entry
    extension = b"\x00\x00" + len(ext_data).to_bytes(2, "big") + ext_data
    with pytest.raises(ClientHelloError, match="twice"):
        parse_client_hello(_with_extra_extension(client_hello("api.test"), extension))


@pytest.mark.parametrize("data", [
    b"\x17\x03\x03\x00\x05hello",  # application data, not a handshake
    b"\x16\x03\x01\x00\x04\x02\x00\x00\x00",  # ServerHello type
    b"\x16\x02\x00\x00\x04\x01\x00\x00\x00",  # not a TLS version
    b"\x16\x03\x01\x00\x00",  # empty record
    b"\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00",  # body too short for a ClientHello
    b"\x16\x03\x01\x00\x04\x01\xff\xff\xff",  # declares a 16 MiB ClientHello
])
def test_garbage_is_rejected(data: bytes) -> None:
    with pytest.raises(ClientHelloError):
        parse_client_hello(data)


def test_first_bytes_detection() -> None:
    assert starts_tls(b"\x16\x03\x01") is True
    assert starts_tls(b"\x16\x03\x07") is True  # any minor version: servers accept it
    assert starts_tls(b"GET / HTTP/1.1") is False
    assert starts_tls(b"\x16\x99binary") is False  # 0x16 alone is not TLS
    assert starts_tls(b"") is None
    assert starts_tls(b"\x16") is None
