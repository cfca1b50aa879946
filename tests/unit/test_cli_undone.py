"""What the sandbox undid of a command's work: a field on the result, and `run`'s line.

The isolation suites run it for real (test_iso_fs.py, test_llb_fs.py); these
pin the decision without a kernel.
"""

import json

import pytest

from stockade.cli import _report
from stockade.command import Neutralised, SandboxOutput

VSCODE = Neutralised("/w/.vscode", "created by the command: the person's tools would read "
                     "or run it", "/q/1/item")


def result(exit_code: int, *done: Neutralised, hint: str | None = None) -> SandboxOutput:
    return SandboxOutput(exit_code, None, b"", b"", denial_hint=hint, neutralised=done)


def test_the_result_lists_what_was_undone_in_its_json() -> None:
    out = json.loads(json.dumps(result(0, VSCODE).to_json()))
    assert out["exit_code"] == 0
    assert out["neutralised"] == [{"path": "/w/.vscode", "what": VSCODE.what,
                                   "moved_to": "/q/1/item"}]
    assert result(0).to_json()["neutralised"] == []
    assert result(0, VSCODE).neutralised == (Neutralised(VSCODE.path, VSCODE.what,
                                                         VSCODE.moved_to),)


def test_a_zero_over_undone_work_is_said_on_the_line_and_the_status_is_the_commands(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The status stays the command's: a sweep also undoes what an overlapping command
    left, and the command that ended it did nothing wrong."""
    assert _report(result(0, VSCODE, hint="the sandbox neutralised …"), quiet=False) == 0
    assert capsys.readouterr().err == ("stockade: the sandbox neutralised …; the command "
                                       "exited 0, but what is named here did not stay\n")
    assert _report(result(3, VSCODE, hint="h"), quiet=False) == 3
    assert capsys.readouterr().err == "stockade: h\n"
    assert _report(result(0, VSCODE, hint="h"), quiet=True) == 0
    assert capsys.readouterr().err == ""
    assert _report(result(0), quiet=False) == 0
    assert capsys.readouterr().err == ""


def test_the_keys_one_config_lost_in_several_merges_are_named_together() -> None:
    """Under Landlock a config is merged back as each write lands: seven merges must not
    push the key that matters behind "and N more"."""
    from stockade.interpret import neutralised_hint

    merges = [Neutralised.dropped("/ws/.git/config", [key], f"/q/{i}")
              for i, key in enumerate(["include.path", "alias.st", "core.pager",
                                       "core.worktree", "core.sshcommand",
                                       "core.fsmonitor", "include.path"])]
    hint = neutralised_hint([VSCODE, *merges])
    assert "more" not in hint, hint
    assert ("dropped include.path, alias.st, core.pager, core.worktree, core.sshcommand, "
            "core.fsmonitor (moved to /q/6)") in hint, hint
    assert merges[0].what.endswith("dropped include.path")  # the run's own list is kept
