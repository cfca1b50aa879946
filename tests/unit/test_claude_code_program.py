"""The line the Claude Code hook writes names the packages of the environment it runs
from, when the hook itself runs as installed: `python -I -S`, where `site` never ran."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
