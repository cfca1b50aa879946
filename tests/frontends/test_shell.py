"""`stockade shell` under a real pty, typed at the way a person would.

Each test starts `stockade shell` as the session leader of a pty the test
owns (as a terminal emulator would), types on the master side, and checks
what appears and what is left running on the host. Markers like
`echo A$((6*7))B` print `A42B` only when the shell ran them, so an echo of
the typed line never counts as a result.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(90)


class Term:
    """A terminal emulator's view: the master side of the pty stockade runs on."""

    def __init__(self, args: list[str], cwd: Path, rows: int = 24, cols: int = 80) -> None:
        env = dict(os.environ, TERM="xterm", XDG_DATA_HOME=str(cwd.parent / "data"),
                   XDG_STATE_HOME=str(cwd.parent / "state"))
        pid, fd = pty.fork()
        if pid == 0:  # pragma: no cover - the child execs at once
            os.chdir(cwd)
            os.execve(sys.executable, [sys.executable, "-m", "stockade", "shell", *args], env)
        self.pid, self.fd = pid, fd
        self.resize(rows, cols)
        self.screen = b""
        self.status: int | None = None

    def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def expect(self, text: str, seconds: float = 20.0) -> str:
        """Wait until `text` appears after the last expect; return what came before it."""
        deadline = time.monotonic() + seconds
        needle = text.encode()
        while needle not in self.screen:
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} never appeared; screen:\n"
                                     f"{self.screen.decode(errors='replace')}")
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if ready:
                try:
                    data = os.read(self.fd, 4096)
                except OSError:
                    data = b""
                if not data:
                    raise AssertionError(f"terminal closed before {text!r}:\n"
                                         f"{self.screen.decode(errors='replace')}")
                self.screen += data
        before, _, self.screen = self.screen.partition(needle)
        return before.decode(errors="replace")

    def wait(self, seconds: float = 20.0) -> int:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                ready, _, _ = select.select([self.fd], [], [], 0.1)
                if ready:
                    self.screen += os.read(self.fd, 4096)
            except OSError:
                pass
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                return self.status
        raise AssertionError("stockade shell did not exit")

    def close(self) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, 9)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
        os.close(self.fd)


@pytest.fixture
def ws() -> Iterator[Path]:
    # /var/tmp, not /tmp: the sandbox has a private /tmp.
    base = Path(tempfile.mkdtemp(prefix="stockade-shell-", dir="/var/tmp"))
    (base / "ws").mkdir()
    yield base / "ws"
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def shell(ws: Path) -> Iterator[Term]:
    term = Term(["--mode", "workspace-write"], ws)
    term.expect("[stockade workspace-write] ")
    yield term
    term.close()


