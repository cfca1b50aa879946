"""CLI parsing and exit statuses (the isolation suite runs the real thing)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stockade.cli import main, parse_options
from stockade.clitables import RUN_OPTIONS
from stockade.cliutil import UsageError


def test_parse_options_values_flags_repeats_and_command():
    values, cmd = parse_options(
        ["--mode", "workspace-write", "--allow-read=/a", "--allow-read", "/b", "--json", "--",
         "ls", "--bind"], RUN_OPTIONS, "u")
    assert values == {"mode": "workspace-write", "allow_read": ["/a", "/b"], "json": True}
    assert cmd == ["ls", "--bind"]


@pytest.mark.parametrize("argv", [["--nope"], ["--mode"], ["--json=1"]])
def test_parse_errors(argv):
    with pytest.raises(UsageError):
        parse_options(argv, RUN_OPTIONS, "u")


def run_cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "stockade", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=60)


def test_help_everywhere(tmp_path):
    for args in ([], ["run", "--help"], ["audit", "--help"], ["doctor", "--help"]):
        out = run_cli(*(args or ["--help"]), cwd=tmp_path)
        assert out.returncode == 0 and "usage: stockade" in out.stdout


def test_usage_errors_exit_2_with_one_line(tmp_path):
    out = run_cli("run", cwd=tmp_path)
    assert out.returncode == 2 and "no command given" in out.stderr
    assert run_cli("frobnicate", cwd=tmp_path).returncode == 2


def test_unknown_mode_is_a_usage_error(tmp_path):
    out = run_cli("run", "--mode", "yolo", "--", "true", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("stockade: --mode must be one of read-only, workspace-write, "
                                 "full-access, got 'yolo'\n")


def test_json_result_and_exit_status(tmp_path):
    out = run_cli("run", "--json", "--", "sh", "-c", "echo out; echo err >&2; exit 7",
                  cwd=tmp_path)
    result = json.loads(out.stdout)
    assert out.returncode == 7 and result["exit_code"] == 7
    assert result["stdout"] == "out\n" and result["stderr"] == "err\n"
    assert result["backend"] == "bubblewrap"


def test_main_returns_status_in_process(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--", "true"]) == 0
    assert main(["run", "--", "sh", "-c", "exit 5"]) == 5


# -- through the installed entry point, in a real sandbox -------------------------

STOCKADE = os.path.join(os.path.dirname(sys.executable), "stockade")


@pytest.fixture
def cli(tmp_path):
    """`stockade ARGS` in a fresh workspace with its own ledger and state."""
    import tempfile

    ws = tmp_path / "ws"
    ws.mkdir()
    # Short: the proxy's unix sockets live under the state directory.
    state = tempfile.mkdtemp(prefix="sk", dir="/tmp")
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_STATE_HOME": state,
           "XDG_CONFIG_HOME": str(tmp_path / "config")}

    def run(*args, cwd=ws, **kw):
        return subprocess.run([STOCKADE, *args], capture_output=True, text=True, cwd=cwd,
                              env=env, timeout=60, stdin=subprocess.DEVNULL, **kw)

    run.ws = ws
    yield run
    import shutil

    shutil.rmtree(state, ignore_errors=True)


def last_line(stderr):
    return stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_read_only_redirection_names_the_file_and_the_mode_rule(cli, shell):
    out = cli("run", "--mode", "read-only", "--", shell, "-c", "echo x > c.txt")
    assert out.returncode != 0
    assert last_line(out.stderr) == (
        "stockade: blocked by the sandbox: c.txt in the workspace is read-only: the "
        "workspace is read-only in read-only mode (ask for workspace-write)"), out.stderr
    assert "/bin/sh" not in last_line(out.stderr)


def test_workspace_write_outside_path_says_only_the_workspace_is_writable(cli):
    out = cli("run", "--mode", "workspace-write", "--", "sh", "-c", "echo x > /etc/x.txt")
    line = last_line(out.stderr)
    assert "/etc/x.txt is outside the workspace" in line
    assert line.endswith("only the workspace is writable"), line


def test_relative_path_out_of_the_workspace_is_resolved(cli):
    # Up to /etc: the sandbox's /tmp is its own, so a sibling there would be writable.
    rel = "../" * len(cli.ws.parts[1:]) + "etc/up.txt"
    out = cli("run", "--mode", "workspace-write", "--", "sh", "-c", f"echo x > {rel}")
    assert f"{rel} (/etc/up.txt) is outside the workspace" in out.stderr, out.stderr


def test_git_init_works_and_a_protected_write_is_named(cli):
    out = cli("run", "--mode", "workspace-write", "--", "git", "init", "-q")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert (cli.ws / ".git" / "HEAD").is_file()
    out = cli("run", "--mode", "workspace-write", "--", "sh", "-c",
              "echo x > .git/hooks/pre-commit")
    line = last_line(out.stderr)
    assert ".git/hooks/pre-commit is read-only: .git is protected metadata" in line, line
    assert "outside" not in line


def test_quiet_and_json_carry_the_same_hint(cli):
    cmd = ["--mode", "read-only", "--", "sh", "-c", "echo x > c.txt"]
    quiet = cli("run", "-q", *cmd)
    assert quiet.returncode == 2 and "stockade:" not in quiet.stderr
    assert quiet.stderr.strip() == "sh: 1: cannot create c.txt: Read-only file system"
    result = json.loads(cli("run", "--json", *cmd).stdout)
    assert result["likely_sandbox_denied"] is True
    assert last_line(cli("run", *cmd).stderr) == f"stockade: {result['denial_hint']}"


def test_passthrough_stderr_still_reaches_the_caller_in_order(cli):
    out = cli("run", "--", "sh", "-c", "echo one >&2; echo two; echo three >&2; exit 4")
    assert out.returncode == 4 and out.stdout == "two\n" and out.stderr == "one\nthree\n"


def test_a_proxy_refusal_makes_a_hint(cli):
    code = "import urllib.request; urllib.request.urlopen('http://other.example/')"
    out = cli("run", "--yes", "--network", "proxy", "--allow-host", "example.com", "--",
              "python3", "-c", code)
    assert out.returncode == 1
    assert last_line(out.stderr).startswith(
        "stockade: blocked by the sandbox: the network proxy refused other.example:80"), out.stderr
    record = json.loads(cli("audit", "--json", "--last", "1").stdout)
    assert record["denied"] is True and record["verdict"] == "ran-denied"
    assert "other.example" in record["reason"]


@pytest.mark.parametrize("stderr, path", [
    (b"sh: 1: cannot create c.txt: Read-only file system", "c.txt"),
    (b"bash: c.txt: Read-only file system", "c.txt"),
    (b"bash: line 1: c.txt: Read-only file system", "c.txt"),
    (b"touch: cannot touch 'x': Read-only file system", "x"),
    (b"cp: cannot create regular file 'x': Permission denied", "x"),
    (b"PermissionError: [Errno 13] Permission denied: 'x'", "x"),
    (b"OSError: [Errno 30] Read-only file system: 'x'", "x"),
    (b"sh: Read-only file system", ""),
])
def test_the_path_is_parsed_from_each_tools_format(stderr, path):
    from stockade.denial import _quoted_path

    assert _quoted_path(stderr) == path


def test_hint_without_a_path_still_names_the_rule():
    from stockade.denial import denial_hint

    assert denial_hint("read-only", b"sh: Read-only file system", "read-only",
                       workspace="/w", cwd="/w").endswith(
        "the workspace is read-only in read-only mode (ask for workspace-write)")


def test_a_sandbox_that_cannot_be_built_exits_125_without_json(cli, tmp_path):
    # Passes the start-up probe, then fails the real sandbox as a kernel would.
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\nfor a; do last=$a; done\n[ \"$last\" = /bin/true ] && exit 0\n"
                    "echo \"bwrap: Can't mount proc on /newroot/proc: Operation not permitted\""
                    " >&2\nexit 1\n")
    fake.chmod(0o755)
    cfg = tmp_path / "fake.toml"
    cfg.write_text(f'[sandbox]\nbwrap = "{fake}"\n')
    for extra in ([], ["--json"]):
        out = cli("run", "--config", str(cfg), *extra, "--", "true")
        assert out.returncode == 125, (extra, out.stderr)
        assert "SandboxUnavailable" in last_line(out.stderr)


@pytest.fixture
def caller_token(monkeypatch):
    """A secret in the caller's environment, set before `cli` copies it."""
    monkeypatch.setenv("GH_TOKEN", "ghp_from_caller")


