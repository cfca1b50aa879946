"""The Claude Code hook's host side: the line it writes names the packages of the
environment it runs from (as installed, `python -I -S`, where `site` never ran),
the person's permission rules are matched against the command the agent wrote,
and --install writes only inside the project."""

from __future__ import annotations

import ast
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from stockade.adapters import claude_code as cc
from stockade.adapters import claude_settings as rules
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
    assert rules.rule_matches(rule, command) is matches


@pytest.fixture
def rm_denied(tmp_path: Path) -> tuple[str, dict[str, str]]:
    """A project whose local settings deny `rm` and ask before `git push`."""
    project = tmp_path / "proj"
    (project / ".claude").mkdir(parents=True)
    (project / ".claude" / "settings.local.json").write_text(json.dumps(
        {"permissions": {"deny": ["Bash(rm:*)", "Bash(git push --force:*)"],
                         "ask": ["Bash(git push:*)"]}}))
    return str(project), {"HOME": str(tmp_path / "home")}


#: Forms of `rm f` that Claude Code itself denies under `Bash(rm:*)`, each either
#: denied here or, where it is not taken apart, asked about.
RM_FORMS = {
    "deny": ["rm f", "make && rm -rf /x", "FOO=1 rm f", "\\rm f", '"rm" f', "'rm' f",
             "r\\m f", "/bin/rm f", "rm\tf", "ls | rm f", "true;rm f", "a || rm f",
             "git  push --force", "GIT_DIR=.git git push --force",
             # A `#` inside a word, a redirection before the command (third review).
             "echo a#b; rm -f x", "echo ''#; rm -f z", "ls;#\nrm x", ">out rm -f y",
             "2>/dev/null rm -f y"],
    "ask": ["timeout 5 rm f", "nice rm f", "nohup rm f", "time rm f", "env rm f",
            "command rm f", "exec rm f", "echo f | xargs rm", "(rm f)", "{ rm f; }", "! rm f",
            "if true; then rm f; fi", "for f in f; do rm $f; done", "case x in x) rm f;; esac",
            "echo $(rm f)", "echo `rm f`", "cat <(rm f)", "bash -c 'rm f'", "x=rm; $x f",
            "echo 'x' && \\\nrm f", "echo 'unclosed", "git push origin",
            # Wrappers Claude Code reads through, a heredoc, a command too long to take apart.
            "ionice rm -f v", "taskset 1 rm -f x", "chrt -o 0 rm -f v",
            "strace -o /dev/null rm -f v", "noglob rm -f w", "cat <<EOF\nrm x\nEOF",
            "x" * 70_000 + "; rm f"],
}


@pytest.mark.parametrize(("kind", "command"), [(k, c) for k, cs in RM_FORMS.items() for c in cs])
def test_the_persons_rules_stop_every_form_claude_code_stops(
        rm_denied: tuple[str, dict[str, str]], kind: str, command: str) -> None:
    project, env = rm_denied
    ruled = rules.person_rule(command, project, env)
    assert ruled is not None and ruled[0] == kind, ruled


@pytest.mark.parametrize("command", ["echo 'rm -rf /x'", "ls -l; make test", "grep rm f",
                                     "git push2", "rmdir x"])
def test_what_no_rule_names_runs(rm_denied: tuple[str, dict[str, str]], command: str) -> None:
    project, env = rm_denied
    assert rules.person_rule(command, project, env) is None


def test_rules_come_from_every_settings_file_claude_code_reads(tmp_path: Path) -> None:
    """A user's CLAUDE_CONFIG_DIR and a project's file linked to a dotfiles directory
    were not read, and their rules were lost."""
    project, conf, dotfiles = tmp_path / "proj", tmp_path / "conf", tmp_path / "dotfiles"
    for d in (project / ".claude", conf, dotfiles):
        d.mkdir(parents=True)
    (conf / "settings.json").write_text(json.dumps({"permissions": {"deny": ["Bash(touch:*)"]}}))
    (dotfiles / "local.json").write_text(json.dumps({"permissions": {"deny": ["Bash(mv:*)"]}}))
    (project / ".claude" / "settings.local.json").symlink_to(dotfiles / "local.json")
    env = {"HOME": str(tmp_path / "home"), "CLAUDE_CONFIG_DIR": str(conf)}
    assert rules.person_rule("touch x", str(project), env) == (
        "deny", "your Claude Code permission rule Bash(touch:*) denies it")
    assert rules.person_rule("mv a b", str(project), env) is not None
    assert rules.person_rule("timeout 1 ls", str(project), env) is not None  # rules exist: asked
    # Without any rule, nothing is asked.
    bare = {"HOME": str(tmp_path)}
    assert rules.person_rule("timeout 1 ls", str(tmp_path / "none"), bare) is None


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


