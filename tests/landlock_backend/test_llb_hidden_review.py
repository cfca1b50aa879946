"""The review's findings under the Landlock backend (a writable root holding an area
is refused there, so that one is bubblewrap's alone)."""

from __future__ import annotations

import pytest

from isolation import test_iso_hidden_review as iso
from isolation.conftest import Box


def test_a_store_linked_into_an_area_stays_hidden(box: Box) -> None:
    iso.test_a_store_linked_into_an_area_stays_hidden(box)


def test_a_dotenv_linked_out_of_the_workspace_stays_hidden(box: Box) -> None:
    iso.test_a_dotenv_linked_out_of_the_workspace_stays_hidden(box)


def test_a_virtualenv_named_dotenv_keeps_working(box: Box) -> None:
    iso.test_a_virtualenv_named_dotenv_keeps_working(box)


@pytest.mark.parametrize("project", ['["default"]', '["default", "dotenv", "!.env"]'])
def test_a_project_file_cannot_drop_the_persons_patterns(box: Box, project: str) -> None:
    iso.test_a_project_file_cannot_drop_the_persons_patterns(box, project)
