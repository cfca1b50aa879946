"""`StockadeSandbox` as the backend of a real `create_deep_agent` run.

A scripted chat model calls Deep Agents' own tools (`execute`, `write_file`,
`read_file`, `edit_file`, `grep`); every one runs in stockade, and the test
checks what landed on the host and what the model was shown, as root and as an
unprivileged user.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from isolation.conftest import Box

pytest.importorskip("deepagents")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def dirs(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    base = Path(tempfile.mkdtemp(prefix="stockade-deepagents-", dir="/var/tmp"))
    for sub in ("ws", "home/.aws", "state", "data", "config"):
        (base / sub).mkdir(parents=True)
    (base / "home/.bashrc").write_text("# mine\n")
    (base / "home/.aws/credentials").write_text("SECRET-KEY-deep\n")
    for name, sub in (("HOME", "home"), ("XDG_STATE_HOME", "state"), ("XDG_DATA_HOME", "data"),
                      ("XDG_CONFIG_HOME", "config")):
        monkeypatch.setenv(name, str(base / sub))
    yield base / "ws", base / "home"
    shutil.rmtree(base, ignore_errors=True)


# Set by the conftest: the user runner reads the venv's packages from a copy of its own.
RUNS_INSTALLED_PACKAGES = True

# The block docs/agents.md shows (argv[1]) for the project (argv[2]), with a chat model
# that makes the tool calls of argv[3] (JSON), one per turn, and records what it is
# shown; prints the tool results its last turn saw, as JSON.
AGENT_RUN = """
import json
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

block, ws, calls = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
shown = []

class ScriptedChat(GenericFakeChatModel):
    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, *args, **kwargs):
        shown[:] = [str(m.content) for m in messages if m.type == "tool"]
        return super()._generate(messages, *args, **kwargs)

model = ScriptedChat(messages=iter([
    *(AIMessage(content="", tool_calls=[{"name": name, "id": f"call_{i}", "args": args}])
      for i, (name, args) in enumerate(calls)),
    AIMessage(content="done"),
]))
exec(block.replace("/path/to/project", ws))
print(json.dumps(shown))
"""


def test_a_deep_agent_runs_its_shell_and_file_tools_in_stockade(
        box: Box, host_python: Callable[..., Any], documented: Callable[[str, str], str]) -> None:
    """The documented `create_deep_agent` run, as root and as an unprivileged user."""
    ws, home = box.ws, box.home
    notes = str(ws / "notes.txt")
    bashrc = (home / ".bashrc").read_text()
    calls = [
        ("execute", {"command": "echo built > build.log && cat build.log && "
                                "echo $STOCKADE_SANDBOX"}),
        ("write_file", {"file_path": notes, "content": "first line\nsecond line\n"}),
        ("edit_file", {"file_path": notes, "old_string": "second", "new_string": "2nd"}),
        ("read_file", {"file_path": notes}),
        ("grep", {"pattern": "2nd", "path": str(ws)}),
        ("execute", {"command": "echo pwned >> ~/.bashrc; cat ~/.aws/credentials"}),
        ("write_file", {"file_path": str(home / "planted.txt"), "content": "x"}),
        ("read_file", {"file_path": str(home / ".aws/credentials")}),
        ("execute", {"command": "rm -rf --no-preserve-root /"}),
    ]
    res = host_python(AGENT_RUN, documented("Deep Agents", "python"), str(ws),
                      json.dumps(calls), timeout=100)
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    shown = json.loads(res.stdout.decode().splitlines()[-1])
    assert len(shown) == 9, shown
    assert "built" in shown[0] and "bubblewrap" in shown[0]
    assert (ws / "build.log").read_text() == "built\n"
    assert (ws / "notes.txt").read_text() == "first line\n2nd line\n"
    assert "2nd line" in shown[3] and "notes.txt" in shown[4]
    assert "Read-only file system" in shown[5] and "stockade: blocked by the sandbox" in shown[5]
    assert box.markers[".aws/credentials"] not in "".join(shown)
    assert "permission_denied" in shown[6] and not (home / "planted.txt").exists()
    assert "command policy blocked" in shown[8] and "77" in shown[8]
    assert (home / ".bashrc").read_text() == bashrc
    # Each operation, file ones included, has its ledger record in the session.
    with contextlib.closing(sqlite3.connect(box.state / "data/stockade/ledger.db")) as db:
        sessions = {s for (s,) in db.execute("SELECT session FROM executions")}
        count = db.execute("SELECT count(*) FROM executions").fetchone()[0]
    assert len(sessions) == 1 and next(iter(sessions)).startswith("deepagents-")
    assert count >= 9


def test_a_file_over_the_limit_or_not_regular_is_reported_as_such(
        dirs: tuple[Path, Path]) -> None:
    """Deep Agents has no error kind for size: a file past what stockade reads of one is
    an error naming the limit, not `permission_denied`; a FIFO or device is refused at
    once rather than waited on until the command's timeout."""
    import os
    import time

    from stockade.adapters.deepagents import StockadeSandbox

    ws, _ = dirs
    limit = (1 << 20) // 2  # stdout's half of the default max_output_bytes
    (ws / "big.bin").write_bytes(b"x" * (limit + 1))
    (ws / "full.bin").write_bytes(b"y" * limit)
    os.mkfifo(ws / "pipe")
    with StockadeSandbox(str(ws), mode="workspace-write") as backend:
        big, full = backend.download_files(["big.bin", "full.bin"])
        assert big.content is None and big.error != "permission_denied"
        assert f"larger than {limit} bytes" in (big.error or "")
        assert full.error is None and full.content == b"y" * limit
        start = time.monotonic()
        pipe, zero = backend.download_files(["pipe", "/dev/zero"])
        [upload] = backend.upload_files([("pipe", b"x")])
        assert time.monotonic() - start < 30
        for response in (pipe, zero, upload):
            assert "not a regular file" in (response.error or ""), response
