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

`ShellTool` is a hosted tool, which only Responses-API models accept. For
a Chat Completions model, `stockade_function_tool(executor)` is the same
shell as an ordinary function tool:

    agent = Agent(name="coder", model=chat_model, tools=[stockade_function_tool(shell)])
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

__all__ = ["StockadeShellExecutor", "stockade_function_tool"]


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


_PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "commands": {"type": "array", "items": {"type": "string"},
                     "description": "Shell commands, run one after another with /bin/sh -c"},
        "timeout_ms": {"type": ["integer", "null"],
                       "description": "Per-command timeout in milliseconds, or null"},
    },
    "required": ["commands", "timeout_ms"],
    "additionalProperties": False,
}


def stockade_function_tool(executor: StockadeShellExecutor, *, name: str = "shell",
                           description: str | None = None,
                           max_output_length: int | None = 20000) -> Any:
    """An `agents.FunctionTool` that runs commands through `executor`'s stockade session.

    For models without hosted tools (the Chat Completions API). The model
    reads, per command, its stdout, stderr (with stockade's hint when the
    sandbox blocked it) and outcome, as text.
    """
    import json

    from agents import FunctionTool

    async def invoke(_ctx: Any, raw: str) -> str:
        try:
            args = json.loads(raw or "{}")
            commands = args.get("commands")
            if isinstance(commands, str):
                commands = [commands]
            if not isinstance(commands, list) or not all(isinstance(c, str) for c in commands):
                raise ValueError("'commands' must be a list of strings")
            timeout_ms = args.get("timeout_ms")
            if timeout_ms is not None and not isinstance(timeout_ms, int):
                raise ValueError("'timeout_ms' must be an integer or null")
        except (ValueError, AttributeError) as exc:
            return f"stockade: invalid arguments: {exc}"
        if not executor._opened:
            await executor.sandbox.open_session(executor.session_id, executor.workspace)
            executor._opened = True
        timeout = timeout_ms / 1000.0 if timeout_ms else executor.default_timeout
        parts = []
        for command in commands:
            out = await executor._one(command, timeout, max_output_length)
            outcome = out.outcome
            status = ("timed out" if outcome.type == "timeout"
                      else f"exit status {outcome.exit_code}")
            parts.append(f"$ {command}\n{out.stdout}"
                         + (f"[stderr]\n{out.stderr}" if out.stderr else "")
                         + f"[{status}]\n")
        return "".join(parts)

    return FunctionTool(
        name=name,
        description=description or (
            "Run shell commands in the project workspace, inside stockade's sandbox. "
            "Commands the sandbox blocks fail with a hint saying why."),
        params_json_schema=_PARAMS, on_invoke_tool=invoke, strict_json_schema=True)


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
