"""`--publish`: parsing (publish.py), the init's config, and the host's listeners alone."""

from __future__ import annotations

import socket

import pytest

from stockade.command import SandboxCommand
from stockade.drivers.linux.host.publish import PortForward
from stockade.drivers.linux.init.initschema import config_problem
from stockade.errors import InvalidCommand, SandboxUnavailable
from stockade.publish import describe, parse_all, parse_publish


@pytest.mark.parametrize(("spec", "want"), [
    ("8000", ("127.0.0.1", 8000, 8000)),
    ("8080:8000", ("127.0.0.1", 8080, 8000)),
    ("0.0.0.0:8080:8000", ("0.0.0.0", 8080, 8000)),
    ("192.168.1.5:8000", ("192.168.1.5", 8000, 8000)),
    ("[::1]:8000", ("::1", 8000, 8000)),
    ("[::1]:8080:8000", ("::1", 8080, 8000)),
])
def test_parse(spec: str, want: tuple[str, int, int]) -> None:
    assert parse_publish(spec) == want


@pytest.mark.parametrize(("spec", "says"), [
    ("", "needs"), ("0", "not a port"), ("65536", "not a port"), ("80:x", "not a port"),
    ("localhost:8000", "not an IP address"), ("1:2:3:4", "give"), ("[::1]8000", "IPv6"),
    ("::1:8000", "brackets"),
])
def test_malformed_specs_say_what_is_wrong(spec: str, says: str) -> None:
    with pytest.raises(InvalidCommand, match=says):
        parse_publish(spec)


def test_a_host_port_is_published_once() -> None:
    with pytest.raises(InvalidCommand, match="published twice"):
        parse_all(["8000", "8000:9000"])
    with pytest.raises(InvalidCommand, match="published twice"):
        parse_all(["0.0.0.0:8000", "127.0.0.1:8000:9000"])
    assert len(parse_all(["8000", "[::1]:8000"])) == 2


def test_command_carries_parsed_forwards() -> None:
    cmd = SandboxCommand("true", publish=["8080:8000", ("::1", 9000, 9000)])
    assert cmd.publish == (("127.0.0.1", 8080, 8000), ("::1", 9000, 9000))
    assert SandboxCommand("true", publish="8000").publish == (("127.0.0.1", 8000, 8000),)
    assert describe(("::1", 9000, 80)) == "[::1]:9000->80"


def test_init_config_knows_the_publish_key() -> None:
    assert config_problem({"v": 1, "publish": {"fd": 5, "ports": [8000]}}) is None


def test_a_taken_port_is_refused_naming_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(SandboxUnavailable, match=f"port {port} on 127.0.0.1 is already in "
                                                     "use on the host"):
            PortForward([("127.0.0.1", port, 8000)])


@pytest.mark.parametrize(("named", "other"), [("127.0.0.1", "::1"), ("::1", "127.0.0.1")])
def test_loopback_is_held_in_both_families(named: str, other: str) -> None:
    """A host service on the other family's loopback is not shadowed: refused, naming it.

    Clients that try `localhost` as ::1 first (Node, browsers) would otherwise
    reach the sandbox where they meant the person's own service, or the reverse.
    """
    family = socket.AF_INET6 if ":" in other else socket.AF_INET
    with socket.socket(family) as taken:
        if family == socket.AF_INET6:
            taken.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        taken.bind((other, 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(SandboxUnavailable, match=f"port {port} on {other} is already in "):
            PortForward([(named, port, 8000)])
    forward = PortForward([(named, 0, 8000)])
    try:
        assert sorted(s.getsockname()[0] for s, _p in forward._listeners) == sorted(
            [named, other])
        assert len({s.getsockname()[1] for s, _p in forward._listeners}) == 1
    finally:
        forward.close()


@pytest.mark.parametrize("spec", ["\u00b2", "\uff11\uff18\uff18\uff19\uff13",
                                  "\u0668\u0660\u0660\u0660", "8000:\u00b2"])
def test_only_ascii_digits_are_a_port(spec: str) -> None:
    with pytest.raises(InvalidCommand, match="not a port"):
        parse_publish(spec)


def test_listeners_hand_each_connection_over_and_close() -> None:
    """The host side alone: a connection arrives on the socketpair as a descriptor."""
    forward = PortForward([("127.0.0.1", 0, 8000)])
    try:
        port = forward._listeners[0][0].getsockname()[1]
        forward.start()
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        theirs = socket.socket(fileno=forward.child_fd)
        try:
            theirs.settimeout(5)
            data, fds, _flags, _addr = socket.recv_fds(theirs, 2, 1)
            assert int.from_bytes(data, "big") == 8000 and len(fds) == 1
            with socket.socket(fileno=fds[0]) as handed:
                client.sendall(b"ping")
                assert handed.recv(4) == b"ping"
        finally:
            theirs.detach()
            client.close()
    finally:
        forward.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
