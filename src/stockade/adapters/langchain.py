"""LangChain: an execution policy for `ShellToolMiddleware` that runs the shell in stockade.

    from langchain.agents import create_agent
    from langchain.agents.middleware import ShellToolMiddleware
    from stockade.adapters.langchain import StockadeExecutionPolicy

    agent = create_agent(model, middleware=[ShellToolMiddleware(
        workspace_root="/path/to/project",
        execution_policy=StockadeExecutionPolicy(mode="workspace-write"))])

The middleware keeps one persistent shell per agent run and writes the
model's commands to its stdin. This policy starts that shell through the
stockade pipeline (the same cwd check, profile, bubblewrap boundary and audit
record as `stockade run`), as a command that outlives the call; the
middleware's own timeouts and restarts then end it by killing the sandbox,
which takes everything the shell started with it.

The shell's stdin is gated: each command the middleware writes passes the
command policy (and the rest of the before-hooks) first and gets its own
ledger record. A denied command never reaches the shell; the model reads
the reason on stderr instead, with exit status 126. A command that passes
runs in a bash of its own, started by the persistent shell
(`_langchain_shell.py`) with stdin from /dev/null, which carries the
directory and the exported variables to the next command and nothing else:
the persistent shell never runs a command's code, so no trap, function or
shell variable of one command can run code in another's place. The exit
status comes back on a status line only this process and the persistent
shell know how to print, and is recorded with the command.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    from langchain.agents.middleware._execution import BaseExecutionPolicy
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "stockade.adapters.langchain needs LangChain 1.x: pip install 'stockade[langchain]'"
    ) from exc

from ..command import SandboxCommand
from ..errors import InvalidCommand, SandboxUnavailable
from ..process import from_lasting_thread

__all__ = ["StockadeExecutionPolicy"]


@dataclass
class StockadeExecutionPolicy(BaseExecutionPolicy):
    """Run `ShellToolMiddleware`'s shell inside stockade.

    `mode` overrides the configured mode (`read-only` by default). `config`
    is a `SandboxConfig` to use instead of the usual config files. Each
    workspace the middleware opens becomes one stockade session, with a
    private /tmp that lives as long as the shell. The timeouts and output
    limits are the middleware's (`command_timeout` and friends).
    """

    mode: str | None = None
    config: Any = None
    session_prefix: str = field(default_factory=lambda: f"langchain-{os.getpid()}")
    _sandbox: Any = field(default=None, init=False, repr=False)
    _spawned: int = field(default=0, init=False, repr=False)
    _ending: dict[str, list[tuple[subprocess.Popen[str], threading.Event]]] = field(
        default_factory=dict, init=False, repr=False)
    _gates: list[_CommandGate] = field(default_factory=list, init=False, repr=False)

    def spawn(self, *, workspace: Path, env: Mapping[str, str],
              command: Sequence[str]) -> subprocess.Popen[str]:
        from ..core import Run

        sandbox = self._get_sandbox(str(workspace))
        key = _short_hash(os.path.realpath(workspace))
        # A session per shell: a restart must not share a /tmp (or the cleanup
        # of one) with the shell it replaces, which may still be ending.
        self._spawned += 1
        session_id = f"{self.session_prefix}-{key}-{self._spawned}"
        # A restart waits for its predecessor's cleanup (the metadata guard's
        # sweep), so the new shell starts on a workspace already swept rather
        # than racing it. A shell that still runs (another agent run's) is
        # left alone.
        shells = self._ending.setdefault(key, [])
        for prev, done in list(shells):
            if prev.poll() is not None:
                done.wait(timeout=30)
                shells.remove((prev, done))
        ws = sandbox.session(session_id, str(workspace), ephemeral_tmp=True)
        # The middleware's own shell command goes unused: every command runs in
        # a /bin/bash of its own that the persistent shell starts.
        argv = _shell_argv()
        cmd = SandboxCommand(argv[0], argv[1:], session_id=session_id, env=dict(env))
        backend = "unresolved"

        def run(effect: Run) -> subprocess.Popen[str]:
            nonlocal backend
            backend = effect.profile.env.get("STOCKADE_SANDBOX", backend)
            started, done = _popen(effect)
            shells.append((started, done))
            return started

        proc = sandbox.start_with(cmd, run)
        assert isinstance(proc, subprocess.Popen)
        gate = _CommandGate(sandbox, ws, backend, str(workspace), proc)
        proc.stdin = _GatedStdin(proc.stdin, gate)  # type: ignore[assignment]
        limit = self.max_output_bytes or LINE_LIMIT
        proc.stdout = _WatchedStdout(proc.stdout, gate, limit)  # type: ignore[assignment]
        proc.stderr = _BoundedLines(proc.stderr, limit)  # type: ignore[assignment]
        self._gates = [g for g in self._gates if not g.settled_and_gone()]
        self._gates.append(gate)
        return proc

    def _get_sandbox(self, workspace: str) -> Any:
        if self._sandbox is None:
            from ..config import load_config
            from ..sync import SyncWorkspaceSandbox

            config = self.config
            if config is None:
                config = load_config(cwd=workspace, mode=self.mode)
            elif self.mode is not None:
                config.mode = self.mode
            self._sandbox = SyncWorkspaceSandbox(config)
        return self._sandbox

    def close(self) -> None:
        """End every shell this policy started that still runs, wait for each one's
        cleanup (the metadata guard's sweep), then close the sessions and the ledger."""
        _end_shells([shell for shells in self._ending.values() for shell in shells])
        self._ending.clear()
        # A command whose status line nobody read (its shell killed, or
        # stdout never read) is still recorded, before the ledger closes.
        for gate in self._gates:
            gate.shell_ended()
        self._gates.clear()
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None


# What ShellSession writes after each command to learn its exit status
# (`printf '__LC_SHELL_DONE__<hex> %s\n' $?`), and to end. The status line is
# recognised whole, never by its start: text that only begins like it is a
# command like any other.
_STATUS_LINE = re.compile(r"printf '(__LC_SHELL_DONE__[0-9a-f]{32}) %s\\n' \$\?\n")
_EXIT = "exit\n"
_STOP = json.dumps({"exit": True}) + "\n"
#: Why the persistent shell refused a command it was sent, by the word on its
#: status line (see `_langchain_shell`).
_SHELL_REFUSED = {
    "moved": "the directory the last command ended in had moved or become a symlink",
    "unconfined": "the persistent shell could not put it in a Landlock domain of its own",
    "unstarted": "the persistent shell could not start it (the reason is on its stderr)",
}


def _shell_argv() -> list[str]:
    """The persistent shell: `_langchain_shell.py`, run by the init's interpreter.

    The init's interpreter, which the sandbox shows wherever it lives (a venv's
    link to it, under /tmp, would be invisible there).
    """
    from ..drivers.linux.layers import init_python

    source = Path(__file__).with_name("_langchain_shell.py").read_text(encoding="utf-8")
    return [init_python(), "-I", "-S", "-c", source]


def _framed(command: str, token: str) -> str:
    """The request that has the persistent shell run `command` (see `_langchain_shell`)."""
    return json.dumps({"run": command, "token": token}) + "\n"


def _refused(hint: str, token: str) -> str:
    return json.dumps({"refuse": hint, "token": token}) + "\n"


class _CommandGate:
    """The before-hooks and a ledger record for one command of the persistent shell.

    A command that passes is recorded once it ends, with its exit status,
    read from the status line its framing prints (see `_framed`).
    """

    def __init__(self, sandbox: Any, ws: Any, backend: str, cwd: str,
                 proc: subprocess.Popen[str]) -> None:
        self._sandbox, self._ws, self._backend, self._cwd = sandbox, ws, backend, cwd
        self._proc = proc
        self._lock = threading.Lock()
        #: The command that went into the shell and has no record yet.
        self._pending: _Pending | None = None
        #: The last command written, whose status line the middleware may still ask for.
        self._framing: _Pending | None = None

    def __call__(self, command: str) -> str:
        """What to write to the shell instead of `command`."""
        import time

        from ..ledger import DENIED

        # A status line never came for the last one (a caller that writes no
        # status line): recorded without one rather than not at all.
        self._settle(None)
        sid = self._ws.session_id
        started = time.monotonic()
        text = command.rstrip("\n")
        mode = self._sandbox.mode_for(self._ws)
        warnings: Sequence[str] = ()
        exact: dict[str, object] = {}
        try:
            cmd = SandboxCommand("/bin/bash", ["-c", text], session_id=sid, cwd=self._cwd)
        except InvalidCommand:
            # Refused like a denied one, and recorded: every command the model
            # sent has its record, not only those that ran. The argv shows a
            # NUL as \0, which a literal backslash-zero also reads as, so the
            # exact text goes beside it (JSON spells a NUL \u0000).
            cmd = SandboxCommand("/bin/bash", ["-c", text.replace("\0", "\\0")],
                                 session_id=sid, cwd=self._cwd)
            reason = "the command contains a NUL byte, which no shell command can hold"
            exact = {"command": text}
        else:
            try:
                denial, warnings = self._sandbox.command_policy(cmd, sid)
            except Exception as exc:  # a broken hook must not let the command through
                reason = f"the command policy failed: {exc}"
            else:
                reason = denial.reason if denial is not None else ""
        token = f"__stockade_status_{os.urandom(16).hex()}"
        detail: dict[str, object] = {"persistent_shell": True}
        pending = _Pending(cmd, mode, started, detail, token)
        if reason:
            hint = ("stockade denied this command before it reached the shell: "
                    f"{reason}. Do not retry it as is; ask the user, or do the task another way.")
            self._sandbox.record(cmd, self._ws, mode, None, self._backend, DENIED, started,
                                 denied=True, detail={"reason": reason, "hint": hint,
                                                      "persistent_shell": True, **exact})
            pending.recorded = True
            with self._lock:
                self._framing = pending
            return _refused(hint, token)
        if warnings:
            detail["warnings"] = list(warnings)
        with self._lock:
            self._pending = self._framing = pending
        return _framed(text, token)

    def status_line_asked(self, text: str) -> bool:
        """The middleware wrote the line that prints the last command's status:
        True when it is exactly that line, for the command just written."""
        match = _STATUS_LINE.fullmatch(text)
        with self._lock:
            framing = self._framing
            if match is None or framing is None or framing.marker is not None:
                return False
            framing.marker = match.group(1)
            framing.asked.set()
        return True

    def stdout_line(self, line: str) -> list[str]:
        """What the middleware reads for a line the shell printed: a status line
        of ours becomes the middleware's, with the command's exit status."""
        framing = self._framing
        if framing is None:
            return [line]
        at = line.find(framing.token + " ")
        if at < 0 or not line.endswith("\n"):
            return [line]
        status, _, why = line[at + len(framing.token) + 1:].strip().partition(" ")
        before = [line[:at]] if at else []
        if not status.isdigit() or (why and why not in _SHELL_REFUSED):
            return [line]
        code = int(status)
        if not framing.recorded:
            self._settle(code, expect=framing, refused=_SHELL_REFUSED.get(why, ""))
        # The middleware writes its status line right after the command; a
        # caller that writes none reads nothing of ours.
        if not framing.asked.wait(timeout=2.0) or framing.marker is None:
            return before
        with self._lock:
            if self._framing is framing:
                self._framing = None
        return [*before, f"{framing.marker} {code}\n"]

    def shell_stopping(self) -> None:
        """The middleware is ending the shell (`exit`): whatever still runs was given up on."""
        if self._proc.poll() is not None:
            self.shell_ended()
        else:
            self._settle(None, timed_out=True)

    def shell_ended(self) -> None:
        """The shell is gone: a command still pending ended it (`exit 3`) or died with it."""
        if self._pending is None:
            return
        try:
            code: int | None = self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self._settle(code)

    def settled_and_gone(self) -> bool:
        return self._pending is None and self._proc.returncode is not None

    def _settle(self, code: int | None, *, timed_out: bool = False,
                expect: _Pending | None = None, refused: str = "") -> None:
        from ..ledger import DENIED, RAN, TIMED_OUT

        with self._lock:
            pending = self._pending
            if pending is None or (expect is not None and pending is not expect):
                return
            self._pending = None
            pending.recorded = True
        if refused:
            self._sandbox.record(pending.cmd, self._ws, pending.mode, None, self._backend,
                                 DENIED, pending.started, denied=True,
                                 detail={**pending.detail, "reason": refused})
            return
        exit_code = code if code is not None and code >= 0 else None
        signal = -code if code is not None and code < 0 else None
        self._sandbox.record(pending.cmd, self._ws, pending.mode, None, self._backend,
                             TIMED_OUT if timed_out else RAN, pending.started,
                             exit_code=exit_code, signal=signal, detail=pending.detail)


@dataclass
class _Pending:
    cmd: SandboxCommand
    mode: str
    started: float
    detail: dict[str, object]
    #: What the command's status line is printed after, known to this process alone.
    token: str
    #: The token of the status line the middleware asked for after it.
    marker: str | None = None
    asked: threading.Event = field(default_factory=threading.Event)
    recorded: bool = False


class _GatedStdin:
    """The shell's stdin: every command written to it passes the gate, and the
    middleware's status line is answered by the gate's own framing.

    `exit` alone is both how the middleware ends the shell and a command a
    model may send; the middleware follows a command with its status line
    before it flushes, and its own `exit` with nothing, so the write is held
    until one or the other shows which it was: the model's is gated and
    recorded like any command.
    """

    def __init__(self, raw: Any, gate: _CommandGate) -> None:
        self._raw, self._gate = raw, gate
        self._exit_held = False

    def write(self, text: str) -> int:
        if self._exit_held:
            self._exit_held = False
            self._raw.write(self._gate(_EXIT))
        if text == _EXIT:
            self._exit_held = True
        elif not self._gate.status_line_asked(text):
            # The status line never reaches the shell: only the gate answers it.
            self._raw.write(self._gate(text))
        return len(text)

    def flush(self) -> None:
        if self._exit_held:
            self._exit_held = False
            self._gate.shell_stopping()
            self._raw.write(_STOP)
        self._raw.flush()

    def close(self) -> None:
        try:
            self.flush()
        except (OSError, ValueError):
            pass  # the shell is gone already
        self._raw.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


#: The most of one line handed to the middleware at once where the policy sets
#: no `max_output_bytes`.
LINE_LIMIT = 64 * 1024
#: What a cut line keeps back for the next piece: more than a status line, so a
#: cut never splits one.
_STATUS_LINE_ROOM = 128


class _BoundedLines:
    """One of the shell's output streams, read a line at a time, a long line in pieces.

    The middleware reads whole lines: a command printing gigabytes without a
    newline grew this process by as much, however little of it the
    middleware's output limit then kept.
    """

    def __init__(self, raw: Any, limit: int) -> None:
        self._raw, self._limit = raw, max(limit, 2 * _STATUS_LINE_ROOM)

    def readline(self, *args: Any) -> str:
        return str(self._raw.readline(self._limit))

    def __iter__(self) -> _BoundedLines:
        return self

    def __next__(self) -> str:
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class _WatchedStdout(_BoundedLines):
    """The shell's stdout as the middleware reads it, each line shown to the gate."""

    def __init__(self, raw: Any, gate: _CommandGate, limit: int) -> None:
        super().__init__(raw, limit)
        self._gate = gate
        self._ahead: list[str] = []
        #: The end of a cut line, read again with the next piece.
        self._kept = ""

    def readline(self, *args: Any) -> str:
        while not self._ahead:
            piece = super().readline()
            line, self._kept = self._kept + piece, ""
            if not piece:
                if line:
                    self._ahead = [line]
                    break
                self._gate.shell_ended()
                return line
            if not line.endswith("\n"):
                line, self._kept = line[:-_STATUS_LINE_ROOM], line[-_STATUS_LINE_ROOM:]
                if not line:
                    continue  # an empty line is the end of the stream to the middleware
            self._ahead = self._gate.stdout_line(line)
        return self._ahead.pop(0)



def _popen(run: Any) -> tuple[subprocess.Popen[str], threading.Event]:
    """Perform the Run effect as the text-mode Popen the middleware reads from.

    The event is set once the shell has ended and its cleanup has run.
    """
    launch = run.launch
    if any(child != parent for child, parent in launch.extra_fds.items()):
        raise SandboxUnavailable("this driver moves descriptors; Popen can only pass them on")
    # argv from the driver, never a shell string. The middleware starts and
    # restarts its shell from whatever thread runs the agent's step -- a
    # thread pool's, which ends with the step -- and bwrap dies with the
    # thread that started it: the shell was killed before its next command.
    proc = from_lasting_thread(
        subprocess.Popen, launch.argv, env=launch.env, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8",
        errors="replace", bufsize=1, start_new_session=True, close_fds=True,
        pass_fds=tuple(launch.extra_fds))
    return proc, _cleanup_after_exit(proc, launch.cleanup)


#: Every shell whose cleanup has not run yet, for `_end_shells` at exit.
_PENDING: set[tuple[subprocess.Popen[str], threading.Event]] = set()
_AT_EXIT: list[bool] = []


def _cleanup_after_exit(proc: subprocess.Popen[str], cleanup: Any) -> threading.Event:
    """Undo what the driver prepared once the shell is gone, without reaping it.

    The Popen belongs to the middleware, which waits on it; a pidfd becomes
    readable at exit and leaves the zombie for Popen.wait to collect.
    """
    import select

    done = threading.Event()
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        done.set()
        return done  # no pidfd: the next command's guard sweeps what this shell left
    if not _AT_EXIT:  # once: _PENDING empties whenever no shell is ending
        import atexit

        atexit.register(lambda: _end_shells(list(_PENDING.copy())))
        _AT_EXIT.append(True)
    shell = (proc, done)
    _PENDING.add(shell)

    def wait() -> None:
        try:
            select.select([pidfd], [], [])
            cleanup()
        finally:
            os.close(pidfd)
            _PENDING.discard(shell)
            done.set()

    threading.Thread(target=wait, name=f"stockade-cleanup-{proc.pid}", daemon=True).start()
    return done


#: How long ending the shells waits for each one's cleanup.
CLEANUP_WAIT = 30.0


def _end_shells(shells: list[tuple[subprocess.Popen[str], threading.Event]]) -> None:
    """Kill the shells that still run and wait for every one's cleanup.

    The cleanup runs on a daemon thread, which the interpreter stops at exit:
    a script that ended right after its agent left what the shell wrote
    (a `.vscode/tasks.json`, a hook) unswept until some later command came
    along. atexit runs before daemon threads are stopped, so waiting here
    lets them finish.
    """
    for proc, _ in shells:
        if proc.poll() is None:
            proc.kill()
    for _, done in shells:
        done.wait(timeout=CLEANUP_WAIT)


def _short_hash(text: str) -> str:
    from ..paths import sha256_hex

    return sha256_hex(text.encode())[:12]
