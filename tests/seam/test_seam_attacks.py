"""Attacks on the driver contract, the provisioned-workspace mask, and config typing.

Each test runs a real command in a real sandbox (or the real config loader)
and checks the effect from outside. Each fails on the code it was written
against; the fix makes it pass.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade import SandboxCommand, SyncWorkspaceSandbox
from stockade.config import SandboxConfig, load_config
from stockade.errors import ConfigError, SandboxUnavailable

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux backends")

BACKENDS = ["bubblewrap", "landlock"]


@pytest.fixture
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # Under /var/tmp: the sandbox's /tmp is private, so a path there would prove nothing.
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="stockade-adv-", dir="/var/tmp"))
    yield path
    # rm, not shutil.rmtree: a tree deeper than Python's recursion limit is one of the attacks.
    subprocess.run(["rm", "-rf", str(path)], check=False)


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(XDG_DATA_HOME=str(tmp / "data"), XDG_STATE_HOME=str(tmp / "state"),
               XDG_CONFIG_HOME=str(tmp / "config"))
    return env


def _procs(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                if marker.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                    found.append(int(name))
            except OSError:
                pass
    return found


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_command_cannot_pass_itself_off_as_a_failed_bwrap_start(tmp: Path, backend: str
                                                                  ) -> None:
    ws = tmp / "ws"
    ws.mkdir()
    env = _env(tmp)
    script = ("echo ran > proof; echo 'bwrap: Creating new namespace failed: "
              "Operation not permitted' >&2; exit 1")
    with SyncWorkspaceSandbox(load_config(env, str(ws), backend=backend,
                                          mode="workspace-write"), env=env) as sb:
        sb.open_session("s", str(ws))
        # The command ran (its file is there); reporting that the sandbox never
        # started records a false "error" in the ledger and hides its exit.
        try:
            out = sb.execute(SandboxCommand("/bin/sh", ["-c", script], session_id="s"))
        except SandboxUnavailable as exc:
            assert not (ws / "proof").exists(), f"the command ran, yet: {exc}"
        else:
            assert out.exit_code == 1


def test_the_ledger_wal_created_mid_run_is_not_readable(tmp: Path) -> None:
    """Host scope (an explicit workspace): the ledger's -wal did not exist when the
    profile was built; another session writes the ledger while the command runs."""
    ws = tmp / "ws"
    ws.mkdir()
    env = _env(tmp)
    ledger = tmp / "data" / "stockade" / "ledger.db"
    secret = "SECRET_ARGV_" + uuid.uuid4().hex[:8]
    reader = (f"i=0; while [ $i -lt 100 ]; do if [ -e {ledger}-wal ]; then "
              f"exec 3<{ledger}-wal || exit 3; sleep 2; cat <&3; exit 0; fi; "
              "i=$((i+1)); sleep 0.05; done; exit 4")
    config = load_config(env, str(ws), backend="bubblewrap")
    with SyncWorkspaceSandbox(config, env=env) as first, \
            SyncWorkspaceSandbox(config, env=env) as second:
        first.open_session("reader", str(ws))
        second.open_session("writer", str(ws))

        def write() -> None:
            time.sleep(1)
            second.execute(SandboxCommand("echo", [secret], session_id="writer"))

        t = threading.Thread(target=write)
        t.start()
        out = first.execute(SandboxCommand("/bin/sh", ["-c", reader], session_id="reader",
                                           timeout=20))
        t.join()
    assert secret.encode() not in out.stdout


def test_a_workspace_root_created_mid_run_is_not_readable(tmp: Path) -> None:
    """Host scope: the provisioned workspaces' root did not exist when the profile was
    built; a provisioned session is created and filled while the command runs."""
    ws = tmp / "ws"
    ws.mkdir()
    env = _env(tmp)
    (tmp / "data").mkdir()
    root = tmp / "data" / "stockade" / "workspaces"
    reader = (f"i=0; while [ $i -lt 100 ]; do for f in {root}/*/SECRET; do "
              "[ -e \"$f\" ] && { cat \"$f\"; exit 0; }; done; i=$((i+1)); sleep 0.05; done; "
              "exit 4")
    config = load_config(env, str(ws), backend="bubblewrap")
    with SyncWorkspaceSandbox(config, env=env, ledger=None) as first, \
            SyncWorkspaceSandbox(config, env=env) as second:
        first.open_session("reader", str(ws))

        def provision() -> None:
            time.sleep(1)
            w = second.open_session("victim")
            Path(w.cwd, "SECRET").write_text("CANARY_PROVISIONED")

        t = threading.Thread(target=provision)
        t.start()
        out = first.execute(SandboxCommand("/bin/sh", ["-c", reader], session_id="reader",
                                           timeout=20))
        t.join()
    assert b"CANARY_PROVISIONED" not in out.stdout


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_deep_tmp_tree_does_not_stop_close_from_stopping_other_sessions(
        tmp: Path, backend: str) -> None:
    ws = tmp / "ws"
    ws.mkdir()
    env = _env(tmp)
    marker = "advc" + uuid.uuid4().hex[:8]
    sb = SyncWorkspaceSandbox(load_config(env, str(ws), backend=backend), env=env)
    try:
        sb.open_session("deep", str(ws))
        sb.open_session("bg", str(ws))
        sb.execute(SandboxCommand("/bin/sh", ["-c", "cd ${TMPDIR:-/tmp}; i=0; while [ $i -lt "
                                              "1200 ]; do mkdir d && cd d || break; "
                                              "i=$((i+1)); done"],
                                  session_id="deep", timeout=60))
        sb.start(SandboxCommand("/bin/sh", ["-c", f"sleep 60 # {marker}"], session_id="bg"))
        time.sleep(0.5)
        assert _procs(marker)
        sb.close()
        time.sleep(0.5)
        assert not _procs(marker), "close() left another session's process running"
    finally:
        for pid in _procs(marker):
            os.kill(pid, 9)


def test_doctor_does_not_run_a_bwrap_planted_in_the_workspace(tmp: Path) -> None:
    ws = tmp / "ws"
    (ws / ".venv" / "bin").mkdir(parents=True)
    marker = tmp / "ran"
    fake = ws / ".venv" / "bin" / "bwrap"
    fake.write_text(f"#!/bin/sh\necho \"$*\" >> {marker}\necho bubblewrap 0.11.0\n")
    fake.chmod(0o755)
    env = _env(tmp)
    # An activated in-project venv puts its bin first on PATH.
    env["PATH"] = f"{fake.parent}:{env.get('PATH', '')}"
    src = Path(__file__).resolve().parents[2] / "src"
    subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(src)!r}); "
                    "from stockade.cli import main; sys.exit(main())", "doctor"],
                   cwd=ws, env=env, capture_output=True, timeout=60)
    assert not marker.exists(), f"doctor ran the workspace's bwrap: {marker.read_text()!r}"


def test_the_cli_override_does_not_break_the_windows_driver() -> None:
    from stockade.drivers.windows.driver import WindowsDriver

    # `stockade run` builds every driver with probe=False.
    WindowsDriver.from_config(SandboxConfig(), env={}, workspace="", state_dir="",
                              probe=False)


def test_backend_options_are_type_checked() -> None:
    with pytest.raises(ConfigError):
        SandboxConfig(backend_options={"windows_allow_job_only": "false"})
    with pytest.raises(ConfigError):
        load_config({"HOME": "/nonexistent"}, "/nonexistent", windows_allow_job_only="false")


def test_a_project_file_does_not_override_the_callers_backend_options(tmp: Path) -> None:
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "stockade.toml").write_text('[sandbox]\nwindows_tier = "auto"\n')
    config = load_config(_env(tmp), str(ws), backend_options={"windows_tier": "appcontainer"})
    assert config.option("windows_tier") == "appcontainer"


def test_a_project_file_cannot_widen_past_the_callers_backend_options(tmp: Path) -> None:
    """The yardstick is the caller's value, not the default: a project's 100 s
    is narrower than the default 300 s but wider than the caller's 30 s."""
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "stockade.toml").write_text('[sandbox]\nwarm_idle_seconds = 100\n')
    with pytest.raises(ConfigError, match="warm_idle_seconds"):
        load_config(_env(tmp), str(ws), backend_options={"warm_idle_seconds": 30})


