"""`stockade shell`: an interactive shell inside the sandbox, on a real pty.

The shell is one command through the same pipeline as `stockade run` (same
flags, same approvals, same audit record); only the Run effect is performed
differently. Instead of pipes, the command gets the slave side of a new pty,
and stockade relays bytes between the person's terminal (in raw mode) and
the master side. So Ctrl-C, Ctrl-Z and Ctrl-\\ are bytes that reach the
sandbox's own line discipline, which signals the sandboxed foreground job --
never stockade -- and a window resize is copied to the pty, whose kernel
sends SIGWINCH inside.

bwrap starts the command in a new session with no controlling terminal
(`--new-session`: a sandboxed TIOCSTI must not reach the person's real
terminal). A shell needs one for job control, so a few lines of Python run
first inside the sandbox and make the pty -- the sandbox's own, not the
person's terminal -- the controlling terminal, then exec the shell.

When the shell exits, its PID namespace goes with it: nothing it started
keeps running. Without a namespace (full-access) stockade ends what is left
of the shell's session itself.
"""

from __future__ import annotations

import os
import sys

from .clitables import SHELL_OPTIONS, SHELL_USAGE
from .cliutil import (
    check_host_flags,
    command_help,
    explicit_env,
    open_session,
    parse_options,
    positive_number,
    requested_capabilities,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .command import SandboxCommand, SandboxOutput
    from .core import Run, SessionWorkspace
    from .drivers import ProcessHandle
    from .process import Outcome
    from .sync import SyncWorkspaceSandbox

# Runs inside the sandbox before the shell. `-I -S`: no user site, no
# environment-driven imports, nothing but the standard library.
CTTY_HELPER = """\
import fcntl, os, sys, termios
def ctty():
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
try:
    if os.getsid(0) != os.getpid():
        os.setsid()
    ctty()
except OSError:
    # A process-group leader cannot start a session: a child can.
    pid = os.fork()
    if pid:
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status) & 0xff)
    try:
        os.setsid()
        ctty()
    except OSError as exc:
        print("stockade: no job control in this shell (%s)" % exc, file=sys.stderr)
try:
    os.execvp(sys.argv[1], sys.argv[1:])
except OSError as exc:
    # As `run` says it (the init's words, env(1)'s statuses), never a traceback.
    name = sys.argv[1] if sys.argv[1].isprintable() else repr(sys.argv[1])[1:-1]
    print("stockade-init: cannot run %s: %s" % (name, exc.strerror), file=sys.stderr)
    sys.exit(127 if isinstance(exc, FileNotFoundError) else 126)
"""


def default_shell() -> list[str]:
    """bash without rc files (so the prompt marker stays), else POSIX sh."""
    if os.path.exists("/bin/bash"):
        return ["/bin/bash", "--norc", "--noprofile", "-i"]
    return ["/bin/sh", "-i"]


def main(argv: list[str]) -> int:
    values, command = parse_options(argv, SHELL_OPTIONS, SHELL_USAGE)
    if values.get("help"):
        print(command_help("shell"))
        return 0
    timeout = positive_number(values, "timeout", float, SHELL_USAGE)
    check_host_flags(values, SHELL_USAGE)

    from .command import SandboxCommand
    from .errors import CommandTimeout

    sandbox, ws, mode = open_session(values, prefix="shell")
    try:
        session = ws.session_id
        caps = requested_capabilities(values, sandbox, ws, mode, SHELL_USAGE)
        shell = command or default_shell()
        marker = f"[stockade {mode}] "
        shell_env = {"PS1": marker + "\\w \\$ ", "STOCKADE_SHELL": "1"}
        if not os.isatty(0):
            # Piped input: no terminal to paste into, and readline's bracketed
            # paste (on by default since bash 5.1) wrote ESC[?2004h into the
            # output. A dumb terminal turns it off.
            shell_env["TERM"] = "dumb"
        elif "TERM" in os.environ:
            shell_env["TERM"] = os.environ["TERM"]
        shell_env.update(explicit_env(values.get("env", []), SHELL_USAGE))  # type: ignore[arg-type]
        # The real interpreter (a venv's link to it, under /tmp, would be
        # invisible inside), on Linux the init's, which the sandbox shows.
        python = os.path.realpath(sys.executable)
        if sys.platform == "linux":
            from .drivers.linux.layers import init_python

            python = init_python()
        cmd = SandboxCommand(python,
                             ["-I", "-S", "-c", CTTY_HELPER, *shell],
                             session_id=session, capabilities=caps, timeout=timeout,
                             cwd=str(values["cwd"]) if values.get("cwd") else None,
                             env=shell_env)
        where = ws.cwd if not values.get("cwd") else os.path.join(ws.cwd, str(values["cwd"]))
        print(f"stockade: sandboxed shell in {where} ({mode}); prompt starts with "
              f"{marker.strip()}; exit or Ctrl-D to leave", file=sys.stderr)
        try:
            out = _drive(sandbox, cmd, ws, timeout)
        except CommandTimeout as exc:
            # The pipeline names the program it ran, which is the pty helper's
            # interpreter; the person ran the shell.
            raise CommandTimeout(f"{shell[0]} ran past its {timeout or 0:g} s timeout; its "
                                 "process tree was killed", output=exc.output) from None
    finally:
        sandbox.close()
    print(f"stockade: left the sandbox (exit {out.returncode})", file=sys.stderr)
    return out.returncode


def _drive(sandbox: SyncWorkspaceSandbox, cmd: SandboxCommand, ws: SessionWorkspace,
           timeout: float | None) -> SandboxOutput:
    """The pipeline, with the Run effect performed on a pty."""
    return sandbox.execute_with(cmd, lambda run: run_on_pty(run, timeout))


def run_on_pty(run: Run, timeout: float | None = None, *, stdin: int = 0,
               stdout: int = 1) -> Outcome:
    """Perform a Run effect with the command on a new pty, relaying `stdin`/`stdout`.

    `timeout` is the person's (`--timeout`), not the pipeline's default: an
    interactive shell has no natural end a default could guess.
    """
    import signal
    import time

    from .process import Outcome

    launch = run.launch
    master, slave = os.openpty()
    interactive = os.isatty(stdin)
    saved = None
    start = time.monotonic()
    try:
        if interactive:
            _copy_winsize(stdin, master)
        # The driver's own descriptors too: under the Landlock backend one is
        # the reaper's pipe, whose end-of-file tells cleanup that every
        # process the shell left behind is dead.
        proc = launch.start(stdin=slave, capture=False, stdio={1: slave, 2: slave})
        os.close(slave)
        slave = -1
        # Ctrl-C belongs to the sandboxed job. With a raw terminal it arrives
        # as a byte; a SIGINT sent to stockade itself is ignored too, so it
        # cannot leave the sandbox running unsupervised.
        old_handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGQUIT)}
        for sig in old_handlers:
            signal.signal(sig, signal.SIG_IGN)
        old_winch = signal.getsignal(signal.SIGWINCH)
        if interactive:
            signal.signal(signal.SIGWINCH, lambda *_: _copy_winsize(stdin, master))
            saved = _raw(stdin)
        try:
            timed_out, tail = _relay(proc, master, stdin, stdout, timeout)
        finally:
            if saved is not None:
                import termios

                termios.tcsetattr(stdin, termios.TCSAFLUSH, saved)
            signal.signal(signal.SIGWINCH, old_winch)
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
            if proc.returncode is None:
                proc.kill()
            code = proc.wait()
            _end_session(proc.pid)
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
        launch.cleanup()
    # The pty carried stderr to the person; what it showed of the start is
    # what the driver reads to tell its own failure from the shell's.
    return Outcome(code, b"", b"", False, timed_out, (time.monotonic() - start) * 1000.0,
                   diagnostic=tail)


