"""What the Landlock backend refuses for want of a namespace, and says so.

Under bubblewrap a command may trace its own processes and serve on its own
loopback (tests/isolation/test_iso_trace.py, test_iso_loopback.py). This
backend has no PID or network namespace: ptrace could reach any process of
the user that Landlock's ptrace rule leaves open, and 127.0.0.1 is the
host's. So both stay refused, and the hint names the backend and the way out.
"""

from __future__ import annotations

import shutil

import pytest

from isolation.conftest import Box, Listener, tcp_listener, text
from isolation.test_iso_trace import CLEAN_C, _compile

pytestmark = pytest.mark.isolation

TOOLS = "/usr/bin:/usr/local/bin"


def test_asan_leak_check_is_refused_with_the_reason(box: Box) -> None:
    prog = _compile(box, "clean", CLEAN_C, "-fsanitize=address")
    res = box.run([str(prog)], mode="workspace-write")
    assert res.returncode != 0
    out = text(res)
    assert "LeakSanitizer does not work under ptrace" in out
    assert "the Landlock backend refuses ptrace" in out and "bubblewrap" in out, out


@pytest.mark.skipif(shutil.which("strace", path=TOOLS) is None, reason="strace is not installed")
def test_strace_is_refused_with_the_reason(box: Box) -> None:
    res = box.run(["strace", "/bin/true"], mode="workspace-write")
    assert res.returncode != 0
    assert "the Landlock backend refuses ptrace" in text(res), text(res)


SERVER = r"""
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print("LISTENING")
"""


@pytest.mark.parametrize("options", [[], ["--allow-host", "example.invalid", "--yes"]],
                         ids=["none", "hosts"])
def test_loopback_server_is_refused_with_the_reason(box: Box, options: list[str]) -> None:
    # A script file, as a real server is: its traceback names the call that failed.
    box.write(box.ws / "server.py", SERVER)
    res = box.run(["/usr/bin/python3", "-I", "server.py"], mode="workspace-write",
                  options=options)
    out = text(res)
    assert res.returncode != 0 and "LISTENING" not in out
    assert "the Landlock backend has no network namespace" in out, out


def test_host_loopback_listener_still_unreachable(box: Box, listeners: list[Listener]) -> None:
    host, port = tcp_listener(listeners)
    probe = ("import socket, sys\n"
             "try:\n"
             "    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=2)\n"
             "    print('REACHED')\n"
             "except OSError as exc: print('refused', exc.errno)\n")
    res = box.py(probe, str(port))
    assert "REACHED" not in text(res)
    assert host.settle() == 0


UNBOUND = r"""
import socket
s = socket.socket()
try:
    s.listen()
    print("LISTENING", s.getsockname(), flush=True)
except OSError as exc:
    print("refused", exc.errno)
"""


def test_listen_without_bind_serves_nothing(box: Box) -> None:
    """listen() binds an unbound socket to 0.0.0.0 on a free port, a bind Landlock's
    rule never sees: it served every address of the host under network hosts."""
    box.write(box.ws / "unbound.py", UNBOUND)
    control = box.host(["/usr/bin/python3", "-I", str(box.ws / "unbound.py")])
    assert b"LISTENING ('0.0.0.0'" in control.stdout, text(control)
    res = box.run(["/usr/bin/python3", "-I", "unbound.py"], mode="workspace-write",
                  options=["--allow-host", "example.invalid", "--yes"])
    out = text(res)
    assert "LISTENING" not in out and "refused 1" in out, out
