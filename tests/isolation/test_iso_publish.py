"""Published ports: a dev server in the sandbox's own network namespace, opened from the host.

Each test starts a real server inside a real sandbox, reaches it from the
host (curl, urllib, headless Chromium) on the published port only, and then
checks from the host that the forward is gone once the command has ended,
and what the audit record says. As root and as an unprivileged user.
"""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from .conftest import SYSTEM_PYTHON, Box, text

pytestmark = pytest.mark.isolation

#: Every wait for the server to come up is bounded by this.
UP_WITHIN = 20.0

#: A server stops when the host creates `stop` in the workspace: the test
#: decides when the command ends, and can then check that the forward did.
SERVE_UNTIL_STOP = ("{python} -m http.server {port} & server=$!; "
                    "while [ ! -e stop ]; do sleep 0.1; done; kill $server")

PAGE = """<!doctype html>
<html><head><title>sandboxed</title>
<style>html, body {{ margin: 0; height: 100%; background: rgb(255, 0, 0); }}</style></head>
<body><p id="who">{marker}</p>
<script>document.getElementById("who").textContent += " rendered";</script>
</body></html>
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def refused(port: int) -> bool:
    """Whether nothing listens on the host's 127.0.0.1:port any more."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True


def curl(box: Box, url: str) -> str:
    """`url` fetched by curl on the host, as the runner, retried until the server is up."""
    deadline = time.monotonic() + UP_WITHIN
    res = None
    while time.monotonic() < deadline:
        res = box.host(["curl", "-sS", "--max-time", "3", url], timeout=10)
        if res.returncode == 0:
            return res.stdout.decode()
        time.sleep(0.2)
    assert res is not None
    raise AssertionError(f"{url} never answered: {text(res)}")


