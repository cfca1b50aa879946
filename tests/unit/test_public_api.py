"""The exported surface is deliberate; this pins it."""

import subprocess
import sys

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
