"""A server and its client on the sandbox's own loopback, and nothing beyond it.

Under bubblewrap a command with network none or hosts has a network
namespace whose only interface is `lo`, so TCP and UDP on 127.0.0.1 and
::1 reach only what runs there: `node server.js &` then `curl` works in one
command. With network none that namespace is the session's, so a server
one command started (`start()`) serves the session's next command, while
another session, and the host, see nothing of it. The same port on the
host's loopback is another namespace's: a host listener sees nothing, while
the control with `--network all` shows the probe reaching it. Under the
Landlock backend there is no namespace, and the refusal says so
(tests/landlock_backend).
"""

from __future__ import annotations

import json
import shutil
import socket

import pytest

from .conftest import SYSTEM_PYTHON, Box, Listener, tcp_listener, text

pytestmark = pytest.mark.isolation

NETWORKS = {"none": [], "hosts": ["--allow-host", "example.invalid", "--yes"]}


def options(box: Box, network: str) -> list[str]:
    """`network`'s options. The warm harness's `/bin/true` commands park no sandbox a
    `--allow-host` command can use (its proxy endpoint is that command's own), so
    `hosts` runs only cold; the warm path itself is the same init and config."""
    if network == "hosts" and box.runner.warm:
        pytest.skip("the warm harness parks no sandbox for a --allow-host command")
    return NETWORKS[network]

# A server in the background, its client in the foreground: the workflow.
# The server writes what it served into the workspace, checked from the host.
SERVER = r"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"served from the sandbox's own loopback"
        self.send_response(200); self.end_headers(); self.wfile.write(body)
        open("served.txt", "wb").write(body)
    def log_message(self, *a): pass
