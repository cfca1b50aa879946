"""git in workspace-write under the Landlock backend.

git works (objects, index and refs are the workspace's); hooks and config
cannot be made read-only without a mount namespace, so this backend puts
them back after each run. What a host-side `git commit` would execute is
therefore checked after the run -- which holds -- and during it, which
does not and is a strict xfail (docs/landlock-backend.md).
"""

from __future__ import annotations

import pytest

from isolation import test_iso_git as iso
from isolation.conftest import Box, attempts, snapshot, text

pytestmark = pytest.mark.isolation

repo = iso.repo  # the isolation suite's fixture: a committed git repository in the box

DURING_RUN = ("without a mount namespace .git/hooks and .git/config in a writable workspace "
              "are writable while the command runs (Landlock's rights on the workspace reach "
              "everything in it): a write lands, and the guard's watch puts it back within "
              "milliseconds, not before")


def test_git_status_add_commit_work_inside(repo: Box) -> None:
    iso.test_git_status_add_commit_work_inside(repo)


@pytest.mark.xfail(strict=True, reason=DURING_RUN)
def test_git_hooks_and_config_cannot_be_changed_during_the_run(repo: Box) -> None:
    iso.test_git_hooks_and_config_cannot_be_changed(repo)


def test_git_hooks_and_config_are_restored_after_the_run(repo: Box) -> None:
    box = repo
    before = iso.guarded(box)
    info0 = snapshot(box.ws / ".git" / "info")
    res = box.sh(iso.GIT_META_ATTACKS, mode="workspace-write", env=box.env(**iso.GIT_ENV))
    tried = attempts(res)
    assert tried.get("hook-write") and tried.get("config-append"), text(res)  # they ran
    assert iso.guarded(box) == before
    assert snapshot(box.ws / ".git" / "info") == info0
    assert not (box.ws / "pwned").exists()
    # What a person types next on the host runs nothing the command wrote.
    assert not iso._host_commit_runs_planted_hook(box)


def test_replacing_dot_git_cannot_plant_a_hook(repo: Box) -> None:
    iso.test_replacing_dot_git_cannot_plant_a_hook(repo)


def test_commondir_cannot_redirect_host_git(repo: Box) -> None:
    iso.test_commondir_cannot_redirect_host_git(repo)


def test_control_host_commit_would_run_a_planted_hook(repo: Box) -> None:
    iso.test_control_host_commit_would_run_a_planted_hook(repo)


def test_git_metadata_untouched_by_read_only_commit_attempt(repo: Box) -> None:
    iso.test_git_metadata_untouched_by_read_only_commit_attempt(repo)


def test_planted_gitdir_pointer_cannot_steer_stockade_outside_workspace(repo: Box) -> None:
    iso.test_planted_gitdir_pointer_cannot_steer_stockade_outside_workspace(repo)


def test_dot_git_replaced_by_a_symlink_is_removed_not_written_through(repo: Box) -> None:
    """The restore must never follow a link the command made: `.git -> $HOME`
    would have it write the baseline's hooks and config into HOME."""
    box = repo
    home0 = snapshot(box.home)
    res = box.sh('mv .git .git-moved && ln -s "$HOME" .git && echo done', mode="workspace-write")
    assert "done" in text(res), text(res)
    assert snapshot(box.home) == home0
    assert not (box.ws / ".git").is_symlink()
    assert (box.ws / ".git-moved" / "HEAD").exists()  # the repository itself is untouched


def test_hook_planted_during_a_run_is_put_back_at_once(repo: Box) -> None:
    """Landlock cannot hold `.git/hooks` read-only, so a hook a running command writes
    exists for the window the watch takes to put the directory back: milliseconds, and
    the host's `git commit` after it runs nothing while the command still runs."""
    box = repo
    plant = 'printf "%s" "$1" > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit'
    ran, window, out = iso.commit_during(box, iso.plant_and_time(plant, ".git/hooks/pre-commit"),
                                         ("--backend", "landlock"))
    assert not ran, "host git ran a hook the sandbox planted while the command was running"
    assert 0 <= window < iso.WINDOW_MS, out


def test_commondir_planted_during_a_run_is_never_live(repo: Box) -> None:
    box = repo
    plant = ('cp -a .git/. .evil/ && printf "%s" "$1" > .evil/hooks/pre-commit && '
             'chmod +x .evil/hooks/pre-commit && echo ../.evil > .git/commondir')
    ran, window, out = iso.commit_during(box, iso.plant_and_time(plant, ".git/commondir"),
                                         ("--backend", "landlock"))
    assert not ran, "host git ran a hook the sandbox planted while the command was running"
    assert 0 <= window < iso.WINDOW_MS, out


def test_crafted_gitlinks_cannot_steer_the_sweep_out_of_the_workspace(repo: Box) -> None:
    iso.test_crafted_gitlinks_cannot_steer_the_sweep_out_of_the_workspace(repo)


def test_a_fifo_where_stockade_reads_cannot_hang_the_workspace(repo: Box) -> None:
    iso.test_a_fifo_where_stockade_reads_cannot_hang_the_workspace(repo)


def test_an_agent_or_editor_config_made_below_the_top_is_moved_away(box: Box) -> None:
    from isolation import test_iso_trust as trust

    trust.test_an_agent_or_editor_config_made_below_the_top_is_moved_away(box)
