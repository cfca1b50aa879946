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
"""

from __future__ import annotations

import os
import subprocess
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
from ..errors import SandboxUnavailable

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

    def spawn(self, *, workspace: Path, env: Mapping[str, str],
              command: Sequence[str]) -> subprocess.Popen[str]:
        from ..core import Approve

        sandbox = self._get_sandbox(str(workspace))
        key = _short_hash(os.path.realpath(workspace))
        session_id = f"{self.session_prefix}-{key}"
        ws = sandbox.session(session_id, str(workspace), ephemeral_tmp=True)
        argv = list(command)
        cmd = SandboxCommand(argv[0], argv[1:], session_id=session_id, env=dict(env))
        gen = sandbox.core.pipeline(cmd, ws, background=True)
        value: object = None
        while True:
            try:
                effect = gen.send(value)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            value = sandbox._ask(effect) if isinstance(effect, Approve) else _popen(effect)

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
        """Close the ledger and forget the sessions (the shells end with the middleware)."""
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None


def _popen(run: Any) -> subprocess.Popen[str]:
    """Perform the Run effect as the text-mode Popen the middleware reads from."""
    launch = run.launch
    if any(child != parent for child, parent in launch.extra_fds.items()):
        raise SandboxUnavailable("this driver moves descriptors; Popen can only pass them on")
    # argv from the driver, never a shell string.
    proc = subprocess.Popen(
        launch.argv, env=launch.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, encoding="utf-8", errors="replace", bufsize=1,
        start_new_session=True, close_fds=True, pass_fds=tuple(launch.extra_fds),
    )
    _cleanup_after_exit(proc.pid, launch.cleanup)
    return proc


def _cleanup_after_exit(pid: int, cleanup: Any) -> None:
    """Undo what the driver prepared once the shell is gone, without reaping it.

    The Popen belongs to the middleware, which waits on it; a pidfd becomes
    readable at exit and leaves the zombie for Popen.wait to collect.
    """
    import select
    import threading

    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return  # the empty placeholders stay; they are harmless

    def wait() -> None:
        try:
            select.select([pidfd], [], [])
            cleanup()
        finally:
            os.close(pidfd)

    threading.Thread(target=wait, name=f"stockade-cleanup-{pid}", daemon=True).start()


def _short_hash(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:12]