def test_env_passes_a_secret_that_the_record_never_holds(caller_token, cli):
    """`--env NAME` hands over the caller's value, `--env NAME=VALUE` a given one; the
    scrub would drop both names; `stockade audit` names them and shows neither value.
    `env NAME=value cmd`, the old way, is redacted in the record too."""
    out = cli("run", "--", "sh", "-c", 'echo "${GH_TOKEN:-scrubbed}"')
    assert out.stdout == "scrubbed\n", out.stderr  # control: without --env, dropped
    out = cli("run", "--env", "GH_TOKEN", "--env", "API_KEY=given-value", "--",
              "sh", "-c", 'echo "$GH_TOKEN $API_KEY"')
    assert (out.returncode, out.stdout) == (0, "ghp_from_caller given-value\n"), out.stderr
    out = cli("run", "--", "env", "DB_PASSWORD=old-way", "sh", "-c", 'echo "$DB_PASSWORD"')
    assert out.stdout == "old-way\n", out.stderr
    text = cli("audit", "--last", "2").stdout
    records = [json.loads(line) for line in
               cli("audit", "--json", "--last", "2").stdout.splitlines() if line.strip()]
    records = [r for item in records for r in (item if isinstance(item, list) else [item])]
    for secret in ("ghp_from_caller", "given-value", "old-way"):
        assert secret not in text and secret not in json.dumps(records)
    assert records[0]["detail"]["env"] == {"API_KEY": "[redacted]", "GH_TOKEN": "[redacted]"}
    assert records[1]["argv"][:2] == ["env", "DB_PASSWORD=[redacted]"]
    assert "DB_PASSWORD=[redacted]" in text


