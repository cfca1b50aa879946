"""Merging back the git config a command wrote: inert keys only, the host's own writes kept.

Each case writes the three files with the host's git (the command's copy,
the host's config meanwhile) and reads the merged result back with it, so
what is checked is what git itself will make of the file.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from stockade.gitmeta import parse_config
from stockade.gitpolicy import merge_config

pytestmark = pytest.mark.skipif(not shutil.which("git"), reason="git is not installed")


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def listing(path: Path) -> list[str]:
    return git("config", "-f", str(path), "--list").splitlines()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git("init", "-q", str(tmp_path / "r"))
    return tmp_path / "r"


def merged(repo: Path, tmp_path: Path, command: list[list[str]], host: list[list[str]]
           ) -> tuple[list[str], list[str], list[str]]:
    """Run `command` (git config argvs) on a copy, `host` on the real config, merge."""
    config = repo / ".git" / "config"
    base = config.read_text()
    ours = tmp_path / "ours"
    ours.write_text(base)
    for args in command:
        git("config", "-f", str(ours), *args)
    for args in host:
        git("config", "-f", str(config), *args)
    result = merge_config(parse_config(base) or [], parse_config(ours.read_text()) or [],
                          config.read_text())
    assert result is not None
    text, kept, dropped = result
    out = tmp_path / "merged"
    out.write_text(text)
    return listing(out), kept, dropped


def test_inert_keys_a_command_set_reach_the_host(repo: Path, tmp_path: Path) -> None:
    got, kept, dropped = merged(repo, tmp_path, [
        ["user.name", "Bob Builder"],
        ["remote.origin.url", "/srv/bare.git"],
        ["remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"],
        ["branch.main.remote", "origin"],
        ["branch.main.merge", "refs/heads/main"],
        ["submodule.lib.url", "../lib.git"],
        ["submodule.lib.active", "true"],
    ], [])
    assert "user.name=Bob Builder" in got
    assert "remote.origin.url=/srv/bare.git" in got
    assert "branch.main.merge=refs/heads/main" in got
    assert "submodule.lib.active=true" in got
    assert dropped == [] and len(kept) == 7


def test_keys_that_run_or_read_something_never_reach_the_host(repo: Path, tmp_path: Path
                                                              ) -> None:
    got, kept, dropped = merged(repo, tmp_path, [
        ["core.fsmonitor", "touch /tmp/pwned"],
        ["core.hooksPath", "evil-hooks"],
        ["include.path", "/tmp/evil.cfg"],
        ["includeIf.gitdir:/.path", "/tmp/evil.cfg"],
        ["core.sshCommand", "sh -c evil"],
        ["remote.origin.uploadpack", "sh -c evil"],
        ["alias.st", "!sh -c evil"],
        ["filter.x.smudge", "sh -c evil"],
        ["core.worktree", "/root"],
        ["user.name", "Kept"],
    ], [])
    assert not [line for line in got if "evil" in line or "pwned" in line or "/root" in line]
    assert "user.name=Kept" in got and kept == ["user.name"]
    assert set(dropped) == {"core.fsmonitor", "core.hookspath", "include.path",
                            "includeif.gitdir:/.path", "core.sshcommand",
                            "remote.origin.uploadpack", "alias.st", "filter.x.smudge",
                            "core.worktree"}


def test_what_the_host_wrote_meanwhile_stays(repo: Path, tmp_path: Path) -> None:
    got, kept, _ = merged(repo, tmp_path, [["user.email", "bot@example.com"]], [
        ["core.sshCommand", "ssh -i ~/.ssh/work"],  # the person's own, kept as it is
        ["user.name", "Person"],
        ["core.filemode", "false"],
    ])
    assert "core.sshcommand=ssh -i ~/.ssh/work" in got
    assert "user.name=Person" in got and "user.email=bot@example.com" in got
    assert "core.filemode=false" in got and kept == ["user.email"]


def test_removals_and_multiple_values_merge_as_lists(repo: Path, tmp_path: Path) -> None:
    config = repo / ".git" / "config"
    git("config", "-f", str(config), "branch.old.remote", "origin")
    got, kept, _ = merged(repo, tmp_path, [
        ["--remove-section", "branch.old"],
        ["--add", "remote.up.fetch", "+refs/heads/a:refs/remotes/up/a"],
        ["--add", "remote.up.fetch", "+refs/heads/b:refs/remotes/up/b"],
    ], [])
    assert not [line for line in got if line.startswith("branch.old.")]
    assert [line for line in got if line.startswith("remote.up.fetch=")] == [
        "remote.up.fetch=+refs/heads/a:refs/remotes/up/a",
        "remote.up.fetch=+refs/heads/b:refs/remotes/up/b"]
    assert sorted(kept) == ["branch.old.remote", "remote.up.fetch"]


def test_values_that_need_quoting_come_back_exactly(repo: Path, tmp_path: Path) -> None:
    name = 'Ann "the # dev"; \\ tab\there '
    got, _, _ = merged(repo, tmp_path, [["user.name", name],
                                        ['branch.feat/Ünï.remote', "origin"]], [])
    assert f"user.name={name}" in got
    assert "branch.feat/Ünï.remote=origin" in got


def test_a_config_the_host_cannot_parse_is_left_alone() -> None:
    assert merge_config([], [], "[core\n") is None


def test_a_header_line_with_a_variable_keeps_its_header(tmp_path: Path) -> None:
    host = "[user] name = Old\n\temail = a@b\n"
    base = parse_config(host) or []
    ours = parse_config("[user]\n\tname = New\n\temail = a@b\n") or []
    result = merge_config(base, ours, host)
    assert result is not None
    (tmp_path / "c").write_text(result[0])
    assert sorted(listing(tmp_path / "c")) == ["user.email=a@b", "user.name=New"]


def merged_text(repo: Path, tmp_path: Path, command: list[list[str]]) -> tuple[str, str]:
    """(what merging `command`'s git config writes leaves, what git itself left)."""
    config = repo / ".git" / "config"
    base = config.read_text()
    for args in command:
        git(*args, cwd=repo)
    ours = config.read_text()
    result = merge_config(parse_config(base) or [], parse_config(ours) or [], base)
    assert result is not None
    return result[0], ours


def test_a_removed_section_leaves_no_empty_header(repo: Path, tmp_path: Path) -> None:
    git("config", "branch.main.remote", "origin", cwd=repo)
    git("config", "branch.main.merge", "refs/heads/main", cwd=repo)
    got, git_wrote = merged_text(repo, tmp_path, [["config", "--unset", "branch.main.remote"],
                                                  ["config", "--unset", "branch.main.merge"]])
    assert "[branch" not in got and "[branch" not in git_wrote
    assert "repositoryformatversion" in got


def test_a_changed_key_stays_in_its_section(repo: Path, tmp_path: Path) -> None:
    git("config", "branch.main.remote", "origin", cwd=repo)
    git("config", "branch.main.merge", "refs/heads/main", cwd=repo)
    got, _ = merged_text(repo, tmp_path, [["config", "branch.main.merge", "refs/heads/up"]])
    assert got.count('[branch "main"]') == 1
    out = tmp_path / "merged"
    out.write_text(got)
    assert "branch.main.remote=origin" in listing(out)
    assert "branch.main.merge=refs/heads/up" in listing(out)


def test_a_remote_the_person_had_keeps_where_it_pushes(repo: Path, tmp_path: Path) -> None:
    """Nothing here runs, but each would send the person's next plain `git push`
    elsewhere, or make it delete their branches."""
    git("remote", "add", "origin", "/srv/real.git", cwd=repo)
    got, kept, dropped = merged(repo, tmp_path, [
        ["remote.origin.url", "/srv/attacker.git"],
        ["remote.origin.pushurl", "/srv/attacker.git"],
        ["--add", "remote.origin.push", ":refs/heads/keep-me"],
        ["remote.origin.mirror", "true"],
        ["remote.mine.url", "/srv/mine.git"],
    ], [])
    assert "remote.origin.url=/srv/real.git" in got
    assert not [k for k in got if k.startswith(("remote.origin.push", "remote.origin.mirror"))]
    assert kept == ["remote.mine.url"]
    assert sorted(dropped) == ["remote.origin.mirror", "remote.origin.push",
                               "remote.origin.pushurl", "remote.origin.url"]


def test_a_branch_of_the_persons_follows_only_their_remotes(repo: Path, tmp_path: Path
                                                            ) -> None:
    """`pushRemote`, or their branch's remote pointed at one the command added, sent the
    person's next plain `git push` to the command's URL; a new upstream on their own
    remote (`git branch --set-upstream-to origin/x`) is ordinary work."""
    git("remote", "add", "origin", "/srv/real.git", cwd=repo)
    git("config", "branch.main.remote", "origin", cwd=repo)
    git("config", "branch.main.merge", "refs/heads/main", cwd=repo)
    got, kept, dropped = merged(repo, tmp_path, [
        ["remote.exfil.url", "/srv/attacker.git"],
        ["branch.main.pushRemote", "exfil"],
        ["branch.main.remote", "exfil"],
        ["branch.main.merge", "refs/heads/x"],
        ["branch.topic.remote", "exfil"],
    ], [])
    assert "branch.main.remote=origin" in got and "branch.main.merge=refs/heads/x" in got
    assert not [k for k in got if k.startswith("branch.main.pushremote")]
    assert sorted(kept) == ["branch.main.merge", "branch.topic.remote", "remote.exfil.url"]
    assert sorted(dropped) == ["branch.main.pushremote", "branch.main.remote"]


def test_a_new_remote_fetches_only_into_its_own_namespace(repo: Path, tmp_path: Path
                                                          ) -> None:
    """With prune, `+refs/heads/*:refs/heads/*` made the person's next `git fetch --all`
    delete and overwrite their branches; `refs/tags/*:refs/tags/*` their tags."""
    got, kept, dropped = merged(repo, tmp_path, [
        ["remote.mirror.url", "/srv/m.git"],
        ["remote.mirror.fetch", "+refs/heads/*:refs/heads/*"],
        ["--add", "remote.mirror.fetch", "+refs/tags/*:refs/tags/*"],
        ["remote.good.url", "/srv/g.git"],
        ["remote.good.fetch", "+refs/heads/*:refs/remotes/good/*"],
        ["--add", "remote.good.fetch", "^refs/heads/skip"],
    ], [])
    assert "remote.good.fetch=+refs/heads/*:refs/remotes/good/*" in got
    assert not [k for k in got if k.startswith("remote.mirror.fetch")]
    assert sorted(kept) == ["remote.good.fetch", "remote.good.url", "remote.mirror.url"]
    assert dropped == ["remote.mirror.fetch"]


def test_the_repositorys_format_stays_the_persons(repo: Path, tmp_path: Path) -> None:
    """Inert, but the person's git then refuses the repository ("Expected git repo
    version <= 1")."""
    got, kept, dropped = merged(repo, tmp_path, [
        ["core.repositoryformatversion", "99"], ["core.bare", "true"], ["user.name", "B"],
    ], [])
    assert "core.repositoryformatversion=0" in got and "core.bare=false" in got
    assert kept == ["user.name"]
    assert sorted(dropped) == ["core.bare", "core.repositoryformatversion"]


def test_headers_the_person_wrote_empty_or_commented_stay(tmp_path: Path) -> None:
    host = '[alias]\n[user] # mine\n\tname = a\n\n[color]\n\tui = auto\n'
    result = merge_config(parse_config(host) or [], parse_config("[alias]\n") or [], host)
    assert result is not None
    assert result[0] == '[alias]\n[user] # mine\n'  # [color] was emptied by the merge


def test_an_escape_git_rejects_makes_the_file_unparsed(tmp_path: Path) -> None:
    bad = tmp_path / "c"
    bad.write_text('[user]\n\tname = "\\xff"\n')
    assert subprocess.run(["git", "config", "-f", str(bad), "--list"],
                          capture_output=True).returncode != 0
    assert parse_config(bad.read_text()) is None
    assert parse_config('[user]\n\tname = "a\\"b\\\\c\\td"\n') is not None


@pytest.mark.parametrize("refspec", [
    "^refs/heads/a:refs/heads/main", "+refs/heads/*:refs/remotes/x/../../heads/*",
    "+refs/heads/main:refs/remotes/x/a:refs/heads/main",
    "refs/heads/main:refs/remotes/x/./../../heads/q", "+refs/heads/main:refs/remotes/x/..",
    "refs/heads/main:refs/remotes/x/", "refs/heads/main:refs/remotes/x//a",
    "refs/heads/main:refs/remotes/x/a.lock", "refs/heads/main:refs/remotes/x/a@{1}",
])
def test_a_refspec_git_would_refuse_or_read_elsewhere_is_dropped(refspec: str) -> None:
    """Each is either refused by git, which then stops the person's `git status`,
    `fetch` and `push` until removed by hand, or read by git (split at its last colon)
    as a destination outside the remote's namespace."""
    from stockade.gitpolicy import fetches_into

    assert not fetches_into(refspec, "refs/remotes/x/")


@pytest.mark.parametrize("refspec", [
    "+refs/heads/*:refs/remotes/x/*", "refs/heads/main:refs/remotes/x/main",
    "^refs/heads/skip", "+refs/heads/feat/*:refs/remotes/x/feat/*",
])
def test_a_refspec_into_the_remotes_namespace_is_kept(refspec: str) -> None:
    from stockade.gitpolicy import fetches_into

    assert fetches_into(refspec, "refs/remotes/x/")


def test_push_default_stays_the_persons(repo: Path, tmp_path: Path) -> None:
    """`upstream`, with their branch's `merge` changed, pushed their `main` to `prod`."""
    got, kept, dropped = merged(repo, tmp_path, [["push.default", "upstream"]], [])
    assert not [k for k in got if k.startswith("push.default")]
    assert (kept, dropped) == ([], ["push.default"])
