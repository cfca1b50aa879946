"""OpenAI Agents SDK: a `ShellTool` executor that runs the model's commands in stockade.

    from agents import Agent, Runner, ShellTool
    from stockade.adapters.openai_agents import StockadeShellExecutor

    async with StockadeShellExecutor("/path/to/project", mode="workspace-write") as shell:
        agent = Agent(name="coder", tools=[ShellTool(executor=shell)])
        result = await Runner.run(agent, "run the tests and summarise the failures")

Each command of a `shell_call` runs with `/bin/sh -c` in the same stockade
session, one after another, so the session's private /tmp carries over
between them. A command the sandbox blocked gets stockade's one-line hint
appended to its stderr, which is what the model reads; a command stockade
refused to run at all (more than the mode, sandbox unavailable) gets the
same one line the CLI prints, and exit status of that kind.
"""

from __future__ import annotations

import os
from typing import Any

try:
    from agents import ShellCallOutcome, ShellCommandOutput, ShellCommandRequest, ShellResult
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "stockade.adapters.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'stockade[openai-agents]'"
    ) from exc

from ..command import SandboxCommand
from ..errors import CommandTimeout, SandboxError

__all__ = ["StockadeShellExecutor"]


class StockadeShellExecutor:
    """A `ShellExecutor` (the `executor=` of `agents.ShellTool`) backed by `WorkspaceSandbox`.

    `workspace` is the directory the agent works in (bound, not copied).
    `mode` overrides the configured mode (`read-only` by default). `config`
    is a `SandboxConfig` to use instead of the usual config files; other
    keyword options go to `WorkspaceSandbox` (for instance `approval=` with
    an `ApprovalGate`). Close it (`aclose()` or `async with`) to stop
    anything still running and remove the session's /tmp.
    """

    def __init__(self, workspace: str | os.PathLike[str], *, mode: str | None = None,
                 config: Any = None, session_id: str | None = None,
                 default_timeout: float | None = None, **options: Any) -> None:
        from ..config import load_config
        from ..workspace import WorkspaceSandbox

        self.workspace = os.path.abspath(os.fspath(workspace))
        if config is None:
            config = load_config(cwd=self.workspace, mode=mode)
        elif mode is not None:
            config.mode = mode
        self.sandbox = WorkspaceSandbox(config, **options)
        self.session_id = session_id or f"openai-agents-{os.getpid()}-{os.urandom(4).hex()}"
        self.default_timeout = default_timeout
        self._opened = False

    async def __call__(self, request: ShellCommandRequest) -> ShellResult:
        if not self._opened:
            await self.sandbox.open_session(self.session_id, self.workspace)
            self._opened = True
        action = request.data.action
        timeout = action.timeout_ms / 1000.0 if action.timeout_ms else self.default_timeout
        limit = action.max_output_length
        outputs = [await self._one(command, timeout, limit) for command in action.commands]
        return ShellResult(output=outputs, max_output_length=limit)

    async def _one(self, command: str, timeout: float | None, limit: int | None
                   ) -> ShellCommandOutput:
        try:
            cmd = SandboxCommand("/bin/sh", ["-c", command], session_id=self.session_id,
                                 timeout=timeout)
            out = await self.sandbox.execute(cmd)
        except CommandTimeout as exc:
            partial = exc.output
            stdout = _text(getattr(partial, "stdout", b""), limit)
            stderr = _text(getattr(partial, "stderr", b""), limit)
            return ShellCommandOutput(stdout=stdout, stderr=_append(stderr, _line(exc)),
                                      outcome=ShellCallOutcome(type="timeout"), command=command)
        except SandboxError as exc:
            return ShellCommandOutput(stderr=_line(exc), command=command,
                                      outcome=ShellCallOutcome(type="exit",
                                                               exit_code=exc.exit_status))
        stderr = _text(out.stderr, limit)
        if out.denial_hint:
            stderr = _append(stderr, f"stockade: {out.denial_hint}")
        return ShellCommandOutput(stdout=_text(out.stdout, limit), stderr=stderr,
                                  outcome=ShellCallOutcome(type="exit",
                                                           exit_code=out.returncode),
                                  command=command)

    async def aclose(self) -> None:
        await self.sandbox.aclose()

    async def __aenter__(self) -> StockadeShellExecutor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _line(exc: SandboxError) -> str:
    """The CLI's one line for a refusal, so a model and a person read the same words."""
    return f"stockade: {type(exc).__name__}: {' '.join(str(exc).split())}"


def _append(text: str, line: str) -> str:
    return f"{text}{'' if not text or text.endswith(chr(10)) else chr(10)}{line}\n"


def _text(data: bytes, limit: int | None) -> str:
    text = data.decode("utf-8", "replace")
    if limit is not None and limit >= 0 and len(text) > limit:
        return text[:limit]
    return text
