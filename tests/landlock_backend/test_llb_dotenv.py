"""The dotenv preset under the Landlock backend: hidden in read-only mode; in a
writable workspace, where Landlock cannot take a file back out of a grant, refused."""

from __future__ import annotations

from isolation import test_iso_dotenv as iso
from isolation.conftest import Box, text


def test_control_the_command_reads_the_dotenv_files_without_the_preset(box: Box) -> None:
    iso.test_control_the_command_reads_the_dotenv_files_without_the_preset(box)


def test_the_dotenv_preset_hides_env_files_in_read_only_mode(box: Box) -> None:
    iso.test_the_dotenv_preset_hides_env_files_and_keeps_examples(box, "read-only")


def test_a_writable_workspace_with_the_preset_is_refused_not_run_unhidden(box: Box) -> None:
    iso._project(box)
    box.user_config('unreadable = ["default", "dotenv"]')
    res = box.sh(iso.READ, mode="workspace-write")
    assert res.returncode == 125, text(res)
    assert "DOTENV-SECRET" not in text(res)
    assert "bubblewrap" in text(res), text(res)


def test_a_dotenv_file_made_between_commands_is_hidden_from_the_next(box: Box) -> None:
    iso.test_a_dotenv_file_made_between_commands_is_hidden_from_the_next(
        box, ', backend="landlock"', mode="read-only")
