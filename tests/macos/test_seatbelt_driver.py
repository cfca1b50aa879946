"""The driver around the profile: argv, environment, availability, scratch, hardening.

Everything here runs on Linux. The one thing executed for real is the shell
prefix that sets the memory ceiling and the cwd, which is plain /bin/sh and
behaves the same on both systems.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from macos_fakes import HOME, PROXY_PORT, WS, mac_profile
from sbpl_eval import Policy

from stockade.capabilities import NetworkPolicy, SandboxCapabilities
from stockade.config import SandboxConfig
from stockade.drivers import registry
from stockade.drivers.macos.diagnose import (
    explain_denial,
    refused_path,
    sandbox_exec_failure,
    seatbelt_violation,
)
from stockade.drivers.macos.hardening import scrub_env
from stockade.drivers.macos.seatbelt import (
    SANDBOX_EXEC,
    SeatbeltDriver,
    check_available,
    command_argv,
    command_env,
    sandbox_exec_argv,
)
from stockade.errors import SandboxUnavailable

HOSTS = NetworkPolicy.allow_hosts(["example.com"])


def _split(argv: list[str]) -> tuple[str, dict[str, str], list[str]]:
    """(profile text, -D parameters, inner argv) from a sandbox-exec command line."""
    assert argv[0] == SANDBOX_EXEC and argv[1] == "-p"
    text, rest = argv[2], argv[3:]
    end = rest.index("--")
    params = {}
    for item in rest[:end]:
        assert item.startswith("-D") and "=" in item, item
        key, _, value = item[2:].partition("=")
        params[key] = value
    return text, params, rest[end + 1:]


# -- availability ---------------------------------------------------------------------------


def test_available_only_on_macos_with_the_exact_binary() -> None:
    with pytest.raises(SandboxUnavailable, match=r"needs macOS, and this is linux"):
        check_available("linux", lambda p: True)
    seen: list[str] = []
    with pytest.raises(SandboxUnavailable, match=r"/usr/bin/sandbox-exec is missing"):
        check_available("darwin", lambda p: seen.append(p) or False)
    assert seen == ["/usr/bin/sandbox-exec"]  # asked about that path, and only that one
    check_available("darwin", lambda p: p == "/usr/bin/sandbox-exec")


def test_driver_refuses_here_rather_than_running_unconfined() -> None:
    if sys.platform == "darwin":
        pytest.skip("this host is a Mac")
    with pytest.raises(SandboxUnavailable, match="needs macOS"):
        SeatbeltDriver(env={}).available()


def test_a_planted_sandbox_exec_on_path_is_never_used(tmp_path) -> None:
    fake = tmp_path / "sandbox-exec"
    fake.write_text("#!/bin/sh\nexec \"$@\"\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin", "HOME": HOME, "TMPDIR": str(tmp_path)}
    launch = SeatbeltDriver(env=env).prepare(["true"], mac_profile())
    try:
        assert launch.argv[0] == "/usr/bin/sandbox-exec"
    finally:
        launch.cleanup()


def test_the_registry_builds_it_with_the_pipelines_options() -> None:
    driver = registry.from_config(SandboxConfig(backend="seatbelt", bwrap="/x/bwrap"),
                                  env={"HOME": HOME}, workspace=WS, state_dir="/nonexistent")
    assert isinstance(driver, SeatbeltDriver) and driver.name == "seatbelt"


# -- the launch -----------------------------------------------------------------------------


def test_sandbox_exec_argv_layout() -> None:
    argv = sandbox_exec_argv("(version 1)", {"WORKSPACE": "/w", "TMP": "/t"}, ["--evil", "x"])
    assert argv == ["/usr/bin/sandbox-exec", "-p", "(version 1)", "-DWORKSPACE=/w",
                    "-DTMP=/t", "--", "--evil", "x"]


def test_prepare_runs_the_command_in_its_cwd_under_the_profile(tmp_path) -> None:
    env = {"HOME": HOME, "TMPDIR": str(tmp_path)}
    # A profile without a session TMPDIR: the driver makes the command one.
    launch = SeatbeltDriver(env=env).prepare(["git", "status"],
                                             mac_profile().replace(session_tmp=None))
    try:
        text, params, inner = _split(launch.argv)
        assert inner == ["/bin/sh", "-c", 'cd -- "$0" && exec "$@"', WS, "git", "status"]
        scratch = launch.env["TMPDIR"]
        made = [p for p in os.listdir(tmp_path) if p.startswith("stockade-")]
        assert len(made) == 1 and scratch.endswith(made[0])
        assert params["TMP"] == scratch and params["WORKSPACE"] == WS
        p = Policy(text, params)
        assert p.create(f"{scratch}/pip-unpack/x")
        assert not p.create(f"{os.path.dirname(scratch)}/other-session/x")
        assert launch.env["STOCKADE_SANDBOX"] == "seatbelt"
    finally:
        launch.cleanup()
    assert [p for p in os.listdir(tmp_path) if p.startswith("stockade-")] == []


def test_prepare_uses_the_session_tmp_and_leaves_it_alone(tmp_path) -> None:
    session_tmp = tmp_path / "session"
    session_tmp.mkdir()
    prof = mac_profile().replace(session_tmp=str(session_tmp))
    launch = SeatbeltDriver(env={"TMPDIR": str(tmp_path)}).prepare(["true"], prof)
    _, params, _ = _split(launch.argv)
    launch.cleanup()
    assert session_tmp.is_dir()
    assert params["TMP"].endswith("/session") and launch.env["TMPDIR"] == params["TMP"]
    assert [p for p in os.listdir(tmp_path) if p.startswith("stockade-")] == []


def test_a_failed_prepare_leaves_no_scratch_directory(tmp_path) -> None:
    driver = SeatbeltDriver(env={"TMPDIR": str(tmp_path)})  # no proxy port
    with pytest.raises(SandboxUnavailable):
        driver.prepare(["curl", "https://example.com"], mac_profile(network=HOSTS))
    assert os.listdir(tmp_path) == []


def test_proxy_ports_reach_the_profile_and_the_environment(tmp_path) -> None:
    driver = SeatbeltDriver(env={"TMPDIR": str(tmp_path)}, proxy_ports=(PROXY_PORT,))
    launch = driver.prepare(["curl", "https://example.com"], mac_profile(network=HOSTS))
    try:
        text, params, _ = _split(launch.argv)
        assert Policy(text, params).connect("127.0.0.1", PROXY_PORT)
        url = f"http://127.0.0.1:{PROXY_PORT}"
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
            assert launch.env[name] == url and launch.env[name.lower()] == url
    finally:
        launch.cleanup()
    # Per-call ports override the constructor's.
    launch = driver.prepare(["true"], mac_profile(network=HOSTS), proxy_ports=(8888,))
    try:
        text, params, _ = _split(launch.argv)
        p = Policy(text, params)
        assert p.connect("127.0.0.1", 8888) and not p.connect("127.0.0.1", PROXY_PORT)
    finally:
        launch.cleanup()


def test_no_proxy_variables_without_a_host_allowlist() -> None:
    env = command_env(mac_profile(), scratch="/private/tmp/s", proxy_ports=(PROXY_PORT,))
    assert "HTTPS_PROXY" not in env and "https_proxy" not in env


def test_loader_and_malloc_variables_never_reach_the_command() -> None:
    prof = mac_profile(env={"DYLD_INSERT_LIBRARIES": "/tmp/evil.dylib", "MallocLogFile": "/x",
                            "LANG": "en_US.UTF-8"})
    # Even when the caller passes them explicitly for this command.
    prof.env.update({"DYLD_LIBRARY_PATH": "/tmp", "MallocStackLogging": "1",
                     "MallocNanoZone": "0"})
    env = command_env(prof, scratch="/private/tmp/s")
    assert not [k for k in env if k.startswith(("DYLD_", "Malloc"))]
    assert env["LANG"] == "en_US.UTF-8" and env["TMPDIR"] == "/private/tmp/s"


# -- memory ceiling: the shell prefix, run for real -------------------------------------------


def _with_memory(mb: int | None, argv: list[str], cwd: str) -> list[str]:
    prof = mac_profile(capabilities=SandboxCapabilities(fs_write=(WS,), max_memory_mb=mb))
    return command_argv(argv, prof.replace(cwd=cwd))


def test_memory_ceiling_is_set_before_the_command_runs(tmp_path) -> None:
    work = tmp_path / "dir with space"
    work.mkdir()
    argv = _with_memory(512, ["/bin/sh", "-c", 'ulimit -v; pwd'], str(work))
    assert argv[:2] == ["/bin/sh", "-c"] and argv[3] == str(512 * 1024)
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(512 * 1024), *str(work).split()]


def test_memory_ceiling_refused_means_the_command_does_not_run(tmp_path) -> None:
    argv = _with_memory(512, ["/bin/sh", "-c", "echo RAN"], str(tmp_path))
    argv[3] = "not-a-number"  # what macOS does to a value below its reserved address space
    out = subprocess.run(argv, capture_output=True, text=True)
    assert out.returncode == 125
    assert "RAN" not in out.stdout
    assert "stockade: macOS refused an address-space limit" in out.stderr


def test_no_ceiling_no_prefix() -> None:
    argv = _with_memory(None, ["make"], WS)
    assert argv == ["/bin/sh", "-c", 'cd -- "$0" && exec "$@"', WS, "make"]


# -- import cost and hardening ----------------------------------------------------------------


def test_import_is_cheap_and_platform_neutral() -> None:
    code = ("import sys, stockade.drivers.macos.seatbelt, stockade.drivers.macos.diagnose;"
            "print(' '.join(sorted(set(sys.modules) & "
            "{'ctypes', 'tempfile', 'shutil', 'resource', 'subprocess'})))")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         check=True, cwd="/", env={"PYTHONPATH": ""})
    assert out.stdout.strip() == ""


def test_scrub_env() -> None:
    env = {"DYLD_FALLBACK_LIBRARY_PATH": "x", "MallocScribble": "1", "PATH": "/usr/bin",
           "LD_PRELOAD": "kept-here-the-profile-scrubs-it"}
    assert scrub_env(env) == {"PATH": "/usr/bin", "LD_PRELOAD": "kept-here-the-profile-scrubs-it"}


def test_harden_process_in_a_helper() -> None:
    code = (
        "import resource, sys\n"
        "from stockade.drivers.macos.hardening import harden_process\n"
        "env = {'DYLD_INSERT_LIBRARIES': 'x', 'MallocLogFile': 'y', 'HOME': '/h'}\n"
        "steps = harden_process(env)\n"
        "print(sorted(env), steps, resource.getrlimit(resource.RLIMIT_CORE))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    expected = "('env-scrubbed', 'no-core-dumps', 'pt-deny-attach')" if sys.platform == \
        "darwin" else "('env-scrubbed', 'no-core-dumps')"
    assert out.stdout.strip() == f"['HOME'] {expected} (0, 0)"


# -- denial attribution -------------------------------------------------------------------------


def test_seatbelt_violation_lines_are_parsed() -> None:
    err = b"noise\nSandbox: sh(4242) deny(1) file-write-create /Users/dev/.zshrc\n"
    assert seatbelt_violation(err) == ("file-write-create", "/Users/dev/.zshrc")
    assert seatbelt_violation(b"Operation not permitted") is None


def test_refused_path_from_tool_messages() -> None:
    assert refused_path(b"sh: /Users/dev/.bashrc: Operation not permitted\n") == \
        "/Users/dev/.bashrc"
    assert refused_path(b"touch: '/tmp/x': Operation not permitted") == "/tmp/x"
    assert refused_path(b"Permission denied") == ""


@pytest.mark.parametrize(("stderr", "expect"), [
    (b"cat: /Users/dev/.aws/credentials: Operation not permitted", "hidden credential"),
    (b"sh: /Users/dev/work/proj/.git/hooks/pre-commit: Operation not permitted",
     "protected metadata"),
    (b"mkdir: /Users/dev/work/proj/.STOCKADE: Operation not permitted", "protected metadata"),
    (b"mv: rename /Users/dev/work/proj/.git to /Users/dev/work/proj/x: "
     b"Operation not permitted", "holds protected metadata"),
    (b"sh: /tmp/out.txt: Operation not permitted", "shared /tmp"),
    (b"sh: /Users/dev/.bashrc: Operation not permitted", "outside what workspace-write allows"),
    (b"Sandbox: curl(1) deny(1) network-outbound 93.184.216.34:443", "network access is off"),
    (b"Sandbox: python3(1) deny(1) network-outbound /private/var/run/docker.sock",
     "network access is off"),
    (b"Sandbox: open(1) deny(1) mach-lookup com.apple.coreservices.launchservicesd",
     "not among the system services"),
])
def test_explain_denial(stderr: bytes, expect: str) -> None:
    hint = explain_denial(mac_profile(), stderr, scratch="/private/var/folders/x/T/s")
    assert hint is not None and expect in hint, hint


def test_explain_denial_for_sockets_and_proxy() -> None:
    sock = b"Sandbox: docker(1) deny(1) network-outbound /Users/dev/.docker/run/docker.sock"
    hint = explain_denial(mac_profile(network=NetworkPolicy.allow_all()), sock)
    assert hint is not None and "unix socket" in hint
    direct = b"Sandbox: go(1) deny(1) network-outbound 1.1.1.1:443"
    hint = explain_denial(mac_profile(network=HOSTS), direct)
    assert hint is not None and "proxy" in hint


def test_no_refusal_no_explanation() -> None:
    assert explain_denial(mac_profile(), b"error: file not found") is None


def test_sandbox_exec_failure() -> None:
    msg = sandbox_exec_failure(b"sandbox-exec: unbound variable: file-teleport\n")
    assert msg is not None and "sw_vers" in msg and "file-teleport" in msg
    assert sandbox_exec_failure(b"Operation not permitted") is None
