"""`--publish [HOST_ADDR:]PORT[:SANDBOX_PORT]`: what a person asks to open, parsed (pure).

A dev server started inside a sandbox with its own network namespace
listens on that namespace's loopback, which nothing on the host reaches:
the person cannot open the page the agent is working on. A published port
is a listener on the host that leads to one port on the sandbox's loopback
while the command runs (drivers/linux/host/publish.py and bridge.py carry it).

Loopback unless an address is named: `0.0.0.0` would hand the agent's
server to the whole network, which the person must say in so many words.
Parsed here once, for the CLI, the library and the MCP server alike.
"""

from __future__ import annotations

from .errors import InvalidCommand

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

#: (host address, host port, sandbox port): what a `Profile` carries.
Published = tuple[str, int, int]

LOOPBACK = "127.0.0.1"
FORM = "[HOST_ADDR:]PORT[:SANDBOX_PORT]"

#: Why a backend without a network namespace of the command's own has nothing
#: to forward (the drivers raise these; the README says the same).
_FORWARDS = "--publish forwards a host port into the sandbox's own network namespace, and "
NETWORK_ALL = (_FORWARDS + "with network all the command shares the host's: a server it "
               "starts already listens on the host's loopback (open it there; no forward "
               "is needed)")
LANDLOCK = (_FORWARDS + "the Landlock backend gives the command none: with network all a "
            "server it starts already listens on the host's loopback (open it there), and "
            "with network none or a list of hosts it may listen on no TCP port at all; use "
            "the bubblewrap backend to publish")
NO_BOUNDARY = (_FORWARDS + "full-access runs the command with no boundary: a server it "
               "starts already listens on the host's loopback (open it there; no forward "
               "is needed)")


def _port(text: str, spec: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 65536:
        raise InvalidCommand(f"--publish {spec!r}: {text!r} is not a port (1-65535); "
                             f"give {FORM}, e.g. 8000 or 127.0.0.1:8080:8000")
    return int(text)


def parse_publish(spec: str) -> Published:
    """`spec` as (host address, host port, sandbox port); InvalidCommand if malformed.

    `8000` publishes the sandbox's 8000 on the host's 127.0.0.1:8000,
    `8080:8000` its 8000 on the host's 8080, `0.0.0.0:8080:8000` on every
    address, `[::1]:8000` on IPv6 loopback. Two fields are PORT:SANDBOX_PORT
    when the first is a number, HOST_ADDR:PORT otherwise.
    """
    import ipaddress

    if not isinstance(spec, str) or not spec:
        raise InvalidCommand(f"--publish needs {FORM}, got {spec!r}")
    addr = LOOPBACK
    rest = spec
    if spec.startswith("["):
        inner, bracket, rest = spec[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise InvalidCommand(f"--publish {spec!r}: an IPv6 address is [ADDR]:PORT")
        addr, rest = inner, rest[1:]
        fields = rest.split(":")
        if len(fields) > 2:
            raise InvalidCommand(f"--publish {spec!r}: give {FORM}")
    else:
        fields = spec.split(":")
        if len(fields) == 3 or (len(fields) == 2 and not fields[0].isdigit()):
            addr, fields = fields[0], fields[1:]
        elif len(fields) > 3:
            raise InvalidCommand(f"--publish {spec!r}: give {FORM} (an IPv6 address in "
                                 "brackets: [::1]:8000)")
    try:
        addr = str(ipaddress.ip_address(addr))
    except ValueError:
        raise InvalidCommand(f"--publish {spec!r}: {addr!r} is not an IP address (the host "
                             "address to listen on, e.g. 127.0.0.1 or 0.0.0.0)") from None
    host_port = _port(fields[0], spec)
    sandbox_port = _port(fields[1], spec) if len(fields) > 1 else host_port
    return addr, host_port, sandbox_port


def parse_all(specs: Iterable[str | Published]) -> tuple[Published, ...]:
    """Each spec parsed (a tuple passes as it is, checked); one host port published once."""
    out: list[Published] = []
    for spec in specs:
        if isinstance(spec, tuple):
            addr, host_port, sandbox_port = spec
            item = parse_publish(f"[{addr}]:{host_port}:{sandbox_port}" if ":" in str(addr)
                                 else f"{addr}:{host_port}:{sandbox_port}")
        else:
            item = parse_publish(spec)
        for other in out:
            if other[1] == item[1] and (other[0] == item[0] or "0.0.0.0" in (other[0], item[0])
                                        or "::" in (other[0], item[0])):
                raise InvalidCommand(f"--publish: host port {item[1]} is published twice")
        out.append(item)
    return tuple(out)


def describe(item: Published) -> str:
    """`127.0.0.1:8080 -> 8000`, as the audit record and messages show it."""
    addr, host_port, sandbox_port = item
    shown = f"[{addr}]" if ":" in addr else addr
    return f"{shown}:{host_port}->{sandbox_port}"