@pytest.mark.parametrize("args, message", [
    (["--env", "STOCKADE_UNSET_VAR"], "stockade: --env STOCKADE_UNSET_VAR: STOCKADE_UNSET_VAR "
     "is not set here, so there is no value to pass (use --env STOCKADE_UNSET_VAR=VALUE)"),
    (["--env", "1X=y"], "stockade: --env '1X=y': give NAME or NAME=VALUE"),
    (["--env", "=y"], "stockade: --env '=y': give NAME or NAME=VALUE"),
])
def test_env_refuses_what_it_cannot_pass(cli, args, message):
    out = cli("run", *args, "--", "true")
    assert out.returncode == 2 and message in out.stderr, out.stderr


# -- flags ---------------------------------------------------------------------------

def test_version(cli):
    from stockade import __version__

    out = cli("--version")
    assert out.returncode == 0 and out.stdout == f"stockade {__version__}\n"


@pytest.mark.parametrize("sub", ["run", "shell", "doctor", "audit", "policy", "proxy", "mcp",
                                 "completion"])
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_every_subcommand_has_help(cli, sub, flag):
    out = cli(sub, flag)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: stockade {sub}"), out.stdout


def test_help_after_double_dash_belongs_to_the_command(cli):
    out = cli("run", "--", "sh", "-c", 'echo "$0"', "-h")
    assert out.returncode == 0 and out.stdout == "-h\n"
    out = cli("run", "--mode", "read-only", "-h")
    assert out.stdout.startswith("usage: stockade run")


