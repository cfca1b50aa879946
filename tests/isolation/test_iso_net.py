"""Network and local sockets: with network none nothing on the host answers.

Only loopback is ever used. "No egress" is observed on the host side with
listeners that count connections; each comes with a control that runs the
same probe where it must connect (`--network all`, or a socket stockade does
not hide), proving the probe and the listener can see a connection.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import (
    SYSTEM_PYTHON,
    Box,
    Listener,
    abstract_listener,
    tcp_listener,
    text,
    unix_listener,
)

pytestmark = pytest.mark.isolation

NET_ALL = ["--network", "all", "--yes"]

TCP_PROBE = r"""
import socket, sys
for host, port in (("127.0.0.1", int(sys.argv[1])), ("::1", int(sys.argv[2]))):
    if port == 0:
        continue
    try:
        s = socket.create_connection((host, port), timeout=2)
        s.sendall(b"hello from the sandbox")
        s.close()
        print("CONNECTED", host)
    except OSError as exc:
        print("FAILED", host, exc.errno)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendto(b"udp from the sandbox", ("127.0.0.1", int(sys.argv[3])))
    print("UDP SENT")
except OSError as exc:
    print("UDP FAILED", exc.errno)
"""


class UdpSink:
    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.3)
        self.port = self.sock.getsockname()[1]

    def received(self) -> bytes:
        try:
            return self.sock.recv(4096)
        except OSError:
            return b""


@dataclass
class Loopback:
    """Host listeners on 127.0.0.1 (TCP, UDP) and ::1 (TCP, when the host has IPv6)."""

    tcp4: Listener
    tcp6: Listener | None
    udp: UdpSink

    @property
    def ports(self) -> list[str]:
        port6 = self.tcp6.sock.getsockname()[1] if self.tcp6 else 0
        return [str(self.tcp4.sock.getsockname()[1]), str(port6), str(self.udp.port)]


@pytest.fixture
def loopback(listeners: list[Listener]) -> Iterator[Loopback]:
    tcp4, _ = tcp_listener(listeners)
    tcp6 = None
    with contextlib.suppress(OSError):
        s6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s6.bind(("::1", 0))
        tcp6 = Listener(s6, "tcp6")
        listeners.append(tcp6)
    udp = UdpSink()
    yield Loopback(tcp4, tcp6, udp)
    udp.sock.close()


@pytest.mark.parametrize("mode", ["read-only", "workspace-write"])
def test_host_loopback_listeners_get_nothing_with_network_none(box: Box, loopback: Loopback,
                                                               mode: str) -> None:
    res = box.py(TCP_PROBE, *loopback.ports, mode=mode)
    assert "CONNECTED" not in text(res), text(res)
    assert loopback.tcp4.settle() == 0
    assert loopback.tcp6 is None or loopback.tcp6.connections == 0
    assert loopback.udp.received() == b""


def test_control_network_all_reaches_host_loopback(box: Box, loopback: Loopback) -> None:
    res = box.py(TCP_PROBE, *loopback.ports, options=NET_ALL)
    assert "CONNECTED 127.0.0.1" in text(res), text(res)
    assert loopback.tcp4.settle() >= 1
    assert b"sandbox" in loopback.tcp4.received
    assert loopback.udp.received() == b"udp from the sandbox"


ABSTRACT_PROBE = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(2)
try:
    s.connect("\0" + sys.argv[1])
    s.sendall(b"hi")
    print("CONNECTED")
except OSError as exc:
    print("FAILED", exc.errno)
"""


def test_abstract_unix_socket_unreachable(box: Box, listeners: list[Listener]) -> None:
    """Abstract sockets have no file to hide: only the network namespace keeps them out."""
    listener, name = abstract_listener(listeners)
    res = box.py(ABSTRACT_PROBE, name, mode="workspace-write")
    assert "CONNECTED" not in text(res), text(res)
    assert listener.settle() == 0


def test_control_abstract_socket_reachable_unconfined(box: Box,
                                                      listeners: list[Listener]) -> None:
    """The probe and the listener do meet when nothing stands between them."""
    listener, name = abstract_listener(listeners)
    res = box.py(ABSTRACT_PROBE, name, mode="full-access")
    assert "CONNECTED" in text(res), text(res)
    assert listener.settle() >= 1


# -- container runtime sockets ---------------------------------------------------------------

UNIX_PROBE = r"""
import socket, sys
for path in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(2)
    try:
        s.connect(path)
        s.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
        print("CONNECTED", path)
    except OSError as exc:
        print("FAILED", path, exc.errno)
    finally:
        s.close()
"""


@pytest.mark.parametrize("options", [["--mode", "workspace-write"], NET_ALL],
                         ids=["workspace-write", "network-all"])
