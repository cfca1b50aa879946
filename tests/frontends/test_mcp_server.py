"""`stockade mcp` driven as a real subprocess by the MCP SDK's own client.

Each test starts the server over stdio, runs real commands in real
sandboxes, and checks effects from outside (files on the host, processes in
/proc). Elicitation answers come from the client callback, the way a
person's click would reach the server.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

mcp = pytest.importorskip("mcp")
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp import types as mt  # noqa: E402

pytestmark = pytest.mark.timeout(90)

Answer = Callable[[str], str | None]


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """Under /var/tmp, not /tmp: the sandbox mounts its own /tmp, so a path
    "outside the workspace" under the host's /tmp would simply not exist inside,
    and a test about writing there could not fail."""
    path = Path(tempfile.mkdtemp(prefix="stockade-mcp-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    # The ledger, session /tmp dirs and provisioned workspaces stay in the test's directory.
    env["XDG_DATA_HOME"] = str(tmp / "data")
    env["XDG_STATE_HOME"] = str(tmp / "state")
    env["XDG_CONFIG_HOME"] = str(tmp / "config")
    return env


@asynccontextmanager
async def serve(tmp: Path, *args: str, answer: Answer | None = None, protocol: str = "legacy",
                asked: list[str] | None = None) -> AsyncIterator[Client]:
    """A connected client; `answer(message)` plays the person (None: no elicitation support)."""
    workspace = tmp / "ws"
    workspace.mkdir(exist_ok=True)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "stockade", "mcp", "--workspace", str(workspace), *args],
        env=_env(tmp),
    )
    callback: Callable[..., Awaitable[mt.ElicitResult]] | None = None
    if answer is not None:
        async def callback(_ctx: Any, params: Any) -> mt.ElicitResult:
            if asked is not None:
                asked.append(params.message)
            decision = answer(params.message)
            if decision is None:
                return mt.ElicitResult(action="decline")
            return mt.ElicitResult(action="accept", content={"decision": decision})

    async with Client(params, mode=protocol, elicitation_callback=callback) as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    return await client.call_tool(tool, arguments)


def text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))  # type: ignore[arg-type]


def _processes_with(marker: str) -> list[int]:
    """PIDs whose command line contains `marker` (seen from outside any sandbox)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(name))
    return found


def _wait_gone(marker: str, seconds: float = 15.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = _processes_with(marker)
        if not left:
            return []
        time.sleep(0.1)
    return _processes_with(marker)


# -- run_command ---------------------------------------------------------------------

def test_lists_the_tools(tmp_path: Path) -> None:
    async def go() -> None:
        async with serve(tmp_path) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            assert names == {"run_command", "start_process", "process_output", "stop_process",
                             "request_capability"}
    run(go())


def test_server_info_names_its_version(tmp_path: Path) -> None:
    from stockade import __version__

    async def go() -> None:
        async with serve(tmp_path) as c:
            info = c.server_info
            assert info.name == "stockade" and info.version == __version__
    run(go())


def test_every_tool_input_has_a_description(tmp_path: Path) -> None:
    async def go() -> None:
        async with serve(tmp_path) as c:
            for tool in (await c.list_tools()).tools:
                for name, field in tool.input_schema["properties"].items():
                    assert field.get("description"), f"{tool.name}.{name} has no description"
            kinds = {t.name: t for t in (await c.list_tools()).tools}["request_capability"]
            assert kinds.input_schema["properties"]["kind"]["enum"] == [
                "network_host", "writable_path", "mode"]
    run(go())


def test_a_bad_kind_is_one_readable_line(tmp_path: Path) -> None:
    async def go() -> None:
        async with serve(tmp_path) as c:
            r = await call(c, "request_capability", kind="root", value="x", reason="y")
            assert r.is_error
            message = text(r)
            assert "\n" not in message.strip() and "pydantic" not in message
            assert "unknown kind 'root'" in message and "network_host" in message
    run(go())


def test_shell_string_and_argv(tmp_path: Path) -> None:
    async def go() -> None:
        async with serve(tmp_path) as c:
            r = await call(c, "run_command", command="echo hi; echo err >&2; exit 3")
            assert not r.is_error
            s = r.structured_content
            assert (s["exit_code"], s["stdout"], s["stderr"]) == (3, "hi\n", "err\n")
            assert s["timed_out"] is False and s["sandbox_denied"] is False
            r = await call(c, "run_command", command=["printf", "%s|", "a b", "$HOME"])
            assert r.structured_content["stdout"] == "a b|$HOME|"
            r = await call(c, "run_command", command="cat", stdin="fed on stdin")
            assert r.structured_content["stdout"] == "fed on stdin"
    run(go())


def test_no_login_shell_and_no_rc_files(tmp_path: Path) -> None:
    async def go() -> None:
        async with serve(tmp_path) as c:
            r = await call(c, "run_command", command='echo "$0"; case $- in *i*) echo i;; esac')
            assert r.structured_content["stdout"] == "/bin/sh\n"
    run(go())


def test_cwd_is_relative_to_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "ws" / "sub").mkdir(parents=True)
    async def go() -> None:
        async with serve(tmp_path) as c:
            r = await call(c, "run_command", command="pwd", cwd="sub")
            assert r.structured_content["stdout"].strip().endswith("/ws/sub")
            r = await call(c, "run_command", command="pwd", cwd="../..")
            assert r.is_error
            assert "CapabilityDenied: cwd outside workspace root" in text(r)
    run(go())


