"""`TerminalApprovalRequester` on a real pty, and `stockade run` asking through it.

The requester is pointed at the slave side of a pty the test owns; the test
plays the person on the master side. The CLI tests give `stockade run` a pty
as its controlling terminal and a pipe as stdin, to prove the question goes
to /dev/tty and stdin stays the command's.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade.approval import ApprovalRequest
from stockade.approvers import TerminalApprovalRequester
from stockade.capabilities import SandboxCapabilities

pytestmark = pytest.mark.timeout(60)


class Person:
    """The master side of a pty: reads what is shown, types answers."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        self.path = os.ttyname(self.slave)
        self.shown = b""

    def wait_for(self, text: str, seconds: float = 15.0) -> bool:
        deadline = time.monotonic() + seconds
        while text.encode() not in self.shown and time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                try:
                    self.shown += os.read(self.master, 4096)
                except OSError:
                    return False
        return text.encode() in self.shown

    def answer(self, text: str, after: str = "Allow it?") -> threading.Thread:
        def go() -> None:
            if self.wait_for(after):
                os.write(self.master, text.encode())
        thread = threading.Thread(target=go, daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        for fd in (self.master, self.slave):
            try:
                os.close(fd)
            except OSError:
                pass


@pytest.fixture
def person() -> Iterator[Person]:
    p = Person()
    yield p
    p.close()


def _request(argv: list[str] | None = None, reason: str = "write access to /srv/out"
             ) -> ApprovalRequest:
    caps = SandboxCapabilities()
    return ApprovalRequest("agent-7", argv or ["make", "install"], "/work/p", "read-only", caps,
                           caps, reason)


@pytest.mark.parametrize(("typed", "outcome"), [
    ("o\n", "approved-once"), ("once\n", "approved-once"), ("s\n", "approved-session"),
    ("SESSION\r", "approved-session"), ("d\n", "denied"), ("\n", "denied"), ("no\n", "denied"),
])
def test_answers(person: Person, typed: str, outcome: str) -> None:
    person.answer(typed)
    assert TerminalApprovalRequester(10, tty=person.path).request(_request()) == outcome


def test_the_question_says_what_who_and_which_command(person: Person) -> None:
    person.answer("d\n")
    TerminalApprovalRequester(10, tty=person.path).request(_request())
    shown = person.shown.decode()
    assert "session:  agent-7" in shown
    assert "command:  make install" in shown
    assert "in:       /work/p (mode read-only)" in shown
    assert "asks for: write access to /srv/out" in shown
    assert "[o]nce" in shown and "[s]ession" in shown and "[d]eny" in shown


def test_no_answer_in_time_is_a_timeout(person: Person) -> None:
    started = time.monotonic()
    outcome = TerminalApprovalRequester(0.5, tty=person.path).request(_request())
    assert outcome == "timeout"
    assert time.monotonic() - started < 5
    assert person.wait_for("no answer in 0.5 s: denied")


def test_a_wrong_answer_asks_again(person: Person) -> None:
    def go() -> None:
        person.wait_for("Allow it?")
        os.write(person.master, b"maybe\n")
        person.wait_for("please answer")
        os.write(person.master, b"s\n")
    threading.Thread(target=go, daemon=True).start()
    assert TerminalApprovalRequester(10, tty=person.path).request(_request()) == \
        "approved-session"


def test_typeahead_is_not_an_answer(person: Person) -> None:
    # Typed (or pasted) before the question existed: flushed, not read.
    os.write(person.master, b"o\n")
    # The pty delivers a master write asynchronously: wait until the line is queued.
    assert select.select([person.slave], [], [], 10)[0]
    person.answer("d\n")
    assert TerminalApprovalRequester(10, tty=person.path).request(_request()) == "denied"


def test_escape_sequences_are_shown_not_obeyed(person: Person) -> None:
    person.answer("d\n")
    TerminalApprovalRequester(10, tty=person.path).request(
        _request(["sh", "-c", "echo \x1b[2J\x1b[1;1Hall fine"], reason="x\x1b]0;title\x07"))
    shown = person.shown.decode()
    assert "\x1b[2J" not in shown and "\x07" not in shown
    assert "\\x1b[2J" in shown and "\\x07" in shown


def test_separators_and_bidi_overrides_are_shown_not_obeyed(person: Person) -> None:
    """A paragraph separator would start a forged line; U+202E would reverse what follows."""
    forged = "cache\u2029\u2029Request: ls\u2028Allow once\u202eecnO\u200b"
    person.answer("d\n")
    TerminalApprovalRequester(timeout=10, tty=person.path).request(
        _request(["sh", "-c", "echo \u202eok"], reason=forged))
    shown = person.shown.decode("utf-8", "replace")
    asks = next(line for line in shown.splitlines() if "asks for:" in line)
    assert asks.endswith("cache\\u2029\\u2029Request: ls\\u2028Allow once\\u202eecnO\\u200b")
    for raw in ("\u2028", "\u2029", "\u202e", "\u200b"):
        assert raw not in shown
    assert "\\u202eok" in shown


def test_no_terminal_denies_with_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    outcome = TerminalApprovalRequester(10, tty="/nonexistent/tty").request(_request())
    assert outcome == "denied"
    err = capsys.readouterr().err
    assert "write access to /srv/out needs a person's approval" in err
    assert "--yes" in err


def test_a_file_that_is_not_a_terminal_denies(tmp_path: Path) -> None:
    fake = tmp_path / "tty"
    fake.write_text("o\n")
    assert TerminalApprovalRequester(10, tty=str(fake)).request(_request()) == "denied"


# -- stockade run ---------------------------------------------------------------------

@pytest.fixture
def dirs() -> Iterator[tuple[Path, Path]]:
    # /var/tmp: the sandbox has its own /tmp, where a host path would not exist.
    base = Path(tempfile.mkdtemp(prefix="stockade-tty-", dir="/var/tmp"))
    (base / "ws").mkdir()
    (base / "out").mkdir()
    yield base / "ws", base / "out"
    shutil.rmtree(base, ignore_errors=True)


def _stockade_run(args: list[str], ws: Path, tty: str | None, stdin: bytes = b""
                  ) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, XDG_DATA_HOME=str(ws.parent / "data"),
               XDG_STATE_HOME=str(ws.parent / "state"))

    def with_terminal() -> None:
        # A new session, then opening the pty makes it the controlling terminal.
        if tty is not None:
            os.close(os.open(tty, os.O_RDWR))

    return subprocess.run(
        [sys.executable, "-m", "stockade", "run", "--workspace", str(ws), *args],
        input=stdin, capture_output=True, env=env, timeout=40, start_new_session=True,
        preexec_fn=with_terminal,
    )


