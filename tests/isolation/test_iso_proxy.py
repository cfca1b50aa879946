"""The managed network, attacked through the real sandbox, as root and as a user.

A command allowed some hosts runs in its own network namespace; its only way
out is the in-sandbox bridge to the session's proxy on the host. These tests
run real clients inside (curl, Python, git, openssl and hand-made protocol
bytes) against servers this process runs on 127.0.0.0/8 and ::1, and judge
every denial from OUTSIDE: the server that would have been reached records
every TCP connection it accepted, every byte and every datagram, and must
have recorded none.

Two ways in, both run by the `runner` fixture as root and as the
unprivileged user:

* the CLI, `stockade run --allow-host ...`, with IP-literal entries (and
  `localhost`, which the host's /etc/hosts answers);
* the library, `SyncWorkspaceSandbox(config, proxy_options={"resolver": ...})`,
  driven by a short script the runner executes, so that `.test` names map to
  loopback addresses without touching /etc/hosts or any DNS server.

Both go through a test-only seatbelt installed before stockade starts: it
wraps the proxy's outbound connect (`stockade.proxy.server._connect`) to log
every address the proxy dials and to refuse any address outside loopback, and
replaces the system resolver with the test map (plus the names in /etc/hosts
that a test names explicitly). So no test can reach a non-loopback address
even if the product were broken, "refused before dialing" is checked against
the proxy's own dial log, and each test's control proves the log is live.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from .conftest import (
    IS_ROOT,
    RUN_TIMEOUT,
    SYSTEM_PYTHON,
    Box,
    Listener,
    Runner,
    tcp_listener,
    text,
)
from .proxy_servers import (
    Cert,
    Closer,
    HttpBackend,
    TlsRecorder,
    UdpServer,
    bind_same_port,
    dns_server,
    iter_lines,
    make_cert,
    make_git_repo,
)

pytestmark = pytest.mark.isolation

ALLOWED = "127.0.0.2"  # the backend every test may reach
CERT_NAMES = ("tls.test", "git.test")
CERT_IPS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")

# -- the seatbelt: every run of stockade below starts with it ----------------------------

SEATBELT = r'''
import errno as _errno, ipaddress as _ip, json as _json
import stockade.proxy.server as _srv

with open(SEATBELT_CONFIG) as _f:
    _CFG = _json.load(_f)
_ANSWERS = {name: list(seq) for name, seq in _CFG["resolve"].items()}
_REAL_NAMES = set(_CFG["real"])
_real_connect, _real_resolver = _srv._connect, _srv.system_resolver
DIALS = []


def _note(*entry):
    with open(_CFG["log"], "a") as f:
        f.write(_json.dumps(entry) + "\n")


async def _guarded_connect(address, port):
    DIALS.append((str(address), port))
    _note("dial", str(address), port)
    if not _ip.ip_address(address).is_loopback:
        raise OSError(_errno.ENETUNREACH, "isolation seatbelt: no dial beyond loopback")
    return await _real_connect(address, port)


async def test_resolver(name, port):
    """The test map (answers in turn, the last one repeated), else /etc/hosts names."""
    _note("resolve", name, port)
    if name in _ANSWERS:
        seq = _ANSWERS[name]
        return [_ip.ip_address(a) for a in (seq.pop(0) if len(seq) > 1 else seq[0])]
    if name in _REAL_NAMES:
        return await _real_resolver(name, port)
    raise OSError(_errno.ENOENT, f"isolation seatbelt: {name} is not a test name")


_srv._connect = _guarded_connect
_srv.system_resolver = test_resolver
'''

CLI_MAIN = "from stockade.cli import main\nsys.exit(main())"

# Runs a list of steps through SyncWorkspaceSandbox in one session; prints JSON.
DRIVER = r'''
import json, threading, time
from stockade import NetworkPolicy, SandboxCommand, SandboxConfig, SyncWorkspaceSandbox
from stockade.approval import ApprovalGate
from stockade.ledger import Ledger

with open(sys.argv[1]) as f:
    SPEC = json.load(f)
config = SandboxConfig(ledger=SPEC["ledger"], allow_hosts=SPEC["allow"],
                       deny_hosts=SPEC["deny"], mode=SPEC["mode"])
APPROVALS = []


class ApproveOnce:
    """A person who approves each request for that one command only."""

    def request(self, request):
        APPROVALS.append(list(request.argv))
        return "approved-once"


sandbox = SyncWorkspaceSandbox(config, proxy_options={"resolver": test_resolver},
                               approval=ApprovalGate(ApproveOnce(), 30))
ws = sandbox.open_session("iso", SPEC["workspace"])
background = []


def command(step):
    caps = None
    if "network" in step:  # this command's own allowlist, beyond the session's baseline
        base = sandbox.core.baseline(sandbox.core.mode_for(ws), ws)
        caps = base.replace(network=NetworkPolicy.allow_hosts(step["network"]))
    return SandboxCommand(step["argv"][0], step["argv"][1:], session_id="iso",
                          timeout=step.get("timeout", 25), capabilities=caps)


def run(step, out):
    try:
        o = sandbox.execute(command(step))
        out.update(exit=o.exit_code, stdout=o.stdout.decode(errors="replace"),
                   stderr=o.stderr.decode(errors="replace"))
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"


results = []
for step in SPEC["steps"]:
    out = {}
    kill = step.get("kill_after_dials")
    if "sleep" in step:
        time.sleep(step["sleep"])
    elif step.get("wait_background"):
        for proc in background:
            out.setdefault("exits", []).append(proc.wait(40))
            out["stdout"] = out.get("stdout", "") + proc.output("stdout")[0].decode(
                errors="replace")
    elif step.get("background"):
        background.append(sandbox.start(command(step)))
    elif kill is None:
        run(step, out)
    else:
        t = threading.Thread(target=run, args=(step, out))
        t.start()
        deadline = time.monotonic() + 15
        while len(DIALS) < kill and t.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        sandbox.core._proxy.close()
        out["dials_at_kill"] = len(DIALS)
        t.join(40)
        out["dials_after"] = len(DIALS)
    results.append(out)
sandbox.close()
print(json.dumps({"steps": results, "approvals": APPROVALS,
                  "network": Ledger(SPEC["ledger"]).query(table="network", last=5000)}))
'''

# -- the probe: the attacker inside the sandbox -------------------------------------------

PROBE = r'''
import json, os, select, socket, ssl, subprocess, sys, time, urllib.error, urllib.parse
import urllib.request

HTTP = urllib.parse.urlsplit(os.environ.get("HTTP_PROXY") or "http://127.0.0.1:3128")
SOCKS = urllib.parse.urlsplit(os.environ.get("ALL_PROXY") or "socks5h://127.0.0.1:1080")
T = 4.0


def bridge(kind="http"):
    u = HTTP if kind == "http" else SOCKS
    return socket.create_connection((u.hostname, u.port), timeout=T)


def recv_until(s, marker):
    data = b""
    while marker not in data:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def read_response(s):
    data = recv_until(s, b"\r\n\r\n")
    head, sep, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    while sep and len(rest) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    return head, rest


def parse(head, body=b""):
    lines = head.decode(errors="replace").split("\r\n")
    first = lines[0].split() if lines else []
    status = int(first[1]) if len(first) > 1 and first[1].isdigit() else 0
    denied = None
    for line in lines[1:]:
        if line.lower().startswith("x-stockade-denied:"):
            denied = line.split(":", 1)[1].strip()
    return {"status": status, "denied": denied, "body": body[:300].decode(errors="replace")}


def do_http(a):
    s = bridge()
    out = []
    for req in a["requests"]:
        head = f"{req.get('method', 'GET')} {req['target']} HTTP/1.1\r\n"
        for h in req.get("headers", []):
            head += h + "\r\n"
        s.sendall((head + "\r\n").encode())
        try:
            out.append(parse(*read_response(s)))
        except OSError as exc:
            out.append({"status": 0, "error": str(exc)})
    return {"responses": out}


def do_connect(a):
    s = bridge()
    s.sendall(f"CONNECT {a['target']} HTTP/1.1\r\nHost: {a['target']}\r\n\r\n".encode())
    r = parse(recv_until(s, b"\r\n\r\n").partition(b"\r\n\r\n")[0])
    if r["status"] == 200 and a.get("send"):
        s.sendall(a["send"].encode())
        try:
            r["reply"] = s.recv(300).decode(errors="replace")
        except OSError as exc:
            r["reply_error"] = str(exc)
    return r


def do_socks(a):
    s = bridge("socks")
    s.sendall(b"\x05\x01\x00")
    if s.recv(2) != b"\x05\x00":
        return {"reply": None}
    atyp, addr = a["atyp"], a["addr"]
    if atyp == 1:
        raw = socket.inet_pton(socket.AF_INET, addr)
    elif atyp == 4:
        raw = socket.inet_pton(socket.AF_INET6, addr)
    else:
        raw = bytes([len(addr)]) + addr.encode()
    s.sendall(bytes([5, a.get("cmd", 1), 0, atyp]) + raw + a["port"].to_bytes(2, "big"))
    reply = s.recv(10)
    r = {"reply": reply[1] if len(reply) > 1 else None}
    if r["reply"] == 0 and a.get("send"):
        s.sendall(a["send"].encode())
        r["data"] = s.recv(300).decode(errors="replace")
    return r


def do_tls(a):
    """CONNECT, then a TLS handshake driven by hand so the ClientHello can be re-framed."""
    s = bridge()
    s.sendall(f"CONNECT {a['connect']} HTTP/1.1\r\nHost: {a['connect']}\r\n\r\n".encode())
    r = parse(recv_until(s, b"\r\n\r\n").partition(b"\r\n\r\n")[0])
    if r["status"] != 200:
        return r
    ctx = ssl.create_default_context(cafile=a["cafile"])
    ctx.check_hostname = False  # the SNI is the experiment; the chain is still verified
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(inc, out, server_hostname=a.get("sni"))
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = out.read()
    split = a.get("split")
    if split:
        length = int.from_bytes(hello[3:5], "big")
        assert len(hello) == 5 + length, "one record expected"
        body = hello[5:]
        hello = b"".join(hello[:3] + len(body[i:i + split]).to_bytes(2, "big")
                         + body[i:i + split] for i in range(0, len(body), split))
    try:
        s.sendall(hello)
        request_sent = False
        answer = b""
        while True:
            try:
                if not request_sent:
                    tls.do_handshake()
                    tls.write(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
                    request_sent = True
                answer += tls.read(4096)
                if b"hello tls" in answer:
                    r["tls"] = "ok"
                    r["answer"] = answer.decode(errors="replace")[-60:]
                    return r
            except ssl.SSLWantReadError:
                pass
            pending = out.read()
            if pending:
                s.sendall(pending)
            data = s.recv(65536)
            if not data:
                r["tls"] = "closed"
                return r
            inc.write(data)
    except (OSError, ssl.SSLError) as exc:
        r["tls"] = f"error {exc}"
        return r


def do_direct(a):
    family = socket.AF_INET6 if ":" in a["host"] else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect((a["host"], a["port"]))
        s.sendall(b"direct from the sandbox")
        return {"connected": True}
    except OSError as exc:
        return {"connected": False, "error": f"{exc.errno} {exc.strerror}"}
    finally:
        s.close()


def dns_query(name):
    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\x00\x00\x01\x00\x01"


def do_udp(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    payload = dns_query("probe.test") if a.get("dns") else b"udp from the sandbox"
    try:
        s.sendto(payload, (a["host"], a["port"]))
    except OSError as exc:
        return {"sent": False, "answer": False, "error": f"{exc.errno} {exc.strerror}"}
    try:
        return {"sent": True, "answer": bool(s.recv(4096))}
    except OSError as exc:
        return {"sent": True, "answer": False, "error": str(exc)}


def do_dns_tcp(a):
    try:
        s = socket.create_connection((a["host"], a["port"]), timeout=2)
        q = dns_query("probe.test")
        s.sendall(len(q).to_bytes(2, "big") + q)
        return {"answer": len(s.recv(4096)) > 2}
    except OSError as exc:
        return {"answer": False, "error": f"{exc.errno} {exc.strerror}"}


def do_urllib(a):
    handlers = [] if a.get("proxy", True) else [urllib.request.ProxyHandler({})]
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(a["url"], timeout=T) as resp:
            return {"status": resp.status, "body": resp.read(300).decode(errors="replace")}
    except urllib.error.HTTPError as exc:
        return {"status": exc.code, "denied": exc.headers.get("X-Stockade-Denied")}
    except OSError as exc:
        return {"status": 0, "error": str(exc)}


def do_cmd(a):
    try:
        p = subprocess.run(a["argv"], capture_output=True, timeout=a.get("timeout", 15),
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"rc": None, "out": "", "err": "timeout"}
    return {"rc": p.returncode, "out": p.stdout.decode(errors="replace")[-3000:],
            "err": p.stderr.decode(errors="replace")[-3000:]}


def do_concurrent(a):
    """n requests open at once through the bridge; the backend answers none until all
    n have arrived."""
    socks = []
    for _ in range(a["n"]):
        s = bridge()
        s.sendall(f"GET {a['url']} HTTP/1.1\r\nHost: {a['host']}\r\n"
                  "Connection: close\r\n\r\n".encode())
        socks.append(s)
    bufs = {s: b"" for s in socks}
    live = set(socks)
    for s in socks:
        s.setblocking(False)
    deadline = time.monotonic() + a["timeout"]
    while live and time.monotonic() < deadline:
        ready, _, _ = select.select(list(live), [], [], 0.5)
        for s in ready:
            try:
                chunk = s.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if chunk:
                bufs[s] += chunk
            else:
                live.discard(s)
    statuses = {}
    for data in bufs.values():
        status = parse(data.partition(b"\r\n\r\n")[0])["status"]
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    return {"statuses": statuses, "unfinished": len(live)}


def do_poll(a):
    """GET `url` every 0.1 s for `duration` seconds; the status of each attempt."""
    statuses = []
    deadline = time.monotonic() + a["duration"]
    while time.monotonic() < deadline:
        statuses.append(do_urllib({"url": a["url"]}).get("status"))
        time.sleep(0.1)
    return {"statuses": statuses}


def do_loop(a):
    """Requests through the proxy (and direct attempts) until the proxy has been gone a while."""
    seq, direct = [], []
    deadline = time.monotonic() + a["deadline"]
    while time.monotonic() < deadline:
        seq.append("OK" if do_urllib({"url": a["url"]}).get("status") == 200 else "FAIL")
        for host, port in a["direct"]:
            direct.append(do_direct({"host": host, "port": port})["connected"])
        tail = seq[-a["fails"]:]
        if "OK" in seq and len(tail) == a["fails"] and "OK" not in tail:
            break
        time.sleep(0.05)
    return {"seq": seq, "direct": direct}


results = []
for attempt in json.loads(sys.argv[1]):
    try:
        results.append(globals()["do_" + attempt["k"]](attempt))
    except Exception as exc:
        results.append({"exception": f"{type(exc).__name__}: {exc}"})
print("PROBE-RESULTS " + json.dumps(results))
'''


def probe_argv(attempts: Sequence[dict[str, Any]]) -> list[str]:
    return [SYSTEM_PYTHON, "-I", "-c", PROBE, json.dumps(list(attempts))]


def probe_results(out: str) -> list[dict[str, Any]]:
    for line in out.splitlines():
        if line.startswith("PROBE-RESULTS "):
            return json.loads(line[len("PROBE-RESULTS "):])  # type: ignore[no-any-return]
    raise AssertionError(f"the probe printed no results:\n{out[-3000:]}")


# -- one test's network world --------------------------------------------------------------


class Net:
    """Runs stockade (CLI or library) for one test, behind the seatbelt, and reads its logs."""

    def __init__(self, box: Box) -> None:
        self.box = box
        self.log = box.write(box.root / "seatbelt.log", "")
        self.config = box.root / "seatbelt.json"
        self.ledger = box.state / "ledger.db"
        self.configure()

    @property
    def runner(self) -> Runner:
        return self.box.runner

    def configure(self, resolve: dict[str, list[list[str]]] | None = None,
                  real: Sequence[str] = ()) -> None:
        self.box.write(self.config, json.dumps(
            {"log": str(self.log), "resolve": resolve or {}, "real": list(real)}))

    def _program(self, tail: str) -> str:
        return "\n".join(["import sys", f"sys.path.insert(0, {self.runner.site!r})",
                          f"SEATBELT_CONFIG = {str(self.config)!r}", SEATBELT, tail])

    def cli_argv(self, args: Sequence[str]) -> list[str]:
        return [self.runner.python, "-I", "-c", self._program(CLI_MAIN), *args]

    def cli(self, args: Sequence[str], *, timeout: float = RUN_TIMEOUT
            ) -> subprocess.CompletedProcess[bytes]:
        return self.runner.host(self.cli_argv(args), cwd=self.box.ws, env=self.box.env(),
                                timeout=timeout)

    def run(self, cmd: Sequence[str], *, allow: Sequence[str] = (), deny: Sequence[str] = (),
            options: Sequence[str] = (), timeout: float = RUN_TIMEOUT
            ) -> subprocess.CompletedProcess[bytes]:
        args = ["run", "--yes", *options]
        for host in allow:
            args += ["--allow-host", host]
        for host in deny:
            args += ["--deny-host", host]
        return self.cli([*args, "--", *cmd], timeout=timeout)

    def probe(self, attempts: Sequence[dict[str, Any]], **kw: Any) -> list[dict[str, Any]]:
        res = self.run(probe_argv(attempts), **kw)
        return probe_results(text(res))

    def library(self, steps: Sequence[dict[str, Any]], *, allow: Sequence[str],
                deny: Sequence[str] = (), mode: str = "read-only",
                timeout: float = RUN_TIMEOUT * 2) -> dict[str, Any]:
        spec = self.box.write(self.box.root / "spec.json", json.dumps({
            "ledger": str(self.ledger), "workspace": str(self.box.ws), "allow": list(allow),
            "deny": list(deny), "mode": mode, "steps": list(steps)}))
        argv = [self.runner.python, "-I", "-c", self._program(DRIVER), str(spec)]
        res = self.runner.host(argv, cwd=self.box.ws, env=self.box.env(), timeout=timeout)
        lines = res.stdout.decode(errors="replace").strip().splitlines()
        assert res.returncode == 0 and lines, text(res)
        return json.loads(lines[-1])  # type: ignore[no-any-return]

    def library_probe(self, attempts: Sequence[dict[str, Any]], *, allow: Sequence[str],
                      deny: Sequence[str] = ()
                      ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """One probe through the library; its results and the ledger's network rows."""
        out = self.library([{"argv": probe_argv(attempts)}], allow=allow, deny=deny)
        step = out["steps"][0]
        assert "error" not in step, step
        return probe_results(step["stdout"] + step["stderr"]), out["network"]

    def entries(self, kind: str) -> list[tuple[Any, ...]]:
        return [tuple(e[1:]) for e in map(json.loads, iter_lines(self.log)) if e[0] == kind]

    def dials(self) -> list[tuple[str, int]]:
        return [(str(a), int(p)) for a, p in self.entries("dial")]

    def audit(self) -> list[dict[str, Any]]:
        res = self.cli(["audit", "--network", "--json", "--last", "5000"])
        assert res.returncode == 0, text(res)
        return [json.loads(line) for line in res.stdout.decode().splitlines() if line.strip()]


