"""`SyncWorkspaceSandbox`: the pipeline driven by plain blocking calls.

The CLI's `run` path uses this, so nothing here may import asyncio.
"""

from __future__ import annotations

import _thread

from .context import current_session
from .core import Performers, Run, SandboxCore, SessionWorkspace, make_core, output
from .errors import InvalidCommand
from .hooks import run_before_hooks

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, TypeVar

    from .approval import ApprovalGate
    from .capabilities import SandboxCapabilities
    from .command import SandboxCommand, SandboxOutput
    from .config import SandboxConfig
    from .drivers import Driver
    from .hooks import HookDecision
    from .ledger import Ledger
    from .process import BackgroundProcess, Outcome
    from .profile import Profile

    T = TypeVar("T")


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


class SandboxBase:
    """What both shells answer besides running a command: settings, sessions and the
    pipeline's own decisions, so that no front end reaches into `SandboxCore`, whose
    state a caller could change under the pipeline's feet."""

    core: SandboxCore

    @property
    def config(self) -> SandboxConfig:
        """The settings this sandbox was built with."""
        return self.core.config

    @property
    def env(self) -> Mapping[str, str]:
        """The host environment the sandbox reads (home, runtime dirs), not a command's."""
        return self.core.env

    @property
    def approval(self) -> ApprovalGate:
        """The gate that remembers what a person approved and asks for more."""
        return self.core.gate

    @property
    def ledger(self) -> Ledger:
        """Where every command's record goes."""
        return self.core.ledger

    def find_session(self, session_id: str) -> SessionWorkspace | None:
        """The open session of that id, or None; never creates one."""
        return self.core.sessions.get(session_id)

    def session_ids(self) -> list[str]:
        """The ids of the sessions open now, a copy safe to close them while iterating."""
        return list(self.core.sessions)

    def mode_for(self, ws: SessionWorkspace) -> str:
        """The mode the session's next command runs in: asked anew for each command."""
        return self.core.mode_for(ws)

    def baseline(self, ws: SessionWorkspace, mode: str | None = None) -> SandboxCapabilities:
        """What `mode` (the session's own when None) gives without approval, with the
        network as granted now."""
        return self.core.baseline(self.core.mode_for(ws) if mode is None else mode, ws)

    def resolve_cwd(self, ws: SessionWorkspace, cwd: str | None) -> str:
        """`cwd` resolved inside the workspace; CapabilityDenied when it leads outside."""
        return self.core.validate_cwd(ws, cwd)

    def command_policy(self, cmd: SandboxCommand, session_id: str
                       ) -> tuple[HookDecision | None, tuple[str, ...]]:
        """(denial or None, warnings) of the before-hooks the pipeline runs for `cmd`."""
        return run_before_hooks(self.core.hooks, cmd, session_id)

    def record(self, cmd: SandboxCommand, ws: SessionWorkspace, mode: str,
               caps: SandboxCapabilities | None, backend: str, outcome: str, started: float,
               *, exit_code: int | None = None, signal: int | None = None,
               denied: bool = False, detail: dict[str, object] | None = None,
               cwd: str | None = None) -> None:
        """One ledger record in the pipeline's shape, for a command a front end decided
        or ran outside the pipeline (`started` is a `time.monotonic()` reading)."""
        self.core.audit(cmd, ws, mode, caps, backend, outcome, started, exit_code=exit_code,
                        signal=signal, denied=denied, detail=detail, cwd=cwd)

    def driver_for(self, ws: SessionWorkspace, sandboxed: bool) -> Driver:
        """The driver the session's commands run under: the one the pipeline uses."""
        return self.core.driver(sandboxed, ws.cwd)

    def profile_for(self, cmd: SandboxCommand, ws: SessionWorkspace, mode: str,
                    caps: SandboxCapabilities, cwd: str, driver: Driver) -> Profile:
        """The profile the pipeline would give a sandboxed `cmd` under `driver`, with no
        proxy endpoint: what `stockade explain` shows without running anything."""
        return self.core.command_profile(cmd, ws, mode, caps, cwd, driver)


class SyncWorkspaceSandbox(SandboxBase):
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
        return self.execute_with(command, perform_run)

    def start(self, command: SandboxCommand) -> BackgroundProcess:
        from .process import BackgroundProcess

        ws = self.session(command.session_id)
        core = self.core
        proc = core.drive(core.pipeline(command, ws, background=True),
                          Performers(core.ask, lambda run: perform_start(run, core, ws)))
        assert isinstance(proc, BackgroundProcess)
        return proc

    def execute_with(self, command: SandboxCommand, perform: Callable[[Run], Outcome]
                     ) -> SandboxOutput:
        """`execute`, with `perform` running the prepared launch where pipes will not do
        (a pty, the terminal, a stoppable supervision); it owns `launch.cleanup()`."""
        ws = self.session(command.session_id)
        core = self.core
        return output(core.drive(core.pipeline(command, ws), Performers(core.ask, perform)))

    def start_with(self, command: SandboxCommand, perform: Callable[[Run], T]) -> T:
        """`start`, with `perform` starting the prepared launch; returns what it returns,
        and the caller owns the process and the launch's cleanup."""
        ws = self.session(command.session_id)
        core = self.core
        started = core.drive(core.pipeline(command, ws, background=True),
                             Performers(core.ask, perform))
        return started  # type: ignore[return-value]

    def close_session(self, session_id: str) -> None:
        self.core.close_session(session_id)

    def close(self) -> None:
        self.core.close()

    def __enter__(self) -> SyncWorkspaceSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
