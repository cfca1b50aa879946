"""The host end of published ports: listeners on the host, each connection handed in.

The sandbox's network namespace has only `lo`, so nothing on the host can
connect to a server there, and a helper that entered the namespace (setns)
would need privileges an ordinary user lacks in bwrap's user namespace. So
the direction is turned around: stockade listens on the host, and each
connection it accepts is passed, as a descriptor over a SOCK_SEQPACKET
socketpair, to a relay inside (bridge.relay_published, forked by the init).
The relay dials the sandbox's own 127.0.0.1:SANDBOX_PORT and copies bytes.

No file and no port is opened for the passing: the socketpair's other end
reaches the init as a descriptor and the relay alone keeps it, so the
command can neither reach the host listener's queue nor send the relay
anything. The listeners are bound before the sandbox starts (a port in use
is refused before anything runs) and closed by the launch's cleanup, when
the command has ended: the forward lives exactly as long as the command.
"""

from __future__ import annotations

import errno
import os
import socket
import threading

from ....errors import SandboxUnavailable
from ....publish import describe

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from ....publish import Published

#: How long the hand-over may wait on a relay that stopped reading (a command
#: that killed it): the connection is then dropped, the listener keeps going.
_SEND_TIMEOUT = 5.0


def in_use_message(item: Published, exc: OSError, where: str = "") -> str:
    """Why `item` cannot be published; `where`: the address that failed, if not its own."""
    addr, host_port, sandbox_port = item
    addr = where or addr
    if exc.errno == errno.EADDRINUSE:
        return (f"cannot publish {describe(item)}: port {host_port} on {addr} is already in "
                f"use on the host; stop what holds it, or choose another host port "
                f"(--publish {host_port + 1}:{sandbox_port})")
    if exc.errno == errno.EACCES:
        return (f"cannot publish {describe(item)}: binding port {host_port} needs privileges "
                "(ports below 1024 do); choose a port of 1024 or more")
    if exc.errno == errno.EADDRNOTAVAIL:
        return (f"cannot publish {describe(item)}: {addr} is not an address of this host")
    return f"cannot publish {describe(item)}: {exc.strerror or exc}"


#: The other family's loopback address, held along with the one named.
_LOOPBACK_TWIN = {"127.0.0.1": "::1", "::1": "127.0.0.1"}


class PortForward:
    """Bound listeners for a launch; `child_fd` is the end the init passes to its relay."""

    def __init__(self, published: Sequence[Published]) -> None:
        self.published = tuple(published)
        self._listeners: list[tuple[socket.socket, int]] = []
        try:
            for item in self.published:
                addr, host_port, sandbox_port = item
                # Loopback is both families: with 127.0.0.1:P alone, a host
                # service on [::1]:P stays, and the clients that try `localhost`
                # as ::1 first (Node, browsers) would reach one or the other
                # by address family. Both are held, or the port is refused.
                twin = _LOOPBACK_TWIN.get(addr)
                for where in (addr, twin) if twin else (addr,):
                    family = socket.AF_INET6 if ":" in where else socket.AF_INET
                    try:
                        sock = socket.socket(family, socket.SOCK_STREAM)
                    except OSError:
                        if where == twin:
                            continue  # no IPv6 on this host: nothing to shadow
                        raise
                    self._listeners.append((sock, sandbox_port))
                    # Not SO_REUSEADDR's port sharing: only a listener in TIME_WAIT
                    # is taken over, never one another program holds.
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    if family == socket.AF_INET6:
                        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    try:
                        sock.bind((where, host_port))
                        sock.listen(64)
                        host_port = sock.getsockname()[1]  # the twin's too, when 0 chose it
                    except OSError as exc:
                        if where == twin and exc.errno in (errno.EADDRNOTAVAIL,
                                                          errno.EAFNOSUPPORT):
                            continue
                        raise SandboxUnavailable(in_use_message(item, exc, where)) from None
            self._ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except BaseException:
            for sock, _port in self._listeners:
                sock.close()
            raise
        self._theirs = theirs
        self.child_fd = theirs.fileno()
        self._ours.settimeout(_SEND_TIMEOUT)
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC)
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def sandbox_ports(self) -> list[int]:
        return sorted({port for _sock, port in self._listeners})

    def start(self) -> None:
        """Begin handing connections in (queued in the socketpair until the relay reads)."""
        self._thread = threading.Thread(target=self._serve, name="stockade-publish",
                                        daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import select

        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        by_fd = {}
        for sock, port in self._listeners:
            poller.register(sock.fileno(), select.POLLIN)
            by_fd[sock.fileno()] = (sock, port)
        while True:
            for fd, _events in poller.poll():
                if fd == self._wake_r:
                    return
                sock, port = by_fd[fd]
                try:
                    conn, _peer = sock.accept()
                except OSError:
                    continue
                try:
                    socket.send_fds(self._ours, [port.to_bytes(2, "big")], [conn.fileno()])
                except OSError:
                    pass  # the relay is gone or stuck: this client sees the connection close
                finally:
                    conn.close()

    def close(self) -> None:
        """Stop listening: the host port is free again once this returns."""
        if self._closed:
            return
        self._closed = True
        os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join()
        for sock, _port in self._listeners:
            sock.close()
        for end in (self._ours, self._theirs):
            end.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
