"""Rules about the shape of the tree that no behavioural test would notice."""

from __future__ import annotations

import importlib.machinery
import os
import sys

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _top_level_names_from_tests() -> dict[str, str]:
    """Every name the test layout makes importable at top level, with its path.

    tests/ is on sys.path (its conftest.py), so each directory and module in
    it is a top-level name. pytest also puts each test directory without an
    `__init__.py` on sys.path, so what that directory holds is top-level too.
    """
    names: dict[str, str] = {}

    def add(directory: str) -> None:
        for entry in sorted(os.listdir(directory)):
            path = os.path.join(directory, entry)
            if entry.startswith((".", "_")):
                continue
            if os.path.isdir(path):
                names.setdefault(entry, path)
            elif entry.endswith(".py"):
                names.setdefault(entry[:-3], path)

    add(TESTS)
    for root, dirs, _files in os.walk(TESTS):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        if root != TESTS and not os.path.exists(os.path.join(root, "__init__.py")):
            add(root)
    return names


def test_no_test_directory_or_module_shadows_an_importable_package() -> None:
    """A test directory named like a package hides it, or joins it.

    tests/agents (no `__init__.py`) was a namespace portion of the optional
    `agents` package (the OpenAI Agents SDK): which one `import agents`
    found depended on the order of sys.path, and the adapter's tests failed
    in a full run that passed alone. So no name the layout puts at top level
    may also be the standard library's or found on sys.path outside tests/.
    """
    outside = [p for p in sys.path
               if not os.path.abspath(p or os.curdir).startswith(TESTS)]
    clashes = []
    for name, path in _top_level_names_from_tests().items():
        if name in sys.stdlib_module_names or name in sys.builtin_module_names:
            clashes.append(f"{os.path.relpath(path, TESTS)} shadows the standard library's {name}")
            continue
        spec = importlib.machinery.PathFinder.find_spec(name, outside)
        if spec is not None:
            where = spec.origin or list(spec.submodule_search_locations or [])
            clashes.append(f"{os.path.relpath(path, TESTS)} shadows {name} ({where})")
    assert not clashes, "rename these under tests/:\n" + "\n".join(clashes)
