"""The CLI's surface: the pass-through budget, help everywhere, completion,
`explain` and `config show` (through the installed entry point)."""

import os
import subprocess
import sys

import pytest

STOCKADE = os.path.join(os.path.dirname(sys.executable), "stockade")


@pytest.fixture
def cli(tmp_path):
    """`stockade ARGS` in a fresh workspace with its own config, ledger and state."""
    import shutil
    import tempfile

    ws = tmp_path / "ws"
    ws.mkdir()
    state = tempfile.mkdtemp(prefix="sk", dir="/tmp")
    config = tmp_path / "config"
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_STATE_HOME": state,
           "XDG_CONFIG_HOME": str(config)}

    def run(*args, cwd=ws, **kw):
        kw.setdefault("capture_output", True)
        return subprocess.run([STOCKADE, *args], text=True, cwd=cwd, env=env, timeout=60,
                              stdin=subprocess.DEVNULL, **kw)

    def user_config(text):
        (config / "stockade").mkdir(parents=True, exist_ok=True)
        path = config / "stockade" / "config.toml"
        path.write_text(text)
        return path

    run.ws = ws
    run.env = env
    run.user_config = user_config
    yield run
    shutil.rmtree(state, ignore_errors=True)


# -- the pass-through budget ---------------------------------------------------------

def test_a_flood_through_a_pipe_stops_at_the_default_stream_budget(cli):
    out = subprocess.run(
        [STOCKADE, "run", "--", "head", "-c", "100000000", "/dev/zero"],
        capture_output=True, cwd=cli.ws, env=cli.env, timeout=60,
        stdin=subprocess.DEVNULL)
    assert len(out.stdout) == 64 << 20
    assert out.returncode == 128 + 9
    assert out.stderr.decode().splitlines()[-1] == (
        "stockade: the command's output passed stream_output_bytes (67108864 bytes); "
        "its process tree was killed")


def test_the_stream_budget_counts_stdout_and_stderr_together_and_is_configurable(cli):
    cli.user_config("[sandbox]\nstream_output_bytes = 1000\n")
    out = cli("run", "--", "sh", "-c",
              "head -c 600 /dev/zero | tr '\\0' o; head -c 600 /dev/zero | tr '\\0' e >&2; "
              "sleep 5; echo never")
    assert out.returncode == 137, out.stderr
    assert out.stdout == "o" * 600
    assert out.stderr.startswith("e" * 400 + "stockade: the command's output passed "
                                 "stream_output_bytes (1000 bytes)")
    # The audit record says it was cut.
    record = cli("audit", "--json", "--last", "1").stdout
    assert '"truncated": true' in record


