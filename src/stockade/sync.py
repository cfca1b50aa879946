"""`SyncWorkspaceSandbox`: the pipeline driven by plain blocking calls.

The CLI's `run` path uses this, so nothing here may import asyncio.
"""

from __future__ import annotations

import _thread

from .context import current_session
from .core import Performers, Run, SandboxCore, SessionWorkspace, make_core, output
from .errors import InvalidCommand

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

    from .command import SandboxCommand, SandboxOutput
    from .config import SandboxConfig
    from .process import BackgroundProcess, Outcome


def perform_run(run: Run) -> Outcome:
    """Run a prepared launch to completion, then undo what the driver prepared."""
    launch = run.launch
    try:
        proc = launch.start()
        outcome = proc.communicate(run.stdin, timeout=run.timeout, max_output=run.max_output)
    finally:
        launch.cleanup()
    return outcome


def perform_start(run: Run, core: SandboxCore, ws: SessionWorkspace) -> BackgroundProcess:
    from .process import BackgroundProcess

    launch = run.launch

    def on_exit(proc: BackgroundProcess) -> None:
        core.untrack(ws, proc)
        launch.cleanup()

    try:
        started = launch.start()
    except BaseException:
        launch.cleanup()
        raise
    proc = BackgroundProcess(started, stdin=run.stdin, window=run.max_output, on_exit=on_exit)
    core.track(ws, proc)
    return proc


class SyncWorkspaceSandbox:
    """Blocking twin of `WorkspaceSandbox`; same pipeline, same ledger, same errors."""

    def __init__(self, config: SandboxConfig | None = None, **options: Any) -> None:
        """Options: driver, approval (ApprovalGate), hooks, mode_source, env, ledger."""
        self.core = make_core(config, **options)
        self._lock = _thread.allocate_lock()

    def open_session(self, session_id: str, workspace: str | None = None) -> SessionWorkspace:
        """Bind a session to an existing directory (or provision one when None)."""
        return self.session(session_id, workspace)

    def session(self, session_id: str | None = None, workspace: str | None = None,
                *, ephemeral_tmp: bool = False) -> SessionWorkspace:
        """The session's workspace: looked up, or created once (double-checked)."""
        sid = session_id or current_session()
        if not sid:
            raise InvalidCommand("no session id: pass one, or run inside session_scope()")
        ws = self.core.sessions.get(sid)
        if ws is not None:
            return ws
        with self._lock:
            ws = self.core.sessions.get(sid)
            if ws is None:
                ws = self.core.new_session(sid, workspace, ephemeral_tmp=ephemeral_tmp)
            return ws

    def execute(self, command: SandboxCommand) -> SandboxOutput:
        ws = self.session(command.session_id)
        core = self.core
        return output(core.drive(core.pipeline(command, ws), Performers(core.ask, perform_run)))

    def start(self, command: SandboxCommand) -> BackgroundProcess:
        from .process import BackgroundProcess

        ws = self.session(command.session_id)
        core = self.core
        proc = core.drive(core.pipeline(command, ws, background=True),
                          Performers(core.ask, lambda run: perform_start(run, core, ws)))
        assert isinstance(proc, BackgroundProcess)
        return proc

    def close_session(self, session_id: str) -> None:
        self.core.close_session(session_id)

    def close(self) -> None:
        self.core.close()

    def __enter__(self) -> SyncWorkspaceSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