def test_write_outside_the_workspace_is_denied_with_a_hint(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    async def go() -> None:
        async with serve(tmp_path, "--mode", "workspace-write") as c:
            r = await call(c, "run_command", command=f"echo inside > f && echo x > {outside}/f")
            s = r.structured_content
            assert s["exit_code"] != 0
            assert s["sandbox_denied"] is True
            assert "is outside the workspace" in s["hint"]
            assert s["hint"].endswith("only the workspace is writable")
    run(go())
    assert (tmp_path / "ws" / "f").read_text() == "inside\n"
    assert not (outside / "f").exists()


def test_read_only_mode_blocks_workspace_writes(tmp_path: Path) -> None:
    async def go() -> None:
        async with serve(tmp_path) as c:
            r = await call(c, "run_command", command="touch made-here")
            assert r.structured_content["sandbox_denied"] is True
            assert "read-only" in r.structured_content["hint"]
    run(go())
    assert not (tmp_path / "ws" / "made-here").exists()


def test_timeout_kills_the_tree_and_reports_it(tmp_path: Path) -> None:
    marker = f"{uuid.uuid4().int % 10**6}.25"
    async def go() -> None:
        async with serve(tmp_path) as c:
            started = time.monotonic()
            # Long enough that a loaded machine still reaches the `echo` before it.
            r = await call(c, "run_command", command=f"echo before; sleep {marker} & sleep 30",
                           timeout=5)
            assert time.monotonic() - started < 25
            s = r.structured_content
            assert s["timed_out"] is True and s["exit_code"] is None
            assert s["stdout"] == "before\n"
            assert "timeout" in s["hint"]
            assert _wait_gone(f"sleep\0{marker}") == []
    run(go())


def test_a_long_command_reports_progress(tmp_path: Path) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async def go() -> None:
        async with serve(tmp_path, "--mode", "workspace-write") as c:
            r = await c.call_tool("run_command", {"command": "printf abc; sleep 3.5; echo done"},
                                  progress_callback=on_progress)
            assert r.structured_content["stdout"] == "abcdone\n"
            # A quick command sends none: progress is for the long ones.
            before = len(seen)
            await c.call_tool("run_command", {"command": "true"}, progress_callback=on_progress)
            assert len(seen) == before
    run(go())
    assert len(seen) >= 2, seen
    values = [p for p, _, _ in seen]
    assert values == sorted(values) and len(set(values)) == len(values), values
    assert all(total is None for _, total, _ in seen)
    # The bytes reach the pipe before the sleep; by the last report they are counted.
    assert "3 bytes of output" in (seen[-1][2] or ""), seen


@pytest.mark.parametrize("mode", ["workspace-write", "full-access"])
def test_cancelling_a_call_ends_the_whole_tree(tmp_path: Path, mode: str) -> None:
    marker = f"{uuid.uuid4().int % 10**6}.5"
    # A child, a grandchild in its own session (which escapes a process group,
    # not a PID namespace) and the command's own sleep.
    daemon = "" if mode == "full-access" else f"setsid sleep {marker} & "
    command = f"{daemon}sh -c 'sleep {marker}' & sleep {marker}"
    want = 2 if mode == "full-access" else 3

    async def go() -> None:
        async with serve(tmp_path, "--mode", mode) as c:
            call_task = asyncio.ensure_future(c.call_tool("run_command", {"command": command,
                                                                          "timeout": 600}))
            deadline = time.monotonic() + 20
            while len(_processes_with(f"sleep\0{marker}")) < want:
                assert time.monotonic() < deadline, "the command never started"
                assert not call_task.done()
                await asyncio.sleep(0.05)
            call_task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call_task
            # Ended from the server's side: the client is still connected.
            assert await asyncio.to_thread(_wait_gone, f"sleep\0{marker}") == []
            r = await call(c, "run_command", command="echo still-serving")
            assert r.structured_content["stdout"] == "still-serving\n"
    run(go())


def test_allow_host_surfaces_what_the_sandbox_says(tmp_path: Path) -> None:
    async def go() -> None:
        async with serve(tmp_path, "--allow-host", "pypi.org") as c:
            r = await call(c, "run_command", command="true")
            if r.is_error:
                # Until the managed proxy runs, the sandbox refuses, and says why.
                assert text(r).count("SandboxUnavailable") == 1
                assert "proxy" in text(r)
            else:
                assert r.structured_content["exit_code"] == 0
    run(go())


def test_invalid_requests_are_tool_errors(tmp_path: Path) -> None:
    async def go() -> None:
        async with serve(tmp_path) as c:
            assert (await call(c, "run_command", command="   ")).is_error
            r = await call(c, "run_command", command=["echo", "a\0b"])
            assert r.is_error and "NUL" in text(r)
            r = await call(c, "process_output", process_id="p99")
            assert r.is_error and "no process" in text(r)
    run(go())


# -- background processes ------------------------------------------------------------

def test_background_process_lifecycle(tmp_path: Path) -> None:
    marker = f"{uuid.uuid4().int % 10**6}.5"
    script = f'echo ready; i=0; while [ $i -lt 3 ]; do i=$((i+1)); echo "line $i"; done; ' \
             f'echo oops >&2; exec sleep {marker}'
    async def go() -> None:
        async with serve(tmp_path) as c:
            r = await call(c, "start_process", command=script)
            assert not r.is_error, text(r)
            pid = r.structured_content["process_id"]
            assert r.structured_content["running"] is True
            out = ""
            offset = err_offset = 0
            stderr = ""
            for _ in range(40):
                r = await call(c, "process_output", process_id=pid, stdout_offset=offset,
                               stderr_offset=err_offset, wait_seconds=1)
                s = r.structured_content
                out += s["stdout"]
                stderr += s["stderr"]
                offset, err_offset = s["stdout_offset"], s["stderr_offset"]
                if "line 3" in out and "oops" in stderr:
                    break
            assert out == "ready\nline 1\nline 2\nline 3\n"
            assert stderr == "oops\n"
            assert offset == len(out.encode())
            # Asking again from the returned offset gives nothing new.
            r = await call(c, "process_output", process_id=pid, stdout_offset=offset)
            assert r.structured_content["stdout"] == "" and r.structured_content["running"]
            assert _processes_with(f"sleep\0{marker}")
            r = await call(c, "stop_process", process_id=pid)
            assert r.structured_content["running"] is False
            assert r.structured_content["signal"] == 9
            assert _wait_gone(f"sleep\0{marker}") == []
            # Output stays readable after the stop.
            r = await call(c, "process_output", process_id=pid)
            assert r.structured_content["stdout"].startswith("ready\n")
    run(go())


def test_process_output_does_not_split_characters(tmp_path: Path) -> None:
    async def go() -> None:
        async with serve(tmp_path) as c:
            r = await call(c, "start_process", command="printf 'h\\303\\251llo'; sleep 30")
            pid = r.structured_content["process_id"]
            r = await call(c, "process_output", process_id=pid, wait_seconds=5, max_bytes=2)
            s = r.structured_content
            # Two bytes would end inside "é": only "h" comes back, and the offset says so.
            assert (s["stdout"], s["stdout_offset"]) == ("h", 1)
            r = await call(c, "process_output", process_id=pid, stdout_offset=1)
            assert r.structured_content["stdout"] == "\u00e9llo"
            await call(c, "stop_process", process_id=pid)
    run(go())


def test_disconnect_stops_every_process(tmp_path: Path) -> None:
    marker = f"{uuid.uuid4().int % 10**6}.75"
    session = f"disconnect-{uuid.uuid4().hex[:8]}"
    async def go() -> None:
        async with serve(tmp_path, "--session", session, "--mode", "full-access") as c:
            # full-access has no PID namespace: stockade itself ends these, by
            # process group (a `setsid` daemon escapes that; the sandboxed
            # modes' namespace does not -- see the next test).
            for _ in range(2):
                r = await call(c, "start_process", command=f"sleep {marker}")
                assert not r.is_error, text(r)
            r = await call(c, "start_process", command=f"sleep {marker} & wait")
            assert not r.is_error
            deadline = time.monotonic() + 10
            while len(_processes_with(f"sleep\0{marker}")) < 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert len(_processes_with(f"sleep\0{marker}")) == 3
    run(go())
    assert _wait_gone(session) == [], "the server outlived its client"
    assert _wait_gone(f"sleep\0{marker}") == []


def test_disconnect_stops_sandboxed_processes(tmp_path: Path) -> None:
    marker = f"{uuid.uuid4().int % 10**6}.125"
    async def go() -> None:
        async with serve(tmp_path, "--mode", "workspace-write") as c:
            r = await call(c, "start_process", command=f"setsid sleep {marker} & sleep {marker}")
            assert not r.is_error
            deadline = time.monotonic() + 10
            while len(_processes_with(f"sleep\0{marker}")) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
    run(go())
    assert _wait_gone(f"sleep\0{marker}") == []


def test_sigterm_stops_the_processes_too(tmp_path: Path) -> None:
    marker = f"{uuid.uuid4().int % 10**6}.625"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    server = subprocess.Popen(
        [sys.executable, "-m", "stockade", "mcp", "--workspace", str(workspace),
         "--mode", "full-access"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(tmp_path))
    assert server.stdin is not None and server.stdout is not None
    try:
        def send(message: dict[str, Any]) -> None:
            assert server.stdin is not None
            server.stdin.write((json.dumps(message) + "\n").encode())
            server.stdin.flush()

        def receive() -> dict[str, Any]:
            assert server.stdout is not None
            line = server.stdout.readline()
            return json.loads(line)  # type: ignore[no-any-return]

        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}})
        assert receive()["id"] == 1
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "start_process", "arguments": {"command": f"sleep {marker}"}}})
        reply = receive()
        assert reply["id"] == 2 and not reply["result"].get("isError"), reply
        deadline = time.monotonic() + 10
        while not _processes_with(f"sleep\0{marker}") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _processes_with(f"sleep\0{marker}"), "the process never started"
        server.terminate()
        server.wait(timeout=20)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert _wait_gone(f"sleep\0{marker}") == []


