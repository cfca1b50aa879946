"""TIOCSTI: a sandboxed command cannot type into the terminal that started it.

The CLI runs on a real pty that is its controlling terminal, as under an
interactive shell, and in passthrough mode the command inherits that pty as
fds 0-2. TIOCSTI pushes bytes into the tty's *input* queue -- what the user's
shell reads next -- so the verdict is read from that queue on the host after
the run: anything there was typed by the sandbox.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import time
import tty
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import SYSTEM_PYTHON, Box

pytestmark = pytest.mark.isolation

INJECT = r"""
import errno, fcntl, json, os, termios
result = {}
for fd in (0, 1, 2):
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b"x")
        result[str(fd)] = "injected"
    except OSError as exc:
        result[str(fd)] = errno.errorcode[exc.errno]
try:
    fd = os.open("/dev/tty", os.O_RDWR)
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b"x")
        result["/dev/tty"] = "injected"
    except OSError as exc:
        result["/dev/tty"] = errno.errorcode[exc.errno]
except OSError as exc:
    result["/dev/tty"] = "open " + errno.errorcode[exc.errno]
print("RESULT " + json.dumps(result), flush=True)
"""
CTTY = "import fcntl, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0)\n"


@dataclass
class PtyRun:
    returncode: int
    output: bytes  # what the program wrote to the terminal
    typed: bytes  # what is waiting in the terminal's input queue afterwards

    def result(self) -> dict[str, str]:
        for line in self.output.decode(errors="replace").splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT "):])  # type: ignore[no-any-return]
        raise AssertionError(f"no RESULT line in terminal output {self.output!r}")


def run_on_pty(box: Box, argv: Sequence[str], timeout: float = 20.0) -> PtyRun:
    master, slave = pty.openpty()
    # Raw: no echo (an echoed byte would look like output) and no line
    # buffering, so a single injected byte is readable from the queue at once.
    tty.setraw(slave)
    output = b""
    try:
        proc = box.runner.popen(argv, stdin=slave, stdout=slave, stderr=slave,
                                start_new_session=True, cwd=str(box.ws), env=box.env())
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                with contextlib.suppress(OSError):
                    output += os.read(master, 65536)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
            raise AssertionError(f"{argv[0]} did not finish on the pty within {timeout}s")
        while select.select([master], [], [], 0.1)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        typed = b""
        while select.select([slave], [], [], 0.3)[0]:
            chunk = os.read(slave, 4096)
            if not chunk:
                break
            typed += chunk
        return PtyRun(proc.returncode, output, typed)
    finally:
        os.close(master)
        os.close(slave)


def test_tiocsti_cannot_type_into_the_parent_terminal(box: Box) -> None:
    argv = box.runner.cli_argv(["run", "--", SYSTEM_PYTHON, "-I", "-c", INJECT], ctty=True)
    run = run_on_pty(box, argv)
    result = run.result()
    assert run.returncode == 0, run
    assert run.typed == b"", f"the sandbox typed {run.typed!r} into the caller's terminal"
    assert all(v != "injected" for v in result.values()), result
    # The attempts failed at the kernel, on the inherited terminal fds themselves.
    assert {result[k] for k in ("0", "1", "2")} <= {"EPERM", "EIO", "ENOTTY", "EACCES"}, result


def test_control_unconfined_tiocsti_is_seen_in_the_input_queue(box: Box) -> None:
    """Same user, same pty, no sandbox: the byte arrives, so the check above can fail."""
    legacy = Path("/proc/sys/dev/tty/legacy_tiocsti")
    if box.runner.uid != 0 and legacy.exists() and legacy.read_text().strip() == "0":
        pytest.skip("this kernel refuses TIOCSTI to unprivileged users (legacy_tiocsti=0), "
                    "so an unprivileged control cannot inject")
    run = run_on_pty(box, [SYSTEM_PYTHON, "-I", "-c", CTTY + INJECT])
    assert run.result()["0"] == "injected", run
    assert b"x" in run.typed, run


def test_json_mode_gives_the_command_no_terminal(box: Box) -> None:
    """Captured mode: stdio are pipes, so there is no terminal to inject into at all."""
    argv = box.runner.cli_argv(["run", "--json", "--", SYSTEM_PYTHON, "-I", "-c", INJECT],
                               ctty=True)
    run = run_on_pty(box, argv)
    assert run.typed == b"", run
    payload = json.loads(run.output.decode(errors="replace").strip().splitlines()[-1])
    inner = json.loads(payload["stdout"].split("RESULT ", 1)[1])
    assert all(v != "injected" for v in inner.values()), inner