@pytest.fixture
def net(box: Box) -> Net:
    return Net(box)


@pytest.fixture
def servers() -> Iterator[Closer]:
    closer = Closer()
    yield closer
    closer.close()


@pytest.fixture(scope="session")
def cert(iso_root: Path) -> Cert:
    directory = iso_root / "proxy-cert"
    made = make_cert(directory, CERT_NAMES, CERT_IPS)
    os.chmod(directory, 0o755)
    return made


@pytest.fixture(scope="session")
def git_repo(iso_root: Path) -> tuple[Path, str]:
    root = iso_root / "proxy-git"
    sha = make_git_repo(root)
    for dirpath, _dirs, files in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in files:
            os.chmod(os.path.join(dirpath, name), 0o644)
    return root, sha


class Removal:
    """A directory removed when the test's servers close."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def backend(servers: Closer, *decoys: str, listeners: list[Listener] | None = None,
            address: str = ALLOWED, **kw: Any) -> tuple[HttpBackend, list[Listener]]:
    """An HTTP backend on `address`:P, with a counting decoy on each of `decoys`:P."""
    socks = bind_same_port([address, *decoys])
    b = HttpBackend(socks[0], greeting=f"hello from {address}", **kw)
    servers.add(b)
    made = [Listener(s, f"decoy {s.getsockname()[0]}") for s in socks[1:]]
    if listeners is not None:
        listeners.extend(made)
    else:
        for listener in made:
            servers.add(listener)
    return b, made


def settle(*decoys: Listener) -> list[int]:
    """Connections each decoy accepted; any at all is a leak, shown with what it carried."""
    time.sleep(0.3)
    counts = [d.connections for d in decoys]
    if any(counts):
        print("decoys touched:", [(d.label, d.connections, d.received[:300]) for d in decoys])
    return counts


def http_attempt(target: str, host: str | None = "", **extra: Any) -> dict[str, Any]:
    """A forward-proxy request; `host` "" means "the target's own authority"."""
    if host == "":
        host = target.split("/")[2]
    headers = [f"Host: {host}"] if host is not None else []
    return {"k": "http", "requests": [{"target": target, "headers": headers, **extra}]}


def denied_by_proxy(r: dict[str, Any]) -> bool:
    """A refusal the proxy wrote itself: 4xx with the X-Stockade-Denied reason."""
    return 400 <= r.get("status", 0) < 500 and bool(r.get("denied"))


# == allowed traffic ==========================================================================


def test_allowed_ip_literal_reachable_with_curl_and_urllib(net: Net, servers: Closer) -> None:
    b, _ = backend(servers)
    url = f"http://{b.authority}"
    results = net.probe([
        {"k": "cmd", "argv": ["curl", "-sS", "-m", "10", f"{url}/curl"]},
        {"k": "urllib", "url": f"{url}/urllib"},
    ], allow=[b.authority])
    assert results[0]["rc"] == 0 and f"hello from {ALLOWED} /curl" in results[0]["out"], results
    assert results[1] == {"status": 200, "body": f"hello from {ALLOWED} /urllib\n"}, results
    assert [r.path for r in b.requests] == ["/curl", "/urllib"]
    assert set(net.dials()) == {(ALLOWED, b.port)}  # the proxy dialed it: no other way in
    rows = [r for r in net.audit() if r["host"] == ALLOWED]
    assert len(rows) == 2 and all(r["allowed"] == 1 and r["address"] == ALLOWED
                                  and r["bytes_down"] > 0 for r in rows), rows


def test_no_subprocess_leaves_the_bridge_working(net: Net, servers: Closer) -> None:
    """The bridge forks before the no-spawn filter: a lone program still gets through."""
    b, _ = backend(servers)
    results = net.probe([{"k": "urllib", "url": f"http://{b.authority}/lone"}],
                        allow=[b.authority], options=["--no-subprocess"])
    assert results == [{"status": 200, "body": f"hello from {ALLOWED} /lone\n"}], results
    assert [r.path for r in b.requests] == ["/lone"]


def test_git_clone_over_smart_http(net: Net, servers: Closer,
                                   git_repo: tuple[Path, str]) -> None:
    root, sha = git_repo
    b, _ = backend(servers, git_root=root)
    res = net.run(["/bin/sh", "-c",
                   f"git clone -q http://{b.authority}/git/repo.git clone && "
                   "git -C clone rev-parse HEAD && cat clone/README"],
                  allow=[b.authority], options=["--mode", "workspace-write"])
    assert res.returncode == 0, text(res)
    assert sha in text(res) and "smart HTTP" in text(res)
    assert any("service=git-upload-pack" in r.path for r in b.requests), b.requests
    assert any(r.method == "POST" for r in b.requests), "no pack was fetched"
    assert (net.box.ws / "clone" / "README").exists()


def test_allowed_names_via_resolver_hook_curl_urllib_https_git(
        net: Net, servers: Closer, cert: Cert, git_repo: tuple[Path, str]) -> None:
    """The library path: names resolved by the hook, HTTPS and git over CONNECT."""
    root, sha = git_repo
    b, _ = backend(servers)
    tls_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls_ctx.load_cert_chain(str(cert.cert), str(cert.key))
    s, = bind_same_port(["127.0.0.3"])
    https = servers.add(HttpBackend(s, greeting="hello over tls", tls=tls_ctx, git_root=root))
    assert isinstance(https, HttpBackend)
    net.configure(resolve={"api.test": [[ALLOWED]], "git.test": [["127.0.0.3"]]})
    allow = [f"api.test:{b.port}", b.authority, f"git.test:{https.port}", https.authority]
    out = net.library([
        {"argv": probe_argv([
            {"k": "cmd", "argv": ["curl", "-sS", "-m", "10", f"http://api.test:{b.port}/curl"]},
            {"k": "urllib", "url": f"http://api.test:{b.port}/urllib"},
            {"k": "cmd", "argv": ["curl", "-sS", "-m", "10", "--cacert", str(cert.cert),
                                  f"https://git.test:{https.port}/curl-https"]},
        ])},
        {"argv": ["git", "-c", f"http.sslCAInfo={cert.cert}", "clone", "-q",
                  f"https://git.test:{https.port}/git/repo.git", "clone"]},
        {"argv": ["git", "-C", "clone", "rev-parse", "HEAD"]},
    ], allow=allow, mode="workspace-write")
    first, clone, head = out["steps"]
    results = probe_results(first["stdout"])
    assert "hello from 127.0.0.2 /curl" in results[0]["out"], results
    assert results[1]["status"] == 200, results
    assert "hello over tls /curl-https" in results[2]["out"], results
    assert clone.get("exit") == 0, clone
    assert head.get("stdout", "").strip() == sha, head
    # The origin saw the name the client asked for, through the proxy.
    assert {r.host for r in b.requests} == {f"api.test:{b.port}"}
    assert any(r.method == "POST" and "upload-pack" in r.path for r in https.requests)
    assert set(net.dials()) == {(ALLOWED, b.port), ("127.0.0.3", https.port)}
    rows = [r for r in out["network"] if r["host"] == "api.test"]
    assert rows and all(r["allowed"] == 1 and r["address"] == ALLOWED for r in rows), rows
    assert all(r["rule"] == f"allow api.test:{b.port}; allow {b.authority}" for r in rows), rows


# == denials ==================================================================================


def test_denied_hosts_get_403_with_reason_and_a_ledger_row(net: Net, servers: Closer,
                                                           listeners: list[Listener]) -> None:
    b, (unlisted,) = backend(servers, "127.0.0.6", listeners=listeners)
    s, = bind_same_port(["127.0.0.5"])
    denied = Listener(s, "denied")
    listeners.append(denied)
    deny_port = s.getsockname()[1]
    results = net.probe([
        {"k": "cmd", "argv": ["curl", "-sS", "-i", "-m", "10", f"http://127.0.0.5:{deny_port}/"]},
        {"k": "urllib", "url": f"http://127.0.0.5:{deny_port}/"},
        {"k": "cmd", "argv": ["curl", "-sS", "-m", "10", f"https://127.0.0.5:{deny_port}/"]},
        {"k": "cmd", "argv": ["curl", "-sS", "-i", "-m", "10", f"http://127.0.0.6:{b.port}/"]},
    ], allow=[b.authority, f"127.0.0.5:{deny_port}"],
        deny=["127.0.0.5=paste sites exfiltrate the workspace"])
    reason = f"127.0.0.5:{deny_port} is denied: paste sites exfiltrate the workspace"
    assert f"X-Stockade-Denied: {reason}" in results[0]["out"], results[0]
    assert results[0]["out"].startswith("HTTP/1.1 403"), results[0]
    assert results[1] == {"status": 403, "denied": reason}, results[1]
    assert "CONNECT tunnel failed, response 403" in results[2]["err"], results[2]
    assert (f"X-Stockade-Denied: 127.0.0.6:{b.port} is not on the allow list"
            in results[3]["out"]), results[3]
    assert settle(denied, unlisted) == [0, 0]
    assert b.connections == 0
    assert net.dials() == []
    rows = net.audit()
    refused = [r for r in rows if r["host"] == "127.0.0.5"]
    assert len(refused) == 3 and all(r["allowed"] == 0 and r["rule"] == "deny 127.0.0.5"
                                     for r in refused), rows
    assert [r["rule"] for r in rows if r["host"] == "127.0.0.6"] == ["no allow entry"], rows


LOOPBACK_SPELLINGS = (
    "2130706433", "0x7f.1", "0177.0.0.1", "127.1", "[::ffff:127.0.0.1]", "0x7f000001",
    "127.0.0.1.", "0x7F.0.0.1", "127.000.000.001", "127.0.1", "[::ffff:7f00:1]",
    "[0:0:0:0:0:ffff:127.0.0.1]", "[::1]", "0", "0.0.0.0", "[::]", "localhost", "LOCALHOST.",
)
ALLOWED_SPELLINGS = ("2130706434", "0x7f.2", "127.2", "[::ffff:127.0.0.2]", "0177.0.0.2")


def test_ip_spellings_of_loopback_denied(net: Net, servers: Closer,
                                         listeners: list[Listener]) -> None:
    """127.0.0.0/30:P is allowed as addresses and 127.0.0.1 denied: only the canonical
    form stands between each spelling and the decoy on 127.0.0.1:P (or [::1]:P)."""
    b, (decoy4, decoy6) = backend(servers, "127.0.0.1", "::1", listeners=listeners)
    p = b.port
    net.configure(real=["localhost"])  # /etc/hosts: localhost is 127.0.0.1
    attempts: list[dict[str, Any]] = []
    for sp in LOOPBACK_SPELLINGS:
        attempts.append(http_attempt(f"http://{sp}:{p}/leak"))
        attempts.append({"k": "connect", "target": f"{sp}:{p}",
                         "send": "GET /leak HTTP/1.0\r\n\r\n"})
        attempts.append({"k": "socks", "atyp": 3, "addr": sp.strip("[]"), "port": p,
                         "send": "GET /leak HTTP/1.0\r\n\r\n"})
    for atyp, addr in ((1, "127.0.0.1"), (1, "0.0.0.0"), (4, "::1"), (4, "::ffff:127.0.0.1"),
                       (4, "::")):
        attempts.append({"k": "socks", "atyp": atyp, "addr": addr, "port": p,
                         "send": "GET /leak HTTP/1.0\r\n\r\n"})
    controls = [http_attempt(f"http://{sp}:{p}/ok") for sp in ALLOWED_SPELLINGS]
    # A tunnel to an allowed spelling opens; plain HTTP inside it is refused like any
    # (test_host_header_mismatch_inside_plain_tunnel_rejected), so nothing is sent.
    controls.append({"k": "socks", "atyp": 3, "addr": "0x7f.0.0.2", "port": p})
    results = net.probe([*attempts, *controls], allow=[f"127.0.0.0/30:{p}", f"localhost:{p}"],
                        deny=["127.0.0.1"])
    refusals, allowed = results[:len(attempts)], results[len(attempts):]
    leaks = []
    for attempt, r in zip(attempts, refusals, strict=True):
        if attempt["k"] == "http":
            ok = denied_by_proxy(r["responses"][0])
        elif attempt["k"] == "connect":
            ok = denied_by_proxy(r)
        else:
            ok = r.get("reply") in (1, 2)  # general failure (bad name) or not allowed
        if not ok:
            leaks.append((attempt, r))
    assert not leaks, leaks
    assert all(r["responses"][0]["status"] == 200 for r in allowed[:-1]), allowed
    assert allowed[-1]["reply"] == 0, allowed
    assert settle(decoy4, decoy6) == [0, 0]
    assert [r.path for r in b.requests] == ["/ok"] * (len(controls) - 1)
    assert set(net.dials()) == {(ALLOWED, p)}


def test_loopback_v6_and_metadata_refused_by_range_before_dialing(
        net: Net, servers: Closer, listeners: list[Listener]) -> None:
    """Allowed names resolving to loopback, ::1 or 169.254.169.254 are refused after
    resolution; the proxy's dial log proves it never dialed them."""
    b, (decoy4, decoy6) = backend(servers, "127.0.0.1", "::1", listeners=listeners)
    p = b.port
    net.configure(resolve={
        "ok.test": [[ALLOWED]], "local.test": [["127.0.0.1"]], "six.test": [["::1"]],
        "mapped.test": [["::ffff:127.0.0.1"]], "meta.test": [["169.254.169.254"]],
        "mixed.test": [["169.254.169.254", "::1", "127.0.0.1", "0.0.0.0"]],
    })
    names = ["local.test", "six.test", "mapped.test", "mixed.test"]
    attempts: list[dict[str, Any]] = [http_attempt(f"http://{n}:{p}/leak") for n in names]
    attempts += [{"k": "connect", "target": f"{n}:{p}"} for n in names]
    attempts += [
        http_attempt("http://meta.test/latest/meta-data/"),
        {"k": "connect", "target": "meta.test:443"},
        {"k": "socks", "atyp": 3, "addr": "meta.test", "port": 80},
        # the address itself, however spelled, is on no allow list
        http_attempt("http://169.254.169.254/latest/meta-data/iam/security-credentials/"),
        http_attempt("http://2852039166/latest/meta-data/"),
        http_attempt("http://[::ffff:169.254.169.254]/latest/meta-data/"),
        {"k": "connect", "target": "169.254.169.254:80"},
        {"k": "socks", "atyp": 1, "addr": "169.254.169.254", "port": 80},
        http_attempt(f"http://[::1]:{p}/leak"),
        http_attempt(f"http://127.0.0.1:{p}/leak"),
    ]
    allow = [f"{n}:{p}" for n in ("ok.test", *names)] + ["meta.test", b.authority]
    results, rows = net.library_probe([*attempts, http_attempt(f"http://ok.test:{p}/ok")],
                                      allow=allow)
    control = results.pop()
    assert control["responses"][0]["status"] == 200, control
    reasons = []
    for attempt, r in zip(attempts, results, strict=True):
        if attempt["k"] == "socks":
            assert r["reply"] == 2, (attempt, r)
            continue
        resp = r["responses"][0] if attempt["k"] == "http" else r
        assert denied_by_proxy(resp) and resp["status"] == 403, (attempt, r)
        reasons.append(resp["denied"])
    assert "local.test resolves to 127.0.0.1 (loopback 127.0.0.0/8)" in reasons[0], reasons
    assert "six.test resolves to ::1 (loopback" in reasons[1], reasons
    assert "mapped.test resolves to 127.0.0.1 (loopback" in reasons[2], reasons
    assert "meta.test resolves to 169.254.169.254 (link-local 169.254.0.0/16)" in reasons[8]
    assert settle(decoy4, decoy6) == [0, 0]
    assert net.dials() == [(ALLOWED, p)]  # the control, and nothing else, was ever dialed
    meta = [r for r in rows if r["host"] == "meta.test"]
    assert len(meta) == 3 and all(r["allowed"] == 0 and r["address"] == "169.254.169.254"
                                  and r["rule"].startswith("refused link-local") for r in meta)