def _left(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                    found.append(int(name))
            except OSError:
                pass
    return found


def _running(argv: list[str], seconds: float = 20.0) -> list[int]:
    """Pids whose argv is exactly `argv`, once `seconds` pass or as soon as one exists.

    An exact match counts a process only after its exec: the forked shell, or a
    `setsid`/`nohup` that has not yet exec'd (or forked), would otherwise count too.
    """
    want = "\0".join(argv).encode() + b"\0"
    deadline = time.monotonic() + seconds
    while True:
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    if Path(f"/proc/{name}/cmdline").read_bytes() == want:
                        found.append(int(name))
                except OSError:
                    pass
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _all_running(argv: list[str], count: int, seconds: float = 20.0) -> int:
    deadline = time.monotonic() + seconds
    while len(found := _running(argv, 0)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(found)


def _gone(marker: str, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while _left(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _left(marker)


def test_prompt_marker_and_the_sandbox_is_real(shell: Term, ws: Path) -> None:
    outside = ws.parent / "outside"
    outside.mkdir()
    shell.type(f'echo "S=$STOCKADE_SANDBOX"; touch inside {outside}/f; echo A$((6*7))B\r')
    out = shell.expect("A42B")
    assert "S=bubblewrap" in out
    assert "Read-only file system" in out
    shell.expect("[stockade workspace-write] ")
    assert (ws / "inside").exists() and not (outside / "f").exists()


def test_ctrl_c_reaches_the_foreground_job_not_stockade(shell: Term) -> None:
    marker = f"{uuid.uuid4().int % 10**6}.6"
    shell.type(f"sleep {marker}; echo after-sleep\r")
    # ^C before the job holds the terminal would only interrupt the shell itself.
    assert _running(["sleep", marker])
    started = time.monotonic()
    shell.type("\x03")
    shell.expect("[stockade workspace-write] ")
    assert time.monotonic() - started < 10
    shell.type("echo still-here-$((1+1))\r")
    assert "after-sleep" not in shell.expect("still-here-2")


def test_job_control(shell: Term) -> None:
    marker = f"{uuid.uuid4().int % 10**6}.5"
    shell.type(f"sleep {marker} & jobs; echo J$((2+3))\r")
    assert "Running" in shell.expect("J5")
    stopped = f"{uuid.uuid4().int % 10**6}.61"
    shell.type(f"sleep {stopped}\r")
    # The shell ignores ^Z: it must reach the foreground job, so wait for that job.
    assert _running(["sleep", stopped])
    shell.type("\x1a")  # Ctrl-Z
    shell.expect("Stopped")
    shell.type("jobs; echo K$((3+4))\r")
    jobs = shell.expect("K7")
    assert "Stopped" in jobs and f"sleep {stopped}" in jobs
    shell.type("kill %2; fg %1 >/dev/null & echo done-$((8+1))\r")
    shell.expect("done-9")


def test_resize_reaches_the_sandbox(shell: Term) -> None:
    shell.type("stty size; echo R$((1+1))\r")
    assert "24 80" in shell.expect("R2")
    shell.resize(33, 111)
    # The resize travels as SIGWINCH, not in the byte stream: ask until it has arrived.
    deadline = time.monotonic() + 20
    while True:
        shell.type("stty size; echo R$((2+2))\r")
        if "33 111" in shell.expect("R4"):
            break
        assert time.monotonic() < deadline, "the sandbox never saw the new size"


@pytest.mark.parametrize("backend", ["bubblewrap", "landlock"])
def test_exit_status_and_nothing_left_running(ws: Path, backend: str) -> None:
    """Under bubblewrap the PID namespace ends what the shell left; under the Landlock
    backend the reaper does, and stockade waits for it (its pipe reaches the shell too)."""
    marker = f"{uuid.uuid4().int % 10**6}.25"
    term = Term(["--mode", "workspace-write", "--backend", backend], ws)
    try:
        term.expect("[stockade workspace-write] ")
        term.type(f"sleep {marker} & disown; setsid sleep {marker} & "
                  f"nohup sleep {marker} >/dev/null 2>&1 & echo B$((5*5))\r")
        term.expect("B25")
        assert _all_running(["sleep", marker], 3) == 3
        term.type("exit 7\r")
        assert term.wait() == 7
        assert "left the sandbox (exit 7)" in term.screen.decode(errors="replace")
    finally:
        term.close()
    assert _gone(f"sleep\0{marker}")


def test_full_access_shell_leaves_nothing_either(ws: Path) -> None:
    # No PID namespace here: stockade ends the shell's session itself.
    marker = f"{uuid.uuid4().int % 10**6}.75"
    term = Term(["--mode", "full-access"], ws)
    try:
        term.expect("[stockade full-access] ")
        term.type(f"sleep {marker} & disown; echo F$((4*4))\r")
        term.expect("F16")
        term.type("exit\r")
        assert term.wait() == 0
    finally:
        term.close()
    assert _gone(f"sleep\0{marker}")


def test_piped_input_without_a_terminal(ws: Path) -> None:
    env = dict(os.environ, XDG_DATA_HOME=str(ws.parent / "data"),
               XDG_STATE_HOME=str(ws.parent / "state"))
    result = subprocess.run(
        [sys.executable, "-m", "stockade", "shell", "--workspace", str(ws)],
        input=b"echo P$((9*9))\nexit 5\n", capture_output=True, env=env, timeout=40,
        start_new_session=True)
    assert result.returncode == 5, result.stderr
    assert b"P81" in result.stdout
    assert b"sandboxed shell in" in result.stderr
    # No terminal control sequences for a reader that is not a terminal.
    assert b"\x1b[?2004" not in result.stdout, result.stdout


def test_a_given_shell_and_timeout(ws: Path) -> None:
    env = dict(os.environ, XDG_DATA_HOME=str(ws.parent / "data"),
               XDG_STATE_HOME=str(ws.parent / "state"))
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "stockade", "shell", "--workspace", str(ws), "--timeout", "1",
         "--", "/bin/sh", "-c", "echo given; sleep 30"],
        capture_output=True, env=env, timeout=40, start_new_session=True)
    assert time.monotonic() - started < 20
    assert result.returncode == 124
    assert b"given" in result.stdout
    # The shell that ran too long, not the pty helper's interpreter.
    assert (b"stockade: CommandTimeout: /bin/sh ran past its 1 s timeout; its process tree "
            b"was killed") in result.stderr, result.stderr


def test_help() -> None:
    result = subprocess.run([sys.executable, "-m", "stockade", "shell", "--help"],
                            capture_output=True, timeout=20)
    assert result.returncode == 0
    assert b"usage: stockade shell" in result.stdout
    assert b"--allow-write" in result.stdout and b"--json" not in result.stdout


def test_the_shell_takes_runs_network_flags(ws: Path) -> None:
    """`shell` and `run` build the session and its capabilities from the same flags."""
    env = dict(os.environ, XDG_DATA_HOME=str(ws.parent / "data"),
               XDG_STATE_HOME=str(ws.parent / "state"))
    result = subprocess.run(
        [sys.executable, "-m", "stockade", "shell", "--workspace", str(ws), "--network", "proxy"],
        input=b"exit\n", capture_output=True, env=env, timeout=40, start_new_session=True)
    assert result.returncode == 2, result.stderr
    assert b"--network proxy needs --allow-host" in result.stderr


def test_env_reaches_the_shell(ws: Path) -> None:
    env = dict(os.environ, XDG_DATA_HOME=str(ws.parent / "data"),
               XDG_STATE_HOME=str(ws.parent / "state"), SHELL_TOKEN_T="from-caller")
    result = subprocess.run(
        [sys.executable, "-m", "stockade", "shell", "--workspace", str(ws),
         "--env", "SHELL_TOKEN_T", "--env", "PLAIN_T=given", "--",
         "/bin/sh", "-c", 'echo "[$SHELL_TOKEN_T] [$PLAIN_T]"'],
        capture_output=True, env=env, timeout=40, start_new_session=True)
    assert result.returncode == 0, result.stderr
    assert b"[from-caller] [given]" in result.stdout, result.stdout