@pytest.mark.parametrize("args, message", [
    (["audit", "--last", "-3"], "stockade: --last must be a positive integer, got '-3'"),
    (["audit", "--last", "x"], "stockade: --last must be a positive integer, got 'x'"),
    (["run", "--allow-host", "", "--", "true"], "stockade: --allow-host '': empty host"),
    (["run", "--allow-host", "https://example.com/x", "--", "true"],
     "stockade: --allow-host 'https://example.com/x': give a host name, not a URL: "
     "try --allow-host example.com"),
    (["run", "--timeout", "-1", "--", "true"],
     "stockade: --timeout must be a positive number, got '-1'"),
    (["run", "--timeout", "nan", "--", "true"],
     "stockade: --timeout must be a positive number, got 'nan'"),
    (["run", "--timeout", "inf", "--", "true"],
     "stockade: --timeout must be a positive number, got 'inf'"),
    (["run", "--max-output", "0", "--", "true"],
     "stockade: --max-output must be a positive integer, got '0'"),
    (["run", "--backend", "bogus", "--", "true"],
     "stockade: --backend must be one of auto, bubblewrap, landlock, none, got 'bogus'"),
    (["run", "--network", "bogus", "--", "true"],
     "stockade: --network must be one of none, proxy, all, got 'bogus'"),
])
def test_bad_flag_values_are_usage_errors(cli, args, message):
    out = cli(*args)
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines()[0] == message
    assert out.stderr.splitlines()[1].startswith(f"usage: stockade {args[0]}")


def test_bad_allow_hosts_in_the_config_names_file_and_key(cli):
    (cli.ws / "stockade.toml").write_text('[sandbox]\nallow_hosts = ["https://x.com/"]\n')
    out = cli("run", "--", "true")
    assert out.returncode == 78, out.stderr
    assert out.stderr == (f"stockade: ConfigError: {cli.ws}/stockade.toml: [sandbox] "
                          "allow_hosts entry 'https://x.com/': give a host name, not a URL: "
                          "try x.com\n")


def test_control_characters_are_escaped(cli):
    out = cli("\x1b[31mx")
    assert out.returncode == 2 and "\x1b" not in out.stderr and "\\x1b[31mx" in out.stderr
    out = cli("run", "--", "\x1b[31mx")
    assert out.returncode == 127 and "\x1b" not in out.stderr and "\\x1b[31mx" in out.stderr
    out = cli("run", "--mode", "\x07", "--", "true")
    assert out.returncode == 2 and "\x07" not in out.stderr


def test_allow_write_in_read_only_is_refused_with_the_reason(cli):
    out = cli("run", "--mode", "read-only", "--yes", "--allow-write", str(cli.ws), "--",
              "sh", "-c", "echo x > f.txt")
    assert out.returncode == 77, out.stderr
    assert "fs_write needs workspace-write or full-access mode" in out.stderr
    assert out.stderr.count("\n") == 1 and not (cli.ws / "f.txt").exists()


def test_mcp_with_a_missing_workspace_is_one_line_64(cli):
    pytest.importorskip("mcp")
    out = cli("mcp", "--workspace", "/nonexistent")
    assert out.returncode == 64
    assert out.stderr == ("stockade: InvalidCommand: workspace '/nonexistent' is not a "
                          "directory\n")


# -- audit -----------------------------------------------------------------------------

def test_audit_json_is_values_and_text_shows_verdict_and_reason(cli):
    cli("run", "--mode", "read-only", "--", "sh", "-c", "echo x > c.txt")
    cli("run", "--cwd", "/", "--", "true")
    rows = [json.loads(line) for line in cli("audit", "--json").stdout.splitlines()]
    ran, refused = rows
    assert ran["argv"] == ["sh", "-c", "echo x > c.txt"]
    assert isinstance(ran["capabilities"], dict) and isinstance(ran["detail"], dict)
    assert ran["denied"] is True and ran["verdict"] == "ran-denied"
    assert "c.txt" in ran["detail"]["hint"] and ran["reason"] == ran["detail"]["hint"]
    assert refused["verdict"] == "refused" and "cwd outside" in refused["reason"]
    text_rows = cli("audit").stdout.splitlines()
    assert " ran-denied exit=2 " in text_rows[0] and "(blocked by the sandbox: c.txt" in \
        text_rows[0]
    assert " refused " in text_rows[1] and "exit=" not in text_rows[1]
    assert "sigNone" not in text_rows[1] and "(cwd outside workspace root" in text_rows[1]


def test_audit_says_when_there_is_nothing(cli):
    out = cli("audit", "--network")
    assert out.returncode == 0 and out.stdout == "" and out.stderr == "no network records\n"


# -- completion -------------------------------------------------------------------------

