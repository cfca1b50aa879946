"""git's config written inside, under the Landlock backend: its writes land, and the
guard keeps only the keys that run nothing, as bubblewrap's merge does.

Not here: that the host's file never holds a key git acts on while the command
runs. Without a mount namespace the command writes the person's file itself,
and the guard's watch takes such a key out within milliseconds, not before
(docs/landlock-backend.md).
"""

from __future__ import annotations

import pytest

from isolation import test_iso_git
from isolation import test_iso_gitconfig as iso
from isolation.conftest import Box

pytestmark = pytest.mark.isolation

repo = test_iso_git.repo


def test_everyday_config_writers_work_and_reach_the_host(repo: Box) -> None:
    iso.test_everyday_config_writers_work_and_reach_the_host(repo)


def test_keys_git_acts_on_never_reach_the_host(repo: Box) -> None:
    # The watch takes them out as they land: the command need not see them stay.
    iso.keys_never_reach_the_host(repo)


def test_overlapping_commands_and_the_person_all_keep_their_keys(repo: Box) -> None:
    iso.test_overlapping_commands_and_the_person_all_keep_their_keys(repo)


def test_a_key_written_through_a_hard_link_is_cut_at_once(repo: Box) -> None:
    """Without a mount the command can link the person's config anywhere in the
    workspace; a write through the link is seen by the file's own watch."""
    out = iso.linked_write_is_cut_while_it_runs(repo, iso.LINKED_WRITE, person=False)
    assert b"cut" in out, out


def test_a_config_lock_the_command_left_is_removed_and_its_keys_merged(repo: Box) -> None:
    iso.test_a_config_lock_the_command_left_is_removed_and_its_keys_merged(repo)


def test_a_config_lock_behind_a_directory_the_command_closed_is_removed(repo: Box) -> None:
    iso.test_a_config_lock_behind_a_directory_the_command_closed_is_removed(repo)


def test_a_config_lock_from_before_the_command_is_the_persons(repo: Box) -> None:
    iso.test_a_config_lock_from_before_the_command_is_the_persons(repo)


def test_a_git_directory_made_read_only_is_still_neutralised(repo: Box) -> None:
    """Landlock does not mediate chmod: with the write bit off `.git`, the guard could
    neither write its merge nor move the command's file away, and the fsmonitor stayed
    for the person's next `git status` (as root, no mode bit refuses the guard)."""
    box = repo
    res = box.sh("chmod a-w .git && printf '[core]\\n\\tfsmonitor = touch %s/pwned-fsmonitor\\n' "
                 '"$PWD" >> .git/config', mode="workspace-write", env=box.env(**iso.GIT_ENV))
    assert res.returncode == 0, iso.text(res)
    assert "COULD NOT" not in iso.text(res), iso.text(res)
    assert iso.config(box, "core.fsmonitor") == ""
    assert iso._host_git_runs_something(box) == []


def test_control_a_read_only_git_directory_keeps_what_was_written(repo: Box) -> None:
    box = repo
    box.host(["/bin/sh", "-c", "chmod a-w .git && printf '[core]\\n\\tfsmonitor = touch "
              "%s/pwned-fsmonitor\\n' \"$PWD\" >> .git/config"], env=box.env(**iso.GIT_ENV))
    try:
        assert iso._host_git_runs_something(box) == ["pwned-fsmonitor"]
    finally:
        (box.ws / ".git").chmod(0o755)


def test_a_git_directory_made_unreachable_does_not_stop_the_sweep(repo: Box) -> None:
    iso.test_a_git_directory_made_unreachable_does_not_stop_the_sweep(repo)


def test_a_mode_the_person_gave_their_git_directory_stays(repo: Box) -> None:
    iso.test_a_mode_the_person_gave_their_git_directory_stays(repo)