def test_a_callers_backend_options_cannot_smuggle_a_keyword(tmp: Path) -> None:
    with pytest.raises(ConfigError, match="backend_options"):
        load_config(_env(tmp), str(tmp), backend_options={"mode": "full-access"})


def _cli(env: dict[str, str], cwd: Path, *args: str) -> list[str]:
    src = Path(__file__).resolve().parents[2] / "src"
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(src)!r}); "
            "from stockade.cli import main; sys.exit(main())", *args]


def _killed_mid_run(tmp: Path, backend: str) -> tuple[Path, dict[str, str]]:
    """A repository workspace; a command writes a hook and .vscode/tasks.json while its
    stockade is stopped (its watch would otherwise take them back at once), then
    stockade is SIGKILLed before its guard can undo them."""
    ws = tmp / "ws"
    ws.mkdir()
    env = _env(tmp)
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    plant = ("touch started; while [ ! -e go ]; do sleep 0.02; done; "
             "printf '#!/bin/sh\\necho ran > \"$0.ran\"\\n' > .git/hooks/pre-commit; "
             "chmod +x .git/hooks/pre-commit; mkdir -p .vscode; echo '{}' > .vscode/tasks.json; "
             "touch planted; sleep 30")
    proc = subprocess.Popen(_cli(env, ws, "run", "--backend", backend, "--mode",
                                 "workspace-write", "--", "sh", "-c", plant), cwd=ws, env=env)
    try:
        deadline = time.monotonic() + 30
        while not (ws / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGSTOP)
        (ws / "go").touch()
        while not (ws / "planted").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        proc.kill()
        proc.wait()
    assert (ws / ".vscode" / "tasks.json").exists(), "nothing was left to sweep"
    return ws, env


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_next_command_sweeps_after_a_killed_stockade(tmp: Path, backend: str) -> None:
    """README: 'If stockade is killed, the next command on that workspace sweeps first.'"""
    ws, env = _killed_mid_run(tmp, backend)
    subprocess.run(_cli(env, ws, "run", "--backend", backend, "--", "true"), cwd=ws, env=env,
                   capture_output=True, timeout=60)
    left = [p for p in (".git/hooks/pre-commit", ".vscode/tasks.json") if (ws / p).exists()]
    assert not left, f"after a killed stockade and a next (read-only) run: {left}"