def test_dns_rebinding_never_reaches_the_rebound_address(
        net: Net, servers: Closer, listeners: list[Listener]) -> None:
    b, (decoy,) = backend(servers, "127.0.0.1", listeners=listeners)
    p = b.port
    # A port where 127.0.0.2 refuses (bound, never listening) and 127.0.0.1 has a decoy.
    dead, dead_decoy_sock = bind_same_port([ALLOWED, "127.0.0.1"])
    servers.add(dead)
    dead_decoy = Listener(dead_decoy_sock, "dead decoy")
    listeners.append(dead_decoy)
    q = dead.getsockname()[1]
    net.configure(resolve={
        "rebind.test": [[ALLOWED], ["127.0.0.1"]],
        "keepalive.test": [[ALLOWED], ["127.0.0.1"]],
        "mixed.test": [["127.0.0.1", ALLOWED]],
        "dead.test": [[ALLOWED, "127.0.0.1"]],
    })
    attempts = [
        http_attempt(f"http://rebind.test:{p}/first"),
        http_attempt(f"http://rebind.test:{p}/rebound"),
        {"k": "connect", "target": f"rebind.test:{p}", "send": "GET /rebound HTTP/1.0\r\n\r\n"},
        {"k": "socks", "atyp": 3, "addr": "rebind.test", "port": p,
         "send": "GET /rebound HTTP/1.0\r\n\r\n"},
        {"k": "http", "requests": [
            {"target": f"http://keepalive.test:{p}/first",
             "headers": [f"Host: keepalive.test:{p}"]},
            {"target": f"http://keepalive.test:{p}/rebound",
             "headers": [f"Host: keepalive.test:{p}"]}]},
        http_attempt(f"http://mixed.test:{p}/mixed"),
        http_attempt(f"http://dead.test:{q}/dead"),
    ]
    allow = [b.authority, f"{ALLOWED}:{q}",
             *(f"{n}.test:{port}" for n, port in (("rebind", p), ("keepalive", p),
                                                  ("mixed", p), ("dead", q)))]
    results, _ = net.library_probe(attempts, allow=allow)
    first, rebound, tunnel, socks, keepalive, mixed, dead_r = results
    assert first["responses"][0]["status"] == 200, first
    assert rebound["responses"][0]["status"] == 403, rebound
    assert "rebind.test resolves to 127.0.0.1 (loopback" in rebound["responses"][0]["denied"]
    assert tunnel["status"] == 403 and socks["reply"] == 2, (tunnel, socks)
    assert [r["status"] for r in keepalive["responses"]] == [200, 403], keepalive
    assert mixed["responses"][0]["status"] == 200, mixed  # only the permitted address used
    assert dead_r["responses"][0]["status"] == 502, dead_r  # no fallback to the refused one
    assert settle(decoy, dead_decoy) == [0, 0]
    assert sorted(r.path for r in b.requests) == ["/first", "/first", "/mixed"]
    assert (ALLOWED, q) in net.dials() and ("127.0.0.1", q) not in net.dials()
    # One lookup per connection (per request on a kept-alive one), never a second
    # lookup between the check and the connect.
    resolved = [e[0] for e in net.entries("resolve")]
    assert resolved.count("rebind.test") == 4 and resolved.count("keepalive.test") == 2