def test_run_asks_on_the_terminal_and_stdin_stays_the_commands(
        person: Person, dirs: tuple[Path, Path]) -> None:
    ws, out = dirs
    person.answer("o\n")
    result = _stockade_run(["--mode", "workspace-write", "--allow-write", str(out), "--",
                            "sh", "-c", f'cat > "{out}/got"'], ws, person.path,
                           stdin=b"piped data\n")
    assert result.returncode == 0, result.stderr
    assert (out / "got").read_bytes() == b"piped data\n"
    assert person.wait_for("approved once")
    assert f"write access to {out}" in person.shown.decode()


def test_run_denied_at_the_terminal(person: Person, dirs: tuple[Path, Path]) -> None:
    ws, out = dirs
    person.answer("d\n")
    result = _stockade_run(["--mode", "workspace-write", "--allow-write", str(out), "--",
                            "touch", f"{out}/f"], ws, person.path)
    assert result.returncode == 77
    assert b"CapabilityDenied: write access to" in result.stderr
    assert b"was denied" in result.stderr
    assert not (out / "f").exists()


def test_run_without_a_terminal_denies_with_a_hint(dirs: tuple[Path, Path]) -> None:
    ws, out = dirs
    result = _stockade_run(["--mode", "workspace-write", "--allow-write", str(out), "--",
                            "touch", f"{out}/f"], ws, None)
    assert result.returncode == 77
    assert b"no terminal to ask on" in result.stderr
    assert b"--yes" in result.stderr
    assert not (out / "f").exists()


def test_run_yes_still_approves_without_asking(dirs: tuple[Path, Path]) -> None:
    ws, out = dirs
    result = _stockade_run(["--mode", "workspace-write", "--allow-write", str(out), "--yes",
                            "--", "touch", f"{out}/f"], ws, None)
    assert result.returncode == 0, result.stderr
    assert (out / "f").exists()


def test_run_within_the_mode_never_asks(dirs: tuple[Path, Path]) -> None:
    ws, _ = dirs
    result = _stockade_run(["--mode", "workspace-write", "--", "touch", "inside"], ws, None)
    assert result.returncode == 0, result.stderr
    assert b"approval" not in result.stderr
