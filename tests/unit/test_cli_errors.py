"""Bad input gets one readable line and a documented exit status, never a traceback.

Each test drives the real CLI (the installed entry point, a real sandbox) or the
library, as a person or an agent would, and checks the line, the status and,
with `--json`, the object on stdout.
"""

import json
import os
import subprocess
import sys
import tempfile

import pytest

STOCKADE = os.path.join(os.path.dirname(sys.executable), "stockade")

#: The README's table: one status per kind of failure.
STATUS = {"MissingDependency": 69, "ConfigError": 78, "CapabilityDenied": 77,
          "SandboxUnavailable": 125, "InvalidCommand": 64, "UsageError": 2}


@pytest.fixture
def cli(tmp_path):
    """`stockade ARGS` in a fresh workspace with its own config, ledger and state."""
    ws = tmp_path / "ws"
    ws.mkdir()
    state = tempfile.mkdtemp(prefix="sk", dir="/tmp")  # short: the proxy's sockets
    env = {**os.environ, "HOME": str(tmp_path / "home"),
           "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_STATE_HOME": state,
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    (tmp_path / "home").mkdir()

    def run(*args, cwd=ws, env_extra=None, argv0=STOCKADE, **kw):
        kw.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.run([argv0, *args], capture_output=True, text=True, cwd=cwd,
                              env={**env, **(env_extra or {})}, timeout=120, **kw)

    run.ws = ws
    run.env = env
    yield run
    import shutil

    shutil.rmtree(state, ignore_errors=True)


def one_line(out, kind):
    """The failure was one `stockade: KIND: ...` line and the kind's own status."""
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines and lines[-1].startswith(f"stockade: {kind}: "), out.stderr
    assert out.returncode == STATUS[kind], (out.returncode, out.stderr)
    return lines[-1]


# -- 1. backend none is no boundary: full-access only ---------------------------------

@pytest.mark.parametrize("mode", ["read-only", "workspace-write"])
def test_backend_none_outside_full_access_is_a_config_error(cli, mode):
    line = one_line(cli("run", "--mode", mode, "--backend", "none", "--", "true"),
                    "ConfigError")
    assert "backend 'none' is no boundary" in line and mode in line
    assert "full-access" in line


def test_backend_none_runs_full_access(cli):
    assert cli("run", "--mode", "full-access", "--backend", "none", "--", "true").returncode == 0


def test_backend_none_from_the_config_is_the_same_refusal(cli, tmp_path):
    conf = tmp_path / "config" / "stockade"
    conf.mkdir(parents=True)
    (conf / "config.toml").write_text('[sandbox]\nbackend = "none"\n')
    line = one_line(cli("run", "--", "true"), "ConfigError")
    assert "backend 'none'" in line and "read-only" in line


def test_backend_none_refusal_in_the_library_is_typed_and_audited(tmp_path):
    from stockade import ConfigError, SandboxCommand, SandboxConfig, SyncWorkspaceSandbox

    env = {"HOME": str(tmp_path), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_DATA_HOME": str(tmp_path / "data")}
    sandbox = SyncWorkspaceSandbox(SandboxConfig(backend="none"), env=env)
    try:
        ws = sandbox.session("s", str(tmp_path))
        with pytest.raises(ConfigError, match="no boundary"):
            sandbox.execute(SandboxCommand("true", [], session_id=ws.session_id))
        from stockade.ledger import decoded

        rows = [decoded(r) for r in sandbox.core.ledger.query(session="s", last=1,
                                                               table="executions")]
        assert rows and rows[0]["verdict"] == "error", rows
    finally:
        sandbox.close()


def test_a_driver_built_by_name_ignores_seams_it_does_not_take(tmp_path):
    from stockade.config import SandboxConfig
    from stockade.drivers import registry

    driver = registry.from_config(SandboxConfig(backend="none"), env={}, workspace="/",
                                  state_dir=str(tmp_path), probe=False, warm_sandboxes=0)
    assert driver.name == "none"


# -- 2, 3. stockade's own directories -------------------------------------------------

def test_state_home_that_is_a_file_is_one_line_naming_it(cli, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    line = one_line(cli("run", "--", "true", env_extra={"XDG_STATE_HOME": str(afile)}),
                    "SandboxUnavailable")
    assert f"XDG_STATE_HOME is {afile}, which is not a directory" in line


def test_state_home_whose_parent_is_missing_is_refused_not_created(cli, tmp_path):
    deep = tmp_path / "nonexistent" / "deep"
    line = one_line(cli("run", "--", "true", env_extra={"XDG_STATE_HOME": str(deep)}),
                    "SandboxUnavailable")
    assert f"{tmp_path / 'nonexistent'} does not exist" in line
    assert not (tmp_path / "nonexistent").exists()


def test_state_home_is_made_when_its_parent_exists(cli, tmp_path):
    fresh = tmp_path / "fresh-state"
    assert cli("run", "--", "true", env_extra={"XDG_STATE_HOME": str(fresh)}).returncode == 0
    assert (fresh / "stockade").is_dir() and fresh.stat().st_mode & 0o777 == 0o700


def test_data_home_that_is_a_file_is_one_line_naming_it(cli, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    line = one_line(cli("run", "--", "true", env_extra={"XDG_DATA_HOME": str(afile)}),
                    "SandboxUnavailable")
    assert "data directory" in line and "XDG_DATA_HOME" in line


def test_relative_xdg_values_are_ignored_not_made_in_the_project(cli):
    out = cli("run", "--", "true", env_extra={"XDG_STATE_HOME": "state",
                                              "XDG_DATA_HOME": "data",
                                              "XDG_CONFIG_HOME": "config"})
    assert out.returncode == 0, out.stderr
    assert sorted(os.listdir(cli.ws)) == []
    home = cli.env["HOME"]
    assert os.path.isdir(os.path.join(home, ".local", "state", "stockade"))
    assert os.path.isdir(os.path.join(home, ".local", "share", "stockade"))


def test_xdg_home_follows_the_specification():
    from stockade.config import config_sources
    from stockade.ledger import default_ledger_path
    from stockade.paths import data_dir, state_dir, xdg_home

    env = {"HOME": "/h", "XDG_STATE_HOME": "rel", "XDG_DATA_HOME": "./d",
           "XDG_CONFIG_HOME": "c"}
    assert state_dir(env) == "/h/.local/state/stockade"
    assert data_dir(env) == "/h/.local/share/stockade"
    assert default_ledger_path(env) == "/h/.local/share/stockade/ledger.db"
    assert config_sources(env, "/p")[0][0] == "/h/.config/stockade/config.toml"
    assert xdg_home({"XDG_STATE_HOME": "/abs"}, "XDG_STATE_HOME", ".x") == "/abs"
    assert xdg_home({}, "XDG_STATE_HOME", ".x", no_home="/") == "/.x"


def test_trust_with_a_state_home_that_is_a_file_is_one_line(cli, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    (cli.ws / "stockade.toml").write_text("[sandbox]\n")
    out = cli("trust", env_extra={"XDG_STATE_HOME": str(afile)})
    assert "Traceback" not in out.stderr and out.returncode in (78, 125), out.stderr
    assert str(afile) in out.stderr.strip().splitlines()[-1]


# -- 4. a shell that is not there -----------------------------------------------------

def test_shell_that_is_not_installed_exits_127_like_run(cli):
    out = cli("shell", "--", "no-such-shell-stockade", "-i", input="exit\n", stdin=None)
    # The pty carries the shell's stderr to stdout, as a terminal would show it.
    assert "Traceback" not in out.stdout + out.stderr, out.stdout
    assert out.returncode == 127, out.stderr
    assert "cannot run no-such-shell-stockade: No such file or directory" in out.stdout
    ran = cli("run", "--", "no-such-shell-stockade")
    assert ran.returncode == 127


# -- 5. a workspace of / --------------------------------------------------------------

@pytest.mark.parametrize("mode", ["read-only", "workspace-write"])
def test_workspace_of_root_is_one_clear_refusal(cli, mode):
    line = one_line(cli("run", "--mode", mode, "--", "ls", cwd="/"), "CapabilityDenied")
    assert "the workspace is / (the whole filesystem)" in line
    assert "bwrap" not in line


def test_workspace_of_root_runs_in_full_access(cli):
    out = cli("run", "--mode", "full-access", "--", "ls", cwd="/")
    assert out.returncode == 0 and "usr" in out.stdout.split()


# -- 6. many arguments ----------------------------------------------------------------

def _backends():
    from stockade.drivers.linux.layers import host_landlock_abi

    return ["bubblewrap", "landlock"] if host_landlock_abi() >= 3 else ["bubblewrap"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux backends")
@pytest.mark.parametrize("count", [20_000, 100_000])
@pytest.mark.parametrize("backend", _backends() if sys.platform.startswith("linux") else [])
def test_many_arguments_reach_the_command_whole(cli, count, backend):
    # bwrap refuses more than 9000 arguments in all; the init gets a long argv
    # packed (initschema.PACKED_ARGV), so only ARG_MAX bounds it, as for exec.
    words = [str(i) for i in range(count)]
    out = cli("run", "--backend", backend, "--", "/bin/echo", *words)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == " ".join(words) + "\n"


def test_init_argv_packs_a_long_argv_in_pieces():
    from stockade.drivers.linux.init.initcore import parse_command
    from stockade.drivers.linux.init.initschema import ARGV_INLINE, ARGV_PIECE, PACKED_ARGV
    from stockade.drivers.linux.layers import init_argv

    config = {"v": 1}
    short = init_argv("/py", "/init.py", config, ["echo", "a"])
    assert short[5:] == ["--", "echo", "a"]
    argv = ["echo", "ü", "a\udcffb", *map(str, range(ARGV_INLINE + 40_000))]
    packed = init_argv("/py", "/init.py", config, argv)
    assert packed[5] == PACKED_ARGV and len(packed) < 50
    assert all(len(piece) <= ARGV_PIECE for piece in packed[6:])
    assert parse_command("".join(packed[6:])) == argv


# -- 7. --config that is not a file ---------------------------------------------------

def test_config_that_does_not_exist_is_an_error_naming_it(cli, tmp_path):
    missing = tmp_path / "nonexistent.toml"
    line = one_line(cli("run", "--config", str(missing), "--", "true"), "ConfigError")
    assert str(missing) in line and "no such file" in line


def test_config_that_is_a_directory_is_an_error_naming_it(cli, tmp_path):
    line = one_line(cli("run", "--config", str(tmp_path), "--", "true"), "ConfigError")
    assert str(tmp_path) in line and "a directory" in line and "remove it" not in line


# -- 8. a missing optional dependency -------------------------------------------------

def _without(module, *cli_args, cwd):
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            "from stockade.cli import main\n"
            f"sys.exit(main({list(cli_args)!r}))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=cwd, timeout=60, stdin=subprocess.DEVNULL)


def test_mcp_without_the_extra_names_it_and_exits_69(tmp_path):
    out = _without("mcp", "mcp", cwd=tmp_path)
    line = one_line(out, "MissingDependency")
    assert "pip install 'stockade[mcp]'" in line


def test_sandbox_pool_without_ray_names_the_extra():
    code = ("import sys; sys.modules['ray'] = None\n"
            "from stockade.cluster import SandboxPool\n"
            "from stockade.errors import MissingDependency\n"
            "try:\n    SandboxPool()\n"
            "except MissingDependency as exc:\n"
            "    assert isinstance(exc, ModuleNotFoundError) and exc.exit_status == 69\n"
            "    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "pip install 'stockade[ray]'" in out.stdout


def test_a_subcommand_whose_module_cannot_load_exits_69(tmp_path):
    out = _without("stockade.completion", "completion", "bash", cwd=tmp_path)
    assert "Traceback" not in out.stderr and out.returncode == 69, out.stderr
    assert out.stderr.startswith("stockade: completion is not available")


# -- 9. --json prints its object on every failure -------------------------------------

def _failed_object(out, kind):
    assert out.returncode == STATUS[kind], out.stderr
    result = json.loads(out.stdout)
    assert result["error"] == kind and result["status"] == STATUS[kind]
    assert result["exit_code"] is None and result["message"]
    return result


def test_json_refusal_prints_the_object(cli):
    result = _failed_object(cli("run", "--json", "--", "rm", "-rf", "/"), "CapabilityDenied")
    assert "rm-root-recursive" in result["message"]


@pytest.mark.parametrize("args, kind", [
    (["--config", "/nonexistent.toml"], "ConfigError"),
    (["--backend", "none"], "ConfigError"),
    (["--timeout", "nan"], "UsageError"),
    (["--no-such-flag"], "UsageError"),
    (["--cwd", "../.."], "CapabilityDenied"),
    (["--workspace", "/nonexistent"], "InvalidCommand"),
])
def test_json_prints_the_object_for_every_failure(cli, args, kind):
    _failed_object(cli("run", "--json", *args, "--", "true"), kind)


def test_json_sandbox_unavailable_prints_the_object(cli, tmp_path):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\nfor a; do last=$a; done\n[ \"$last\" = /bin/true ] && exit 0\n"
                    "echo \"bwrap: Can't mount proc on /newroot/proc: Operation not permitted\""
                    " >&2\nexit 1\n")
    fake.chmod(0o755)
    cfg = tmp_path / "fake.toml"
    cfg.write_text(f'[sandbox]\nbwrap = "{fake}"\n')
    _failed_object(cli("run", "--json", "--config", str(cfg), "--", "true"),
                   "SandboxUnavailable")


def test_without_json_stdout_stays_empty_on_failure(cli):
    out = cli("run", "--", "rm", "-rf", "/")
    assert out.returncode == 77 and out.stdout == ""
    # --json after the command is the command's argument, not stockade's.
    out = cli("run", "--", "echo", "--json")
    assert out.returncode == 0 and out.stdout == "--json\n"
