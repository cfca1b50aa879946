"""The managed proxy through the real sandbox, as a CLI user meets it.

Each test runs `stockade run --network proxy --allow-host ...` under both
Linux backends against servers this process runs on the host's loopback, and
judges from outside: the server records every request it received, and the
ledger every connection it was told about.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

pytestmark = pytest.mark.isolation

BACKENDS = ("bubblewrap", "landlock")
TIMEOUT = 90


class Recorder(http.server.ThreadingHTTPServer):
    """A loopback file server that remembers each request path and its proxy headers."""

    daemon_threads = True

    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths: list[str] = []
        self.leaked_auth: list[str] = []
        super().__init__(("127.0.0.1", 0), functools.partial(_Handler, directory=str(root)))
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def close(self) -> None:
        self.shutdown()
        self.server_close()
        self.thread.join(5)


class _Handler(http.server.SimpleHTTPRequestHandler):
    server: Recorder

    def do_GET(self) -> None:
        self.server.paths.append(self.path)
        if self.headers.get("Proxy-Authorization"):
            self.server.leaked_auth.append(self.path)
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Recorder]:
    root = tmp_path / "site"
    root.mkdir()
    (root / "hello.txt").write_text("hello from the host\n")
    if shutil.which("git"):
        src = tmp_path / "src"
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
        subprocess.run([*git, "init", "-q", str(src)], check=True)
        (src / "README").write_text("cloned\n")
        subprocess.run([*git, "-C", str(src), "add", "README"], check=True)
        subprocess.run([*git, "-C", str(src), "commit", "-qm", "one"], check=True)
        subprocess.run([*git, "clone", "-q", "--bare", str(src), str(root / "repo.git")],
                       check=True)
        subprocess.run(["git", "-C", str(root / "repo.git"), "update-server-info"], check=True)
    server = Recorder(root)
    yield server
    server.close()


@pytest.fixture
def other_site(tmp_path: Path) -> Iterator[Recorder]:
    root = tmp_path / "other"
    root.mkdir()
    server = Recorder(root)
    yield server
    server.close()


class Cli:
    def __init__(self, tmp_path: Path, backend: str, home: Path | None = None) -> None:
        self.backend = backend
        self.home = home or tmp_path / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.ws = tmp_path / "ws"
        self.ws.mkdir(exist_ok=True)
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("XDG_") and "proxy" not in k.lower()}
        self.env["HOME"] = str(self.home)
        self.read: list[str] = []

    def argv(self, cmd: Sequence[str], allow: Sequence[str], *, session: str = "s",
             mode: str = "read-only") -> list[str]:
        hosts = [a for h in allow for a in ("--allow-host", h)]
        hosts += [a for r in self.read for a in ("--allow-read", r)]
        return [sys.executable, "-m", "stockade", "run", "--backend", self.backend,
                "--mode", mode, "--session", session, "--network", "proxy", *hosts, "--yes",
                "--timeout", str(TIMEOUT - 10), "--", *cmd]

    def run(self, cmd: Sequence[str], allow: Sequence[str], **kw: str
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(cmd, allow, **kw), cwd=self.ws, env=self.env,
                              capture_output=True, text=True, timeout=TIMEOUT)

    def network_audit(self, session: str) -> list[dict[str, object]]:
        res = subprocess.run([sys.executable, "-m", "stockade", "audit", "--network", "--json",
                              "--session", session, "--last", "100"],
                             cwd=self.ws, env=self.env, capture_output=True, text=True,
                             timeout=TIMEOUT)
        assert res.returncode == 0, res.stderr
        rows: list[dict[str, object]] = []
        for line in res.stdout.splitlines():
            if line.strip():
                loaded = json.loads(line)
                rows.extend(loaded if isinstance(loaded, list) else [loaded])
        return [r for r in rows if "host" in r]


def _sh(script: str) -> list[str]:
    return ["/bin/sh", "-c", script]


@pytest.mark.parametrize("backend", BACKENDS)
def test_localhost_grant_reaches_the_host_server_with_curl_and_git(
        tmp_path: Path, site: Recorder, other_site: Recorder, backend: str) -> None:
    cli = Cli(tmp_path, backend)
    p, q = site.port, other_site.port
    script = (f"curl -sS http://localhost:{p}/hello.txt; echo curl=$?; "
              f"git clone -q http://localhost:{p}/repo.git \"$TMPDIR/c\" "
              "&& cat \"$TMPDIR/c/README\"; "
              f"echo git=$?; "
              f"curl -sS -o /dev/null -w '%{{http_code}}' http://localhost:{q}/hello.txt; "
              "echo; echo other=$?")
    res = cli.run(_sh(script), [f"localhost:{p}"])
    out = res.stdout
    assert "hello from the host\ncurl=0" in out, (out, res.stderr)
    assert "cloned\ngit=0" in out, (out, res.stderr)
    assert "/hello.txt" in site.paths and "/repo.git/info/refs?service=git-upload-pack" in \
        site.paths, site.paths
    # Control: the same name on a port nobody granted is refused by the proxy.
    assert "403" in out, out
    assert other_site.paths == []


@pytest.mark.skipif(not shutil.which("curl"), reason="needs curl")
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tunnel_cannot_reach_another_virtual_host_on_a_granted_address(
        tmp_path: Path, site: Recorder, backend: str) -> None:
    """Only `localhost:PORT` is granted; the server there would also serve an
    `admin.test` virtual host. A forwarded request naming it is refused, and so
    is the same request inside a `curl -p` tunnel (once relayed unchecked)."""
    cli = Cli(tmp_path, backend)
    p = site.port
    script = (f"curl -sS -o /dev/null -w '%{{http_code}}' -H 'Host: admin.test' "
              f"http://localhost:{p}/hello.txt; echo \" forwarded=$?\"; "
              f"curl -sS -p -H 'Host: admin.test' http://localhost:{p}/hello.txt; "
              "echo \" tunnel=$?\"; "
              f"curl -sS http://localhost:{p}/hello.txt")
    res = cli.run(_sh(script), [f"localhost:{p}"])
    out = res.stdout
    assert "403 forwarded=0" in out, (out, res.stderr)
    assert " tunnel=0" not in out and "tunnel=" in out, (out, res.stderr)
    assert out.endswith("hello from the host\n"), (out, res.stderr)  # control
    assert site.paths == ["/hello.txt"]
    rules = [r.get("rule") for r in cli.network_audit("s")]
    assert "http in tunnel" in rules, rules


def _long_dir(base: Path, length: int) -> Path:
    path = Path(str(base / "h") + "x" * (length - len(str(base / "h"))))
    assert len(str(path)) == length
    return path


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("where", ["HOME", "XDG_STATE_HOME"])
def test_a_150_character_home_still_gets_its_grant(tmp_path: Path, site: Recorder,
                                                  backend: str, where: str) -> None:
    if where == "HOME":
        cli = Cli(tmp_path, backend, home=_long_dir(tmp_path, 150))
    else:
        cli = Cli(tmp_path, backend)
        state = _long_dir(tmp_path / "state", 150)
        state.mkdir(parents=True)
        cli.env["XDG_STATE_HOME"] = str(state)
    res = cli.run(["curl", "-sS", f"http://localhost:{site.port}/hello.txt"],
                  [f"localhost:{site.port}"])
    assert res.returncode == 0 and res.stdout == "hello from the host\n", res
    assert site.paths == ["/hello.txt"]


PY_CLIENTS = {
    "urllib": "import urllib.request as u; print(u.urlopen(URL, timeout=20).read().decode())",
    "requests": "import requests; print(requests.get(URL, timeout=20).text)",
    "httpx": "import httpx; print(httpx.Client(timeout=20).get(URL).text)",
}


def _node_major() -> int:
    if not shutil.which("node"):
        return 0
    out = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout
    return int(out.lstrip("v").split(".")[0] or 0)


def _importable(module: str) -> bool:
    res = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True)
    return res.returncode == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_common_clients_reach_a_granted_name(tmp_path: Path, site: Recorder,
                                             backend: str) -> None:
    cli = Cli(tmp_path, backend)
    base = f"http://localhost:{site.port}"
    cases: dict[str, list[str]] = {}
    if shutil.which("curl"):
        cases["curl"] = ["curl", "-sS", f"{base}/curl"]
    if shutil.which("wget"):
        cases["wget"] = ["wget", "-q", "-O", "-", f"{base}/wget"]
    if shutil.which("git"):
        cases["git"] = _sh(f"git ls-remote {base}/repo.git >/dev/null && echo git ok "
                           f"&& curl -s {base}/git")
    # A virtual environment under /tmp is out of every sandbox's sight (each has
    # its own /tmp): its clients cannot run there, wherever the test runs from.
    venv_seen = not sys.prefix.startswith("/tmp/")
    # The tests' HOME is not the real one, so a home holding the interpreter
    # (/root/.pyenv) is another's home here, masked unless granted.
    if venv_seen:
        cli.read.append(sys.base_prefix)
    for name, code in PY_CLIENTS.items():
        if venv_seen and _importable(name.split(".")[0]):
            cases[name] = [sys.executable, "-c", code.replace("URL", repr(f"{base}/{name}"))]
    expect = {name: f"{name} ok" for name in ("curl", "wget", "git", *PY_CLIENTS)}
    (site.root / "pip" / "simple" / "demo").mkdir(parents=True)
    (site.root / "pip" / "simple" / "demo" / "index.html").write_text(
        '<a href="/demo-1.0.tar.gz">demo-1.0.tar.gz</a>\n')
    if venv_seen:
        cases["pip"] = [sys.executable, "-m", "pip", "index", "versions", "demo",
                        "--no-cache-dir", "--index-url", f"{base}/pip/simple/"]
    expect["pip"] = "Available versions: 1.0"
    if shutil.which("npm"):
        (site.root / "npm").write_text(json.dumps({
            "name": "npm", "dist-tags": {"latest": "1.0.0"},
            "versions": {"1.0.0": {"name": "npm", "version": "1.0.0", "description": "npm ok"}},
        }))
        cases["npm"] = _sh('npm_config_cache="$TMPDIR/npm" npm view npm description '
                           f"--registry {base}/")
    if shutil.which("cargo"):
        # A sparse registry's config, and the search API it points to.
        (site.root / "cargo").mkdir()
        (site.root / "cargo" / "config.json").write_text(json.dumps(
            {"dl": f"{base}/dl", "api": f"{base}/cargoapi"}))
        (site.root / "cargoapi" / "api" / "v1").mkdir(parents=True)
        (site.root / "cargoapi" / "api" / "v1" / "crates").write_text(json.dumps(
            {"crates": [{"name": "demo", "max_version": "1.0.0", "description": "cargo ok"}],
             "meta": {"total": 1}}))
        # The tests' HOME is not the real one, whose toolchain the sandbox hides.
        cargo = Path(shutil.which("cargo") or "").resolve().parent.parent
        rustup = Path(os.environ.get("RUSTUP_HOME") or Path.home() / ".rustup")
        cli.read.append(str(cargo))
        if rustup.is_dir():
            cli.env["RUSTUP_HOME"] = str(rustup)
            cli.read.append(str(rustup))
        cases["cargo"] = _sh(
            'mkdir -p "$TMPDIR/ch" && printf \'[registries.local]\\nindex = "%s"\\n\' '
            f'"sparse+{base}/cargo/" > "$TMPDIR/ch/config.toml" && '
            f'CARGO_HOME="$TMPDIR/ch" {shutil.which("cargo")} search --registry local demo')
    if _node_major() >= 24:
        cases["node"] = ["node", "-e", f"fetch('{base}/node').then(r => r.text())"
                                       ".then(t => process.stdout.write(t))"]
    # Not here: the JVM and Go never use a proxy for localhost or a loopback
    # literal, whatever their settings say, and Node before 24 has no proxy
    # support in fetch at all (docs/proxy.md).
    for name in cases:
        if not (site.root / name).exists():
            (site.root / name).write_text(f"{name} ok\n")
    failed = {}
    for name, argv in cases.items():
        res = cli.run(argv, [f"localhost:{site.port}"])
        if res.returncode != 0 or expect.get(name, f"{name} ok") not in res.stdout:
            failed[name] = (res.returncode, res.stdout[-500:], res.stderr[-1500:])
    assert not failed, failed
    for name in cases:
        assert any(p.startswith(f"/{name}") for p in site.paths), (name, site.paths)
    if "git" in cases:
        assert "/repo.git/info/refs?service=git-upload-pack" in site.paths
    assert site.leaked_auth == []  # the proxy password never travels past the proxy


def _running(cli: Cli, script: str, allow: Sequence[str], session: str
             ) -> subprocess.Popen[str]:
    return subprocess.Popen(cli.argv(_sh(script), allow, session=session,
                                     mode="workspace-write"),
                            cwd=cli.ws, env=cli.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> str:
    for _ in range(300):
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text().strip()
        if proc.poll() is not None:
            raise AssertionError(proc.communicate())
        time.sleep(0.1)
    raise AssertionError(f"{path} never appeared")


_HOLD = ('echo "$HTTP_PROXY" > proxy.url; '
         "i=0; while [ ! -e done ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done")


def _raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        chunks = []
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)


def test_landlock_proxy_port_refuses_a_client_without_the_commands_secret(
        tmp_path: Path, site: Recorder) -> None:
    cli = Cli(tmp_path, "landlock")
    grant = f"localhost:{site.port}"
    proc = _running(cli, _HOLD, [grant], "held")
    try:
        url = _wait_for(cli.ws / "proxy.url", proc)
        assert url.startswith("http://stockade:") and "@127.0.0.1:" in url, url
        secret = url.split("stockade:", 1)[1].split("@", 1)[0]
        port = int(url.rsplit(":", 1)[1])
        target = f"http://localhost:{site.port}/hello.txt"
        # Another local user knows the port (it is on loopback) but not the secret.
        plain = _raw(port, f"GET {target} HTTP/1.1\r\nHost: localhost:{site.port}\r\n"
                           "Connection: close\r\n\r\n".encode())
        assert plain.startswith(b"HTTP/1.1 407 "), plain[:200]
        wrong = base64.b64encode(b"stockade:guess").decode()
        guessed = _raw(port, f"CONNECT localhost:{site.port} HTTP/1.1\r\n"
                             f"Proxy-Authorization: Basic {wrong}\r\n\r\n".encode())
        assert guessed.startswith(b"HTTP/1.1 407 "), guessed[:200]
        name = b"localhost"
        socks = _raw(port, b"\x05\x01\x00" + b"\x05\x01\x00\x03" + bytes([len(name)]) + name
                     + site.port.to_bytes(2, "big") + b"GET / HTTP/1.0\r\n\r\n")
        assert socks == b"\x05\xff", socks
        assert site.paths == []
        # Control: with the secret, the same listener serves the grant.
        good = base64.b64encode(f"stockade:{secret}".encode()).decode()
        ok = _raw(port, f"GET {target} HTTP/1.1\r\nHost: localhost:{site.port}\r\n"
                        f"Proxy-Authorization: Basic {good}\r\nConnection: close\r\n\r\n"
                        .encode())
        status = ok.split(b"\r\n", 1)[0]
        assert status.endswith(b" 200 OK") and ok.endswith(b"hello from the host\n"), ok
        password = secret.encode()
        # Plain HTTP inside a tunnel is refused (its Host would go unchecked),
        # so the SOCKS control speaks a line the site answers with its 400.
        socks_ok = _raw(port, b"\x05\x01\x02" + b"\x01\x08stockade" + bytes([len(password)])
                        + password + b"\x05\x01\x00\x03" + bytes([len(name)]) + name
                        + site.port.to_bytes(2, "big") + b"HELLO\r\n")
        assert socks_ok.startswith(b"\x05\x02\x01\x00\x05\x00"), socks_ok[:40]
        assert b"400" in socks_ok and b"HELLO" in socks_ok, socks_ok
        assert site.paths == ["/hello.txt"]
    finally:
        (cli.ws / "done").touch()
        proc.communicate(timeout=TIMEOUT)
    rows = cli.network_audit("held")
    assert len(rows) == 2 and all(r["allowed"] for r in rows), rows


def _listening_tcp_ports(pid: int) -> set[int]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_bubblewrap_grant_opens_no_tcp_listener_on_the_host(tmp_path: Path,
                                                           site: Recorder) -> None:
    cli = Cli(tmp_path, "bubblewrap")
    proc = _running(cli, f"curl -sS -o /dev/null http://localhost:{site.port}/hello.txt; "
                         + _HOLD, [f"localhost:{site.port}"], "bw")
    try:
        url = _wait_for(cli.ws / "proxy.url", proc)
        assert url == "http://127.0.0.1:3128", url  # the in-sandbox bridge
        assert site.paths == ["/hello.txt"]  # the grant is live while we look
        assert _listening_tcp_ports(proc.pid) == set()
    finally:
        (cli.ws / "done").touch()
        proc.communicate(timeout=TIMEOUT)
