"""The words a refused ptrace or loopback listener gets (denial.py, landlock_driver.py)."""

from __future__ import annotations

import pytest

from stockade.denial import denial_hint, likely_sandbox_denied
from stockade.drivers.linux.landlock_driver import explain_no_namespace

LSAN = (b"==12==LeakSanitizer has encountered a fatal error.\n"
        b"==12==HINT: LeakSanitizer does not work under ptrace (strace, gdb, etc)\n")
STRACE = b"strace: ptrace(PTRACE_TRACEME, ...): Operation not permitted\n"
GDB = b"warning: Could not trace the inferior process.\nwarning: ptrace: Operation not permitted\n"
NODE = b"Error: listen EPERM: operation not permitted 127.0.0.1\n    at Server.setupListenHandle"
PY_BIND = (b'  File "/ws/server.py", line 2, in <module>\n    s.bind(("127.0.0.1", 0))\n'
           b"PermissionError: [Errno 13] Permission denied\n")


@pytest.mark.parametrize("stderr", [LSAN, STRACE, GDB])
def test_tracers_refused_read_as_ptrace(stderr: bytes) -> None:
    assert likely_sandbox_denied(1, None, stderr, sandboxed=True) == "ptrace"
    hint = denial_hint("ptrace", stderr, "workspace-write")
    assert "ptrace" in hint and "bubblewrap" in hint and "Landlock backend" in hint


def test_node_listen_eperm_reads_as_network() -> None:
    assert likely_sandbox_denied(1, None, NODE, sandboxed=True) == "network"


@pytest.mark.parametrize("stderr", [LSAN, STRACE, GDB])
def test_landlock_backend_names_itself_for_ptrace(stderr: bytes) -> None:
    hint = explain_no_namespace(stderr)
    assert hint is not None and "Landlock backend refuses ptrace" in hint
    assert "PID namespace" in hint and "detect_leaks=0" in hint


@pytest.mark.parametrize("stderr", [NODE, PY_BIND,
                                    b"PermissionError: [Errno 1] Operation not permitted\n"
                                    b"  _socket.socket.__init__(self, family, type, proto)\n"])
def test_landlock_backend_names_itself_for_loopback(stderr: bytes) -> None:
    hint = explain_no_namespace(stderr)
    assert hint is not None and "no network namespace" in hint and "bubblewrap" in hint


@pytest.mark.parametrize("stderr", [b"", b"cat: x: Permission denied\n",
                                    b"rm: cannot remove 'a': Operation not permitted\n"])
def test_landlock_backend_leaves_other_errors_alone(stderr: bytes) -> None:
    assert explain_no_namespace(stderr) is None
