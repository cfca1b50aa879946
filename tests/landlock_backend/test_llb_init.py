"""The init's additions for the Landlock backend, run for real without bwrap.

`cwd`, `drop_caps`, `parent` and `reaper` are config keys only this backend
sets; bubblewrap's configs never carry them (checked here too), so its
init behaves exactly as before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stockade.capabilities import NetworkPolicy
from stockade.drivers.linux.init import initcore, landlock
from stockade.drivers.linux.layers import INIT_PATH, init_argv, init_config
from stockade.profile import Profile

PYTHON = os.path.realpath(sys.executable)


def make_profile(ws: str) -> Profile:
    return Profile(mode="workspace-write", workspace=ws, workspace_writable=True, cwd=ws,
                   read_scope="host", read_roots=("/",), read_extra=(), system_links=(),
                   write_roots=(), hidden=(), sockets=(), granted_sockets=(), protected=(),
                   mask_other_homes=False, runtime_dir="", home="/nonexistent",
                   network=NetworkPolicy.none(), session_tmp=None, max_memory_mb=None,
                   env={"PATH": "/usr/bin:/bin"})


def run_init(config: dict[str, object], argv: list[str], cwd: str = "/"
             ) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(init_argv(PYTHON, INIT_PATH, config, argv), cwd=cwd,
                          env={"PATH": "/usr/bin:/bin"}, capture_output=True, timeout=30,
                          check=False)


def base_config(ws: str) -> dict[str, object]:
    config = init_config(make_profile(ws), require_landlock=True)
    rules = landlock.LandlockRules(["/usr", "/bin", "/lib", "/lib64", "/etc", "/proc",
                                    os.path.dirname(os.path.dirname(PYTHON))], [ws],
                                   restrict_tcp=True)
    config.update(landlock=rules.to_json(), seccomp="unix-no-connect", drop_caps=True)
    return config


def test_bubblewrap_configs_carry_none_of_the_new_keys(tmp_path: Path) -> None:
    """But `landlock_list`: the Landlock layer behind bubblewrap splits around the
    hidden set as the backend does, and lists what it split."""
    config = init_config(make_profile(str(tmp_path)))
    assert not {"cwd", "drop_caps", "parent", "reaper", "reaper_fd"} & set(config)
    assert isinstance(config["landlock_list"], list)


def test_with_listing_adds_read_dir_only(tmp_path: Path) -> None:
    rules = landlock.LandlockRules(["/usr"], ["/tmp/w"]).to_json()
    listed = initcore.with_listing(rules, ["/home/u", "/usr"])
    got = dict(listed.path_rules())
    assert got["/home/u"] == landlock.FS_READ_DIR
    assert got["/usr"] == landlock.FS_READ  # an existing grant is not narrowed


@pytest.mark.isolation
def test_the_init_changes_to_the_configured_directory(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    config = {**base_config(str(ws)), "cwd": str(ws / "sub")}
    res = run_init(config, ["/bin/sh", "-c", "pwd; echo x > here"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.decode().strip() == str(ws / "sub")
    assert (ws / "sub" / "here").exists()


@pytest.mark.isolation
def test_a_bad_cwd_refuses_in_one_line(tmp_path: Path) -> None:
    for cwd in (str(tmp_path / "missing"), 5):
        res = run_init({**base_config(str(tmp_path)), "cwd": cwd}, ["/bin/true"])
        assert res.returncode == initcore.REFUSED, res
        assert res.stderr.decode().startswith("stockade-init: "), res.stderr


@pytest.mark.isolation
def test_capabilities_are_gone_for_good(tmp_path: Path) -> None:
    """As root: no effective, permitted, ambient or bounding capability survives, and
    uid 0 regains none by exec (SECBIT_NOROOT, locked)."""
    res = run_init(base_config(str(tmp_path)), ["/bin/sh", "-c",
                                                "grep -E '^Cap|NoNewPrivs' /proc/self/status"])
    assert res.returncode == 0, res.stderr
    fields = dict(line.split(":\t") for line in res.stdout.decode().splitlines())
    for name in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert int(fields[name], 16) == 0, fields
    if os.geteuid() == 0:
        assert int(fields["CapBnd"], 16) == 0, fields


@pytest.mark.isolation
def test_a_parent_that_is_not_stockade_is_refused(tmp_path: Path) -> None:
    """`parent` is stockade's pid; started by anything else (stockade already gone),
    the init refuses rather than run unsupervised."""
    config = {**base_config(str(tmp_path)), "parent": 1}
    res = run_init(config, ["/bin/true"])
    assert res.returncode == initcore.REFUSED
    assert b"stockade exited" in res.stderr
    config["parent"] = os.getpid()
    assert run_init(config, ["/bin/true"]).returncode == 0


@pytest.mark.isolation
@pytest.mark.skipif(landlock.landlock_abi() < 6, reason="the reaper needs Landlock ABI 6")
def test_the_reaper_ends_daemons_and_spares_everything_else(tmp_path: Path) -> None:
    marker = f"{os.getpid()}{int.from_bytes(os.urandom(3), 'big')}"
    outside = subprocess.Popen(["/bin/sleep", f"300.{marker}"])
    try:
        config = {**base_config(str(tmp_path)), "parent": os.getpid(), "reaper": True}
        script = (f'setsid sh -c "sleep 301.{marker} &"; kill -9 -1; '
                  f'kill -9 {outside.pid} 2>/dev/null; echo done')
        res = run_init(config, ["/bin/sh", "-c", script])
        assert b"done" in res.stdout, res.stderr
        import time

        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _running(f"301.{marker}"):
            time.sleep(0.05)
        assert not _running(f"301.{marker}"), "the daemon outlived the command"
        assert outside.poll() is None, "a process outside the command's domain was killed"
    finally:
        outside.kill()
        outside.wait(timeout=5)


def _running(marker: str) -> bool:
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def test_config_round_trips_as_json(tmp_path: Path) -> None:
    config = {**base_config(str(tmp_path)), "cwd": "/x", "reaper": True, "parent": 1}
    assert json.loads(init_argv(PYTHON, INIT_PATH, config, ["true"])[4]) == config


@pytest.mark.isolation
@pytest.mark.skipif(landlock.landlock_abi() < 6, reason="the reaper needs Landlock ABI 6")
def test_the_reaper_needs_a_parent_to_prove_scoping_against(tmp_path: Path) -> None:
    """kill(-1) is only safe once signal 0 to stockade has been refused; without
    stockade's pid there is nothing to prove it with, and the command does not run."""
    res = run_init({**base_config(str(tmp_path)), "reaper": True}, ["/bin/true"])
    assert res.returncode == initcore.REFUSED and b"parent" in res.stderr, res


@pytest.mark.isolation
def test_under_a_systemd_scope_the_recording_shell_is_the_parent(tmp_path: Path) -> None:
    """With `parent: "scope"` the init watches the shell that names itself in
    STOCKADE_INIT_PARENT (see limits.SCOPE_SCRIPT), and the command never sees the name."""
    config = {**base_config(str(tmp_path)), "parent": "scope"}
    init = init_argv(PYTHON, INIT_PATH, config, ["/usr/bin/env"])
    res = subprocess.run(["/bin/sh", "-c", 'STOCKADE_INIT_PARENT=$$ "$@"; exit $?', "sh", *init],
                         env={"PATH": "/usr/bin:/bin"}, capture_output=True, timeout=30,
                         check=False)
    assert res.returncode == 0, res.stderr
    assert b"STOCKADE_INIT_PARENT" not in res.stdout
    # Named wrongly (not the parent) or not at all: refused, as for stockade's own pid.
    for env in ({"STOCKADE_INIT_PARENT": "1"}, {}):
        res = subprocess.run(init, env={"PATH": "/usr/bin:/bin", **env}, capture_output=True,
                             timeout=30, check=False)
        assert res.returncode == initcore.REFUSED, res