# == TLS: SNI must name the CONNECT host ======================================================


def test_sni_mismatch_closes_the_tunnel_before_a_byte_arrives(net: Net, servers: Closer,
                                                              cert: Cert) -> None:
    s, = bind_same_port(["127.0.0.4"])
    rec = TlsRecorder(s, cert.cert, cert.key)
    servers.add(rec)
    port = rec.port
    net.configure(resolve={"tls.test": [["127.0.0.4"]]})
    ca = str(cert.cert)
    mismatches: list[dict[str, Any]] = [
        {"k": "tls", "connect": f"tls.test:{port}", "sni": "evil.test", "cafile": ca},
        {"k": "tls", "connect": f"tls.test:{port}", "sni": "evil.test", "cafile": ca,
         "split": 16},  # the ClientHello re-framed over many small records
        {"k": "tls", "connect": f"127.0.0.4:{port}", "sni": "tls.test", "cafile": ca},
        {"k": "cmd", "argv": ["openssl", "s_client", "-proxy", "127.0.0.1:3128", "-connect",
                              f"tls.test:{port}", "-servername", "evil.test", "-CAfile", ca,
                              "-verify_return_error"], "timeout": 10},
    ]
    controls: list[dict[str, Any]] = [
        {"k": "tls", "connect": f"tls.test:{port}", "sni": "tls.test", "cafile": ca},
        {"k": "tls", "connect": f"tls.test:{port}", "sni": "tls.test", "cafile": ca,
         "split": 16},
        {"k": "tls", "connect": f"127.0.0.4:{port}", "sni": None, "cafile": ca},
        {"k": "cmd", "argv": ["curl", "-sS", "-m", "10", "--cacert", ca,
                              f"https://tls.test:{port}/"]},
    ]
    allow = [f"tls.test:{port}", f"127.0.0.4:{port}"]
    results, rows = net.library_probe([*mismatches, *controls], allow=allow)
    bad, good = results[:4], results[4:]
    assert [r.get("tls") for r in bad[:3]] == ["closed"] * 3, bad
    assert bad[3]["rc"] != 0, bad[3]
    assert [r.get("tls") for r in good[:3]] == ["ok"] * 3, good
    assert good[3]["rc"] == 0 and "hello tls tls.test" in good[3]["out"], good[3]
    conns = rec.settle()
    # The proxy opens the (allowed) upstream TCP connection at CONNECT time and
    # closes it when it judges the first flight: the server must see no byte of
    # any mismatched ClientHello, and never the name evil.test.
    assert all(c.sni != "evil.test" for c in conns), conns
    assert sorted(c.sni or "" for c in conns if c.handshake) == ["", "tls.test", "tls.test",
                                                                 "tls.test"], conns
    assert sum(not c.got_bytes for c in conns) == len(mismatches), conns
    sni_rows = [r for r in rows if r["rule"] == "tls sni mismatch"]
    assert len(sni_rows) == len(mismatches) and not any(r["allowed"] for r in sni_rows), rows


