"""`WorkspaceSandbox`: the async shell around the pipeline, and the `Sandbox` seam.

Runs the blocking process supervision in a worker thread so the event loop
stays free; a cancelled `execute` kills the command's whole tree before it
returns, so cancellation never leaves a sandboxed process running.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Protocol

from .context import current_session
from .core import Performers, Run, SandboxCore, SessionWorkspace, make_core, output
from .errors import InvalidCommand, SandboxDisabled
from .sync import SandboxBase, perform_start

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .command import SandboxCommand, SandboxOutput
    from .config import SandboxConfig
    from .process import BackgroundProcess, Outcome

    #: `progress(elapsed_seconds, output_bytes)`, awaited while a command runs.
    Progress = Callable[[float, int], Awaitable[None]]


class Sandbox(Protocol):
    """The single seam between exec-class tools and the operating system."""

    async def execute(self, command: SandboxCommand) -> SandboxOutput: ...


class WorkspaceSandbox(SandboxBase):
    """Per-session workspaces, capability checks with approval, OS confinement, audit."""

    def __init__(self, config: SandboxConfig | None = None, **options: Any) -> None:
        """Options: driver, approval (ApprovalGate), hooks, mode_source, env, ledger."""
        self.core: SandboxCore = make_core(config, **options)
        self._lock = asyncio.Lock()

    async def for_session(self, session_id: str | None = None,
                          workspace: str | None = None) -> SessionWorkspace:
        """Fast path: a dict hit. Slow path: under the lock, look again, then create."""
        sid = session_id or current_session()
        if not sid:
            raise InvalidCommand("no session id: pass one, or run inside session_scope()")
        ws = self.core.sessions.get(sid)
        if ws is not None:
            return ws
        async with self._lock:
            ws = self.core.sessions.get(sid)
            if ws is None:
                ws = self.core.new_session(sid, workspace)
            return ws

    async def open_session(self, session_id: str, workspace: str | None = None
                           ) -> SessionWorkspace:
        """Bind a session to an existing directory (or provision one when None)."""
        return await self.for_session(session_id, workspace)

    async def execute(self, command: SandboxCommand, *, progress: Progress | None = None
                      ) -> SandboxOutput:
        """Run `command` to completion. `progress(elapsed_s, output_bytes)` is awaited
        about once a second while it runs, so a caller can show that a long
        command is alive; cancelling the awaiting task ends its whole tree."""
        ws = await self.for_session(command.session_id)
        core = self.core
        return output(await core.adrive(core.pipeline(command, ws),
                                        Performers(core.aask,
                                                   lambda run: _run_async(run, progress))))

    async def start(self, command: SandboxCommand) -> BackgroundProcess:
        """Start a command that outlives this call; the session stops it when it closes."""
        from .process import BackgroundProcess

        ws = await self.for_session(command.session_id)
        core = self.core
        proc = await core.adrive(core.pipeline(command, ws, background=True),
                                 Performers(core.aask, lambda run: perform_start(run, core, ws)))
        assert isinstance(proc, BackgroundProcess)
        return proc

    async def close_session(self, session_id: str) -> None:
        await asyncio.to_thread(self.core.close_session, session_id)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.core.close)

    def close(self) -> None:
        """`aclose` for a caller that cannot await: a cancelled scope at shutdown,
        where an await would never run and the sessions' processes would outlive it."""
        self.core.close()

    async def __aenter__(self) -> WorkspaceSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


#: Seconds between two progress reports of a running command.
PROGRESS_INTERVAL = 1.0


async def _run_async(run: Run, progress: Progress | None = None) -> Outcome:
    from .process import OutputMeter

    launch = run.launch
    try:
        proc = launch.start()
        cancelled = False
        meter = OutputMeter()
        started = time.monotonic()
        task = asyncio.ensure_future(asyncio.to_thread(
            proc.communicate, run.stdin, timeout=run.timeout, max_output=run.max_output,
            cancelled=lambda: cancelled, meter=meter))
        try:
            while progress is not None and not task.done():
                await asyncio.wait([task], timeout=PROGRESS_INTERVAL)
                if not task.done():
                    try:
                        await progress(time.monotonic() - started, meter.bytes)
                    except Exception:
                        # A reporter that fails (a client gone mid-call) must
                        # not leave the command unsupervised: stop reporting.
                        progress = None
            outcome = await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
            proc.kill()
            await asyncio.wait([task])
            raise
    finally:
        launch.cleanup()
    return outcome


class NoopSandbox:
    """What `enabled = false` builds: every execute fails, loudly. Never a bypass."""

    async def execute(self, command: SandboxCommand) -> SandboxOutput:
        raise SandboxDisabled(
            "sandbox disabled: [sandbox] enabled = false, so this command was not run"
        )


def build_sandbox(config: SandboxConfig | None = None, **options: Any) -> Sandbox:
    """The production factory: a WorkspaceSandbox, or NoopSandbox when disabled."""
    if config is None:
        from .config import load_config

        config = load_config()
    if not config.enabled:
        return NoopSandbox()
    return WorkspaceSandbox(config, **options)