def test_docker_sockets_unreachable(box: Box, listeners: list[Listener],
                                    options: list[str]) -> None:
    """DOCKER_HOST's socket and $XDG_RUNTIME_DIR/docker.sock: either one is root on the host.

    Hidden even with `--network all`: a local socket is not the network.
    """
    dock = box.mkdir("dock")
    runtime = box.mkdir("xdg-runtime")
    env_sock = unix_listener(listeners, dock / "docker.sock", box.runner)
    rt_sock = unix_listener(listeners, runtime / "docker.sock", box.runner)
    # Control in the same run: a socket stockade has no reason to hide, in the
    # same directory, must answer -- so a refused docker.sock is stockade's doing.
    control = unix_listener(listeners, dock / "unrelated.sock", box.runner)
    os.symlink(dock / "docker.sock", box.ws / "docker-link.sock")
    box.runner.own(box.ws / "docker-link.sock")
    env = box.env(DOCKER_HOST=f"unix://{dock}/docker.sock", XDG_RUNTIME_DIR=str(runtime))
    targets = [f"{dock}/docker.sock", f"/proc/self/root{dock}/docker.sock",
               f"{dock}/./docker.sock", "docker-link.sock", f"{runtime}/docker.sock",
               f"{dock}/unrelated.sock"]
    res = box.py(UNIX_PROBE, *targets, options=options, env=env)
    out = text(res)
    assert f"CONNECTED {dock}/unrelated.sock" in out, out
    assert control.settle() >= 1
    assert env_sock.connections == 0, out
    assert rt_sock.connections == 0, out


def test_docker_desktops_socket_in_a_hidden_directory_is_unreachable_and_commands_run(
        box: Box, listeners: list[Listener]) -> None:
    """Docker Desktop's ~/.docker/run/docker.sock sits in ~/.docker, which is hidden:
    its cover was bound after the mask had turned read-only, and every command
    failed to start ("Can't mkdir parents")."""
    run = box.mkdir("home/.docker/run")
    box.write(box.home / ".docker" / "config.json", '{"auths": {"x": {"auth": "CANARY"}}}')
    box.runner.own(box.home / ".docker", box.home / ".docker" / "config.json", run)
    sock = unix_listener(listeners, run / "docker.sock", box.runner)
    control = unix_listener(listeners, run / "unrelated.sock", box.runner)
    res = box.py(UNIX_PROBE, str(run / "docker.sock"), options=["--mode", "workspace-write"])
    out = text(res)
    assert res.returncode == 0 and sock.connections == 0, out
    # Control: the same probe unconfined reaches both.
    host = box.host([SYSTEM_PYTHON, "-c", UNIX_PROBE, str(run / "docker.sock"),
                     str(run / "unrelated.sock")], capture_output=True)
    assert f"CONNECTED {run}/docker.sock" in text(host), text(host)
    assert control.settle() >= 1


# -- the inside view ---------------------------------------------------------------------

# /proc/net/dev is the network namespace's own list. if_nameindex() asks over
# netlink, which a seccomp filter may refuse outright; refused is as good as "lo".
IFACES = r"""
import json, socket
try:
    names = sorted(name for _, name in socket.if_nameindex())
except OSError as exc:
    names = f"refused {exc.errno}"
print(json.dumps({
    "if_nameindex": names,
    "proc_net_dev": sorted(line.split(":")[0].strip()
                           for line in open("/proc/net/dev").read().splitlines()[2:]),
}))
"""


def test_only_loopback_inside_the_network_namespace(box: Box) -> None:
    import json

    res = box.py(IFACES)
    view = json.loads(res.stdout.decode())
    assert view["proc_net_dev"] == ["lo"], view
    assert view["if_nameindex"] == ["lo"] or str(view["if_nameindex"]).startswith("refused"), view
    # Control: the host has more than loopback, so "only lo" is not the machine's default.
    assert len(socket.if_nameindex()) > 1


def _host_macs() -> set[str]:
    macs = set()
    for iface in os.listdir("/sys/class/net"):
        with contextlib.suppress(OSError):
            mac = Path(f"/sys/class/net/{iface}/address").read_text().strip()
            if mac and mac != "00:00:00:00:00:00":
                macs.add(mac)
    return macs


SYSFS_NET = "ls -a /sys/class/net 2>/dev/null; " \
            "find /sys -name address -type f 2>/dev/null | head -500 | xargs cat 2>/dev/null; " \
            "ls /sys/devices/virtual/net 2>/dev/null; true"


def _sysfs_leaks(box: Box, mode: str) -> list[str]:
    host_ifaces = {name for _, name in socket.if_nameindex()} - {"lo"}
    macs = _host_macs()
    # There is something to leak on this host, or the check proves nothing.
    assert host_ifaces and macs
    out = text(box.sh(SYSFS_NET, mode=mode))
    return sorted(n for n in host_ifaces if n in out.split()) + sorted(m for m in macs
                                                                       if m in out)


def test_sysfs_reveals_no_host_interface(box: Box) -> None:
    """sysfs shows the netns it was mounted in: the host's /sys would list eth0 and its MAC."""
    leaked = _sysfs_leaks(box, "workspace-write")
    assert leaked == [], f"host interfaces visible in the sandbox's /sys: {leaked}"


def test_control_unconfined_sysfs_shows_host_interfaces(box: Box) -> None:
    assert _sysfs_leaks(box, "full-access") != []


def test_host_tmp_socket_dir_invisible(box: Box, listeners: list[Listener]) -> None:
    """A socket in the host's /tmp (X11, tmux, agents) is out of reach: /tmp is private."""
    d = Path(f"/tmp/stockade-iso-sock-{secrets.token_hex(6)}")
    d.mkdir(mode=0o755)
    try:
        box.runner.own(d)
        listener = unix_listener(listeners, d / "app.sock", box.runner)
        res = box.py(UNIX_PROBE, str(d / "app.sock"), mode="workspace-write")
        assert "CONNECTED" not in text(res), text(res)
        assert listener.settle() == 0
    finally:
        for p in d.iterdir():
            p.unlink()
        d.rmdir()