def test_plaintext_tunnel_to_port_443_closed_before_a_byte_arrives(net: Net, servers: Closer,
                                                                   cert: Cert) -> None:
    """Port 443 carries TLS only: a tunnel whose first bytes are not a ClientHello is cut."""
    rec = None
    for address in ("127.0.0.6", "127.0.0.7", "127.0.0.8"):
        try:
            rec = TlsRecorder(bind_same_port([address], port=443)[0], cert.cert, cert.key)
            break
        except OSError:
            continue
    if rec is None:
        if not IS_ROOT:
            pytest.skip("binding port 443 needs root")
        pytest.fail("no loopback address has port 443 free")
    servers.add(rec)
    target = f"{rec.address}:443"
    results, rows = net.library_probe([
        {"k": "connect", "target": target, "send": "GET / HTTP/1.0\r\n\r\n"},
        {"k": "socks", "atyp": 1, "addr": rec.address, "port": 443,
         "send": "GET / HTTP/1.0\r\n\r\n"},
    ], allow=[target])
    assert results[0]["status"] == 200 and not results[0].get("reply"), results
    assert results[1]["reply"] == 0 and not results[1]["data"], results
    conns = rec.settle()
    assert len(conns) == 2 and not any(c.got_bytes for c in conns), conns
    required = [r for r in rows if r["rule"] == "tls required"]
    assert len(required) == 2 and not any(r["allowed"] for r in required), rows