def start_server(box: Box, port: int, options: list[str], marker: str
                 ) -> subprocess.Popen[bytes]:
    box.write(box.ws / "index.html", PAGE.format(marker=marker))
    script = SERVE_UNTIL_STOP.format(python=SYSTEM_PYTHON, port=8000)
    argv = box.runner.cli_argv(["run", *options, "--", "/bin/sh", "-c", script])
    return box.runner.popen(argv, cwd=str(box.ws), env=box.env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def stop_server(box: Box, proc: subprocess.Popen[bytes]) -> tuple[int, bytes]:
    box.write(box.ws / "stop", "")
    try:
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err


def last_record(box: Box) -> dict[str, object]:
    res = box.runner.cli(["audit", "--json", "--last", "1"], cwd=box.ws, env=box.env())
    assert res.returncode == 0, text(res)
    rows = json.loads(res.stdout)
    assert rows, "no audit record"
    row = rows[-1] if isinstance(rows, list) else rows
    assert isinstance(row, dict)
    return row


def test_cli_publish_reaches_the_sandbox_server_and_ends_with_it(box: Box) -> None:
    port = free_port()
    marker = f"published-{port}"
    proc = start_server(box, port, ["--publish", f"{port}:8000"], marker)
    try:
        page = curl(box, f"http://127.0.0.1:{port}/index.html")
    finally:
        status, err = stop_server(box, proc)
    assert marker in page
    assert status == 0, err.decode(errors="replace")
    # The command ended, and the forward with it.
    assert refused(port)
    record = json.dumps(last_record(box))
    assert f"127.0.0.1:{port}->8000" in record


def test_publish_defaults_to_the_same_port_on_loopback_only(box: Box) -> None:
    """`--publish PORT`: the host's 127.0.0.1:PORT to the sandbox's PORT, nothing else."""
    port = free_port()
    box.write(box.ws / "index.html", "same port\n")
    script = (f"{SYSTEM_PYTHON} -m http.server {port} & server=$!; "
              "while [ ! -e stop ]; do sleep 0.1; done; kill $server")
    argv = box.runner.cli_argv(["run", "--publish", str(port), "--", "/bin/sh", "-c", script])
    proc = box.runner.popen(argv, cwd=str(box.ws), env=box.env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert curl(box, f"http://127.0.0.1:{port}/index.html") == "same port\n"
        listening = Path("/proc/net/tcp").read_text()
        # Bound to 127.0.0.1 (0100007F), never to every address (00000000).
        assert f"0100007F:{port:04X}" in listening
        assert f"00000000:{port:04X}" not in listening
    finally:
        stop_server(box, proc)
    assert refused(port)


def test_a_taken_port_is_refused_before_anything_runs(box: Box) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        res = box.run(["/bin/sh", "-c", "touch ran"], mode="workspace-write",
                      options=["--publish", f"{port}:8000"])
    assert res.returncode == 125, text(res)
    err = res.stderr.decode()
    assert f"port {port} on 127.0.0.1 is already in use" in err, err
    assert not (box.ws / "ran").exists()
    record = last_record(box)
    assert record.get("verdict") == "error", record


def test_a_malformed_publish_is_a_usage_error(box: Box) -> None:
    res = box.run(["true"], options=["--publish", "70000"])
    assert res.returncode == 2, text(res)
    assert "not a port" in res.stderr.decode()


def test_library_start_publishes_until_stopped(box: Box) -> None:
    """`SyncWorkspaceSandbox.start` with `publish=`, run as the runner on the host."""
    port = free_port()
    marker = f"library-{port}"
    box.write(box.ws / "index.html", marker)
    script = f"""
import sys, time, urllib.request, json
sys.path.insert(0, {box.runner.site!r})
from stockade import SandboxCommand, SandboxConfig, SyncWorkspaceSandbox
sandbox = SyncWorkspaceSandbox(SandboxConfig(mode="read-only"))
sandbox.open_session("lib", {str(box.ws)!r})
proc = sandbox.start(SandboxCommand({SYSTEM_PYTHON!r}, ["-m", "http.server", "8000"],
                                    session_id="lib", publish=["{port}:8000"]))
deadline = time.monotonic() + {UP_WITHIN}
while True:
    try:
        body = urllib.request.urlopen("http://127.0.0.1:{port}/index.html", timeout=3).read()
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.2)
proc.stop()
sandbox.close()
print(json.dumps(body.decode()))
"""
    res = box.host([box.runner.python, "-I", "-c", script], timeout=60)
    assert res.returncode == 0, text(res)
    assert json.loads(res.stdout) == marker
    assert refused(port)
    record = json.dumps(last_record(box))
    assert f"127.0.0.1:{port}->8000" in record


def test_landlock_backend_refuses_publish_saying_why(box: Box) -> None:
    res = box.run(["true"], options=["--backend", "landlock", "--publish", str(free_port())])
    assert res.returncode == 125, text(res)
    err = res.stderr.decode()
    assert "the Landlock backend gives the command none" in err, err


def test_network_all_refuses_publish_saying_why(box: Box) -> None:
    res = box.run(["true"], options=["--network", "all", "--yes", "--publish",
                                     str(free_port())])
    assert res.returncode == 125, text(res)
    assert "already listens on the host's loopback" in res.stderr.decode()


# -- a person's browser ----------------------------------------------------------------

CHROMIUM = shutil.which("chromium")


def png_pixel(data: bytes, x: int, y: int) -> tuple[int, int, int]:
    """The RGB of one pixel of an 8-bit, non-interlaced RGB or RGBA PNG (Chromium's)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = channels = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _c, _f, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and color in (2, 6), (depth, color)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    prev = bytearray(stride)
    row = bytearray(stride)
    for line in range(y + 1):
        start = line * (stride + 1)
        kind, row = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            a = row[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if kind == 1:
                row[i] = (row[i] + a) & 0xFF
            elif kind == 2:
                row[i] = (row[i] + b) & 0xFF
            elif kind == 3:
                row[i] = (row[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                row[i] = (row[i] + pred) & 0xFF
        prev = row
    assert 0 <= x < width and 0 <= y < height
    r, g, b = row[x * channels:x * channels + 3]
    return r, g, b


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                    "(apt-get install chromium; .ci/run installs it): no browser to open "
                    "the published page with")
def test_headless_chromium_screenshots_a_page_the_sandbox_serves(box: Box) -> None:
    assert CHROMIUM is not None
    port = free_port()
    marker = f"chromium-{port}"
    proc = start_server(box, port, ["--publish", f"{port}:8000"], marker)
    profile = box.mkdir("chromium")
    shot = profile / "shot.png"
    url = f"http://127.0.0.1:{port}/index.html"
    # --no-sandbox: Chromium's own sandbox wants a user namespace or a setuid
    # helper, which root and a test user in a container may not get; the page
    # is the test's own. A private profile directory, no first-run work.
    chrome = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
              "--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars",
              f"--user-data-dir={profile}", "--window-size=400,300"]
    env = box.env(HOME=str(profile))
    try:
        curl(box, url)  # up before the browser looks
        dom = box.host([*chrome, "--dump-dom", url], env=env, timeout=90)
        shot_res = box.host([*chrome, f"--screenshot={shot}", url], env=env, timeout=90)
    finally:
        stop_server(box, proc)
    assert f"{marker} rendered" in dom.stdout.decode(), text(dom)
    assert shot.exists(), text(shot_res)
    data = shot.read_bytes()
    # The page's background, drawn by the browser from what the sandbox served.
    assert png_pixel(data, 200, 250) == (255, 0, 0)
    assert refused(port)


def test_png_reader_reads_a_known_image() -> None:
    """The screenshot check's own decoder, on an image made here (no browser needed)."""
    width, height = 3, 2
    rows = b""
    for y in range(height):
        rows += b"\x00" + b"".join(bytes([10 * x, 20 * y, 30, 255]) for x in range(width))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(
            ">I", zlib.crc32(kind + body))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 6,
                                                             0, 0, 0))
           + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
    assert png_pixel(png, 2, 1) == (20, 20, 30)
