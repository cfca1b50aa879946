"""`stockade audit --web` in a real headless Chromium.

A real refused command and a real blocked one are written to a ledger by
`stockade run`; `stockade audit --web` serves it; Chromium loads the denials
page, dumps what it rendered and takes a screenshot; the server and the browser
run as root and as an unprivileged user.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from isolation.conftest import Box

pytest.importorskip("datasette")

pytestmark = pytest.mark.timeout(180)

# Set by the conftest: the user runner reads the venv's packages (Datasette) from a copy
# of its own.
RUNS_INSTALLED_PACKAGES = True

CHROMIUM = "/usr/bin/chromium"
# This tree's stockade, not whichever one the interpreter has installed.
SRC = str(Path(__file__).resolve().parents[2] / "src")
STOCKADE = [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {SRC!r}); "
            "from stockade.cli import main; sys.exit(main())"]


@pytest.fixture
def world() -> Iterator[tuple[Path, dict[str, str]]]:
    base = Path(tempfile.mkdtemp(prefix="stockade-web-", dir="/var/tmp"))
    for sub in ("ws", "home", "state", "data", "config"):
        (base / sub).mkdir()
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(base / "home"),
           "XDG_STATE_HOME": str(base / "state"), "XDG_DATA_HOME": str(base / "data"),
           "XDG_CONFIG_HOME": str(base / "config"), "PYTHONPATH": ""}
    yield base, env
    shutil.rmtree(base, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening_on(port: int) -> list[str]:
    """The local addresses a socket listens on at `port` (from /proc/net/tcp{,6})."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hexport = local.partition(":")
            if state == "0A" and int(hexport, 16) == port:
                found.append(address)
    return found


def test_the_denials_page_in_headless_chromium(box: Box) -> None:
    """Served and browsed as root and as an unprivileged user."""
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed at /usr/bin/chromium "
                    "(apt-get install chromium; .ci/run installs it): no browser to load the "
                    "page with")
    env = box.env()
    for argv in (["rm", "-rf", "--no-preserve-root", "/"],
                 ["/bin/sh", "-c", f"touch {box.home}/planted"]):
        box.run(argv, mode="workspace-write", timeout=60)
    ledger = box.state / "data" / "stockade" / "ledger.db"
    before = ledger.read_bytes()
    port = _free_port()
    server = box.runner.popen(box.runner.cli_argv(["audit", "--web", "--port", str(port)]),
                              cwd=box.ws, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
    profile = box.mkdir("chromium")
    shot = profile / "denials.png"
    chrome = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
              "--disable-dev-shm-usage", "--no-first-run", f"--user-data-dir={profile}",
              "--window-size=1400,900"]
    url = f"http://127.0.0.1:{port}/ledger/denials?session="
    try:
        deadline = time.monotonic() + 30
        while not _listening_on(port) and time.monotonic() < deadline:
            assert server.poll() is None, server.stdout.read() if server.stdout else ""
            time.sleep(0.2)
        # Loopback only: 127.0.0.1, never 0.0.0.0 or another address.
        assert _listening_on(port) == ["0100007F"]
        browser_env = {**env, "HOME": str(profile)}
        dom = box.host([*chrome, "--dump-dom", url], cwd=profile, env=browser_env, timeout=90)
        taken = box.host([*chrome, f"--screenshot={shot}", url], cwd=profile, env=browser_env,
                         timeout=90)
        # Read-only: a write through Datasette's API is refused.
        import urllib.error
        import urllib.request

        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/ledger/executions/-/insert", method="POST",
            data=b'{"row": {"session": "forged"}}', headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(request, timeout=10)
    finally:
        server.terminate()
        server.wait(timeout=10)
    page = dom.stdout.decode(errors="replace")
    assert "rm -rf --no-preserve-root /" in page, page[:2000]
    assert "command policy blocked: rm-no-preserve-root" in page
    assert "refused" in page and "blocked" in page
    assert f"touch {box.home}/planted" in page
    assert shot.exists() and shot.stat().st_size > 10_000, taken.stderr.decode(errors="replace")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"forged" not in ledger.read_bytes()
    assert len(ledger.read_bytes()) == len(before)


def test_web_refuses_a_missing_ledger_in_one_line(world: tuple[Path, dict[str, str]]) -> None:
    base, env = world
    res = subprocess.run([*STOCKADE, "audit", "--web", "--port", str(_free_port())],
                         cwd=base / "ws", env=env, capture_output=True, timeout=60, check=False)
    assert res.returncode == 64
    assert res.stderr.decode().count("\n") == 1 and b"no ledger" in res.stderr


def _get(port: int, host: bytes | None, path: str = "/ledger/executions.json") -> bytes:
    """A raw GET with this Host header, or an HTTP/1.0 one with none (which 1.1 requires);
    the whole answer."""
    head = f"GET {path} HTTP/1.{0 if host is None else 1}\r\n".encode()
    if host is not None:
        head += b"Host: " + host + b"\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(head + b"Connection: close\r\n\r\n")
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_web_answers_only_requests_addressed_to_loopback(box: Box) -> None:
    """A page whose name was re-pointed at 127.0.0.1 (DNS rebinding) reaches the server
    with its own name in Host: it gets a 403 and nothing of the ledger."""
    marker = "rebinding-marker-4f1c"
    box.run(["echo", marker], timeout=60)
    port = _free_port()
    server = box.runner.popen(box.runner.cli_argv(["audit", "--web", "--port", str(port)]),
                              cwd=box.ws, env=box.env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not _listening_on(port) and time.monotonic() < deadline:
            assert server.poll() is None, server.stdout.read() if server.stdout else ""
            time.sleep(0.2)
        p = str(port).encode()
        for host in (b"127.0.0.1:" + p, b"localhost:" + p, b"LOCALHOST:" + p):
            answer = _get(port, host)
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
            assert marker.encode() in answer
        for host in (b"evil.example", b"evil.example:" + p, b"127.0.0.1", b"localhost:1",
                     b"127.0.0.1:" + p + b".evil.example", None):
            for path in ("/ledger/executions.json", "/ledger/timeline", "/"):
                answer = _get(port, host, path)
                assert answer.startswith(b"HTTP/1.1 403"), (host, path, answer[:200])
                assert marker.encode() not in answer and b"executions" not in answer
    finally:
        server.terminate()
        server.wait(timeout=10)