# == plain HTTP: the Host header must name the request target ================================


def test_host_header_mismatch_rejected(net: Net, servers: Closer,
                                       listeners: list[Listener]) -> None:
    b, decoys = backend(servers, "127.0.0.1", "127.0.0.5", listeners=listeners)
    p, auth = b.port, b.authority

    def req(path: str, host: str | None, target: str = f"http://{auth}") -> dict[str, Any]:
        return {"target": target + path, "headers": [f"Host: {host}"] if host else []}

    attempts = [
        {"k": "http", "requests": [req("/a", f"127.0.0.1:{p}")]},
        {"k": "http", "requests": [req("/b", f"127.0.0.5:{p}")]},
        {"k": "http", "requests": [req("/c", f"{ALLOWED}:{p + 1}")]},
        {"k": "http", "requests": [req("/d", f"{auth}@127.0.0.1:{p}")]},
        {"k": "http", "requests": [req("/e", None)]},  # HTTP/1.1 without Host
        {"k": "http", "requests": [{"target": f"http://{auth}/f",
                                    "headers": [f"Host: {auth}", f"Host: 127.0.0.1:{p}"]}]},
        # each request on a kept-alive connection is judged on its own
        {"k": "http", "requests": [req("/ok1", auth), req("/g", f"127.0.0.1:{p}")]},
        {"k": "http", "requests": [req("/ok2", auth),
                                   req("/h", f"127.0.0.1:{p}", f"http://127.0.0.1:{p}")]},
        # authority confusions in the target itself
        {"k": "http", "requests": [req("/i", auth, f"http://{auth}@127.0.0.1:{p}")]},
        {"k": "http", "requests": [req("/j", auth, f"http://127.0.0.1:{p}#@{auth}")]},
        {"k": "http", "requests": [req("/k", auth, f"http://127.0.0.1:{p}\\@{auth}")]},
    ]
    results = net.probe(attempts, allow=[auth])
    statuses = [[r["status"] for r in res["responses"]] for res in results]
    assert statuses[:6] == [[403], [403], [403], [403], [400], [400]], results
    for res in results[:4]:
        assert "does not match request target" in res["responses"][0]["denied"] or \
            "is not a valid host" in res["responses"][0]["denied"], res
    assert statuses[6:8] == [[200, 403], [200, 403]], results
    assert all(s[0] in (400, 403) and res["responses"][0]["denied"]
               for s, res in zip(statuses[8:], results[8:], strict=True)), results
    assert sorted(r.path for r in b.requests) == ["/ok1", "/ok2"], b.requests
    assert settle(*decoys) == [0, 0]


