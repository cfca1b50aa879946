"""The Windows backend as the rest of stockade sees it: the registry, config, trust."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stockade.config import SandboxConfig, load_config
from stockade.drivers import registry
from stockade.errors import ConfigError


def test_offered_on_windows_only() -> None:
    assert "windows" in registry.choices("win32")
    assert "windows" not in registry.choices("linux")
    assert registry.platform_backend("win32") == "windows"
    assert "windows" in registry.names()  # a team's config names it on every machine


def test_its_options_are_read_without_importing_the_driver() -> None:
    # Config validation on Linux reads them; the driver's module must stay unloaded.
    code = ("import sys; from stockade.drivers import registry; "
            "keys = registry.config_options(); "
            "assert 'windows_allow_job_only' in keys, keys; "
            "assert 'stockade.drivers.windows.driver' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_built_from_config_with_its_own_keys() -> None:
    config = SandboxConfig(backend="windows",
                           backend_options={"windows_allow_job_only": True,
                                            "windows_read_paths": r"C:\tools;D:\sdk"})
    driver = registry.lookup("windows").load().from_config(
        config, env={}, workspace="", state_dir="")
    assert driver.name == "windows"
    assert driver.allow_job_only is True  # type: ignore[attr-defined]
    assert driver.read_paths == (r"C:\tools", r"D:\sdk")  # type: ignore[attr-defined]
    default = registry.lookup("windows").load().from_config(
        SandboxConfig(backend="windows"), env={}, workspace="", state_dir="")
    assert default.allow_job_only is False  # type: ignore[attr-defined]


@pytest.mark.parametrize("line", ["windows_allow_job_only = true",
                                  "windows_allow_open_network = true",
                                  'windows_tier = "job"'])
def test_a_project_file_cannot_loosen_it(tmp_path: Path, line: str) -> None:
    # The workspace is written by the adversary: a stockade.toml there that lets
    # commands run on the job-object tier (no filesystem boundary) is refused.
    (tmp_path / "stockade.toml").write_text(f"[sandbox]\n{line}\n")
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
           "XDG_STATE_HOME": str(tmp_path / "state")}
    with pytest.raises(ConfigError, match=line.split(" ")[0]):
        load_config(env, str(tmp_path))
