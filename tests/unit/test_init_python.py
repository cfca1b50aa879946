"""Which interpreter the init runs on: stockade's own, or the distribution's build of the
same version when stockade's links libpython as a shared library (pyenv)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from stockade.drivers.linux import layers

SHARED = os.path.exists(os.path.join(
    os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))), "lib",
    f"libpython{sys.version_info[0]}.{sys.version_info[1]}.so.1.0"))


def test_the_chosen_interpreter_has_what_the_init_and_the_shells_import() -> None:
    python = layers.init_python()
    res = subprocess.run([python, "-I", "-S", "-c",
                          "import _ctypes, resource, termios, fcntl, select, _socket, "
                          "struct, json, signal, errno, tempfile, subprocess, ctypes"],
                         capture_output=True, timeout=30)
    assert res.returncode == 0, res.stderr


@pytest.mark.skipif(not SHARED, reason="stockade's interpreter here is not a shared-library "
                    "build: the init runs on it, and there is no other choice to test")
def test_a_shared_build_hands_the_init_to_the_systems_one_of_its_version() -> None:
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    if not os.path.isfile(f"/usr/bin/{version}"):
        pytest.skip(f"no /usr/bin/{version} here")
    assert layers._system_build(os.path.realpath(sys.executable)) == f"/usr/bin/{version}"


def test_without_a_module_the_init_needs_it_stays_on_stockades_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layers, "_INIT_NEEDS", (*layers._INIT_NEEDS, "_no_such_module."))
    monkeypatch.setattr(layers, "_INIT_PYTHONS", {})
    assert layers.init_python() == os.path.realpath(sys.executable)


def test_an_interpreter_built_without_a_shared_libpython_keeps_the_init(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layers, "_INIT_PYTHONS", {})
    real = os.path.exists
    monkeypatch.setattr(layers.os.path, "exists",
                        lambda p: False if "libpython" in str(p) else real(p))
    assert layers.init_python() == os.path.realpath(sys.executable)
