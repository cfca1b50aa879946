"""Bad inputs: the documented exit status, one readable line, and nothing run.

Each refused invocation carries a command that would leave a file behind if
it ran, so "refused" is checked on the host, not only in the exit status.
"""

from __future__ import annotations

import json
import os
import string

import pytest

from .conftest import Box, text

pytestmark = pytest.mark.isolation


def one_line(stderr: bytes) -> str:
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    line = lines[0]
    assert line.startswith("stockade: "), line
    assert all(c in string.printable for c in line), line
    return line


# A command that marks the workspace if it runs at all.
TRAP = ["/bin/sh", "-c", "echo ran > ran.txt"]


def assert_not_run(box: Box) -> None:
    assert not (box.ws / "ran.txt").exists(), "the command ran although stockade refused"


def test_cwd_outside_workspace_is_77(box: Box) -> None:
    res = box.run(TRAP, mode="workspace-write", options=["--cwd", "../.."])
    assert res.returncode == 77, text(res)
    assert "cwd outside workspace" in one_line(res.stderr)
    assert_not_run(box)


def test_cwd_through_symlink_out_of_workspace_is_77(box: Box) -> None:
    os.symlink(box.sibling, box.ws / "out")
    box.runner.own(box.ws / "out")
    res = box.run(TRAP, mode="workspace-write", options=["--cwd", "out"])
    assert res.returncode == 77, text(res)
    assert "cwd outside workspace" in one_line(res.stderr)
    assert not (box.sibling / "ran.txt").exists()


def test_unknown_mode_is_a_usage_error(box: Box) -> None:
    res = box.run(TRAP, mode="workspace-writable")
    assert res.returncode == 2, text(res)
    first = res.stderr.decode().splitlines()[0]
    assert first == ("stockade: --mode must be one of read-only, workspace-write, full-access, "
                     "got 'workspace-writable'"), first
    assert_not_run(box)


def test_malformed_toml_is_78(box: Box) -> None:
    cfg = box.write(box.state / "broken.toml", '[sandbox\nmode = "workspace-write"\n')
    res = box.run(TRAP, options=["--config", str(cfg)])
    assert res.returncode == 78, text(res)
    line = one_line(res.stderr)
    assert "broken.toml" in line and "TOML" in line, line
    assert_not_run(box)


def test_unknown_config_key_is_78(box: Box) -> None:
    # A misspelt `unreadable` that silently hid nothing would be worse than an error.
    cfg = box.write(box.state / "typo.toml", '[sandbox]\nunreadabel = ["~/.aws"]\n')
    res = box.run(TRAP, options=["--config", str(cfg)])
    assert res.returncode == 78, text(res)
    assert "unreadabel" in one_line(res.stderr)
    assert_not_run(box)


def test_missing_configured_bwrap_is_125_never_a_silent_fallback(box: Box) -> None:
    cfg = box.write(box.state / "nobwrap.toml", '[sandbox]\nbwrap = "/nonexistent"\n')
    res = box.run(TRAP, mode="workspace-write", options=["--config", str(cfg)])
    assert res.returncode == 125, text(res)
    assert "/nonexistent" in one_line(res.stderr)
    assert_not_run(box)


def test_missing_bwrap_with_bubblewrap_backend_is_125(box: Box) -> None:
    cfg = box.write(box.state / "nobwrap.toml",
                    '[sandbox]\nbackend = "bubblewrap"\nbwrap = "/nonexistent"\n')
    res = box.run(TRAP, mode="workspace-write", options=["--config", str(cfg)])
    assert res.returncode == 125, text(res)
    assert "/nonexistent" in one_line(res.stderr)
    # Above all: it did not fall back to running the command some other way.
    assert_not_run(box)


def test_usage_errors_are_2(box: Box) -> None:
    res = box.runner.cli(["run", "--timeout", "soon", "--", "true"], cwd=box.ws, env=box.env())
    assert res.returncode == 2, text(res)
    assert res.stderr.decode().startswith(
        "stockade: --timeout must be a positive number, got 'soon'")
    res = box.runner.cli(["run"], cwd=box.ws, env=box.env())
    assert res.returncode == 2, text(res)


LIBRARY_NUL = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from stockade import InvalidCommand, SandboxCommand, SandboxConfig, SyncWorkspaceSandbox

results = {}
with SyncWorkspaceSandbox(SandboxConfig(mode="workspace-write", ledger=False)) as sb:
    sb.open_session("nul", sys.argv[2])
    # Control: a well-formed command does run and write.
    ok = sb.execute(SandboxCommand("/bin/sh", ["-c", "echo ok > control.txt"], session_id="nul"))
    results["control"] = ok.exit_code
    cases = {
        "argument": lambda: SandboxCommand("/bin/sh", ["-c", "echo ran > ran.txt\0x"],
                                           session_id="nul"),
        "program": lambda: SandboxCommand("/bin/sh\0", ["-c", "echo ran > ran.txt"],
                                          session_id="nul"),
        "cwd": lambda: SandboxCommand("/bin/sh", ["-c", "echo ran > ran.txt"],
                                      session_id="nul", cwd=".\0"),
        "env": lambda: SandboxCommand("/bin/sh", ["-c", "echo ran > ran.txt"],
                                      session_id="nul", env={"A": "b\0c"}),
    }
    for name, make in cases.items():
        try:
            sb.execute(make())
            results[name] = "ran"
        except InvalidCommand:
            results[name] = "InvalidCommand"
        except Exception as exc:
            results[name] = type(exc).__name__
print(json.dumps(results))
"""


def test_nul_via_library_api_raises_invalid_command(box: Box) -> None:
    res = box.host([box.runner.python, "-I", "-c", LIBRARY_NUL, box.runner.site, str(box.ws)])
    assert res.returncode == 0, text(res)
    results = json.loads(res.stdout.decode().strip().splitlines()[-1])
    assert results == {"control": 0, "argument": "InvalidCommand", "program": "InvalidCommand",
                       "cwd": "InvalidCommand", "env": "InvalidCommand"}, results
    assert (box.ws / "control.txt").read_text() == "ok\n"
    assert_not_run(box)


@pytest.mark.parametrize("options", [[], ["--json"]], ids=["passthrough", "json"])
@pytest.mark.parametrize("status", [0, 1, 3, 77])
def test_command_exit_status_passes_through(box: Box, options: list[str], status: int) -> None:
    """The command's own status is stockade's; 1 and 77 must not be read as stockade's own."""
    res = box.sh(f"exit {status}", options=options)
    assert res.returncode == status, text(res)
    assert b"stockade:" not in res.stderr, text(res)