def test_the_sweep_does_not_fail_the_next_bwrap_start(tmp: Path) -> None:
    ws, env = _killed_mid_run(tmp, "bubblewrap")
    r = subprocess.run(_cli(env, ws, "run", "--backend", "bubblewrap", "--mode",
                            "workspace-write", "--", "true"),
                       cwd=ws, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


# -- stockade's state directory ---------------------------------------------------------------

@pytest.mark.skipif(os.geteuid() != 0, reason="hands a directory to another user (chown)")
@pytest.mark.parametrize("how", ["owned by another user", "writable by all, no sticky bit"])
def test_a_state_directory_another_user_can_change_is_refused(tmp: Path, how: str) -> None:
    """Under it, a session's /tmp path could be swapped for a link between two commands,
    and the next command's /tmp was whatever directory the link named."""
    shared = tmp / "shared"
    shared.mkdir()
    if how.startswith("owned"):
        os.chown(shared, 65534, 65534)
    else:
        os.chmod(shared, 0o777)
    env = {**_env(tmp), "XDG_STATE_HOME": str(shared / "state")}
    with pytest.raises(SandboxUnavailable, match=f"under {shared}, which another user"):
        SyncWorkspaceSandbox(SandboxConfig(ledger=False), env=env)
    # Control: the same place, sticky as /tmp is, is nobody else's to rename in.
    os.chown(shared, 0, 0)
    os.chmod(shared, 0o1777)
    SyncWorkspaceSandbox(SandboxConfig(ledger=False), env=env).close()