def test_bash_completion_registers_and_completes_from_the_parser_tables(cli, tmp_path):
    script = tmp_path / "c.bash"
    script.write_text(cli("completion", "bash").stdout)
    probe = (f"source {script}; complete -p stockade; "
             "COMP_WORDS=(stockade run --mo); COMP_CWORD=2; _shtab_stockade; "
             "echo \"${COMPREPLY[*]}\";"
             "COMP_WORDS=(stockade run --network ''); COMP_CWORD=3; _shtab_stockade; "
             "echo \"${COMPREPLY[*]}\";"
             "COMP_WORDS=(stockade mcp --backend ''); COMP_CWORD=3; _shtab_stockade; "
             "echo \"${COMPREPLY[*]}\"")
    out = subprocess.run(["bash", "--norc", "-c", probe], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines == ["complete -o bashdefault -F _shtab_stockade stockade", "--mode",
                     "none proxy all",
                     "auto bubblewrap landlock none"]


@pytest.mark.parametrize("shell, check", [
    ("zsh", "autoload -U compinit; compinit -u; source {s}; whence -w _shtab_stockade"),
    ("fish", "source {s}; complete -c stockade | string match -q -- '*--allow-host*'"),
])
def test_zsh_and_fish_completion_load(cli, tmp_path, shell, check):
    import shutil

    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed here")
    script = tmp_path / f"c.{shell}"
    script.write_text(cli("completion", shell).stdout)
    out = subprocess.run([shell, "-c", check.format(s=script)], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr


def test_completion_needs_a_known_shell(cli):
    out = cli("completion", "tcsh")
    assert out.returncode == 2 and "completion needs one of bash, zsh, fish" in out.stderr


def test_a_deny_host_reason_is_not_part_of_the_host(cli):
    out = cli("run", "--deny-host", "gist.github.com=paste sites", "--", "true")
    assert out.returncode == 0, out.stderr
    out = cli("run", "--deny-host", "https://gist.github.com=x", "--", "true")
    assert out.returncode == 2 and "try --deny-host gist.github.com" in out.stderr


def test_git_submodule_add_works_and_its_keys_reach_the_host(cli, tmp_path):
    """git writes submodule.lib.url and .active into .git/config: a private copy, merged
    back with inert keys only (drivers/linux/host/gitconfig.py). It used to exit 0 having
    written nothing, "could not write config file .git/config"."""
    lib = tmp_path / "lib"
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for repo in (lib, cli.ws):
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        (repo / "f").write_text("x\n")
        subprocess.run(["git", "-C", str(repo), "add", "f"], check=True)
        subprocess.run(["git", *ident, "-C", str(repo), "commit", "-qm", "m"], check=True)
    out = cli("run", "--mode", "workspace-write", "--allow-read", str(lib), "--yes", "--",
              "git", "-c", "protocol.file.allow=always", "submodule", "add", str(lib), "lib")
    assert out.returncode == 0 and "could not write" not in out.stderr, out.stderr
    got = subprocess.run(["git", "-C", str(cli.ws), "config", "--get-regexp", "^submodule"],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    assert f"submodule.lib.url {lib}" in got and "submodule.lib.active true" in got, got
    status = subprocess.run(["git", "-C", str(cli.ws), "submodule", "status"],
                            capture_output=True, text=True)
    assert status.returncode == 0 and " lib " in status.stdout, status


def test_python_m_stockade_imports_nothing_from_the_working_directory(tmp_path: Path) -> None:
    """`python -m stockade` started in a workspace (as an MCP client starts it) must not
    import a module a sandboxed command wrote there."""
    (tmp_path / "json.py").write_text("raise SystemExit('HIJACKED')\n")
    env = {"HOME": str(tmp_path), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "XDG_STATE_HOME": str(tmp_path / "state")}
    # The control: an ordinary interpreter started there imports it.
    ctl = subprocess.run([sys.executable, "-c", "import json"], cwd=tmp_path, env=env,
                         capture_output=True, timeout=60, check=False)
    assert b"HIJACKED" in ctl.stderr
    res = subprocess.run([sys.executable, "-m", "stockade", "doctor", "--json"], cwd=tmp_path,
                         env=env, capture_output=True, timeout=120, check=False)
    assert b"HIJACKED" not in res.stdout + res.stderr
    assert res.stdout.startswith(b"{"), res.stderr
