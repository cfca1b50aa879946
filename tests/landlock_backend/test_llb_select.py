"""`backend = "auto"` on Linux, with fakes: bubblewrap, else Landlock, else a refusal.

Never a silent "none": no probe outcome here ever yields the NoneDriver.
"""

from __future__ import annotations

import pytest

from stockade import doctor
from stockade.config import SandboxConfig, load_config
from stockade.core import SandboxCore
from stockade.drivers import BUBBLEWRAP, LANDLOCK, Driver, choose_linux_backend, registry
from stockade.drivers.linux import bwrap as bwrap_mod
from stockade.drivers.linux import layers
from stockade.drivers.linux.landlock_driver import DEFAULT_MIN_ABI, LandlockDriver
from stockade.errors import ConfigError, SandboxUnavailable
from stockade.ledger import Ledger

REAL_LOCATE = bwrap_mod.locate_bwrap


def ok() -> None:
    return None


def userns_forbidden() -> None:
    raise SandboxUnavailable("bubblewrap could not create a user namespace: AppArmor says no")


def test_bubblewrap_when_its_probe_passes() -> None:
    calls: list[str] = []

    def abi() -> int:
        calls.append("abi")
        return 7

    assert choose_linux_backend(ok, abi, 3) == BUBBLEWRAP
    assert calls == []  # Landlock is not even asked


def test_landlock_when_bubblewrap_cannot_start() -> None:
    assert choose_linux_backend(userns_forbidden, lambda: 3, 3) == LANDLOCK
    assert choose_linux_backend(userns_forbidden, lambda: 7, 3) == LANDLOCK


@pytest.mark.parametrize(("abi", "minimum"), [(0, 3), (2, 3), (5, 6)])
def test_neither_fails_closed_naming_both_reasons(abi: int, minimum: int) -> None:
    with pytest.raises(SandboxUnavailable) as err:
        choose_linux_backend(userns_forbidden, lambda: abi, minimum)
    message = str(err.value)
    assert "AppArmor says no" in message
    assert f"needs ABI {minimum}" in message and "landlock_min_abi" in message
    assert ("no Landlock" if abi == 0 else f"Landlock ABI {abi}") in message


def test_other_errors_are_not_swallowed_as_unavailability() -> None:
    def broken() -> None:
        raise RuntimeError("a bug, not a missing sandbox")

    with pytest.raises(RuntimeError):
        choose_linux_backend(broken, lambda: 7, 3)