def test_host_header_mismatch_inside_plain_tunnel_rejected(net: Net, servers: Closer) -> None:
    """The Host rule exists because a shared front end routes by Host; a plain-HTTP
    request tunnelled through CONNECT or SOCKS5 to the same allowed host:port carried
    its Host header to that front end just the same. On a port that is not TLS, a
    tunnel that opens with an HTTP request line is closed before the line ends."""
    b, _ = backend(servers)
    smuggled = "GET /tunnelled HTTP/1.1\r\nHost: other-tenant.example\r\nConnection: close\r\n\r\n"
    results = net.probe([
        {"k": "connect", "target": b.authority, "send": smuggled},
        {"k": "socks", "atyp": 1, "addr": ALLOWED, "port": b.port, "send": smuggled},
    ], allow=[b.authority])
    time.sleep(0.3)
    assert all(r.host == b.authority for r in b.requests), (
        f"the backend received Host headers {[r.host for r in b.requests]} through "
        f"{b.authority} tunnels: {results}")


# == ways around the proxy ====================================================================


@pytest.fixture
def targets(servers: Closer, listeners: list[Listener]) -> dict[str, Any]:
    """A backend the allowlist names, host listeners it does not, a UDP sink, a DNS server."""
    b, _ = backend(servers)
    tcp4, port4 = tcp_listener(listeners)
    s6, = bind_same_port(["::1"])
    tcp6 = Listener(s6, "tcp6")
    listeners.append(tcp6)
    udp_sock, = bind_same_port(["127.0.0.1"], kind=socket.SOCK_DGRAM)
    udp = UdpServer(udp_sock)
    servers.add(udp)
    dns = dns_server()
    servers.add(dns)
    return {"backend": b, "tcp4": tcp4, "port4": port4, "tcp6": tcp6,
            "port6": s6.getsockname()[1], "udp": udp, "dns": dns}


def bypass_attempts(t: dict[str, Any]) -> list[dict[str, Any]]:
    b, dns = t["backend"], t["dns"]
    return [
        {"k": "cmd", "argv": ["curl", "-sS", "-m", "5", "--noproxy", "*",
                              f"http://{b.authority}/noproxy"]},
        {"k": "urllib", "url": f"http://{b.authority}/no-proxy-handler", "proxy": False},
        {"k": "direct", "host": ALLOWED, "port": b.port},
        {"k": "direct", "host": "127.0.0.1", "port": t["port4"]},
        {"k": "direct", "host": "::1", "port": t["port6"]},
        {"k": "udp", "host": "127.0.0.1", "port": t["udp"].port},
        {"k": "udp", "host": dns.address, "port": dns.port, "dns": True},
        {"k": "dns_tcp", "host": dns.address, "port": dns.port},
    ]


def test_direct_tcp_udp_and_dns_reach_nothing(net: Net, targets: dict[str, Any]) -> None:
    b = targets["backend"]
    results = net.probe([
        *bypass_attempts(targets),
        {"k": "socks", "atyp": 1, "addr": ALLOWED, "port": b.port, "cmd": 3},  # UDP ASSOCIATE
        {"k": "socks", "atyp": 1, "addr": ALLOWED, "port": b.port, "cmd": 2},  # BIND
    ], allow=[b.authority])
    noproxy, urlopen, d_backend, d4, d6, udp, dns_udp, dns_tcp, assoc, bind = results
    assert noproxy["rc"] != 0 and "hello" not in noproxy["out"], noproxy
    assert urlopen["status"] != 200, urlopen
    assert not any(r["connected"] for r in (d_backend, d4, d6)), results
    assert not udp["answer"] and not dns_udp["answer"] and not dns_tcp["answer"], results
    assert assoc["reply"] == 7 and bind["reply"] == 7, (assoc, bind)
    time.sleep(0.5)
    assert b.connections == 0 and b.requests == []
    assert [targets["tcp4"].connections, targets["tcp6"].connections] == [0, 0]
    assert targets["udp"].datagrams == []
    assert targets["dns"].datagrams == [] and targets["dns"].tcp_connections == 0
    assert net.dials() == []


