"""The exported surface is deliberate; this pins it."""

import os
import subprocess
import sys

import pytest

import stockade

EXPECTED = {
    "ApprovalGate", "ApprovalRequest", "BackgroundProcess", "CapabilityDenied",
    "CommandTimeout", "ConfigError", "InvalidCommand", "NetworkPolicy", "NoopSandbox",
    "Profile", "Sandbox", "SandboxCapabilities", "SandboxCommand", "SandboxConfig",
    "SandboxDisabled", "SandboxError", "SandboxOutput", "SandboxUnavailable",
    "SessionWorkspace", "SyncWorkspaceSandbox", "WorkspaceSandbox", "build_sandbox",
    "capabilities_for_mode", "current_session", "load_config", "namespace_argv", "run",
    "session_scope",
}


def test_exports_are_pinned_and_resolve():
    assert set(stockade.__all__) == EXPECTED
    for name in EXPECTED:
        assert getattr(stockade, name) is not None


def test_cli_run_path_imports_no_heavy_modules():
    # Each of these costs milliseconds on every `stockade run`.
    code = ("import sys, stockade.cli, stockade.sync, stockade.config, stockade.core;"
            "print(' '.join(sorted(set(sys.modules) & {'asyncio','typing','subprocess','re',"
            "'dataclasses','pathlib','argparse','json','logging','enum','tomllib'})))")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": ""}, cwd="/")
    assert out.stdout.strip() == ""


#: What a real `stockade run` must never import: each costs milliseconds on
#: every command, and the README's stage table says they are not there.
COLD_PATH_FORBIDDEN = {
    "asyncio", "typing", "subprocess", "re", "dataclasses", "pathlib", "argparse", "json",
    "logging", "enum", "tomllib", "hashlib", "socket", "selectors",
    "stockade.drivers.linux.warm",
}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux cold path")
@pytest.mark.parametrize("mode", ["read-only", "workspace-write"])
def test_a_real_stockade_run_imports_no_heavy_modules(tmp_path, mode):
    # Not the modules' import-time closure (the test above) but what one whole
    # `stockade run -- /bin/true` has loaded when it exits: the driver, the
    # pipeline, the ledger and the launch import lazily, and warm.py (socket,
    # enum) was pulled in by a launch that parks nothing.
    # A writing command registers with warm.py's writers (no pool of another
    # sandbox in the process may park beside it); the module, not socket or enum.
    forbidden = COLD_PATH_FORBIDDEN - ({"stockade.drivers.linux.warm"}
                                       if mode == "workspace-write" else set())
    code = ("import sys; from stockade.cli import main; "
            f"rc = main(['run', '--mode', {mode!r}, '--', '/bin/true']); "
            f"bad = sorted(set(sys.modules) & set({sorted(forbidden)!r})); "
            "print(rc, ' '.join(bad), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path,
                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                              "HOME": os.environ.get("HOME", "/")})
    last = out.stderr.strip().splitlines()[-1]
    status, _, imported = last.partition(" ")
    assert status == "0", out.stderr
    assert imported == "", f"`stockade run -- /bin/true` imported {imported}"