@pytest.fixture
def fake_machine(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """`registry.from_config`'s real wiring with the two probes replaced."""
    state = {"bwrap": "ok", "abi": 7}

    def probe(path: str, **_cache: object) -> None:
        if state["bwrap"] != "ok":
            raise SandboxUnavailable(str(state["bwrap"]))

    monkeypatch.setattr(bwrap_mod, "probe_userns", probe)
    monkeypatch.setattr(bwrap_mod, "locate_bwrap", lambda env, ws, configured="": "/fake/bwrap")
    monkeypatch.setattr(layers, "host_landlock_abi", lambda cache_dir="": state["abi"])
    return state


def build(env: dict[str, str] | None = None, probe: bool | None = None,
          **config: object) -> Driver:
    """The driver the pipeline would build for this config (`registry.from_config`)."""
    overrides = {} if probe is None else {"probe": probe}
    return registry.from_config(SandboxConfig(**config), env=env or {}, workspace="/w",
                                state_dir="/nonexistent-state", **overrides)


def test_auto_picks_bubblewrap(fake_machine: dict[str, object]) -> None:
    driver = build(backend="auto", landlock_min_abi=3, ledger=False, workspace_root="/r",
                   max_pids=10)
    assert driver.name == "bubblewrap"


def test_auto_falls_back_to_landlock(fake_machine: dict[str, object]) -> None:
    fake_machine["bwrap"] = "user namespaces are disabled"
    driver = build({"HOME": "/h"}, probe=False, backend="auto", landlock_min_abi=3,
                   max_pids=10)
    assert driver.name == "landlock"
    assert isinstance(driver, LandlockDriver)


def test_a_configured_bwrap_is_never_replaced_by_landlock(
        fake_machine: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    """`bwrap = "/nonexistent"` is a mistake to report (exit 125), not a reason to switch."""
    monkeypatch.setattr(bwrap_mod, "locate_bwrap", REAL_LOCATE)
    fake_machine["bwrap"] = "user namespaces are disabled"
    driver = build(backend="auto", bwrap="/nonexistent", landlock_min_abi=3)
    assert driver.name == "bubblewrap"
    with pytest.raises(SandboxUnavailable, match="/nonexistent"):
        driver.available()


def test_auto_refuses_with_both_reasons(fake_machine: dict[str, object]) -> None:
    fake_machine.update(bwrap="user namespaces are disabled", abi=2)
    with pytest.raises(SandboxUnavailable, match=r"disabled.*Landlock ABI 2"):
        build(backend="auto", landlock_min_abi=3)


def test_auto_respects_a_higher_minimum(fake_machine: dict[str, object]) -> None:
    fake_machine.update(bwrap="no", abi=5)
    with pytest.raises(SandboxUnavailable, match="needs ABI 6"):
        build(backend="auto", landlock_min_abi=6)


def test_explicit_landlock_is_landlock_whatever_bwrap_says(
        fake_machine: dict[str, object]) -> None:
    driver = build(probe=True, backend="landlock", bwrap="/x", require_landlock=True)
    assert driver.name == "landlock"


def test_explicit_landlock_too_old_is_refused_at_available(
        fake_machine: dict[str, object]) -> None:
    fake_machine["abi"] = 2
    driver = build(backend="landlock")
    with pytest.raises(SandboxUnavailable, match="ABI 2"):
        driver.available()


def test_bubblewrap_is_not_handed_landlock_options(fake_machine: dict[str, object]) -> None:
    driver = build(backend="bubblewrap", landlock_min_abi=3, ledger="/l", workspace_root="/r")
    assert driver.name == "bubblewrap"


def test_landlock_driver_abi_can_be_injected() -> None:
    assert LandlockDriver(env={}, abi=lambda: 4).abi == 4


# -- configuration and the pipeline's options -----------------------------------------------


def test_landlock_min_abi_defaults_to_three_and_validates() -> None:
    assert SandboxConfig().landlock_min_abi == DEFAULT_MIN_ABI == 3
    assert SandboxConfig(landlock_min_abi=6).landlock_min_abi == 6
    for bad in (0, "3", True):
        with pytest.raises(ConfigError, match="landlock_min_abi"):
            SandboxConfig(landlock_min_abi=bad)


def test_landlock_min_abi_from_a_file(tmp_path: object) -> None:
    import os

    path = os.path.join(str(tmp_path), "s.toml")
    with open(path, "w") as fh:
        fh.write('[sandbox]\nbackend = "landlock"\nlandlock_min_abi = 5\n')
    cfg = load_config({}, paths=[path])
    assert (cfg.backend, cfg.landlock_min_abi) == ("landlock", 5)


@pytest.mark.parametrize("backend", ["auto", "landlock"])
def test_core_passes_landlock_options(backend: str, tmp_path: object,
                                      fake_machine: dict[str, object]) -> None:
    import os

    root = str(tmp_path)
    env = {"HOME": root, "XDG_STATE_HOME": os.path.join(root, "st")}
    config = SandboxConfig(backend=backend, landlock_min_abi=4, ledger=False,
                           workspace_root=os.path.join(root, "wsr"))
    core = SandboxCore(config, env=env, ledger=Ledger(None), hooks=[])
    fake_machine["bwrap"] = "user namespaces are disabled"  # auto falls back to Landlock
    driver = core.driver(True, root)
    assert isinstance(driver, LandlockDriver)
    assert driver._min_abi == 4
    assert os.path.realpath(os.path.join(root, "wsr")) in driver._private
    assert driver._state_dir == os.path.realpath(os.path.join(root, "st", "stockade"))


# -- doctor ---------------------------------------------------------------------------------


def test_doctor_lists_the_landlock_backend_and_its_weaknesses() -> None:
    entry = doctor.landlock_status(min_abi=3)
    assert entry["min_abi"] == 3 and "abi" in entry
    weaknesses = entry["weaker_than_bubblewrap"]
    assert isinstance(weaknesses, list) and len(weaknesses) >= 6
    text = " ".join(weaknesses)
    for word in ("PID namespace", "/tmp", ".git/hooks", "chmod", "ssh-agent", "port"):
        assert word in text, word


def test_doctor_auto_choice_prefers_bubblewrap_then_landlock() -> None:
    both = {"bubblewrap": {"available": True}, "landlock": {"available": True}}
    assert doctor.auto_choice(both) == "bubblewrap"
    assert doctor.auto_choice({"bubblewrap": {"available": False},
                               "landlock": {"available": True}}) == "landlock"
    assert doctor.auto_choice({"bubblewrap": {"available": False},
                               "landlock": {"available": False}}) == ""


def test_doctor_report_exits_zero_when_either_works(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "backend_status", lambda configured="", config=None: {
        "bubblewrap": {"available": False, "why": "userns forbidden"},
        "landlock": {"available": True, "abi": 7, "min_abi": 3,
                     "weaker_than_bubblewrap": ["no PID namespace"]},
        "none": {"available": True}})
    assert doctor.report() == 0
    out = capsys.readouterr().out
    assert "auto: landlock" in out and "no PID namespace" in out
