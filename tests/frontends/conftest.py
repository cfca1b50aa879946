"""The isolation suite's runners (root, an unprivileged user) for the front-end tests
that run stockade's command line, or an agent framework driving stockade, as the
person would (a test module's own `box` fixture takes precedence).

A module that sets `RUNS_INSTALLED_PACKAGES = True` runs the frameworks the venv
has installed (Inspect, mini-swe-agent, Deep Agents, Datasette): its user runner
gets `packages_site`, every package of the venv beside this tree's stockade where
that user can read them, since the venv is not reachable from an ordinary account.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from isolation.conftest import (
    RUNNER_NAMES,
    SRC,
    Box,
    Runner,
    discard,
    iso_root,  # noqa: F401  (fixture)
    make_runner,
    populate,
    unpriv_site,  # noqa: F401  (fixture)
)


@pytest.fixture(scope="module", params=RUNNER_NAMES)
def runner(request: pytest.FixtureRequest, iso_root: Path) -> Runner:  # noqa: F811
    made = make_runner(request, iso_root)
    if made.switches_user and getattr(request.module, "RUNS_INSTALLED_PACKAGES", False):
        made = dataclasses.replace(made, site=request.getfixturevalue("packages_site"))
    return made


@pytest.fixture
def box(runner: Runner, iso_root: Path) -> Iterator[Box]:  # noqa: F811
    b = populate(Box, runner, iso_root)
    yield b
    discard(b)


#: stockade's extras for the frameworks these modules drive.
EXTRAS = ("inspect", "mini-swe-agent", "deepagents", "web")


def _distributions() -> list[metadata.Distribution]:
    """stockade and everything its `EXTRAS` require, by the installed metadata: the
    rest of the venv (Ray, the OpenAI Agents SDK, ...) is not linked for nothing."""
    found: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, str]] = set()
    todo: list[tuple[str, tuple[str, ...]]] = [("stockade", EXTRAS)]
    while todo:
        name, extras = todo.pop()
        key = canonicalize_name(name)
        if all((key, e) in seen for e in ("", *extras)):
            continue
        seen.update((key, e) for e in ("", *extras))
        try:
            dist = found.setdefault(key, metadata.distribution(name))
        except metadata.PackageNotFoundError:
            continue  # a requirement for another platform or Python
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate({"extra": e})
                                         for e in ("", *extras)):
                todo.append((req.name, tuple(req.extras)))
    return list(found.values())


def _link_or_copy(src: Path, dst: Path) -> None:
    """A hard link where the file is already world-readable (tens of thousands of files
    in seconds, not a copy of a gigabyte); a world-readable copy otherwise."""
    mode = src.stat().st_mode
    if mode & 0o004:
        try:
            os.link(src, dst)
            return
        except OSError:
            pass  # another filesystem
    shutil.copy2(src, dst)
    os.chmod(dst, (mode & 0o755) | 0o444)


@pytest.fixture(scope="session")
def packages_site(iso_root: Path) -> Iterator[str]:  # noqa: F811
    """The installed files of `_distributions()`, their bytecode and metadata (entry
    points) included, and this tree's `src/stockade` in place of the editable install's
    pointer."""
    top = Path(tempfile.mkdtemp(prefix="site-", dir=iso_root))
    os.chmod(top, 0o755)
    site = top / "site"
    purelib = Path(sysconfig.get_paths()["purelib"])
    made: set[Path] = set()
    try:
        for dist in _distributions():
            for file in dist.files or []:
                if ".." in file.parts or file.name.startswith(("__editable__", "_editable_impl_")):
                    continue  # scripts in bin/, the editable install's finder
                dst = site / file
                if dst.parent not in made:
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    made.add(dst.parent)
                try:
                    _link_or_copy(purelib / file, dst)
                except FileNotFoundError:
                    pass  # in RECORD, removed since (a .pyc pip listed)
        shutil.copytree(SRC / "stockade", site / "stockade",
                        ignore=shutil.ignore_patterns("__pycache__"), copy_function=shutil.copy)
        for dirpath, _dirs, files in os.walk(site):
            os.chmod(dirpath, 0o755)
            if dirpath.startswith(str(site / "stockade")):
                for name in files:
                    os.chmod(os.path.join(dirpath, name), 0o644)
        yield str(site)
    finally:
        shutil.rmtree(top, ignore_errors=True)


PythonOnHost = Callable[..., "subprocess.CompletedProcess[bytes]"]


@pytest.fixture
def host_python(box: Box) -> PythonOnHost:
    """Runs Python code on the host as the box's runner, with its interpreter and its site
    first on sys.path (`-I`: nothing of the caller's PYTHON* variables or user site)."""

    def run(code: str, *args: str, **kw: object) -> subprocess.CompletedProcess[bytes]:
        boot = f"import sys; sys.path.insert(0, {box.runner.site!r})\n"
        return box.host([box.runner.python, "-I", "-c", boot + code, *args], **kw)

    return run


DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="session")
def documented() -> Callable[[str, str], str]:
    """The first ```LANG block under the `## HEADING...` section of docs/agents.md: a test
    runs what a person copies, not a copy of it that can drift."""
    text = (DOCS / "agents.md").read_text()

    def block(heading: str, lang: str) -> str:
        section = text.split(f"\n## {heading}", 1)[1].split("\n## ", 1)[0]
        return section.split(f"```{lang}\n", 1)[1].split("```", 1)[0]

    return block
