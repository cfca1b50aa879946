"""Approval requesters that ask a person: `TerminalApprovalRequester`.

The question goes to the controlling terminal (`/dev/tty`), never to stdin:
`stockade run -- cmd < input.txt` must still reach the person, and stdin
belongs to the command. Imported on `stockade run`'s path, so it keeps to
`os` at import time; `select` and `termios` are loaded only when asking.
"""

from __future__ import annotations

import os

from .approval import APPROVED_ONCE, APPROVED_SESSION, DENIED, TIMEOUT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .approval import ApprovalRequest

#: What the person types, and what it means. An empty line denies: pressing
#: Enter by reflex must never widen the boundary.
ANSWERS = {
    "o": APPROVED_ONCE, "once": APPROVED_ONCE, "y": APPROVED_ONCE, "yes": APPROVED_ONCE,
    "s": APPROVED_SESSION, "session": APPROVED_SESSION,
    "d": DENIED, "deny": DENIED, "n": DENIED, "no": DENIED, "": DENIED,
}

DEFAULT_HINT = "run it from a terminal to be asked, or pass --yes to approve it up front"


def printable(text: str, limit: int = 400) -> str:
    """`text` on one line with control and format characters spelled out, cut at `limit`.

    The command and the reason are written by the agent: an escape sequence
    in them could move the cursor and repaint the question, so the person
    would approve something other than what they read. Beyond C0 and C1, a
    line or paragraph separator (U+2028, U+2029) starts a line a form shows as
    the question's own ("Request: ...", "Allow once"), and a bidi override
    (U+202E) or another invisible format character (Cf) reverses or hides
    what follows: each is shown as its escape, so the text stays one line
    that reads as it is.
    """
    out = []
    for ch in text:
        code = ord(ch)
        if code < 0x20 or 0x7F <= code < 0xA0:
            out.append(f"\\x{code:02x}")
        elif code >= 0xA0 and _unicodedata().category(ch) in _ESCAPED:
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(ch)
    joined = "".join(out)
    return joined if len(joined) <= limit else joined[:limit] + "…"


#: Unicode categories never shown raw: format characters (bidi overrides and
#: isolates, zero-width joiners, the BOM), line and paragraph separators,
#: surrogates, private use and unassigned code points.
_ESCAPED = frozenset({"Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def _unicodedata() -> Any:
    # Loaded for the first non-ASCII character only: this module is on
    # `stockade run`'s path and keeps to `os` at import time.
    import unicodedata

    return unicodedata


def describe_command(argv: list[str]) -> str:
    """A shell-like rendering of argv, for reading, not for running."""
    parts = []
    for arg in argv:
        safe = arg and all(c.isalnum() or c in "-_./=:,+@%" for c in arg)
        parts.append(arg if safe else "'" + arg.replace("'", "'\\''") + "'")
    return printable(" ".join(parts))


class TerminalApprovalRequester:
    """Asks on the controlling terminal: once, for the session, or deny.

    No terminal (a CI job, a pipe, a daemon) is a denial with a hint on
    stderr, never a silent approval. No answer within `timeout` seconds is
    `timeout`, which the gate treats as a denial.
    """

    def __init__(self, timeout: float = 120.0, *, tty: str = "/dev/tty",
                 hint: str = DEFAULT_HINT) -> None:
        self.timeout = timeout
        self.tty = tty
        self.hint = hint

    def request(self, request: ApprovalRequest) -> str:
        try:
            fd = os.open(self.tty, os.O_RDWR | os.O_NOCTTY)
        except OSError:
            return self._non_interactive(request)
        try:
            if not os.isatty(fd):
                return self._non_interactive(request)
            return self._ask(fd, request)
        finally:
            os.close(fd)

    def _non_interactive(self, request: ApprovalRequest) -> str:
        import sys

        print(f"stockade: {printable(request.reason)} needs a person's approval and there is "
              f"no terminal to ask on, so it is denied; {self.hint}", file=sys.stderr)
        return DENIED

    def _ask(self, fd: int, request: ApprovalRequest) -> str:
        import select
        import termios
        import time

        # Keys typed before the question was shown are not an answer to it.
        try:
            termios.tcflush(fd, termios.TCIFLUSH)
        except termios.error:
            pass
        seconds = f"{self.timeout:g}"
        _write(fd, (
            "\nstockade: approval needed\n"
            f"  session:  {printable(request.session_id)}\n"
            f"  command:  {describe_command(request.argv)}\n"
            f"  in:       {printable(request.cwd)} (mode {request.mode})\n"
            f"  asks for: {printable(request.reason)}\n"
        ))
        prompt = (f"Allow it? [o]nce, for this [s]ession, [d]eny "
                  f"(no answer in {seconds} s denies): ")
        _write(fd, prompt)
        deadline = time.monotonic() + self.timeout
        line = b""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                _write(fd, f"\nstockade: no answer in {seconds} s: denied\n")
                return TIMEOUT
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 1024)
            except OSError:
                chunk = b""
            if not chunk:  # the terminal went away
                _write(fd, "\nstockade: terminal closed: denied\n")
                return DENIED
            line += chunk
            if b"\n" not in line and b"\r" not in line:
                continue
            answer = line.replace(b"\r", b"\n").split(b"\n", 1)[0]
            line = b""
            outcome = ANSWERS.get(answer.decode("utf-8", "replace").strip().lower())
            if outcome is None:
                _write(fd, "please answer o (once), s (session) or d (deny): ")
                continue
            word = {APPROVED_ONCE: "approved once", APPROVED_SESSION:
                    "approved for this session"}.get(outcome, "denied")
            _write(fd, f"stockade: {word}\n")
            return outcome


def _write(fd: int, text: str) -> None:
    data = text.encode("utf-8", "replace")
    while data:
        try:
            n = os.write(fd, data)
        except OSError:
            return
        data = data[n:]
