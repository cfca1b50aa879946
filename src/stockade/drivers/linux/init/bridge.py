"""The in-sandbox end of the managed proxy: loopback TCP in, the proxy's unix socket out.

With network "hosts" the sandbox keeps its own network namespace, which has
only `lo`; nothing in it can reach the host's network. The proxy's unix
socket is bind-mounted in, and this bridge -- forked by the init, the parent
of the command -- listens on 127.0.0.1 inside the namespace and forwards
each connection to that socket. So a program honouring HTTP_PROXY reaches
exactly what the proxy allows, and one ignoring it reaches nothing at all.

`relay_published` is the other direction, for `--publish`: connections a
host client opened on a published port, handed in by stockade as
descriptors, joined to the sandbox's own 127.0.0.1:PORT.

Loaded by initcore inside the sandbox: built-in modules only (`_socket`,
not `socket`, whose enums cost milliseconds on every command).
"""

import _socket
import posix
import select
import sys

TYPE_CHECKING = False  # typing costs the init 3 ms; mypy treats this name as True

_CHUNK = 1 << 16
_LIMIT = 1 << 18  # bytes buffered per direction before reading pauses


def listen(ports: list[int]) -> list[_socket.socket]:
    """Bind the bridge's loopback listeners (before Landlock forbids binding)."""
    socks = []
    for port in ports:
        s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        s.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(128)
        s.setblocking(False)
        socks.append(s)
    return socks


class _Pipe:
    """One relayed connection: two sockets, one buffer each way."""

    def __init__(self, client: _socket.socket, upstream: _socket.socket) -> None:
        self.ends = (client, upstream)
        self.pending = {client.fileno(): bytearray(), upstream.fileno(): bytearray()}
        self.peer = {client.fileno(): upstream, upstream.fileno(): client}
        self.eof: set[int] = set()


class _Relays:
    """Every relayed connection on one poller: copy, back-pressure, half-close."""

    def __init__(self, poller: select.poll) -> None:
        self.poller = poller
        self.pipes: dict[int, _Pipe] = {}

    def add(self, a: _socket.socket, b: _socket.socket) -> None:
        a.setblocking(False)
        b.setblocking(False)
        pipe = _Pipe(a, b)
        for end in pipe.ends:
            self.pipes[end.fileno()] = pipe
            self.poller.register(end.fileno(), select.POLLIN)

    def close(self, pipe: _Pipe) -> None:
        for end in pipe.ends:
            fd = end.fileno()
            if fd >= 0:
                self.poller.unregister(fd)
                self.pipes.pop(fd, None)
                end.close()

    def interest(self, pipe: _Pipe) -> None:
        for end in pipe.ends:
            fd = end.fileno()
            peer_fd = pipe.peer[fd].fileno()
            mask = 0
            if fd not in pipe.eof and len(pipe.pending[peer_fd]) < _LIMIT:
                mask |= select.POLLIN
            if pipe.pending[fd]:
                mask |= select.POLLOUT
            self.poller.modify(fd, mask)

    def handle(self, fd: int, events: int) -> None:
        """Move what `events` on `fd` allow; a descriptor no pipe owns is ignored."""
        pipe = self.pipes.get(fd)
        if pipe is None:
            return
        sock = pipe.ends[0] if pipe.ends[0].fileno() == fd else pipe.ends[1]
        peer = pipe.peer[fd]
        try:
            if events & select.POLLOUT and pipe.pending[fd]:
                sent = sock.send(pipe.pending[fd])
                del pipe.pending[fd][:sent]
                if not pipe.pending[fd] and peer.fileno() in pipe.eof:
                    sock.shutdown(_socket.SHUT_WR)
            if events & (select.POLLIN | select.POLLHUP):
                data = sock.recv(_CHUNK)
                if data:
                    pipe.pending[peer.fileno()] += data
                else:
                    pipe.eof.add(fd)
                    if not pipe.pending[peer.fileno()]:
                        peer.shutdown(_socket.SHUT_WR)
            if events & select.POLLERR or (len(pipe.eof) == 2 and not any(
                    pipe.pending.values())):
                self.close(pipe)
                return
        except BlockingIOError:
            pass
        except OSError:
            self.close(pipe)
            return
        self.interest(pipe)


def serve(listeners: list[_socket.socket], unix_path: str, child: int) -> int:
    """Relay until `child` (the command) exits; return its status as a shell reports it."""
    poller = select.poll()
    pidfd = posix.pidfd_open(child)
    poller.register(pidfd, select.POLLIN)
    by_fd: dict[int, object] = {}
    for s in listeners:
        poller.register(s.fileno(), select.POLLIN)
        by_fd[s.fileno()] = s
    relays = _Relays(poller)

    while True:
        for fd, events in poller.poll():
            if fd == pidfd:
                _, status = posix.waitpid(child, 0)
                return posix.waitstatus_to_exitcode(status) if status >= 0 else 125
            listener = by_fd.get(fd)
            if listener is None:
                relays.handle(fd, events)
                continue
            try:
                # `_socket` has no accept(): that wrapper lives in `socket`.
                fd, _ = listener._accept()  # type: ignore[attr-defined]
            except OSError:
                continue
            conn = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM, 0, fd)
            up = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            try:
                up.connect(unix_path)
            except OSError:
                # The proxy is gone: fail closed, the client sees a reset.
                conn.close()
                up.close()
                continue
            relays.add(conn, up)


def relay_published(control: int, ports: list[int]) -> None:
    """Published ports, the sandbox's end: connections handed in, dialled on loopback.

    `control` is a SOCK_SEQPACKET socket whose other end stockade holds on
    the host (drivers/linux/host/publish.py). Each message is a sandbox port (two
    bytes) with one descriptor: a TCP connection a host client opened on the
    published port. It is joined to a fresh connection to 127.0.0.1:port
    here, the sandbox's own loopback; a port not in `ports`, or nothing
    listening yet, closes the client's connection (its retry may find the
    server up). Returns when stockade hangs up; the PID namespace ends it
    with the command anyway.
    """
    ctl = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET, 0, control)
    allowed = set(ports)
    poller = select.poll()
    poller.register(control, select.POLLIN)
    relays = _Relays(poller)
    space = _socket.CMSG_SPACE(4 * 4)
    while True:
        for fd, events in poller.poll():
            if fd != control:
                relays.handle(fd, events)
                continue
            try:
                data, ancillary, _flags, _addr = ctl.recvmsg(2, space, _socket.MSG_CMSG_CLOEXEC)
            except InterruptedError:
                continue
            received = [int.from_bytes(payload[i:i + 4], sys.byteorder)
                        for level, kind, payload in ancillary
                        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS
                        for i in range(0, len(payload) - 3, 4)]
            if not data and not received:
                return  # stockade closed its end
            port = int.from_bytes(data, "big")
            for extra in received[1:]:
                posix.close(extra)
            if not received:
                continue
            client = _socket.socket(fileno=received[0])
            if port not in allowed:
                client.close()
                continue
            up = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
            try:
                up.connect(("127.0.0.1", port))
            except OSError:
                client.close()
                up.close()
                continue
            relays.add(client, up)