family = sys.argv[1]
cls = type("S", (http.server.HTTPServer,), {"address_family": 10 if family == "6" else 2})
srv = cls(("::1" if family == "6" else "127.0.0.1", int(sys.argv[2])), H)
open("ready", "w").close()
srv.handle_request()
"""

CLIENT = r"""
py=$1; port=$2; fam=$3
"$py" -I -c "$SERVER" "$fam" "$port" &
i=0; while [ ! -e ready ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
if [ "$fam" = 6 ]; then url="http://[::1]:$port/"; else url="http://127.0.0.1:$port/"; fi
curl -s --noproxy '*' "$url"; echo; wait
"""


@pytest.mark.parametrize("network", sorted(NETWORKS))
@pytest.mark.parametrize("family", ["4", "6"])
def test_server_and_client_in_one_command(box: Box, network: str, family: str) -> None:
    res = box.run(["/bin/sh", "-c", CLIENT, "sh", SYSTEM_PYTHON, "8123", family],
                  mode="workspace-write", options=options(box, network),
                  env=box.env(SERVER=SERVER))
    assert res.returncode == 0, text(res)
    assert "served from the sandbox's own loopback" in text(res), text(res)
    # Checked from the host: the server really ran, inside, and wrote the workspace.
    assert (box.ws / "served.txt").read_text() == "served from the sandbox's own loopback"


NODE_SERVER = r"""
const http = require("http");
http.createServer((q, r) => { r.end("node on loopback"); process.exit(0); })
    .listen(+process.argv[2], "127.0.0.1", () => require("fs").writeFileSync("ready", ""));
"""


@pytest.mark.skipif(shutil.which("node", path="/usr/bin:/usr/local/bin") is None,
                    reason="node is not installed on this host")
def test_node_server_and_curl_in_one_command(box: Box) -> None:
    """The issue's own words: `node server.js &` then `curl 127.0.0.1:PORT`, which
    failed with `listen EPERM` when network none allowed only unix sockets."""
    box.write(box.ws / "server.js", NODE_SERVER)
    script = ("node server.js 8124 & i=0; while [ ! -e ready ] && [ $i -lt 200 ]; do "
              "sleep 0.05; i=$((i+1)); done; curl -s 127.0.0.1:8124; echo; wait")
    res = box.sh(script, mode="workspace-write")
    assert res.returncode == 0, text(res)
    assert "node on loopback" in text(res)
    assert "EPERM" not in text(res)


UDP_ECHO = r"""
import socket
for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
    a = socket.socket(family, socket.SOCK_DGRAM); a.bind((host, 0))
    b = socket.socket(family, socket.SOCK_DGRAM); b.sendto(b"udp", a.getsockname())
    a.settimeout(2); print(a.recv(8).decode(), family.name)
"""


def test_udp_on_its_own_loopback(box: Box) -> None:
    res = box.py(UDP_ECHO)
    assert res.stdout.decode().split() == ["udp", "AF_INET", "udp", "AF_INET6"], text(res)


# The host listens on PORT on its loopback. Inside, nothing answers there (the
# host's 127.0.0.1 is another namespace's); then a server of the command's own
# binds the same port, free inside, and the client reaches that one.
SAME_PORT = r"""
import socket, sys
port = int(sys.argv[1])
for host in ("127.0.0.1", "::1"):
    try:
        socket.create_connection((host, port), timeout=2).close(); print("REACHED", host)
    except OSError as exc:
        print("unreachable", host, exc.errno)
srv = socket.socket(); srv.bind(("127.0.0.1", port)); srv.listen()
c = socket.create_connection(("127.0.0.1", port), timeout=2)
peer = srv.accept()[0]; peer.sendall(b"own server"); print(c.recv(16).decode())
"""


@pytest.mark.parametrize("network", sorted(NETWORKS))
def test_the_hosts_loopback_is_another_namespaces(box: Box, listeners: list[Listener],
                                                  network: str) -> None:
    host, port = tcp_listener(listeners)
    res = box.py(SAME_PORT, str(port), options=options(box, network))
    out = text(res)
    assert "unreachable 127.0.0.1 111" in out, out  # ECONNREFUSED: nobody listens inside
    assert "REACHED" not in out, out
    assert "own server" in out, out
    assert host.settle() == 0


def test_control_network_all_reaches_the_hosts_loopback(box: Box,
                                                        listeners: list[Listener]) -> None:
    """The same probe, sharing the host's network: its port is taken, the host answers."""
    host, port = tcp_listener(listeners)
    probe = ("import socket, sys\n"
             "socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=2).close()\n"
             "print('REACHED')\n")
    res = box.py(probe, str(port), options=["--network", "all", "--yes"])
    assert "REACHED" in text(res), text(res)
    assert host.settle() >= 1


BRIDGE_PORTS = r"""
import errno, socket
for port in (3128, 1080):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        s.bind(("127.0.0.1", port)); print("BOUND", port)
    except OSError as exc:
        print(errno.errorcode[exc.errno], port)
"""


def test_network_hosts_bridge_ports_cannot_be_taken_over(box: Box) -> None:
    """The proxy bridge binds 3128 and 1080 before the command starts: the command
    may serve other ports on its loopback, never those."""
    res = box.py(BRIDGE_PORTS, options=options(box, "hosts"))
    assert res.stdout.decode().split() == ["EADDRINUSE", "3128", "EADDRINUSE", "1080"], text(res)


# The workflow across commands: a dev server `start()`ed in one session,
# its client run by the session's next commands, another session's as the
# control that the loopback is the session's, not everyone's. The host checks
# the server's port on its own loopback: nothing.
SESSIONS = r"""
import json, sys, time
sys.path.insert(0, SITE)
from stockade import (NetworkPolicy, SandboxCommand, SandboxConfig, SyncWorkspaceSandbox,
                      capabilities_for_mode)
from stockade.approval import ApprovalGate
probe = ["-I", "-c", "import sys, urllib.request\n"
         f"try: print(urllib.request.urlopen('http://127.0.0.1:{PORT}/page', timeout=3)"
         ".read().decode())\n"
         "except OSError as exc: print('unreachable', exc); sys.exit(3)"]
gate = ApprovalGate()
sandbox = SyncWorkspaceSandbox(SandboxConfig(mode="workspace-write"), approval=gate)
for session in ("one", "other"):
    sandbox.open_session(session, WS)
server = sandbox.start(SandboxCommand(PY, ["-I", "-m", "http.server", str(PORT), "--bind",
                                           "127.0.0.1"], session_id="one"))
out = {}
deadline = time.monotonic() + 20
while True:
    res = sandbox.execute(SandboxCommand(PY, probe, session_id="one"))
    if res.exit_code == 0 or time.monotonic() > deadline:
        break
    time.sleep(0.2)
out["same session"] = [res.exit_code, res.stdout.decode()]
out["again"] = sandbox.execute(SandboxCommand(PY, probe, session_id="one")).exit_code
# Network hosts: the command's own loopback, where its proxy bridge listens.
caps = capabilities_for_mode("workspace-write", WS).replace(
    network=NetworkPolicy.allow_hosts(["example.invalid"]))
gate.grant("one", caps)
hosts = sandbox.execute(SandboxCommand(PY, probe, session_id="one", capabilities=caps))
out["hosts"] = [hosts.exit_code, hosts.stdout.decode()]
other = sandbox.execute(SandboxCommand(PY, probe, session_id="other"))
out["other session"] = [other.exit_code, other.stdout.decode()]
import socket
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=2).close(); out["host"] = "REACHED"
except OSError as exc:
    out["host"] = exc.errno
server.stop()
sandbox.close()
print(json.dumps(out))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_sessions_server_serves_its_next_commands_and_no_one_else(box: Box) -> None:
    port = free_port()
    box.write(box.ws / "page", "served across commands")
    prelude = (f"SITE, WS, PY, PORT = {box.runner.site!r}, {str(box.ws)!r}, "
               f"{SYSTEM_PYTHON!r}, {port}\n")
    res = box.host([box.runner.python, "-I", "-c", prelude + SESSIONS], timeout=90)
    assert res.returncode == 0, text(res)
    out = json.loads(res.stdout.decode().splitlines()[-1])
    assert out["same session"] == [0, "served across commands\n"], out
    assert out["again"] == 0, out
    assert out["other session"][0] == 3, out  # the control: the same probe, refused
    assert "Connection refused" in out["other session"][1], out
    assert out["hosts"][0] == 3 and "Connection refused" in out["hosts"][1], out
    audit = box.runner.cli(["audit", "--json", "--last", "2"], cwd=box.ws, env=box.env())
    records = [json.loads(line) for line in audit.stdout.decode().splitlines()]
    assert [r["detail"].get("loopback") for r in records] == [
        "the command's own", "the session's"], records
    assert out["host"] == 111, out  # ECONNREFUSED on the host's own loopback