def test_control_the_bypass_probes_work_with_network_all(net: Net,
                                                         targets: dict[str, Any]) -> None:
    """The same probes with `--network all` reach every listener: they can see a leak."""
    results = net.probe(bypass_attempts(targets), options=["--network", "all"])
    noproxy, urlopen, d_backend, d4, d6, udp, dns_udp, dns_tcp = results
    assert noproxy["rc"] == 0 and "hello" in noproxy["out"], noproxy
    assert urlopen["status"] == 200, urlopen
    assert all(r["connected"] for r in (d_backend, d4, d6)), results
    assert udp["sent"] and dns_udp["answer"] and dns_tcp["answer"], results
    time.sleep(0.3)
    assert targets["tcp4"].connections == 1 and targets["tcp6"].connections == 1
    assert targets["udp"].datagrams == [b"udp from the sandbox"]
    assert len(targets["dns"].datagrams) == 1 and targets["dns"].tcp_connections == 1


# == load and failure =========================================================================

CONCURRENT = 200


def test_200_concurrent_connections_through_one_session(net: Net, servers: Closer) -> None:
    """The backend answers no request until all 200 are in, so all 200 are open at once."""
    b, _ = backend(servers, barrier=CONCURRENT)
    results = net.probe([{"k": "concurrent", "n": CONCURRENT, "url": f"http://{b.authority}/hold",
                          "host": b.authority, "timeout": 30}],
                        allow=[b.authority], timeout=60)
    assert results[0] == {"statuses": {"200": CONCURRENT}, "unfinished": 0}, results
    assert b.connections == CONCURRENT
    assert len(net.dials()) == CONCURRENT


def test_proxy_killed_mid_run_means_no_network_never_direct(
        net: Net, servers: Closer, listeners: list[Listener]) -> None:
    b, _ = backend(servers)
    direct, direct_port = tcp_listener(listeners)
    loop = {"k": "loop", "url": f"http://{b.authority}/loop", "deadline": 20, "fails": 15,
            "direct": [[ALLOWED, b.port], ["127.0.0.1", direct_port]]}
    out = net.library([
        {"argv": probe_argv([loop]), "kill_after_dials": 3},
        {"argv": probe_argv([{"k": "urllib", "url": f"http://{b.authority}/after"}])},
    ], allow=[b.authority])
    killed, after = out["steps"]
    result = probe_results(killed["stdout"])[0]
    seq = result["seq"]
    assert "OK" in seq and "FAIL" in seq, result
    first_fail = seq.index("FAIL")
    assert "OK" not in seq[first_fail:], seq  # once gone, the network never came back
    assert seq[-15:] == ["FAIL"] * 15, seq
    assert not any(result["direct"]), result  # and no direct connection ever worked
    assert killed["dials_after"] == killed["dials_at_kill"], killed  # nothing after the kill
    assert direct.settle() == 0
    assert b.connections == len([d for d in net.dials() if d == (ALLOWED, b.port)])
    loop_hits = [r.path for r in b.requests if r.path == "/loop"]
    # A request in flight when the proxy closed may have reached the backend and
    # still failed for the client; nothing else can explain a backend hit.
    assert seq.count("OK") <= len(loop_hits) <= min(seq.count("OK") + 1,
                                                    killed["dials_at_kill"]), (seq, loop_hits)
    # The next command gets a fresh proxy (a new socket it can reach), never a direct path.
    assert probe_results(after["stdout"])[0]["status"] == 200, after


def test_once_approved_host_is_not_granted_to_a_running_background_command(
        net: Net, servers: Closer) -> None:
    """A host approved for one command must not reach another command of the session.

    A (background) runs with the session's baseline allowlist and keeps asking for
    host B; meanwhile one command is approved once for B. A must still be refused,
    during that command and after it.
    """
    a, _ = backend(servers)
    s, = bind_same_port(["127.0.0.3"])
    b = HttpBackend(s, greeting="hello from the once-approved host")
    servers.add(b)
    poll = {"k": "poll", "url": f"http://{b.authority}/from-background", "duration": 4.0}
    out = net.library([
        {"argv": probe_argv([poll]), "background": True, "timeout": 30},
        {"sleep": 1.0},
        {"argv": probe_argv([{"k": "urllib", "url": f"http://{b.authority}/approved-once"}]),
         "network": [a.authority, b.authority]},
        {"wait_background": True},
    ], allow=[a.authority])
    _, _, approved, waited = out["steps"]
    assert len(out["approvals"]) == 1, out["approvals"]
    assert probe_results(approved["stdout"])[0]["status"] == 200, approved  # the control
    statuses = probe_results(waited["stdout"])[0]["statuses"]
    assert statuses and statuses[0] == 403, statuses  # refused before the approval
    leaked = [r.path for r in b.requests if r.path == "/from-background"]
    assert leaked == [], (f"the background command reached the once-approved host "
                          f"{len(leaked)} times; its statuses: {statuses}")


SOCKET_THIEF = r"""
import os, socket, stat, sys
found = []
for top in sys.argv[2:]:
    for dirpath, dirs, files in os.walk(top):
        for name in files:
            path = os.path.join(dirpath, name)
            try:
                if stat.S_ISSOCK(os.lstat(path).st_mode):
                    found.append(path)
            except OSError:
                pass
print("SOCKETS", found)
for path in found:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(3)
    try:
        s.connect(path)
        s.sendall(("GET http://%s/stolen HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
                   % (sys.argv[1], sys.argv[1])).encode())
        print("REPLY", path, s.recv(200))
    except OSError as exc:
        print("REFUSED", path, exc)
"""


def test_other_sessions_proxy_socket_unreachable_with_a_visible_tmpdir(
        net: Net, servers: Closer) -> None:
    """Session B is allowed a host; session A (no network at all) must not borrow B's grant."""
    b, _ = backend(servers)
    # Under /var/tmp, so visible (read-only) inside the sandbox; a short path, because a
    # unix socket path is limited to 107 bytes.
    tmpdir = Path(tempfile.mkdtemp(prefix="sp", dir="/var/tmp"))
    servers.add(Removal(tmpdir))
    os.chmod(tmpdir, 0o755)
    net.runner.own(tmpdir)
    env = net.box.env(TMPDIR=str(tmpdir))
    grant = net.runner.popen(
        net.cli_argv(["run", "--yes", "--mode", "workspace-write", "--allow-host", b.authority,
                      "--", "/bin/sh", "-c",
                      "touch b.live; while [ ! -e a.done ]; do sleep 0.05; done; "
                      f"curl -sS -m 5 http://{b.authority}/from-b"]),
        cwd=net.box.ws, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT)
    try:
        # B's grant is live from its command's start until A has tried: B
        # waits for A, and its own request afterwards shows it was.
        deadline = time.monotonic() + RUN_TIMEOUT
        while not (net.box.ws / "b.live").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (net.box.ws / "b.live").exists(), "B's command never started"
        thief = net.box.run([SYSTEM_PYTHON, "-I", "-c", SOCKET_THIEF, b.authority,
                             str(tmpdir)], env=env)
        (net.box.ws / "a.done").touch()
        out, _ = grant.communicate(timeout=RUN_TIMEOUT)
    finally:
        if grant.poll() is None:
            grant.kill()
            grant.wait(5)
    assert b"from-b" in out, out  # control: B's grant was live while A ran
    stolen = [r.path for r in b.requests if r.path == "/stolen"]
    assert stolen == [], f"a command with no network used session B's proxy: {text(thief)}"
