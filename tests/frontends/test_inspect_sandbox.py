"""The `stockade` sandbox provider against the installed inspect-ai.

A real task runs through `inspect eval ... --sandbox stockade` (the CLI,
which finds the provider through the `inspect_ai` entry point) with the
`bash()` tool and Inspect's mock model scripted to call it; the provider's
own operations are then exercised one by one.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("inspect_ai")

pytestmark = pytest.mark.timeout(180)

# The task docs/agents.md shows: a model that runs two commands with bash(),
# one that works in the sample's directory and one that tries to leave it.
TASK = '''
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import bash

def scripted(output):
    # A usage of its own: without one the mock model counts tokens with an
    # encoding it downloads, and an eval without a network fails on it.
    output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return output

@task
def escape_check():
    model = get_model("mockllm/model", custom_outputs=[
        scripted(ModelOutput.for_tool_call("mockllm/model", "bash", {"command": (
            "echo from-the-sandbox > out.txt && cat out.txt; "
            "echo pwned >> ~/.bashrc; cat ~/.aws/credentials; echo $STOCKADE_SANDBOX")})),
        scripted(ModelOutput.from_content("mockllm/model", "from-the-sandbox")),
    ])
    return Task(dataset=[Sample(input="write out.txt", target="from-the-sandbox")],
                solver=[use_tools(bash()), generate()], scorer=includes(), model=model)
'''


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="stockade-inspect-", dir="/var/tmp"))
    for sub in ("home/.aws", "state", "data", "config"):
        (base / sub).mkdir(parents=True)
    (base / "home/.bashrc").write_text("# mine\n")
    (base / "home/.aws/credentials").write_text("SECRET-KEY-inspect\n")
    for name, sub in (("HOME", "home"), ("XDG_STATE_HOME", "state"), ("XDG_DATA_HOME", "data"),
                      ("XDG_CONFIG_HOME", "config")):
        monkeypatch.setenv(name, str(base / sub))
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_inspect_eval_with_sandbox_stockade(home: Path) -> None:
    (home / "task.py").write_text(TASK)
    inspect = Path(sys.executable).with_name("inspect")
    res = subprocess.run(
        [str(inspect), "eval", "task.py", "--sandbox", "stockade", "--log-dir", "logs",
         "--log-format", "json", "--display", "plain", "--no-score-display"],
        cwd=home, capture_output=True, text=True, timeout=150, env=os.environ.copy())
    assert res.returncode == 0, res.stdout + res.stderr
    [log] = (home / "logs").glob("*.json")
    data = json.loads(log.read_text())
    assert data["status"] == "success", data.get("error")
    messages = data["samples"][0]["messages"]
    tool = next(m for m in messages if m["role"] == "tool")
    text = tool["content"] if isinstance(tool["content"], str) else json.dumps(tool["content"])
    assert "from-the-sandbox" in text and "bubblewrap" in text
    assert "Read-only file system" in text
    assert "SECRET-KEY-inspect" not in text
    assert (home / "home/.bashrc").read_text() == "# mine\n"
    # The sample's directory is removed with the sample.
    root = home / "state" / "stockade"
    assert not list(root.rglob("inspect-*/out.txt"))


def _env(home: Path) -> Any:
    from stockade.adapters.inspect_sandbox import StockadeSandboxEnvironment

    envs = asyncio.run(StockadeSandboxEnvironment.sample_init("t", None, {}))
    return envs["default"]


def test_the_provider_operations(home: Path) -> None:
    from inspect_ai.util import OutputLimitExceededError
    from inspect_ai.util._sandbox.environment import SandboxUserUnsupportedError

    from stockade.adapters.inspect_sandbox import StockadeSandboxEnvironment

    env = _env(home)

    async def go() -> dict[str, Any]:
        got: dict[str, Any] = {}
        await env.write_file("sub/a.txt", "héllo\r\n")
        await env.write_file("b.bin", b"\x00\xff\xfe")
        got["text"] = await env.read_file("sub/a.txt")
        got["bytes"] = await env.read_file("b.bin", text=False)
        got["exec"] = await env.exec(["sh", "-c", 'read x; echo "$x $GREETING $(pwd)"'],
                                     input="in", env={"GREETING": "hi"}, cwd="sub")
        got["status"] = await env.exec(["sh", "-c", "exit 3"])
        for name, call in {
            "user": env.exec(["id"], user="root"),
            "timeout": env.exec(["sleep", "30"], timeout=1),
            "missing": env.read_file("nope.txt"),
            "dir": env.read_file("sub"),
            "outside": env.write_file(str(home / "home/.bashrc"), "x"),
            "cwd-out": env.exec(["true"], cwd="/etc"),
        }.items():
            try:
                await call
            except Exception as exc:
                got[name] = exc
        return got

    try:
        got = asyncio.run(go())
        directory = Path(env.directory)
        assert (directory / "sub/a.txt").read_bytes() == "héllo\r\n".encode()
        assert got["text"] == "héllo\r\n" and got["bytes"] == b"\x00\xff\xfe"
        res = got["exec"]
        assert res.success and res.stdout == f"in hi {directory}/sub\n"
        assert (got["status"].success, got["status"].returncode) == (False, 3)
        assert isinstance(got["user"], SandboxUserUnsupportedError)
        assert isinstance(got["timeout"], TimeoutError)
        assert isinstance(got["missing"], FileNotFoundError)
        assert isinstance(got["dir"], IsADirectoryError)
        assert isinstance(got["outside"], PermissionError)
        assert "Read-only file system" in str(got["outside"])
        assert isinstance(got["cwd-out"], PermissionError)
        assert (home / "home/.bashrc").read_text() == "# mine\n"
        assert OutputLimitExceededError  # the class the size limits raise
    finally:
        asyncio.run(StockadeSandboxEnvironment.sample_cleanup("t", None, {"default": env},
                                                              False))
    assert not directory.exists()


def test_a_file_that_is_not_a_regular_one_fails_at_once(home: Path) -> None:
    """A FIFO would hold an open for reading or writing until the command's timeout, and
    a device such as /dev/zero never ends: each is a PermissionError straight away."""
    from stockade.adapters.inspect_sandbox import StockadeSandboxEnvironment

    env = _env(home)
    directory = Path(env.directory)
    os.mkfifo(directory / "pipe")
    (directory / "link").symlink_to("pipe")

    async def go(call: Any) -> Exception | None:
        try:
            await asyncio.wait_for(call, 20)
        except Exception as exc:
            return exc
        return None

    try:
        for name, call in {
            "fifo": lambda: env.read_file("pipe"),
            "link-to-fifo": lambda: env.read_file("link", text=False),
            "device": lambda: env.read_file("/dev/zero"),
            "write-fifo": lambda: env.write_file("pipe", "x"),
        }.items():
            exc = asyncio.run(go(call()))
            assert isinstance(exc, PermissionError), (name, exc)
            assert "not a regular file" in str(exc), name
    finally:
        asyncio.run(StockadeSandboxEnvironment.sample_cleanup("t", None, {"default": env},
                                                              False))


def test_an_unavailable_sandbox_fails_the_sample(home: Path) -> None:
    from inspect_ai.util._sandbox.environment import SandboxUnavailableError

    from stockade.adapters.inspect_sandbox import StockadeSandboxEnvironment

    conf = home / "broken.toml"
    conf.write_text('[sandbox]\nbwrap = "/nonexistent/bwrap"\n')
    envs = asyncio.run(StockadeSandboxEnvironment.sample_init("t", str(conf), {}))
    env = envs["default"]
    try:
        with pytest.raises(SandboxUnavailableError, match="bwrap"):
            asyncio.run(env.exec(["touch", "ran"]))
        assert not (Path(env.directory) / "ran").exists()
    finally:
        asyncio.run(StockadeSandboxEnvironment.sample_cleanup("t", None, envs, False))
    assert zipfile  # (imported for log formats that are zipped)
