"""The `stockade` sandbox provider against the installed inspect-ai.

The task docs/agents.md shows runs through `inspect eval ... --sandbox stockade` (the CLI,
which finds the provider through the `inspect_ai` entry point) with the
`bash()` tool and Inspect's mock model scripted to call it; the provider's
own operations are then exercised one by one.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from isolation.conftest import Box

pytest.importorskip("inspect_ai")

pytestmark = pytest.mark.timeout(180)

# Set by the conftest: the user runner reads the venv's packages from a copy of its own.
RUNS_INSTALLED_PACKAGES = True


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


def test_inspect_eval_with_sandbox_stockade(box: Box, host_python: Callable[..., Any],
                                            documented: Callable[[str, str], str]) -> None:
    """The task and the command line docs/agents.md shows, run by Inspect's own CLI as
    root and as an unprivileged user; the flags added only say where the log goes.

    Its mock model is given a usage of its own: without one it counts tokens with
    an encoding it downloads, and an eval without a network fails on it."""
    box.write(box.ws / "task.py", documented("Inspect", "python"))
    [line] = documented("Inspect", "sh").splitlines()
    argv = shlex.split(line)
    assert argv[:2] == ["inspect", "eval"]
    bashrc = (box.home / ".bashrc").read_text()
    res = host_python(
        "from inspect_ai._cli.main import main; sys.argv[0] = 'inspect'; main()",
        *argv[1:], "--log-dir", "logs", "--log-format", "json", "--display", "plain",
        "--no-score-display", timeout=150)
    assert res.returncode == 0, (res.stdout + res.stderr).decode(errors="replace")
    [log] = (box.ws / "logs").glob("*.json")
    data = json.loads(log.read_text())
    assert data["status"] == "success", data.get("error")
    messages = data["samples"][0]["messages"]
    tool = next(m for m in messages if m["role"] == "tool")
    text = tool["content"] if isinstance(tool["content"], str) else json.dumps(tool["content"])
    assert "from-the-sandbox" in text and "bubblewrap" in text
    assert "Read-only file system" in text
    assert box.markers[".aws/credentials"] not in text
    assert (box.home / ".bashrc").read_text() == bashrc
    # The sample's directory is removed with the sample.
    root = box.state / "state" / "stockade"
    assert not list(root.rglob("inspect-*/out.txt"))
    assert data["samples"][0]["scores"]["includes"]["value"] == "C"


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
