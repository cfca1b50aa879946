"""Secrets inside the workspace, when the person asks: `unreadable = ["default", "dotenv"]`.

A model that `cat`s a project's `.env` has put its keys in the transcript. The
preset hides `.env` and `.env.*` at any depth, never the examples committed
beside them, and keeps up with files that appear between commands.
"""

from __future__ import annotations

import pytest

from .conftest import Box, text

READ = "cat .env app/.env.local 2>&1; cat .env.example; echo done"


def _project(box: Box) -> None:
    box.write(box.ws / ".env", "API_KEY=sk-live-DOTENV-SECRET\n")
    box.write(box.ws / "app" / ".env.local", "DB=postgres://u:DOTENV-SECRET@db/x\n")
    box.write(box.ws / ".env.example", "API_KEY=EXAMPLE-VALUE\n")


def test_control_the_command_reads_the_dotenv_files_without_the_preset(box: Box) -> None:
    _project(box)
    res = box.sh(READ, mode="read-only")
    assert text(res).count("DOTENV-SECRET") == 2, text(res)


@pytest.mark.parametrize("mode", ["read-only", "workspace-write"])
def test_the_dotenv_preset_hides_env_files_and_keeps_examples(box: Box, mode: str) -> None:
    _project(box)
    box.user_config('unreadable = ["default", "dotenv"]')
    res = box.sh(READ, mode=mode)
    out = text(res)
    assert "DOTENV-SECRET" not in out, out
    assert "EXAMPLE-VALUE" in out and "done" in out, out
    # The default set still holds beside the preset.
    res = box.sh("cat ~/.aws/credentials 2>&1; echo done", mode=mode)
    assert "DECOY" not in text(res) and "done" in text(res), text(res)


SESSION = """
import sys
sys.path.insert(0, {site!r})
from stockade import SandboxCommand, SandboxConfig, SyncWorkspaceSandbox
sb = SyncWorkspaceSandbox(SandboxConfig(mode={mode!r}, ledger=False,
                                        unreadable=["default", "dotenv"]{backend}))
sb.open_session("s", {ws!r})
def sh(script):
    r = sb.execute(SandboxCommand("sh", ["-c", script], session_id="s"))
    return r.stdout.decode() + r.stderr.decode()
print(sh("cat deep/er/.env 2>&1; echo first"))
with open({ws!r} + "/deep/er/.env", "w") as fh:
    fh.write("TOKEN=APPEARED-DOTENV-SECRET\\n")
print(sh("cat deep/er/.env 2>&1; echo second"))
sb.close()
"""


def test_a_dotenv_file_made_between_commands_is_hidden_from_the_next(
        box: Box, backend: str = "", mode: str = "workspace-write") -> None:
    """The tree's watch keeps the matches current: the person's new `.env` is hidden
    from the session's next command without a walk."""
    box.mkdir("ws/deep/er")
    code = SESSION.format(site=box.runner.site, ws=str(box.ws), backend=backend, mode=mode)
    res = box.host([box.runner.python, "-I", "-c", code], capture_output=True, timeout=120)
    out = text(res)
    assert res.returncode == 0 and "first" in out and "second" in out, out
    assert "APPEARED-DOTENV-SECRET" not in out, out
