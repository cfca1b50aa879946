"""HTTP head parsing, framing and refusal texts (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stockade.proxy.http import (
    Head,
    HttpError,
    error_response,
    parse_proxy_target,
    parse_request_head,
    request_framing,
    response_framing,
    serialize_request,
)


def head(raw: str) -> Head:
    return parse_request_head(raw.encode("latin-1"))


def test_request_head_is_parsed() -> None:
    h = head("GET http://a.test/x?y=1 HTTP/1.1\r\nHost: a.test\r\nX-A:  b \r\n\r\n")
    assert (h.method, h.target, h.version) == ("GET", "http://a.test/x?y=1", "HTTP/1.1")
    assert h.get_all("x-a") == ["b"]


@pytest.mark.parametrize(("raw", "status"), [
    ("GET http://a.test/ HTTP/1.1\nHost: a.test\r\n\r\n", 400),  # bare LF
    ("GET http://a.test/ HTTP/1.1\r\nHost : a.test\r\n\r\n", 400),  # space before colon
    ("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n folded\r\n\r\n", 400),
    ("GET http://a.test/ HTTP/1.1\r\nX: a\x01b\r\n\r\n", 400),
    ("GET  http://a.test/ HTTP/1.1\r\n\r\n", 400),
    ("GET http://a.test/ HTTP/2.0\r\n\r\n", 505),
    ("G@T http://a.test/ HTTP/1.1\r\n\r\n", 400),
])
def test_ambiguous_heads_are_refused(raw: str, status: int) -> None:
    with pytest.raises(HttpError) as info:
        head(raw)
    assert info.value.status == status


@pytest.mark.parametrize(("target", "host", "port", "path"), [
    ("http://a.test/x", "a.test", 80, "/x"),
    ("HTTP://A.Test:8080", "a.test", 8080, "/"),
    ("http://a.test?q=1", "a.test", 80, "/?q=1"),
    ("http://[::1]:81/p#frag", "[::1]", 81, "/p"),
    ("http://2130706433/", "127.0.0.1", 80, "/"),
])
def test_proxy_targets(target: str, host: str, port: int, path: str) -> None:
    h, p, origin = parse_proxy_target(target)
    assert (str(h), p, origin) == (host, port, path)


@pytest.mark.parametrize("target", [
    "/relative", "https://a.test/", "ftp://a.test/", "http://user:pw@a.test/", "http:///x",
    "http://a.test:99999/", "http://exa%6dple.com/",
])
def test_bad_proxy_targets(target: str) -> None:
    with pytest.raises(HttpError) as info:
        parse_proxy_target(target)
    assert info.value.status == 400


def test_framing_rejects_smuggling_shapes() -> None:
    both = head("POST http://a.test/ HTTP/1.1\r\nContent-Length: 3\r\n"
                "Transfer-Encoding: chunked\r\n\r\n")
    with pytest.raises(HttpError):
        request_framing(both)
    twice = head("POST http://a.test/ HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n")
    with pytest.raises(HttpError):
        request_framing(twice)
    gzip = head("POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
    with pytest.raises(HttpError) as info:
        request_framing(gzip)
    assert info.value.status == 501
    assert request_framing(head("GET http://a.test/ HTTP/1.1\r\n\r\n")).kind == "none"
    same = head("POST http://a.test/ HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\n")
    assert request_framing(same).length == 3


def test_response_framing() -> None:
    def resp(status: int, fields: str = "") -> Head:
        return Head(version="HTTP/1.1", status=status, headers=[
            (k, v) for k, _, v in (f.partition(": ") for f in fields.split("|") if f)])
    assert response_framing(resp(200, "Content-Length: 5"), "GET").kind == "length"
    assert response_framing(resp(200, "Content-Length: 5"), "HEAD").kind == "none"
    assert response_framing(resp(204), "GET").kind == "none"
    assert response_framing(resp(200, "Transfer-Encoding: chunked"), "GET").kind == "chunked"
    assert response_framing(resp(200), "GET").kind == "close"


def test_upstream_request_drops_hop_by_hop_fields() -> None:
    h = head("GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\nProxy-Authorization: secret\r\n"
             "Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nAccept: */*\r\n\r\n")
    out = serialize_request(h, "/x").decode()
    assert out.startswith("GET /x HTTP/1.1\r\n")
    assert "Proxy-Authorization" not in out and "X-Hop" not in out
    assert "Accept: */*" in out and out.endswith("Connection: close\r\n\r\n")


def test_error_response_text_is_exact_and_injection_free() -> None:
    raw = error_response(403, "evil.test:443 is denied: bad\r\nSet-Cookie: x")
    assert raw.startswith(b"HTTP/1.1 403 Forbidden\r\n"
                          b"X-Stockade-Denied: evil.test:443 is denied: bad??Set-Cookie: x\r\n")
    assert raw.endswith(b"\r\n\r\nstockade proxy: evil.test:443 is denied: bad??Set-Cookie: x\n")


def test_the_documented_refusal_is_the_real_one() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "proxy.md"
    block = docs.read_text().split("```\nHTTP/1.1 403 Forbidden\n", 1)[1].split("```", 1)[0]
    documented = ("HTTP/1.1 403 Forbidden\n" + block).replace("\n", "\r\n").encode()
    reason = "gist.github.com:443 is denied: paste sites can exfiltrate the workspace"
    real = error_response(403, reason)
    head, body = real.split(b"\r\n\r\n", 1)
    assert documented == head + b"\r\n\r\n" + body.replace(b"\n", b"\r\n")
