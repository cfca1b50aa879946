"""The Claude Code hook's host side: the line it writes names the packages of the
environment it runs from (as installed, `python -I -S`, where `site` never ran),
the person's permission rules are matched against the command the agent wrote,
and --install writes only inside the project."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stockade.adapters import claude_code as cc
from stockade.errors import ConfigError

SRC = Path(__file__).resolve().parents[2] / "src"
DEBIAN_PYTHON = "/usr/bin/python3"

PRINT_PATH = ("import sys; sys.path.insert(0, sys.argv[1]); "
              "from stockade.adapters.claude_code import stockade_program; "
              "print(stockade_program()[4])")


def boot_path(python: str, *flags: str) -> list[str]:
    out = subprocess.run([python, *flags, "-c", PRINT_PATH, str(SRC)], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    assign = out.split(";")[1]  # " sys.path[:0] = [...]"
    return list(ast.literal_eval(assign.split("=", 1)[1].strip()))


@pytest.mark.parametrize("python", [DEBIAN_PYTHON, sys.executable])
@pytest.mark.parametrize("flags", [("-I", "-S"), ("-I",)], ids=["as-installed", "with-site"])
def test_a_venvs_site_packages_are_named(tmp_path: Path, python: str,
                                          flags: tuple[str, ...]) -> None:
    """Debian's `site.getsitepackages` named no venv `site-packages` under `-S`: every
    call of a hook installed from a venv of Debian's Python failed on its imports."""
    real = os.path.realpath(python)
    if not os.path.exists(real):
        pytest.skip(f"{python} is not installed")
    venv = tmp_path / "venv"
    subprocess.run([real, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    found = boot_path(str(venv / "bin" / "python"), *flags)
    version = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import sys; print('python%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert found[0] == str(SRC)
    assert str(venv / "lib" / version / "site-packages") in found, found


def test_outside_a_venv_the_interpreters_own_directories_are_named() -> None:
    if not os.path.exists(DEBIAN_PYTHON):
        pytest.skip(f"{DEBIAN_PYTHON} is not installed")
    found = boot_path(DEBIAN_PYTHON, "-I", "-S")
    assert found[0] == str(SRC)
    assert any(p.startswith("/usr/") for p in found[1:]), found


@pytest.mark.parametrize(("rule", "command", "matches"), [
    ("Bash", "anything at all", True),
    ("Bash(*)", "anything at all", True),
    ("Bash(rm:*)", "rm -rf build", True),
    ("Bash(rm:*)", "rm", True),
    ("Bash(rm:*)", "rmdir build", False),
    ("Bash(npm run build)", "npm run build", True),
    ("Bash(npm run build)", "npm run build2", False),
    ("Bash(git * main)", "git push origin main", True),
    ("Bash(git * main)", "git push origin main2", False),
    ("Bash(a?b)", "axb", False),  # only `*` is a wildcard
    ("Read(./secrets)", "./secrets", False),
])
def test_rules_match_as_claude_code_reads_them(rule: str, command: str, matches: bool) -> None:
    assert cc.rule_matches(rule, command) is matches


def test_a_compound_command_is_matched_part_by_part(tmp_path: Path) -> None:
    assert cc.command_parts("echo a && rm -rf x; ls | grep 'a;b' & echo \"x|y\"\ntouch z") == [
        "echo a", "rm -rf x", "ls", "grep 'a;b'", 'echo "x|y"', "touch z"]
    project = tmp_path / "proj"
    (project / ".claude").mkdir(parents=True)
    (project / ".claude" / "settings.local.json").write_text(json.dumps(
        {"permissions": {"deny": ["Bash(rm:*)"], "ask": ["Bash(git push:*)"]}}))
    env = {"HOME": str(tmp_path / "home")}
    assert cc.person_rule("make && rm -rf /x", str(project), env) == ("deny", "Bash(rm:*)")
    assert cc.person_rule("git push origin", str(project), env) == ("ask", "Bash(git push:*)")
    assert cc.person_rule("echo 'rm -rf /x'", str(project), env) is None


def test_install_does_not_follow_a_project_claude_dir_swapped_for_a_link(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Checked by its real path and then opened by name, `.claude` swapped for a link in
    between made --install rewrite a file outside the project."""
    project, outside = tmp_path / "proj", tmp_path / "outside"
    (project / ".claude").mkdir(parents=True)
    outside.mkdir()
    (outside / "settings.json").write_text("{}")
    checked = cc._settings_target

    def then_swapped(path: str, scope: str, where: str) -> str:
        target = checked(path, scope, where)
        (project / ".claude").rename(tmp_path / "aside")
        (project / ".claude").symlink_to(outside)
        return target

    monkeypatch.setattr(cc, "_settings_target", then_swapped)
    with pytest.raises(ConfigError, match="nothing was changed"):
        cc.install("project", project=str(project), program=["stockade"],
                   mode="workspace-write", env={"HOME": str(tmp_path)})
    assert (outside / "settings.json").read_text() == "{}"