def _relay(proc: ProcessHandle, master: int, stdin: int, stdout: int, timeout: float | None
           ) -> tuple[bool, bytes]:
    """Copy bytes both ways until the pty closes; (timed out, last output seen)."""
    import select
    import time

    deadline = time.monotonic() + timeout if timeout else None
    poller = select.poll()
    poller.register(master, select.POLLIN)
    poller.register(stdin, select.POLLIN)
    tail = b""
    while True:
        if deadline is not None and time.monotonic() >= deadline:
            return True, tail
        wait = 250 if deadline is None else max(0, min(250, int((deadline - time.monotonic())
                                                                 * 1000)))
        try:
            events = poller.poll(wait)
        except InterruptedError:
            continue
        for fd, ev in events:
            if fd == master:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every process holding the slave is gone
                    data = b""
                if not data:
                    return False, tail
                tail = (tail + data)[-4096:]
                _write_all(stdout, data)
            elif ev & select.POLLIN:
                data = os.read(stdin, 65536)
                if data:
                    _write_all(master, data)
                    continue
                # End of input (a pipe, not a terminal): end the shell's input
                # the way a person would, with Ctrl-D at the start of a line.
                poller.unregister(stdin)
                _write_all(master, b"\x04")
            else:
                poller.unregister(stdin)
                _write_all(master, b"\x04")
        if proc.poll() is not None:
            # The shell is gone. Something it left (only possible without a
            # PID namespace) may still hold the pty open, so do not wait for
            # the pty to close: show what is buffered, then stop.
            while select.select([master], [], [], 0.05)[0]:
                try:
                    data = os.read(master, 65536)
                except OSError:
                    break
                if not data:
                    break
                _write_all(stdout, data)
            return False, tail


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            import select

            select.select([], [fd], [], 1.0)
            continue
        except OSError:
            return
        view = view[n:]


def _raw(fd: int) -> list[Any]:
    """Put the person's terminal in raw mode; returns what to restore."""
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    tty.setraw(fd, termios.TCSANOW)
    return saved


def _copy_winsize(src: int, dst: int) -> None:
    import fcntl
    import termios

    try:
        size = fcntl.ioctl(src, termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(dst, termios.TIOCSWINSZ, size)
    except OSError:
        pass


def _end_session(sid: int) -> None:
    """SIGKILL whatever still runs in the shell's session.

    Under bubblewrap the PID namespace already took everything with it and
    this finds nothing; under full-access a job left in the background
    (`sleep 1000 &`, `disown`) is still in the session the shell led.
    """
    from _signal import SIGKILL

    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # Fields after the command name (which may hold spaces and parens):
        # state ppid pgrp session ...
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 3 and int(fields[3]) == sid and int(name) != os.getpid():
            try:
                os.kill(int(name), SIGKILL)
            except OSError:
                pass
