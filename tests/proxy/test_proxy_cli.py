"""`stockade proxy` in the foreground: the live decision log, signals, config errors.

The CLI uses the host's real resolver, so these tests only use IP literals and
names that the policy refuses before any lookup.
"""

from __future__ import annotations

import io
import json
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from proxy_testkit import Backends

from stockade.proxy.cli import format_decision, main
from stockade.proxy.policy import ProxyDecision

RUN = "import sys; from stockade.proxy.cli import main; sys.exit(main(sys.argv[1:]))"


class Foreground:
    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", RUN, *args],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
        assert self.process.stdout is not None
        first = self.process.stdout.readline()
        match = re.match(r"stockade proxy: listening on 127\.0\.0\.1:(\d+) and unix:(\S+)", first)
        assert match, first + self.process.stderr.read()  # type: ignore[union-attr]
        self.port, self.unix_path = int(match.group(1)), match.group(2)
        self.banner = [first]
        while (line := self.process.stdout.readline()).strip() != "Ctrl-C to stop":
            self.banner.append(line)

    def request(self, raw: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as sock:
            sock.sendall(raw)
            chunks = []
            while data := sock.recv(65536):
                chunks.append(data)
        return b"".join(chunks)

    def log_line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().rstrip("\n")

    def stop(self) -> int:
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(10)
        finally:
            self.process.kill()


@pytest.fixture
def foreground(backends: Backends) -> Iterator[tuple[Foreground, int]]:
    web = backends.start("web")
    fg = Foreground("--allow-host", f"127.0.0.2:{web.port}",
                    "--deny-host", "evil.test=no exfiltration", "--idle-timeout", "5")
    yield fg, web.port
    fg.process.kill()
    fg.process.wait(5)


def test_foreground_proxy_logs_each_decision(foreground: tuple[Foreground, int]) -> None:
    fg, port = foreground
    assert f"  allow 127.0.0.2:{port}\n" in fg.banner
    assert "  deny  evil.test  (no exfiltration)\n" in fg.banner
    reply = fg.request(b"CONNECT evil.test:443 HTTP/1.1\r\n\r\n")
    assert b"X-Stockade-Denied: evil.test:443 is denied: no exfiltration" in reply
    assert re.fullmatch(r"\d\d:\d\d:\d\d DENY  #1 connect evil\.test:443 \[deny evil\.test\] "
                        r"evil\.test:443 is denied: no exfiltration", fg.log_line())
    reply = fg.request(f"GET http://127.0.0.2:{port}/cli HTTP/1.1\r\nHost: 127.0.0.2:{port}\r\n"
                       "Connection: close\r\n\r\n".encode())
    assert reply.endswith(f"web GET /cli host=127.0.0.2:{port}".encode())
    assert re.fullmatch(rf"\S+ ALLOW #2 http 127\.0\.0\.2:{port} -> 127\.0\.0\.2 "
                        rf"\[allow 127\.0\.0\.2:{port}\]", fg.log_line())
    assert re.fullmatch(rf"\S+ CLOSE #2 http 127\.0\.0\.2:{port} -> 127\.0\.0\.2 "
                        r"up \d+ B down \d+ B \d+\.\d\ds", fg.log_line())
    reply = fg.request(b"CONNECT 0x7f.1:22 HTTP/1.1\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 403 Forbidden")
    assert "DENY  #3 connect 127.0.0.1:22 [no allow entry]" in fg.log_line()
    assert fg.stop() == 0


def test_json_log_lines(backends: Backends) -> None:
    fg = Foreground("--json")
    try:
        fg.request(b"CONNECT api.test:443 HTTP/1.1\r\n\r\n")
        record = json.loads(fg.log_line())
        assert record["host"] == "api.test" and record["allowed"] is False
        assert record["session_id"] == "cli" and record["rule"] == "no allow entry"
        assert "(no --allow-host given" in "".join(fg.banner)
        assert fg.stop() == 0
    finally:
        fg.process.kill()


def test_bad_entry_is_a_config_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--allow-host", "*.10.0.0.1"]) == 78
    assert "wildcard cannot cover addresses" in capsys.readouterr().err


def test_busy_port_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert main(["--listen-port", str(taken.getsockname()[1])], out=io.StringIO()) == 125
    assert "could not listen" in capsys.readouterr().err


def test_format_of_a_failed_connection() -> None:
    line = format_decision(ProxyDecision(
        7, "cli", "socks5", "api.test", 443, True, "allow api.test", started=time.time(),
        error="could not connect to api.test:443 (1.2.3.4): Connection refused", final=True,
        address="1.2.3.4"))
    assert line.split(" ", 1)[1] == (
        "FAIL  #7 socks5 api.test:443 -> 1.2.3.4 up 0 B down 0 B 0.00s "
        "error: could not connect to api.test:443 (1.2.3.4): Connection refused")
