"""The on-host suites run items of the checklists a person follows on a real Mac or
Windows machine: an item the suite runs that the checklist does not describe (or
names differently) would pass there without anyone knowing what it proved."""

from __future__ import annotations

import ast
import os
import re

import pytest

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(os.path.dirname(TESTS), "docs")


def suite_items(path: str) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "CHECKLIST"):
            assert isinstance(node.value, ast.List)
            return [ast.literal_eval(item.elts[0])  # type: ignore[attr-defined]
                    for item in node.value.elts]
    raise AssertionError(f"no CHECKLIST in {path}")


@pytest.mark.parametrize(("suite", "doc"), [
    ("windows/test_on_windows.py", "windows-verify.md"),
    ("macos/test_seatbelt_on_macos.py", "macos-verify.md"),
])
def test_every_item_the_on_host_suite_runs_is_in_its_checklist(suite: str, doc: str) -> None:
    with open(os.path.join(DOCS, doc), encoding="utf-8") as fh:
        rows = set(re.findall(r"^\| ([A-Z][0-9A-Za-z]*) \|", fh.read(), re.M))
    items = suite_items(os.path.join(TESTS, suite))
    assert items
    assert [i for i in items if i.split("-")[0] not in rows] == []