def test_output_within_the_budget_passes_unchanged(cli):
    out = cli("run", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (out.returncode, out.stdout, out.stderr) == (3, "out\n", "err\n")


def test_a_terminal_stdout_stays_the_commands_own(cli):
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.chdir(cli.ws)
        os.execve(STOCKADE, [STOCKADE, "run", "--", "sh", "-c",
                             "[ -t 1 ] && echo tty || echo notty"], cli.env)
    data = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    os.waitpid(pid, 0)
    assert b"tty" in data and b"notty" not in data, data


# -- help: one style, every option described ----------------------------------------

def _walk(parser, path=()):
    import argparse

    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _walk(child, (*path, name))


def _undescribed(sub):
    from stockade.clispec import parser

    missing = []
    for path, p in _walk(parser(only=sub)):
        for action in p._actions:
            if action.option_strings and not (action.help or "").strip():
                missing.append(f"stockade {' '.join(path)} {'/'.join(action.option_strings)}")
    return missing


@pytest.mark.parametrize("sub", ["run", "explain", "shell", "doctor", "audit", "config",
                                 "trust", "policy", "mcp", "completion"])
def test_every_option_of_every_subcommand_has_help(sub):
    assert _undescribed(sub) == []


def test_every_proxy_option_has_help():
    assert _undescribed("proxy") == []


@pytest.mark.parametrize("sub", ["run", "explain", "shell", "doctor", "audit", "config",
                                 "trust", "policy", "proxy", "mcp", "completion"])
def test_every_subcommand_help_has_one_style(cli, sub):
    out = cli(sub, "--help")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith(f"usage: stockade {sub}")
    # argparse's layout everywhere: the usage, a description, then "options:" with -h first.
    assert "\noptions:\n  -h, --help " in text, text


def test_doctor_help_lists_json(cli):
    assert "--json" in cli("doctor", "-h").stdout


# -- completion ---------------------------------------------------------------------

def test_the_shipped_scripts_are_generated_from_the_cli_description():
    pytest.importorskip("shtab")
    from stockade import completion

    for shell, name in completion.FILES.items():
        with open(os.path.join(completion.HERE, name)) as fh:
            assert fh.read() == completion.generate(shell), (
                f"{name} is stale: run `python -m stockade.completion --write`")


def _bash_complete(cli, words, cwd):
    script = os.path.join(os.path.dirname(STOCKADE), "..", "stockade.bash")
    script = cli.ws.parent / "c.bash"
    script.write_text(cli("completion", "bash").stdout)
    line = " ".join(f"'{w}'" for w in words)
    probe = (f"source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; "
             "_shtab_stockade; printf '%s\\n' \"${COMPREPLY[@]}\"")
    out = subprocess.run(["bash", "--norc", "-c", probe], capture_output=True, text=True,
                         timeout=30, cwd=cwd)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


@pytest.mark.parametrize("words, expected", [
    (["stockade", "run", "--", "cat", "a"], {"a.txt", "abc.md"}),
    (["stockade", "run", "--mode", "read-only", "--", "cat", "a"], {"a.txt", "abc.md"}),
    (["stockade", "policy", ""], {"check", "rules"}),
    (["stockade", "config", ""], {"show"}),
    (["stockade", "completion", ""], {"bash", "zsh", "fish"}),
    (["stockade", "run", "--network", ""], {"none", "proxy", "all"}),
    (["stockade", "run", "--session", ""], set()),
    (["stockade", "run", "--timeout", ""], set()),
    (["stockade", "run", "--allow-host", ""], set()),
    (["stockade", "audit", "--last", ""], set()),
    (["stockade", "run", "--config", "a"], {"a.txt", "abc.md"}),
])
def test_bash_completes_what_each_position_takes(cli, words, expected):
    (cli.ws / "a.txt").write_text("")
    (cli.ws / "abc.md").write_text("")
    assert _bash_complete(cli, words, cli.ws) == expected


def test_bash_completes_a_command_first_after_the_double_dash(cli):
    got = _bash_complete(cli, ["stockade", "run", "--", "ca"], cli.ws)
    assert "cat" in got and "a.txt" not in got


def test_bash_completes_trust_options_and_every_subcommand(cli):
    assert {"--list", "--revoke"} <= _bash_complete(cli, ["stockade", "trust", "--"], cli.ws)
    from stockade.clispec import SUMMARIES

    assert _bash_complete(cli, ["stockade", ""], cli.ws) >= set(SUMMARIES)


def test_zsh_script_describes_each_option():
    from stockade import completion

    with open(os.path.join(completion.HERE, completion.FILES["zsh"])) as fh:
        text = fh.read()
    assert "[]" not in text.replace("[]}", "")  # no empty descriptions
    assert "--allow-host[let the command reach" in text


# -- explain, config show --------------------------------------------------------------

def test_explain_shows_the_profile_without_running(cli):
    out = cli("explain", "--mode", "workspace-write", "--allow-host", "pypi.org", "--",
              "sh", "-c", "touch ran")
    assert out.returncode == 0, out.stderr
    assert not (cli.ws / "ran").exists()
    text = out.stdout
    assert "mode:      workspace-write   (from --mode)" in text
    assert f"writes:    {cli.ws}" in text
    assert "approval:  network access to pypi.org" in text
    assert "(from --allow-host)" in text
    assert "layer:" in text and "hidden:" in text and "timeout:   60 s" in text
    assert cli("audit", "--json").stdout == ""  # nothing recorded


def test_explain_json_and_where_settings_came_from(cli):
    import json

    config = cli.user_config("[sandbox]\ndefault_timeout_seconds = 7\nmax_pids = 50\n")
    out = cli("explain", "--json", "--", "true")
    report = json.loads(out.stdout)
    assert report["timeout_seconds"] == 7 and report["timeout_from"] == str(config)
    assert report["limits"]["max_pids"] == 50 and report["limits_from"]["max_pids"] == str(config)
    assert report["mode"] == "read-only" and report["mode_from"] == "default"
    assert report["writable"] == []


def test_explain_names_a_policy_block(cli):
    out = cli("explain", "--", "rm", "-rf", "/")
    assert out.returncode == 0 and "policy:    blocked: rm-" in out.stdout


def test_config_show_names_each_settings_source(cli):
    config = cli.user_config("[sandbox]\nmax_pids = 50\n")
    (cli.ws / "stockade.toml").write_text("[sandbox]\ndefault_timeout_seconds = 9\n")
    out = cli("config", "show")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"files read: {config}, {cli.ws}/stockade.toml"
    rows = {line.split()[0]: line for line in lines[1:]}
    assert rows["max_pids"].endswith(f"= 50   # {config}")
    assert rows["default_timeout_seconds"].endswith(f"= 9   # {cli.ws}/stockade.toml")
    assert rows["mode"].endswith('= "read-only"   # default')
    assert cli("config").returncode == 2


# -- doctor ----------------------------------------------------------------------------

@pytest.mark.parametrize("abi, shown", [
    (3, ["ABI < 6", "ABI < 4"]), (5, ["ABI < 6"]), (6, []), (7, []),
])
def test_doctor_lists_only_the_landlock_caveats_of_this_kernel(abi, shown):
    from stockade.doctor import applicable
    from stockade.drivers.linux.landlock_driver import WEAKNESSES

    lines = [line for line in applicable(WEAKNESSES, abi) if "ABI <" in line]
    assert [part for part in ("ABI < 6", "ABI < 4") if any(part in x for x in lines)] == shown
    # The caveats without an ABI stay, whatever the kernel.
    assert len(applicable(WEAKNESSES, abi)) == len(WEAKNESSES) - (0 if shown else 1)


def test_doctor_prints_no_python_dict(cli):
    out = cli("doctor")
    assert "{" not in out.stdout and "user_namespaces:\n    max_user_namespaces: " in out.stdout