def test_reinstalling_keeps_nothing_that_stops_the_hook_deciding() -> None:
    """`async`, `if` or `once` on an earlier entry (a cloned repository's settings)
    survived --install, and the next call ran unsandboxed."""
    old = {"type": "command", "command": "stockade hook claude-code", "async": True,
           "if": "Bash(zzz:*)", "once": True, "timeout": 30, "statusMessage": "checking"}
    current = {"hooks": {"PreToolUse": [{"matcher": cc.MATCHER, "hooks": [old]}]}}
    merged = cc.merged_settings(current, "NEW")
    assert merged is not None
    (hook,) = merged[0]["hooks"]["PreToolUse"][0]["hooks"]
    assert hook == {"type": "command", "command": "NEW", "onFailure": "block", "timeout": 30,
                    "statusMessage": "checking"}
    assert merged[0][cc.NO_SKILL_SHELL] is True


@pytest.mark.parametrize("key", ["disableAllHooks", "allowManagedHooksOnly"])
def test_install_refuses_where_hooks_are_turned_off(tmp_path: Path, key: str) -> None:
    project = tmp_path / "proj"
    (project / ".claude").mkdir(parents=True)
    local = project / ".claude" / "settings.local.json"
    local.write_text(json.dumps({key: True}))
    with pytest.raises(ConfigError, match=rf"settings\.local\.json \({key}\) turns"):
        cc.install("project", project=str(project), program=["stockade"],
                   mode="workspace-write", env={"HOME": str(tmp_path)})
    assert not (project / ".claude" / "settings.json").exists()


def test_install_for_the_user_follows_claude_config_dir(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    cc.install("user", project=str(tmp_path), program=["stockade"], mode="read-only",
               env={"HOME": str(tmp_path / "home"), "CLAUDE_CONFIG_DIR": str(conf)})
    assert "hook claude-code" in (conf / "settings.json").read_text()
    assert not (tmp_path / "home" / ".claude").exists()


def test_the_host_cd_goes_back_when_the_name_was_swapped_for_a_link(tmp_path: Path) -> None:
    """`--run` checks the directory by its real path; the shell then enters it by name,
    which a background call can swap for a link out of the workspace meanwhile."""
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "sub").mkdir(parents=True)
    outside.mkdir()
    # A stand-in for `--run`: it names ws/sub on descriptor 3, then the name is swapped.
    fake = ('printf "%s/." "$WS/sub" >&3; mv "$WS/sub" "$WS/sub-aside"; '
            'ln -s "$OUTSIDE" "$WS/sub"')
    line = cc.rewrite("true", program=["/bin/sh", "-c", fake, "run"], workspace=str(ws),
                      mode="workspace-write", session="s", timeout=5, config_path=None,
                      background=False)
    out = subprocess.run(["/bin/bash", "-c", f"eval {shlex.quote(line)}; pwd -P"], cwd=ws,
                         env={"WS": str(ws), "OUTSIDE": str(outside), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == str(ws), out


def test_the_host_cd_enters_the_directory_the_command_ended_in(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    line = cc.rewrite("true", program=["/bin/sh", "-c", 'printf "%s/." "$WS/sub" >&3', "run"],
                      workspace=str(ws), mode="workspace-write", session="s", timeout=5,
                      config_path=None, background=False)
    out = subprocess.run(["/bin/bash", "-c", f"eval {shlex.quote(line)}; pwd -P"], cwd=ws,
                         env={"WS": str(ws), "PATH": "/usr/bin:/bin"}, capture_output=True,
                         text=True, timeout=30)
    assert out.stdout.strip() == str(ws / "sub"), out