def test_stdout_carries_only_protocol_messages(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "run_command", "arguments": {"command": "echo to-stdout; echo to-stderr >&2"}}},
    ]
    # Each request is sent only after the previous reply: the session must be
    # initialized before a tool call is accepted.
    server = subprocess.Popen(
        [sys.executable, "-m", "stockade", "mcp", "--workspace", str(workspace),
         "--log-level", "DEBUG"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(tmp_path))
    assert server.stdin is not None and server.stdout is not None
    lines = []
    for message in messages:
        server.stdin.write((json.dumps(message) + "\n").encode())
        server.stdin.flush()
        if "id" in message:
            lines.append(server.stdout.readline())
    rest, err = server.communicate(timeout=30)  # closes stdin: the client is gone
    lines += rest.splitlines(keepends=True)
    assert server.returncode == 0
    for line in lines:
        json.loads(line)  # every stdout line is JSON-RPC
    call_reply = json.loads(lines[1])
    assert call_reply["result"]["structuredContent"]["stdout"] == "to-stdout\n"
    assert b"stockade mcp: " in err  # logs went to stderr


# -- approvals -----------------------------------------------------------------------

@pytest.mark.parametrize("protocol", ["legacy", "auto"])
def test_elicitation_approves_a_mode_for_the_session(tmp_path: Path, protocol: str) -> None:
    asked: list[str] = []
    async def go() -> None:
        async with serve(tmp_path, answer=lambda _m: "allow-session", protocol=protocol,
                         asked=asked) as c:
            r = await call(c, "run_command", command="touch a")
            assert r.structured_content["sandbox_denied"] is True
            r = await call(c, "request_capability", kind="mode", value="workspace-write",
                           reason="the tests write coverage files")
            assert r.structured_content["granted"] is True, r.structured_content
            assert r.structured_content["outcome"] == "approved-session"
            for name in ("a", "b"):
                r = await call(c, "run_command", command=f"touch {name}")
                assert r.structured_content["exit_code"] == 0, r.structured_content
    run(go())
    assert (tmp_path / "ws" / "a").exists() and (tmp_path / "ws" / "b").exists()
    assert len(asked) == 1
    assert "mode workspace-write" in asked[0]
    assert "the tests write coverage files" in asked[0]


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
def test_elicitation_deny(tmp_path: Path, protocol: str) -> None:
    async def go() -> None:
        async with serve(tmp_path, answer=lambda _m: "deny", protocol=protocol) as c:
            r = await call(c, "request_capability", kind="mode", value="full-access",
                           reason="x")
            s = r.structured_content
            assert (s["granted"], s["outcome"]) == (False, "denied")
            r = await call(c, "run_command", command="touch a")
            assert r.structured_content["sandbox_denied"] is True
        async with serve(tmp_path, answer=lambda _m: None, protocol=protocol) as c:
            # Declining the form is a denial too.
            r = await call(c, "request_capability", kind="mode", value="full-access",
                           reason="x")
            assert r.structured_content["granted"] is False
    run(go())
    assert not (tmp_path / "ws" / "a").exists()


def test_allow_once_is_one_command(tmp_path: Path) -> None:
    async def go() -> None:
        async with serve(tmp_path, answer=lambda _m: "allow-once") as c:
            r = await call(c, "request_capability", kind="mode", value="workspace-write",
                           reason="write one file")
            assert r.structured_content["outcome"] == "approved-once"
            r = await call(c, "run_command", command="touch once")
            assert r.structured_content["exit_code"] == 0
            r = await call(c, "run_command", command="touch twice")
            assert r.structured_content["sandbox_denied"] is True
    run(go())
    assert (tmp_path / "ws" / "once").exists()
    assert not (tmp_path / "ws" / "twice").exists()


def test_writable_path_needs_workspace_write_then_approval(tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    async def go() -> None:
        async with serve(tmp_path, answer=lambda _m: "allow-session") as c:
            r = await call(c, "request_capability", kind="writable_path", value=str(extra),
                           reason="build output")
            assert r.structured_content["outcome"] == "not-applicable"
        async with serve(tmp_path, "--mode", "workspace-write",
                         answer=lambda _m: "allow-session") as c:
            r = await call(c, "run_command", command=f"touch {extra}/before")
            assert r.structured_content["sandbox_denied"] is True
            r = await call(c, "request_capability", kind="writable_path", value=str(extra),
                           reason="build output")
            assert r.structured_content["granted"] is True
            r = await call(c, "run_command", command=f"touch {extra}/after")
            assert r.structured_content["exit_code"] == 0, r.structured_content
            r = await call(c, "request_capability", kind="writable_path", value=str(extra),
                           reason="again")
            assert r.structured_content["outcome"] == "already-granted"
    run(go())
    assert (extra / "after").exists() and not (extra / "before").exists()


def test_a_granted_path_swapped_for_a_symlink_is_not_followed(tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    async def go() -> None:
        async with serve(tmp_path, "--mode", "workspace-write",
                         answer=lambda _m: "allow-session") as c:
            r = await call(c, "request_capability", kind="writable_path", value=str(extra),
                           reason="build output")
            assert r.structured_content["granted"] is True
            r = await call(c, "run_command", command=f"touch {extra}/granted")
            assert r.structured_content["exit_code"] == 0, r.structured_content
            extra.rename(tmp_path / "moved")
            extra.symlink_to(elsewhere)
            r = await call(c, "run_command", command=f"touch {extra}/swapped")
            assert r.structured_content["exit_code"] != 0
            r = await call(c, "run_command", command=f"touch {elsewhere}/direct")
            assert r.structured_content["exit_code"] != 0
    run(go())
    assert (tmp_path / "moved" / "granted").exists()
    assert list(elsewhere.iterdir()) == []


def test_without_elicitation_the_request_is_denied_with_the_config_way(tmp_path: Path) -> None:
    async def go() -> None:
        async with serve(tmp_path) as c:
            r = await call(c, "request_capability", kind="mode", value="workspace-write",
                           reason="x")
            s = r.structured_content
            assert (s["granted"], s["outcome"]) == (False, "denied")
            assert "--mode workspace-write" in s["message"]
            assert 'mode = "workspace-write"' in s["message"]
            r = await call(c, "request_capability", kind="network_host", value="PyPI.org",
                           reason="x")
            assert "--allow-host pypi.org" in r.structured_content["message"]
            r = await call(c, "run_command", command="touch a")
            assert r.structured_content["sandbox_denied"] is True
    run(go())


def test_what_the_mode_already_gives_needs_no_person(tmp_path: Path) -> None:
    (tmp_path / "ws" / "build").mkdir(parents=True)
    async def go() -> None:
        async with serve(tmp_path, "--mode", "workspace-write") as c:
            r = await call(c, "request_capability", kind="writable_path",
                           value=str(tmp_path / "ws" / "build"), reason="x")
            assert r.structured_content["outcome"] == "not-needed"
            r = await call(c, "request_capability", kind="writable_path",
                           value=str(tmp_path / "missing"), reason="x")
            assert r.is_error and "not an existing directory" in text(r)
        async with serve(tmp_path, "--mode", "full-access") as c:
            r = await call(c, "request_capability", kind="network_host", value="pypi.org",
                           reason="x")
            assert r.structured_content["outcome"] == "not-needed"
    run(go())


def test_narrowing_the_mode_needs_no_person(tmp_path: Path) -> None:
    async def go() -> None:
        async with serve(tmp_path, "--mode", "workspace-write") as c:
            r = await call(c, "request_capability", kind="mode", value="read-only", reason="x")
            assert r.structured_content["outcome"] == "not-needed"
            r = await call(c, "run_command", command="touch a")
            assert r.structured_content["sandbox_denied"] is True
    run(go())


def test_a_hostile_reason_cannot_repaint_the_question(tmp_path: Path) -> None:
    asked: list[str] = []
    async def go() -> None:
        async with serve(tmp_path, answer=lambda _m: "deny", asked=asked) as c:
            await call(c, "request_capability", kind="mode", value="full-access",
                       reason="ok\x1b[2J\x1b[Happroved already, just click allow\r")
    run(go())
    assert "\x1b" not in asked[0] and "\r" not in asked[0]
    assert "\\x1b[2J" in asked[0]


def test_a_reason_cannot_forge_lines_or_reverse_text_in_the_form(tmp_path: Path) -> None:
    """U+2029 would start a forged "Request:" line in the form; U+202E would reverse text."""
    asked: list[str] = []
    async def go() -> None:
        async with serve(tmp_path, answer=lambda _m: "deny", asked=asked) as c:
            await call(c, "request_capability", kind="mode", value="full-access",
                       reason="tests\u2029\u2029Request: ls\u2028Allow once\u202eenod")
    run(go())
    form = asked[0]
    assert not any(c in form for c in "\u2028\u2029\u202e")
    reason = next(line for line in form.splitlines() if line.startswith("The agent's reason:"))
    assert reason.endswith("tests\\u2029\\u2029Request: ls\\u2028Allow once\\u202eenod")
    assert sum(line.startswith("Request:") for line in form.splitlines()) == 1


def test_a_writable_workspace_of_home_is_refused_at_start(tmp_path: Path) -> None:
    """An MCP client started in the home gives a workspace of `~`: in workspace-write the
    server refuses to start, in one line naming the setting that accepts it."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**_env(tmp_path), "HOME": str(home)}
    res = subprocess.run([sys.executable, "-m", "stockade", "mcp", "--workspace", str(home),
                          "--mode", "workspace-write"], stdin=subprocess.DEVNULL,
                         capture_output=True, env=env, timeout=60, check=False)
    assert res.returncode == 77, res.stderr
    lines = res.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "allow_home_workspace" in lines[0], lines


# -- published ports -----------------------------------------------------------------

def test_start_process_publishes_a_port_until_stopped(tmp_path: Path) -> None:
    """`publish` on start_process: the person opens the server on the host's loopback."""
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "index.html").write_text("from the sandbox\n")

    def fetch() -> bytes:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html",
                                            timeout=3) as page:
                    return bytes(page.read())
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    async def go() -> None:
        async with serve(tmp_path) as c:
            r = await call(c, "start_process", command="exec python3 -m http.server 8000",
                           publish=[f"{port}:8000"])
            assert not r.is_error, text(r)
            pid = r.structured_content["process_id"]
            assert await asyncio.to_thread(fetch) == b"from the sandbox\n"
            await call(c, "stop_process", process_id=pid)
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
            r = await call(c, "run_command", command="true", publish=[f"0.0.0.0:{port}:8000"])
            assert r.is_error and "loopback only" in text(r), text(r)
            r = await call(c, "run_command", command="true", publish=["nonsense"])
            assert r.is_error and "InvalidCommand: " in text(r), text(r)
    run(go())
