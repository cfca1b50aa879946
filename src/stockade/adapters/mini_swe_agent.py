"""mini-swe-agent: an environment whose every action runs inside stockade.

mini-swe-agent's `local` environment runs the model's commands with
`subprocess` on the host. Selected from its config instead,

    environment:
      environment_class: stockade.adapters.mini_swe_agent.StockadeEnvironment
      cwd: /path/to/project
      mode: workspace-write

each action is `bash -c <command>` in one stockade session bound to `cwd`
(the same boundary, policy and ledger as `stockade run`). What the model
reads is what `local` gives it: the output (stdout, then stderr, then
stockade's hint when the sandbox stopped something) and the return code; a
timeout is returncode -1 with `exception_info`, and a command stockade
refuses is its exit status (77, 125, ...) with the reason. Nothing runs
outside the boundary when it cannot be built.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

try:
    from minisweagent.environments.local import LocalEnvironment, LocalEnvironmentConfig
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "stockade.adapters.mini_swe_agent needs mini-swe-agent: "
        "pip install 'stockade[mini-swe-agent]'") from exc

from ..command import SandboxCommand
from ..errors import CommandTimeout, SandboxError

__all__ = ["StockadeEnvironment", "StockadeEnvironmentConfig"]


class StockadeEnvironmentConfig(LocalEnvironmentConfig):
    #: read-only, workspace-write or full-access; None: the config's (read-only).
    mode: str | None = "workspace-write"
    #: A stockade config file to use instead of the usual ones.
    config: str | None = None
    session: str = ""


class StockadeEnvironment(LocalEnvironment):
    """`local`'s interface, with stockade's boundary around each action."""

    def __init__(self, *, config_class: type = StockadeEnvironmentConfig, **kwargs: Any) -> None:
        super().__init__(config_class=config_class, **kwargs)
        from ..config import load_config
        from ..sync import SyncWorkspaceSandbox

        workspace = os.path.realpath(self.config.cwd or os.getcwd())
        self.workspace = workspace
        stock = load_config(cwd=workspace, paths=[self.config.config] if self.config.config
                            else None, mode=self.config.mode)
        self._sandbox = SyncWorkspaceSandbox(stock)
        self._session = self.config.session or f"mini-swe-agent-{os.getpid()}-{id(self):x}"
        self._sandbox.session(self._session, workspace)
        self._closer = weakref.finalize(self, self._sandbox.close)

    def execute(self, action: dict[str, Any], cwd: str = "", *,
                timeout: int | None = None) -> dict[str, Any]:
        command = action.get("command", "")
        cmd = SandboxCommand("/bin/bash", ["-c", command], session_id=self._session,
                             cwd=cwd or None, env=dict(self.config.env) or None,
                             timeout=timeout or self.config.timeout)
        try:
            out = self._sandbox.execute(cmd)
        except CommandTimeout as exc:
            partial = exc.output
            text = _text(partial) if partial is not None else ""
            output: dict[str, Any] = {
                "output": text, "returncode": -1,
                "exception_info": f"An error occurred while executing the command: {exc}",
                "extra": {"exception_type": "CommandTimeout", "exception": str(exc)}}
        except SandboxError as exc:
            message = " ".join(str(exc).split())
            output = {"output": f"stockade: {type(exc).__name__}: {message}\n",
                      "returncode": exc.exit_status, "exception_info": "",
                      "extra": {"exception_type": type(exc).__name__, "exception": message}}
        else:
            output = {"output": _text(out), "returncode": out.returncode, "exception_info": ""}
        self._check_finished(output)
        return output

    def close(self) -> None:
        """End the session: what it started, its /tmp, the ledger."""
        self._closer()


def _text(out: Any) -> str:
    text: str = (out.stdout + out.stderr).decode("utf-8", "replace")
    if out.denial_hint:
        text += f"stockade: {out.denial_hint}\n"
    return text
