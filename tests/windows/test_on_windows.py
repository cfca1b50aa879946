"""Real escapes on a real Windows host: run the attack under the driver, check from outside.

Skipped anywhere but Windows. Each attack also runs unconfined first, as
the control that shows it works without stockade; a test whose control
fails proves nothing and fails too.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from stockade.capabilities import NetworkPolicy
from stockade.profile import Profile, Protected

pytestmark = [
    pytest.mark.windows,
    pytest.mark.skipif(sys.platform != "win32",
                       reason="needs a real Windows host (AppContainer, job objects, NTFS ACLs)"),
]

CMD = os.path.join(os.environ.get("SYSTEMROOT", "C:\\Windows"), "System32", "cmd.exe")


def _profile(ws: str, mode: str, *, hidden: tuple[tuple[str, str], ...] = (),
             network: NetworkPolicy | None = None) -> Profile:
    return Profile(
        mode=mode, workspace=ws, workspace_writable=mode != "read-only", cwd=ws,
        read_scope="host", read_roots=("/",), read_extra=(), system_links=(), write_roots=(),
        hidden=hidden, sockets=(), granted_sockets=(),
        protected=(Protected(os.path.join(ws, ".git"), "pin"),
                   Protected(os.path.join(ws, ".git", "hooks"), "dir"),
                   Protected(os.path.join(ws, ".stockade"), "watch")) if mode != "read-only"
        else (),
        mask_other_homes=True, runtime_dir="", home=os.path.expanduser("~"),
        network=network or NetworkPolicy.none(), session_tmp=None, max_memory_mb=None,
        env=dict(os.environ))


def _run(profile: Profile, command: str, **options: object) -> tuple[int, bytes, bytes]:
    import tempfile

    from stockade.drivers.windows.driver import WindowsDriver

    options.setdefault("state_dir", tempfile.mkdtemp(prefix="stockade-state-"))
    driver = WindowsDriver(**options)  # type: ignore[arg-type]
    launch = driver.prepare([CMD, "/c", command], profile)
    try:
        out = launch.start().communicate(timeout=30)
    finally:
        launch.cleanup()
    assert launch.report.audit["windows_tier"]
    return out.returncode, out.stdout, out.stderr


def _control(command: str) -> None:
    assert subprocess.run([CMD, "/d", "/s", "/c", command], check=False).returncode == 0


@pytest.fixture
def workspace(tmp_path: object) -> str:
    ws = os.path.join(str(tmp_path), "ws")
    os.makedirs(os.path.join(ws, ".git", "hooks"))
    return ws


def test_write_outside_the_workspace_is_refused(workspace: str, tmp_path: object) -> None:
    outside = os.path.join(str(tmp_path), "outside.txt")
    _control(f'echo control> "{outside}"')
    os.remove(outside)
    _run(_profile(workspace, "workspace-write"), f'echo pwned> "{outside}"')
    assert not os.path.exists(outside)


def test_read_only_cannot_write_the_workspace(workspace: str) -> None:
    target = os.path.join(workspace, "x.txt")
    _run(_profile(workspace, "read-only"), f'echo pwned> "{target}"')
    assert not os.path.exists(target)


def test_workspace_write_writes_the_workspace(workspace: str) -> None:
    target = os.path.join(workspace, "ok.txt")
    code, _, err = _run(_profile(workspace, "workspace-write"), f'echo ok> "{target}"')
    assert code == 0, err
    assert os.path.exists(target)


def test_hooks_stay_unwritable_and_the_git_dir_cannot_be_renamed(workspace: str) -> None:
    hook = os.path.join(workspace, ".git", "hooks", "pre-commit")
    _run(_profile(workspace, "workspace-write"),
         f'echo pwned> "{hook}" & move "{os.path.join(workspace, ".git")}" '
         f'"{os.path.join(workspace, "old")}"')
    assert not os.path.exists(hook)
    assert os.path.isdir(os.path.join(workspace, ".git"))


def test_a_missing_protected_name_cannot_be_created_and_its_stub_is_gone(workspace: str) -> None:
    _run(_profile(workspace, "workspace-write"),
         f'mkdir "{os.path.join(workspace, ".stockade", "x")}"')
    assert not os.path.exists(os.path.join(workspace, ".stockade"))


def test_a_hidden_store_is_unreadable(workspace: str, tmp_path: object) -> None:
    secret_dir = os.path.join(str(tmp_path), "aws")
    os.makedirs(secret_dir)
    with open(os.path.join(secret_dir, "credentials"), "w") as fh:
        fh.write("SECRET-VALUE")
    _control(f'type "{os.path.join(secret_dir, "credentials")}"')
    _, out, _ = _run(_profile(workspace, "read-only", hidden=((secret_dir, "dir"),)),
                     f'type "{os.path.join(secret_dir, "credentials")}"')
    assert b"SECRET-VALUE" not in out


def test_network_none_cannot_connect(workspace: str) -> None:
    command = ("powershell -NoProfile -Command \"(New-Object Net.Sockets.TcpClient)"
               ".Connect('1.1.1.1', 443); 'CONNECTED'\"")
    _, out, _ = _run(_profile(workspace, "read-only"), command)
    assert b"CONNECTED" not in out


def test_a_detached_child_does_not_outlive_the_run(workspace: str) -> None:
    marker = os.path.join(workspace, "late.txt")
    _run(_profile(workspace, "workspace-write"),
         f'start /b cmd /c "ping -n 4 127.0.0.1 >nul & echo late> "{marker}""')
    import time

    time.sleep(5)
    assert not os.path.exists(marker)


def test_every_ace_is_gone_afterwards(workspace: str) -> None:
    def acl(path: str) -> str:
        return subprocess.run(["icacls", path], capture_output=True, text=True,
                              check=False).stdout

    before = acl(workspace)
    _run(_profile(workspace, "workspace-write"), "ver")
    assert acl(workspace) == before


# -- docs/windows-verify.md, item by item -----------------------------------------------------
#
# The same IDs as the checklist, run through the command line (and so through
# SandboxCore), on each tier the item names.

TIER_CONFIG = {
    1: 'windows_tier = "appcontainer"\n',
    2: 'windows_tier = "restricted-token"\nwindows_allow_open_network = true\n',
    3: ('windows_tier = "job-object"\nwindows_allow_job_only = true\n'
        "windows_allow_open_network = true\n"),
}


def cli(ws: str, tier: int, options: list[str], command: list[str],
        tmp: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    config = os.path.join(tmp, f"t{tier}.toml")
    with open(config, "w") as fh:
        fh.write(TIER_CONFIG[tier])
    argv = [sys.executable, "-m", "stockade", "run", "--yes", "--backend", "windows",
            "--workspace", ws, "--config", config, *options, "--", *command]
    out = subprocess.run(argv, cwd=ws, capture_output=True, timeout=120, check=False, env=env)
    return out.returncode, (out.stdout + out.stderr).decode("utf-8", "replace")


def _icacls(path: str) -> str:
    return subprocess.run(["icacls", path], capture_output=True, text=True,
                          check=False).stdout


RO, WW = ["--mode", "read-only"], ["--mode", "workspace-write"]
CHECKLIST = [
    ("W1a", 1, RO, ["cmd", "/c", "type", "%USERPROFILE%\\.aws\\sv-credentials"],
     lambda code, out: "SV-SECRET" not in out),
    ("W1b", 2, RO, ["cmd", "/c", "type", "%USERPROFILE%\\.aws\\sv-credentials"],
     lambda code, out: "SV-SECRET" not in out),
    ("W1d", 1, RO, ["cmd", "/c", "dir", "%APPDATA%"], lambda code, out: code != 0),
    ("W2a", 2, WW, ["cmd", "/c", "ver"], lambda code, out: "runs only read-only" in out),
    ("W2b", 1, WW, ["cmd", "/c", "move .git old & mkdir .git\\hooks\\x"],
     lambda code, out: True),  # decided by the state of .git, checked below
    ("W7a", 1, ["--network", "all"],
     ["cmd", "/c", "wmic process call create \"cmd /c echo x> %USERPROFILE%\\sv-wmi.txt\""],
     lambda code, out: True),
    ("W7b", 1, [], ["schtasks", "/create", "/tn", "sv", "/tr", "cmd /c ver", "/sc", "once",
                    "/st", "23:59"], lambda code, out: code != 0),
    ("W8b", 2, RO, ["cmd", "/c", "type", "%USERPROFILE%\\.aws\\sv-low.txt"],
     lambda code, out: "SV-SECRET" not in out),
    ("W8c", 1, RO, ["cmd", "/c", "type", "%USERPROFILE%\\.aws\\sv-low.txt"],
     lambda code, out: "SV-SECRET" not in out),
    ("W9a-1", 1, RO, [sys.executable, "-c", "print('SHOWN')"],
     lambda code, out: "SHOWN" in out),
    ("W9a-2", 2, RO, [sys.executable, "-c", "print('SHOWN')"],
     lambda code, out: "SHOWN" in out),
    ("B2", 1, [], ["cmdkey", "/list"], lambda code, out: "sv-target" not in out),
    ("B3", 1, RO, ["cmd", "/c", "type", "%USERPROFILE%\\.aws\\sv-credentials:stream"],
     lambda code, out: "SV-SECRET" not in out),
    ("B4", 1, [], ["powershell", "-NoProfile", "-Command",
                   "(New-Object Net.Sockets.TcpClient).Connect('1.1.1.1',443); 'CONNECTED'"],
     lambda code, out: "CONNECTED" not in out),
    ("B5", 1, [], ["powershell", "-NoProfile", "-Command",
                   "(New-Object Net.Sockets.TcpClient).Connect('127.0.0.1',445); 'CONNECTED'"],
     lambda code, out: "CONNECTED" not in out),
]


@pytest.fixture
def planted() -> object:
    aws = os.path.join(os.path.expanduser("~"), ".aws")
    os.makedirs(aws, exist_ok=True)
    path = os.path.join(aws, "sv-credentials")
    with open(path, "w") as fh:
        fh.write("SV-SECRET")
    low = os.path.join(aws, "sv-low.txt")  # W8b: a child with a Low label of its own
    with open(low, "w") as fh:
        fh.write("SV-SECRET")
    subprocess.run(["icacls", low, "/setintegritylevel", "L"], capture_output=True, check=True)
    subprocess.run(["cmdkey", "/add:sv-target", "/user:u", "/pass:SV-SECRET"],
                   capture_output=True, check=False)
    yield path
    os.remove(path)
    os.remove(low)
    subprocess.run(["cmdkey", "/delete:sv-target"], capture_output=True, check=False)
    subprocess.run(["schtasks", "/delete", "/tn", "sv", "/f"], capture_output=True, check=False)


@pytest.mark.parametrize(("item", "tier", "options", "command", "passes"), CHECKLIST,
                         ids=[c[0] for c in CHECKLIST])
def test_checklist(workspace: str, tmp_path: object, planted: object, item: str, tier: int,
                   options: list[str], command: list[str], passes) -> None:
    before = _icacls(workspace)
    code, out = cli(workspace, tier, options, command, str(tmp_path))
    assert passes(code, out), f"{item}: exit {code}\n{out}"
    assert _icacls(workspace) == before, f"{item}: the workspace's ACL changed"
    if item == "W2b":
        assert os.path.isdir(os.path.join(workspace, ".git", "hooks"))
        assert not os.path.exists(os.path.join(workspace, "old"))
    if item == "W7a":
        import time

        time.sleep(3)
        assert not os.path.exists(os.path.join(os.path.expanduser("~"), "sv-wmi.txt"))


def test_checklist_W1e_without_the_logon_s_variables_the_profile_api_names_the_home(
        workspace: str, tmp_path: object, planted: object) -> None:
    gone = ("USERPROFILE", "HOMEDRIVE", "HOMEPATH", "APPDATA", "LOCALAPPDATA")
    env = {k: v for k, v in os.environ.items() if k.upper() not in gone}
    code, out = cli(workspace, 1, [], ["cmd", "/c", "ver"], str(tmp_path), env=env)
    assert code == 0 and "Microsoft Windows" in out, out
    _, out = cli(workspace, 1, RO, ["cmd", "/c", "type", str(planted)], str(tmp_path), env=env)
    assert "SV-SECRET" not in out


def test_checklist_W3a_created_files_are_not_left_low(workspace: str, tmp_path: object) -> None:
    cli(workspace, 1, WW, ["cmd", "/c", "echo x> made.txt"], str(tmp_path))
    assert "Low Mandatory Level" not in _icacls(os.path.join(workspace, "made.txt"))


def test_checklist_W6a_a_junction_in_the_workspace_refuses(workspace: str,
                                                           tmp_path: object) -> None:
    target = os.path.join(str(tmp_path), "outside")
    os.makedirs(target)
    subprocess.run(["cmd", "/c", "mklink", "/J", os.path.join(workspace, "ws-link"), target],
                   check=True, capture_output=True)
    before = _icacls(target)
    code, out = cli(workspace, 1, WW, ["cmd", "/c", "ver"], str(tmp_path))
    assert code != 0 and "inheritable ACE" in out
    assert _icacls(target) == before


def test_checklist_W10a_elevated_is_refused(workspace: str, tmp_path: object) -> None:
    import ctypes

    if not ctypes.windll.shell32.IsUserAnAdmin():  # type: ignore[attr-defined]
        pytest.skip("run this one from an elevated shell (docs/windows-verify.md W10a)")
    code, out = cli(workspace, 1, [], ["cmd", "/c", "ver"], str(tmp_path))
    assert code != 0 and "running elevated" in out
