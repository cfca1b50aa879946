"""The on-host suites run the checklists a person follows on a real Mac or Windows
machine, item for item.

Both directions matter. An item the suite runs that the checklist does not
describe (or names differently) would pass there without anyone knowing what
it proved; an item of the checklist the suite skips silently is one a host
that "ran the suite" never checked. So every row of the checklist is either
run by the suite or named in the suite's `BY_HAND`, with the reason a
person has to do it.

What a suite runs, read from its text (the suites import only on their host):
- the first element of each row of a module-level list named `CHECKLIST...`
  (`W9a-1` runs `W9a`: the part after `-` tells variants apart);
- the arguments of `@pytest.mark.checklist("M4a", ...)` on a test function.
"""

from __future__ import annotations

import ast
import os
import re

import pytest

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(os.path.dirname(TESTS), "docs")
SUITES = [
    ("windows/test_on_windows.py", "windows-verify.md"),
    ("macos/test_seatbelt_on_macos.py", "macos-verify.md"),
]


def _parse(path: str) -> ast.Module:
    with open(path, encoding="utf-8") as fh:
        return ast.parse(fh.read())


def _checklist_mark(decorator: ast.expr) -> list[str] | None:
    if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
            and decorator.func.attr == "checklist"
            and isinstance(decorator.func.value, ast.Attribute)
            and decorator.func.value.attr == "mark"):
        return [ast.literal_eval(a) for a in decorator.args]
    return None


def suite_items(path: str) -> list[str]:
    """Every item the suite runs, as written (`W9a-1`), tables first."""
    tree = _parse(path)
    items: list[str] = []
    tables = 0
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id.startswith("CHECKLIST")):
            assert isinstance(node.value, ast.List), node.targets[0].id
            tables += 1
            for row in node.value.elts:
                assert isinstance(row, ast.Tuple), ast.unparse(row)
                items.append(ast.literal_eval(row.elts[0]))
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                marked = _checklist_mark(decorator)
                if marked is not None:
                    assert marked, f"{node.name}: @pytest.mark.checklist() names no item"
                    items += marked
    assert tables, f"no CHECKLIST table in {path}"
    return items


def by_hand(path: str) -> dict[str, str]:
    """{item: why a person runs it} from the suite's `BY_HAND`."""
    for node in _parse(path).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id == "BY_HAND" and value is not None:
            manual = ast.literal_eval(value)
            assert isinstance(manual, dict)
            return manual
    raise AssertionError(f"no BY_HAND in {path}: name the items a person runs, or {{}}")


def checklist_rows(doc: str) -> list[str]:
    with open(os.path.join(DOCS, doc), encoding="utf-8") as fh:
        return re.findall(r"^\| ([A-Z][0-9][0-9A-Za-z]*) \|", fh.read(), re.M)


@pytest.mark.parametrize(("suite", "doc"), SUITES)
def test_every_item_the_on_host_suite_runs_is_in_its_checklist(suite: str, doc: str) -> None:
    rows = set(checklist_rows(doc))
    items = suite_items(os.path.join(TESTS, suite))
    assert items
    assert [i for i in items if i.split("-")[0] not in rows] == []


@pytest.mark.parametrize(("suite", "doc"), SUITES)
def test_every_checklist_item_is_run_by_the_suite_or_said_to_be_by_hand(
        suite: str, doc: str) -> None:
    rows = checklist_rows(doc)
    assert len(rows) == len(set(rows)), f"an ID twice in {doc}"
    run = {i.split("-")[0] for i in suite_items(os.path.join(TESTS, suite))}
    manual = by_hand(os.path.join(TESTS, suite))
    assert [r for r in rows if r not in run and r not in manual] == []
    assert sorted(run & set(manual)) == [], "run by the suite and by hand as well"
    assert [i for i in manual if i not in rows] == [], f"BY_HAND names items {doc} lacks"
    assert [i for i, why in manual.items() if len(why.split()) < 4] == [], \
        "each by-hand item says why a person has to run it"
