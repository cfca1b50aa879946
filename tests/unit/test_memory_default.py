"""The default memory bound: derived from the machine, a cgroup's alone, 0 turns it off.

Pure decisions here; tests/isolation/test_iso_memory_default.py runs them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stockade import doctor
from stockade.config import SandboxConfig, load_config
from stockade.drivers.linux.host import limits
from stockade.drivers.linux.host.limits import (
    FROM_DEFAULT,
    FROM_NOTHING,
    FROM_SETTING,
    default_memory_mb,
    memory_in_force,
)
from stockade.errors import ConfigError

CGROUPS = ("cgroup-v2", "cgroup-v1", "systemd-scope")


@pytest.mark.parametrize(("total_mib", "bound"), [
    (512, 256),        # the host keeps half of a tiny machine
    (2048, 1024),
    (4096, 3072),      # from here the host keeps a quarter, at least 1 GiB
    (8192, 6144),
    (16384, 12288),
    (65536, 49152),
])
def test_the_default_is_three_quarters_of_memory_leaving_the_host_at_least_1_gib(
        total_mib: int, bound: int) -> None:
    meminfo = f"MemTotal:       {total_mib << 10} kB\nMemFree:        1 kB\n"
    assert default_memory_mb(meminfo) == bound


@pytest.mark.parametrize("meminfo", ["", "MemFree: 12 kB\n", "MemTotal: lots\n"])
def test_no_readable_memtotal_no_default(meminfo: str) -> None:
    assert default_memory_mb(meminfo) is None


@pytest.mark.parametrize("kind", [*CGROUPS, "rlimit"])
def test_an_explicit_bound_wins_on_every_mechanism(kind: str) -> None:
    assert memory_in_force(512, 18000, kind) == (512, FROM_SETTING)


@pytest.mark.parametrize("kind", CGROUPS)
def test_the_default_holds_where_a_cgroup_bounds_the_tree(kind: str) -> None:
    assert memory_in_force(None, 18000, kind) == (18000, FROM_DEFAULT)


def test_the_default_is_never_a_per_process_rlimit() -> None:
    assert memory_in_force(None, 18000, "rlimit") == (None, FROM_NOTHING)


@pytest.mark.parametrize("kind", [*CGROUPS, "rlimit"])
def test_zero_leaves_no_bound(kind: str) -> None:
    assert memory_in_force(None, None, kind) == (None, FROM_NOTHING)


def test_config_unset_is_the_machines_default_zero_none_a_number_its_own() -> None:
    machine = limits.machine_memory_default()
    assert machine, "this machine's /proc/meminfo has no MemTotal"
    assert SandboxConfig().memory_default_mb() == machine
    assert SandboxConfig(max_memory_mb=0).memory_default_mb() is None
    # A number reaches each command as its ceiling (capabilities), not as a default.
    assert SandboxConfig(max_memory_mb=512).memory_default_mb() is None


@pytest.mark.parametrize("value", [-1, True, "1G"])
def test_a_bound_that_is_not_a_count_is_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="max_memory_mb must be 0 or a positive integer"):
        SandboxConfig(max_memory_mb=value)  # type: ignore[arg-type]


def _project(tmp_path: Path, body: str) -> tuple[dict[str, str], str]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "stockade.toml").write_text("[sandbox]\n" + body)
    return {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}, str(ws)


@pytest.mark.parametrize("value", ["0", "huge"])
def test_a_project_file_cannot_lift_the_default_untrusted(tmp_path: Path, value: str) -> None:
    machine = limits.machine_memory_default()
    assert machine
    shown = "0" if value == "0" else str(machine + 1)
    env, ws = _project(tmp_path, f"max_memory_mb = {shown}\n")
    with pytest.raises(ConfigError, match="max_memory_mb"):
        load_config(env, ws)


def test_a_project_file_may_lower_the_default(tmp_path: Path) -> None:
    env, ws = _project(tmp_path, "max_memory_mb = 256\n")
    assert load_config(env, ws).max_memory_mb == 256


def test_control_a_user_config_may_turn_the_default_off(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg" / "stockade"
    cfg.mkdir(parents=True)
    (cfg / "config.toml").write_text("[sandbox]\nmax_memory_mb = 0\n")
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "stockade.toml").write_text("[sandbox]\nmax_memory_mb = 0\n")
    assert load_config(env, str(ws)).memory_default_mb() is None


def test_doctor_names_the_bound_and_where_it_comes_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "_MECHANISM", ("cgroup-v2", {"": "/x"}, "test"))
    monkeypatch.setattr(limits, "machine_memory_default", lambda: 6144)
    assert doctor.memory_limit(SandboxConfig()).startswith("6144 MiB per command (default:")
    assert doctor.memory_limit(SandboxConfig(max_memory_mb=512)).startswith(
        "512 MiB per command (max_memory_mb)")
    assert doctor.memory_limit(SandboxConfig(max_memory_mb=0)) == "none (max_memory_mb = 0)"
    monkeypatch.setattr(limits, "_MECHANISM", ("rlimit", {}, "test"))
    assert doctor.memory_limit(SandboxConfig()).startswith("none: the default (6144 MiB)")
