"""The framework adapters against the real frameworks, with real sandboxes.

Each framework is driven end to end by its own runner with a scripted model
(no network, no API key): the framework decides to call its shell tool, the
adapter runs the command in stockade, and the test checks the effect on the
host and what the model was shown.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stockade.config import SandboxConfig

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def dirs(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    # /var/tmp: the sandbox has its own /tmp, where a host path would not exist.
    base = Path(tempfile.mkdtemp(prefix="stockade-adapters-", dir="/var/tmp"))
    (base / "ws").mkdir()
    (base / "outside").mkdir()
    monkeypatch.setenv("XDG_DATA_HOME", str(base / "data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(base / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(base / "config"))
    yield base / "ws", base / "outside"
    shutil.rmtree(base, ignore_errors=True)


# -- OpenAI Agents SDK ---------------------------------------------------------------

def _shell_request(commands: list[str], timeout_ms: int | None = None) -> Any:
    agents = pytest.importorskip("agents")
    return agents.ShellCommandRequest(
        ctx_wrapper=agents.RunContextWrapper(None),
        data=agents.ShellCallData(call_id="call_1", action=agents.ShellActionRequest(
            commands=commands, timeout_ms=timeout_ms)))


def test_openai_executor_runs_each_command(dirs: tuple[Path, Path]) -> None:
    pytest.importorskip("agents")
    from stockade.adapters.openai_agents import StockadeShellExecutor

    ws, outside = dirs

    async def go() -> Any:
        async with StockadeShellExecutor(ws, mode="workspace-write") as shell:
            return await shell(_shell_request([
                "echo made > made && cat made",
                f"echo x > {outside}/f",
                "echo carried > /tmp/t",
                "cat /tmp/t",
            ]))

    result = asyncio.run(go())
    made, blocked, _, carried = result.output
    assert (made.stdout, made.exit_code) == ("made\n", 0)
    assert blocked.exit_code != 0
    assert "Read-only file system" in blocked.stderr
    assert "stockade: blocked by the sandbox:" in blocked.stderr
    assert carried.stdout == "carried\n"  # one session: /tmp carries over
    assert (ws / "made").exists() and not (outside / "f").exists()


def test_openai_executor_timeout_and_refusal(dirs: tuple[Path, Path]) -> None:
    pytest.importorskip("agents")
    from stockade.adapters.openai_agents import StockadeShellExecutor

    ws, _ = dirs

    async def go(executor: StockadeShellExecutor, commands: list[str], ms: int | None) -> Any:
        async with executor as shell:
            return await shell(_shell_request(commands, ms))

    timed = asyncio.run(go(StockadeShellExecutor(ws), ["echo early; sleep 30"], 1000))
    out = timed.output[0]
    assert out.status == "timeout" and out.exit_code is None
    assert out.stdout == "early\n"
    assert "stockade: CommandTimeout:" in out.stderr

    broken = SandboxConfig(bwrap="/nonexistent/bwrap")
    refused = asyncio.run(go(StockadeShellExecutor(ws, config=broken), ["true"], None))
    out = refused.output[0]
    assert out.exit_code == 125
    assert out.stderr.startswith("stockade: SandboxUnavailable: configured bwrap")


def test_openai_agents_runner_end_to_end(dirs: tuple[Path, Path]) -> None:
    agents = pytest.importorskip("agents")
    from openai.types.responses import (
        ResponseFunctionShellToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )
    from openai.types.responses.response_function_shell_tool_call import Action

    from stockade.adapters.openai_agents import StockadeShellExecutor

    ws, outside = dirs
    seen: list[Any] = []

    class ScriptedModel(agents.Model):  # type: ignore[misc]
        """Turn 1: call the shell tool. Turn 2: repeat what the tool returned."""

        async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                               **kwargs: Any) -> Any:
            seen.append(input)
            usage = agents.Usage()
            if len(seen) == 1:
                call = ResponseFunctionShellToolCall(
                    id="sh_1", call_id="call_1", type="shell_call", status="completed",
                    action=Action(commands=["echo from-the-sandbox > out.txt; cat out.txt",
                                            f"touch {outside}/escape"]))
                return agents.ModelResponse(output=[call], usage=usage, response_id=None)
            outputs = [item for item in input if isinstance(item, dict)
                       and item.get("type") == "shell_call_output"]
            text = repr(outputs)
            message = ResponseOutputMessage(
                id="msg_1", type="message", role="assistant", status="completed",
                content=[ResponseOutputText(type="output_text", text=text, annotations=[])])
            return agents.ModelResponse(output=[message], usage=usage, response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    async def go() -> Any:
        async with StockadeShellExecutor(ws, mode="workspace-write") as shell:
            agent = agents.Agent(name="coder", model=ScriptedModel(),
                                 tools=[agents.ShellTool(executor=shell)])
            return await agents.Runner.run(agent, "write out.txt",
                                           run_config=agents.RunConfig(tracing_disabled=True))

    result = asyncio.run(go())
    assert (ws / "out.txt").read_text() == "from-the-sandbox\n"
    assert not (outside / "escape").exists()
    assert "from-the-sandbox" in result.final_output
    assert "blocked by the sandbox" in result.final_output


# -- LangChain -----------------------------------------------------------------------

def test_langchain_policy_spawns_a_sandboxed_shell(dirs: tuple[Path, Path]) -> None:
    pytest.importorskip("langchain.agents.middleware")
    from stockade.adapters.langchain import StockadeExecutionPolicy

    ws, outside = dirs
    policy = StockadeExecutionPolicy(mode="workspace-write")
    try:
        proc = policy.spawn(workspace=ws, env={"GREETING": "hello"}, command=["/bin/bash"])
        proc.stdin.write(
            f'echo "$GREETING $STOCKADE_SANDBOX"; touch inside {outside}/f; exit 3\n')
        proc.stdin.flush()
        assert proc.stdout.readline() == "hello bubblewrap\n"
        # Written around the gate (straight to the pipe): refused, never run.
        os.write(proc.stdin.fileno(), b"touch around-the-gate\n")
        _, err = proc.communicate(timeout=30)
    finally:
        policy.close()
    # A command's `exit` ends its own bash; the shell ends when its input does.
    assert proc.returncode == 0
    assert "this command ended its shell (status 3)" in err
    assert "went around the gate and was not run" in err
    assert "Read-only file system" in err
    assert (ws / "inside").exists() and not (outside / "f").exists()
    assert not (ws / "around-the-gate").exists()


def test_langchain_kill_ends_everything_the_shell_started(dirs: tuple[Path, Path]) -> None:
    pytest.importorskip("langchain.agents.middleware")
    from stockade.adapters.langchain import StockadeExecutionPolicy

    ws, _ = dirs
    marker = f"{uuid.uuid4().int % 10**6}.5"
    policy = StockadeExecutionPolicy()
    proc = policy.spawn(workspace=ws, env={}, command=["/bin/bash"])
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(f"setsid sleep {marker} & echo started\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == "started\n"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not _running(f"sleep\0{marker}"):
            time.sleep(0.05)
        assert _running(f"sleep\0{marker}"), _why_not_running(proc)
        proc.kill()
        proc.wait(timeout=10)
    finally:
        policy.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _running(f"sleep\0{marker}"):
        time.sleep(0.1)
    assert not _running(f"sleep\0{marker}")


def _why_not_running(proc: Any) -> str:
    """What the shell said and whether it lives, for a failure seen once in ~25 full runs."""
    import select

    err = ""
    if proc.stderr is not None and select.select([proc.stderr], [], [], 1.0)[0]:
        err = os.read(proc.stderr.fileno(), 4096).decode("utf-8", "replace")
    return f"the sleep never started; shell returncode={proc.poll()!r}, stderr={err!r}"


def _running(marker: str) -> bool:
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                    return True
            except OSError:
                pass
    return False


def _scripted_agent_run(ws: Path, shell_calls: list[dict[str, Any]],
                        config: SandboxConfig | None = None) -> list[str]:
    """A real `create_agent` run whose model makes these shell tool calls, one per
    turn, through stockade: what each tool call showed the model."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import ShellToolMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    from stockade.adapters.langchain import StockadeExecutionPolicy

    class ScriptedChat(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    model = ScriptedChat(messages=iter([
        *(AIMessage(content="", tool_calls=[{"name": "shell", "id": f"call_{i}", "args": args}])
          for i, args in enumerate(shell_calls)),
        AIMessage(content="done"),
    ]))
    policy = StockadeExecutionPolicy(mode="workspace-write", config=config, command_timeout=20)
    agent = create_agent(model, middleware=[ShellToolMiddleware(
        workspace_root=ws, execution_policy=policy)])
    try:
        state = agent.invoke({"messages": [{"role": "user", "content": "go"}]})
    finally:
        policy.close()
    return [str(m.content) for m in state["messages"] if m.type == "tool"]


def test_langchain_agent_end_to_end(dirs: tuple[Path, Path]) -> None:
    pytest.importorskip("langchain.agents.middleware")
    ws, outside = dirs
    tool_messages = _scripted_agent_run(ws, [
        {"command": f"echo lc-ok > made.txt; touch {outside}/escape; cat made.txt"}])
    assert len(tool_messages) == 1
    shown = tool_messages[0]
    assert "lc-ok" in shown
    assert "Read-only file system" in shown
    assert (ws / "made.txt").read_text() == "lc-ok\n"
    assert not (outside / "escape").exists()


def test_langchain_shell_restarted_in_a_tool_step_lives_past_the_step(
        dirs: tuple[Path, Path]) -> None:
    """The middleware restarts its shell inside a tool call, on the thread pool
    of that step, which ends with it: the shell must not end with that thread."""
    pytest.importorskip("langchain.agents.middleware")
    ws, _ = dirs
    shown = _scripted_agent_run(ws, [{"restart": True},
                                     {"command": "echo after-restart $((6*7))"}])
    assert len(shown) == 2, shown
    assert "after-restart 42" in shown[1], shown


def test_langchain_shell_started_from_a_thread_that_ends_lives_on(
        dirs: tuple[Path, Path]) -> None:
    pytest.importorskip("langchain.agents.middleware")
    import threading

    from stockade.adapters.langchain import StockadeExecutionPolicy

    ws, _ = dirs
    policy = StockadeExecutionPolicy()
    started: list[Any] = []
    worker = threading.Thread(target=lambda: started.append(
        policy.spawn(workspace=ws, env={}, command=["/bin/bash"])))
    worker.start()
    worker.join()
    proc = started[0]
    try:
        time.sleep(0.5)  # bwrap's parent-death signal, were it armed, has fired by now
        assert proc.poll() is None, f"the shell ended with the thread: {proc.poll()}"
        proc.stdin.write("echo alive $((40+2))\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == "alive 42\n"
    finally:
        proc.kill()
        proc.wait(timeout=10)
        policy.close()


# A script that leaves an editor task behind through its agent's shell and ends
# at once, its shell still running: nothing ends the shell but the exit.
EXITS_WITH_ITS_SHELL = """
import sys, time
from pathlib import Path
from stockade.adapters.langchain import StockadeExecutionPolicy
ws = Path(sys.argv[1])
policy = StockadeExecutionPolicy(mode="workspace-write")
proc = policy.spawn(workspace=ws, env={}, command=["/bin/bash"])
# `;`: the guard's watch may take .vscode away before the write lands, and the
# shell must still answer.
proc.stdin.write("mkdir -p .vscode; echo '{}' > .vscode/tasks.json; echo made\\n")
proc.stdin.flush()
assert proc.stdout.readline() == "made\\n"
print("exiting", flush=True)
"""


def test_langchain_a_script_that_exits_with_its_shell_running_leaves_nothing(
        dirs: tuple[Path, Path]) -> None:
    pytest.importorskip("langchain.agents.middleware")
    import subprocess
    import sys

    ws, _ = dirs
    res = subprocess.run([sys.executable, "-c", EXITS_WITH_ITS_SHELL, str(ws)],
                         capture_output=True, timeout=60, env=os.environ.copy())
    assert res.stdout == b"exiting\n", res.stderr.decode()
    assert not (ws / ".vscode").exists(), "the shell's .vscode/tasks.json was left live"


def _langchain_session(ws: Path, policy: Any) -> Any:
    from langchain.agents.middleware.shell_tool import ShellSession

    session = ShellSession(ws, policy, ("/bin/bash",), {})
    session.start()
    return session


def test_langchain_every_command_passes_the_policy_and_is_recorded(
        dirs: tuple[Path, Path]) -> None:
    pytest.importorskip("langchain.agents.middleware")
    from stockade.adapters.langchain import StockadeExecutionPolicy

    ws, _ = dirs
    (ws / "keep").write_text("still here\n")
    policy = StockadeExecutionPolicy(mode="workspace-write")
    session = _langchain_session(ws, policy)
    try:
        denied = session.execute("rm -rf --no-preserve-root /", timeout=20)
        ran = session.execute("echo one $((20+22))", timeout=20)
        rows = policy._sandbox.core.ledger.query(last=50)
    finally:
        session.stop(5)
        policy.close()
    assert denied.exit_code == 126
    assert "stockade denied this command" in denied.output
    assert (ws / "keep").read_text() == "still here\n"
    assert ran.exit_code == 0 and "one 42" in ran.output
    argvs = {(tuple(json_list(r["argv"])), r["outcome"]) for r in rows}
    assert (("/bin/bash", "-c", "rm -rf --no-preserve-root /"), "denied") in argvs
    assert (("/bin/bash", "-c", "echo one $((20+22))"), "ran") in argvs
    denial = next(r for r in rows if r["outcome"] == "denied")
    assert "stockade denied" in str(denial["detail"])


def json_list(value: object) -> list[str]:
    import json

    return list(value) if isinstance(value, list) else list(json.loads(str(value)))


def test_langchain_the_shell_comes_back_after_every_timeout(dirs: tuple[Path, Path]) -> None:
    pytest.importorskip("langchain.agents.middleware")
    from stockade.adapters.langchain import StockadeExecutionPolicy

    ws, _ = dirs
    policy = StockadeExecutionPolicy(mode="workspace-write", termination_timeout=2)
    session = _langchain_session(ws, policy)
    try:
        for i in range(4):
            assert session.execute("sleep 30", timeout=1).timed_out
            back = session.execute(f"echo back-$(({i}+1))", timeout=20)
            assert back.exit_code == 0 and f"back-{i + 1}" in back.output, back
    finally:
        session.stop(5)
        policy.close()


def _shell_records(ledger: Path) -> list[tuple[str, str, int | None, int | None]]:
    """(command, outcome, exit_code, signal) of each persistent-shell command in the
    ledger file, read with sqlite3 itself, in the order they were written."""
    import contextlib
    import json
    import sqlite3

    with contextlib.closing(sqlite3.connect(ledger)) as db:
        rows = db.execute("SELECT argv, outcome, exit_code, signal, detail FROM executions "
                          "ORDER BY id").fetchall()
    return [(json.loads(argv)[2], outcome, code, sig)
            for argv, outcome, code, sig, detail in rows
            if "persistent_shell" in (detail or "")]


def test_langchain_records_carry_each_commands_exit_status(dirs: tuple[Path, Path]) -> None:
    """Through a real agent run: each command's record holds the status the
    model was shown, 0 or not (the records carried none)."""
    pytest.importorskip("langchain.agents.middleware")
    ws, _ = dirs
    ledger = ws.parent / "ledger.db"
    config = SandboxConfig(mode="workspace-write", ledger=str(ledger))
    shown = _scripted_agent_run(ws, [
        {"command": "echo fine"},
        {"command": "ls no-such-file"},
        {"command": "sh -c 'exit 7'"},
        {"command": "rm -rf --no-preserve-root /"},
        {"command": "true"},
    ], config=config)
    assert "Exit code: 2" in shown[1] and "Exit code: 7" in shown[2], shown
    assert _shell_records(ledger) == [
        ("echo fine", "ran", 0, None),
        ("ls no-such-file", "ran", 2, None),
        ("sh -c 'exit 7'", "ran", 7, None),
        ("rm -rf --no-preserve-root /", "denied", None, None),
        ("true", "ran", 0, None),
    ]


def test_langchain_records_a_shell_ending_command_and_a_timeout(dirs: tuple[Path, Path]) -> None:
    """`exit 4` ends the shell before any status line: its record holds the
    shell's status. A command the middleware gives up on is a timeout."""
    pytest.importorskip("langchain.agents.middleware")
    from stockade.adapters.langchain import StockadeExecutionPolicy

    ws, _ = dirs
    ledger = ws.parent / "ledger.db"
    policy = StockadeExecutionPolicy(
        config=SandboxConfig(mode="workspace-write", ledger=str(ledger)), termination_timeout=2)
    session = _langchain_session(ws, policy)
    try:
        assert session.execute("sleep 30", timeout=1).timed_out
        assert session.execute("false", timeout=20).exit_code == 1
        session.execute("exit 4", timeout=2)
        session.restart()
        assert session.execute("echo back", timeout=20).exit_code == 0
    finally:
        session.stop(5)
        policy.close()
    assert _shell_records(ledger) == [
        ("sleep 30", "timeout", None, None),
        ("false", "ran", 1, None),
        ("exit 4", "ran", 4, None),
        ("echo back", "ran", 0, None),
    ]


def test_openai_function_tool_for_chat_completions_models(dirs: tuple[Path, Path]) -> None:
    agents = pytest.importorskip("agents")
    import json

    from stockade.adapters.openai_agents import StockadeShellExecutor, stockade_function_tool

    ws, outside = dirs

    async def go() -> tuple[str, str, str]:
        async with StockadeShellExecutor(ws, mode="workspace-write") as shell:
            tool = stockade_function_tool(shell)
            assert isinstance(tool, agents.FunctionTool) and tool.name == "shell"
            ctx = agents.RunContextWrapper(None)
            ran = await tool.on_invoke_tool(ctx, json.dumps({  # type: ignore[arg-type]
                "commands": ["echo fn-ok > made && cat made", f"touch {outside}/f"],
                "timeout_ms": None}))
            timed = await tool.on_invoke_tool(ctx, json.dumps(  # type: ignore[arg-type]
                {"commands": ["sleep 30"], "timeout_ms": 1000}))
            bad = await tool.on_invoke_tool(ctx, '{"commands": 3}')  # type: ignore[arg-type]
            return ran, timed, bad

    ran, timed, bad = asyncio.run(go())
    assert "$ echo fn-ok > made && cat made\nfn-ok\n[exit status 0]" in ran
    assert "Read-only file system" in ran and "stockade: blocked by the sandbox:" in ran
    assert (ws / "made").exists() and not (outside / "f").exists()
    assert "[timed out]" in timed and "stockade: CommandTimeout:" in timed
    assert bad.startswith("stockade: invalid arguments")
