"""A project's stockade.toml may only narrow the user's config unless the person trusted it."""

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from stockade.config import load_config
from stockade.errors import ConfigError
from stockade.trust import TrustStore
from stockade.trustcmd import list_trusted, revoke_file, trust_file

USER = """[sandbox]
mode = "workspace-write"
scratch = false
read_scope = "strict"
require_landlock = true
max_memory_mb = 512
max_file_size_mb = 100
cpu_quota_percent = 50
writable = ["~/out"]
granted_sockets = ["/run/a.sock"]
allow_hosts = ["pypi.org"]
deny_hosts = ["gist.github.com"]
unreadable = ["~/.aws", "~/.kube"]
secret_env = ["*TOKEN*", "*KEY*"]

[sandbox.command_policy]
enforcement = "warn"
custom_rules = [{name = "no-curl", regex = "curl", action = "block", description = "d"}]
"""
RULE = '{name = "no-curl", regex = "curl", action = "block", description = "d"}'


@pytest.fixture
def home(tmp_path):
    """(env, workspace) with the user's config above; the store under XDG_STATE_HOME."""
    home = tmp_path / "home"
    (home / ".config" / "stockade").mkdir(parents=True)
    (home / ".config" / "stockade" / "config.toml").write_text(USER)
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {"HOME": str(home), "XDG_STATE_HOME": str(tmp_path / "state")}
    return env, ws


def project(ws, text, table="sandbox"):
    path = ws / "stockade.toml"
    path.write_text(f"[{table}]\n{text}\n")
    return str(path)


WIDER = [
    ("mode", 'mode = "full-access"'),
    ("backend", 'backend = "none"'),
    ("backend", 'backend = "landlock"'),
    ("enabled", "enabled = false"),
    ("unreadable", 'unreadable = "none"'),
    ("unreadable", 'unreadable = ["~/.aws"]'),
    ("secret_env", 'secret_env = ["*TOKEN*"]'),
    ("allow_hosts", 'allow_hosts = ["pypi.org", "evil.example"]'),
    ("writable", 'writable = ["~/out", "/etc"]'),
    ("granted_sockets", 'granted_sockets = ["/run/docker.sock"]'),
    ("scratch", "scratch = true"),
    ("max_pids", "max_pids = 201"),
    ("max_memory_mb", "max_memory_mb = 1024"),
    ("tmp_size_mb", "tmp_size_mb = 2048"),
    ("max_file_size_mb", "max_file_size_mb = 101"),
    ("cpu_quota_percent", "cpu_quota_percent = 100"),
    ("default_timeout_seconds", "default_timeout_seconds = 61"),
    ("max_output_bytes", "max_output_bytes = 2097152"),
    ("commands_per_minute", "commands_per_minute = 301"),
    ("approval_timeout_seconds", "approval_timeout_seconds = 121"),
    ("read_scope", 'read_scope = "host"'),
    ("read_scope", 'read_scope = "auto"'),
    ("bwrap", 'bwrap = "/tmp/my-bwrap"'),
    ("workspace_root", 'workspace_root = "/"'),
    ("ledger", "ledger = false"),
    ("ledger", 'ledger = "/tmp/elsewhere.db"'),
    ("require_landlock", "require_landlock = false"),
    ("landlock_min_abi", "landlock_min_abi = 2"),
    ("deny_hosts", "deny_hosts = []"),
]
WIDER_POLICY = [
    ("enforcement", 'enforcement = "off"'),
    ("use_default_rules", "use_default_rules = false"),
    ("enabled", "enabled = false"),
    ("custom_rules", "custom_rules = []"),
    ("custom_rules", 'custom_rules = [{name = "no-curl", regex = "curl", action = "warn", '
                     'description = "d"}]'),
]


@pytest.mark.parametrize("key, line", WIDER)
def test_each_wider_sandbox_key_is_refused_naming_key_file_and_command(home, key, line):
    env, ws = home
    path = project(ws, line)
    with pytest.raises(ConfigError) as info:
        load_config(env, str(ws))
    message = str(info.value)
    assert f"[sandbox] {key} = " in message and "is wider than your own config allows" in message
    assert message.startswith(f"{path}: ") and f"stockade trust {path}" in message
    assert message.count("wider than") == 1


@pytest.mark.parametrize("key, line", WIDER_POLICY)
def test_each_weaker_command_policy_key_is_refused(home, key, line):
    env, ws = home
    path = project(ws, line, table="sandbox.command_policy")
    with pytest.raises(ConfigError, match=re.escape(f"[sandbox.command_policy] {key}")) as info:
        load_config(env, str(ws))
    assert path in str(info.value) and f"stockade trust {path}" in str(info.value)


def test_message_names_the_file_as_typed_in_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "stockade.toml").write_text('[sandbox]\nmode = "full-access"\n')
    with pytest.raises(ConfigError) as info:
        load_config({"HOME": str(tmp_path / "nohome")}, str(tmp_path))
    assert str(info.value) == (
        './stockade.toml: [sandbox] mode = "full-access" is wider than your own config allows '
        "(read-only); review the file and run: stockade trust ./stockade.toml")


def test_every_wider_key_is_named_at_once(home):
    env, ws = home
    project(ws, 'mode = "full-access"\nmax_pids = 1000')
    with pytest.raises(ConfigError, match=r"mode = .*; \[sandbox\] max_pids = 1000"):
        load_config(env, str(ws))


def test_narrower_settings_apply_silently(home):
    env, ws = home
    path = project(ws, "\n".join([
        'mode = "read-only"', "max_pids = 50", "writable = []", "allow_hosts = []",
        'deny_hosts = ["gist.github.com", "x.example"]', 'granted_sockets = []',
        'unreadable = ["~/.aws", "~/.kube", "~/.ssh"]',
        'secret_env = ["*TOKEN*", "*KEY*", "*PRIVATE*"]', 'read_scope = "strict"',
        "scratch = false", "require_landlock = true", "landlock_min_abi = 4",
        "max_memory_mb = 256", "max_file_size_mb = 10", "cpu_quota_percent = 10",
        "default_timeout_seconds = 5", "tmp_size_mb = 64", 'backend = "auto"', "enabled = true",
        "", "[sandbox.command_policy]", 'enforcement = "block"',
        f'custom_rules = [{RULE}, {{name = "no-wget", regex = "wget", action = "block", '
        'description = "d"}]']))
    c = load_config(env, str(ws))
    assert c.mode == "read-only" and c.max_pids == 50 and c.writable == []
    assert c.deny_hosts == ["gist.github.com", "x.example"] and c.max_memory_mb == 256
    assert c.unreadable == ["~/.aws", "~/.kube", "~/.ssh"] and c.landlock_min_abi == 4
    assert c.command_policy["enforcement"] == "block"
    assert len(c.command_policy["custom_rules"]) == 2  # type: ignore[arg-type]
    assert c.project_sources == [path] and len(c.sources) == 2


def test_unreadable_superset_of_the_defaults_is_narrower(tmp_path):
    env = {"HOME": str(tmp_path / "home")}
    from stockade.hiddenset import default_hidden

    listed = ", ".join(f'"{p}"' for p in [*default_hidden(env, [])[0], "/srv/keys"])
    (tmp_path / "stockade.toml").write_text(f"[sandbox]\nunreadable = [{listed}]\n")
    assert "/srv/keys" in load_config(env, str(tmp_path)).unreadable  # type: ignore[operator]


def test_flags_allow_what_the_user_config_does_not(home):
    env, ws = home
    project(ws, 'mode = "workspace-write"\nbackend = "bubblewrap"')
    with pytest.raises(ConfigError, match="backend"):
        load_config(env, str(ws))
    assert load_config(env, str(ws), backend="bubblewrap").backend == "bubblewrap"
    # A key the arguments set is theirs: the file's value never applies.
    project(ws, 'mode = "full-access"')
    assert load_config(env, str(ws), mode="read-only").mode == "read-only"


def test_the_users_own_config_honours_xdg_config_home(tmp_path):
    (tmp_path / "xdg" / "stockade").mkdir(parents=True)
    (tmp_path / "xdg" / "stockade" / "config.toml").write_text('[sandbox]\nmode = "full-access"\n')
    project(tmp_path, 'mode = "workspace-write"')
    env = {"HOME": str(tmp_path / "nohome"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert load_config(env, str(tmp_path)).mode == "workspace-write"


def test_explicit_paths_are_the_callers_own(tmp_path):
    path = project(tmp_path, 'mode = "full-access"')
    assert load_config({}, str(tmp_path), paths=[path]).mode == "full-access"


def test_trusted_file_may_widen_and_an_edit_untrusts_it(home):
    env, ws = home
    path = project(ws, 'mode = "full-access"\nmax_pids = 1000')
    lines = trust_file(path, env, str(ws))
    assert any('mode = "full-access"' in line and "workspace-write" in line for line in lines)
    c = load_config(env, str(ws))
    assert c.mode == "full-access" and c.max_pids == 1000
    with open(path, "a") as fh:
        fh.write("# harmless-looking edit\n")
    with pytest.raises(ConfigError, match="changed since you trusted it"):
        load_config(env, str(ws))


def test_trust_follows_the_real_path_and_the_content(home, tmp_path):
    env, ws = home
    path = project(ws, 'mode = "full-access"')
    trust_file(path, env, str(ws))
    other = tmp_path / "other"
    other.mkdir()
    # Same bytes at another path: not what the person reviewed in place.
    shutil.copy(path, other / "stockade.toml")
    with pytest.raises(ConfigError, match="wider"):
        load_config(env, str(other))
    # Nor through a link: a command in `other` could plant one to any file trusted anywhere.
    (other / "stockade.toml").unlink()
    os.symlink(path, other / "stockade.toml")
    with pytest.raises(ConfigError, match="symbolic link"):
        load_config(env, str(other))


def test_store_is_private_atomic_and_revocable(home, tmp_path):
    env, ws = home
    path = project(ws, 'mode = "full-access"')
    trust_file(path, env, str(ws))
    store = tmp_path / "state" / "stockade" / "trusted.json"
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.parent.stat().st_mode) == 0o700
    assert os.listdir(store.parent) == ["trusted.json"]
    assert TrustStore(str(store)).recorded(path) is not None
    assert "trusted" in list_trusted(env)[0]
    revoke_file(path, env)
    assert list_trusted(env)[0].startswith("no trusted files")
    with pytest.raises(ConfigError):
        load_config(env, str(ws))


def test_a_store_others_can_write_is_refused(home, tmp_path):
    env, ws = home
    path = project(ws, 'mode = "full-access"')
    trust_file(path, env, str(ws))
    os.chmod(tmp_path / "state" / "stockade" / "trusted.json", 0o666)
    with pytest.raises(ConfigError, match="writable only by you"):
        load_config(env, str(ws))


# -- the command line ----------------------------------------------------------

def cli(*args, cwd, env, exe=(sys.executable, "-m", "stockade")):
    return subprocess.run([*exe, *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=60)


@pytest.fixture
def outside():
    """A directory outside the workspace and outside the sandbox's private /tmp."""
    path = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="stockade-trust-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def clean_env(home):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "STOCKADE"))}
    env["HOME"] = str(home)
    return env


def test_run_refuses_a_full_access_project_file_and_runs_nothing(tmp_path, outside):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "stockade.toml").write_text('[sandbox]\nmode = "full-access"\n')
    env = clean_env(tmp_path / "home")
    marker = outside / "escaped"
    script = f"echo escaped > {marker}"
    control = subprocess.run(["sh", "-c", script], cwd=ws)
    assert control.returncode == 0 and marker.exists()
    marker.unlink()

    out = cli("run", "--", "sh", "-c", script, cwd=ws, env=env)
    assert out.returncode == 78, out.stderr
    assert out.stderr.count("\n") == 1 and "stockade: ConfigError: ./stockade.toml: " in out.stderr
    assert "stockade trust ./stockade.toml" in out.stderr
    assert not marker.exists()

    assert cli("trust", cwd=ws, env=env).returncode == 0
    assert (tmp_path / "home" / ".local" / "state" / "stockade" / "trusted.json").is_file()
    out = cli("run", "--", "sh", "-c", script, cwd=ws, env=env)
    assert out.returncode == 0 and marker.read_text() == "escaped\n", out.stderr


def test_trust_command_line_errors(tmp_path):
    env = clean_env(tmp_path / "home")
    out = cli("trust", "--help", cwd=tmp_path, env=env)
    assert out.returncode == 0 and "usage: stockade trust" in out.stdout
    out = cli("trust", "missing.toml", cwd=tmp_path, env=env)
    assert out.returncode == 64 and out.stderr.count("\n") == 1
    assert out.stderr.startswith("stockade: ") and "no such file" in out.stderr
    out = cli("trust", "--revoke", "missing.toml", cwd=tmp_path, env=env)
    assert out.returncode == 64 and "not a trusted file" in out.stderr
    assert cli("trust", "a", "b", cwd=tmp_path, env=env).returncode == 2
    assert cli("trust", "--list", "a", cwd=tmp_path, env=env).returncode == 2
    (tmp_path / "stockade.toml").write_text("[sandbox\n")
    out = cli("trust", cwd=tmp_path, env=env)
    assert out.returncode == 78 and "malformed TOML" in out.stderr
    assert not (tmp_path / "home" / ".local" / "state" / "stockade" / "trusted.json").exists()
    out = cli("trust", "--list", cwd=tmp_path, env=env)
    assert out.returncode == 0 and "no trusted files" in out.stdout


def test_no_project_file_costs_no_json_hashlib_re_or_typing(tmp_path):
    code = ("import sys; from stockade.config import load_config; import stockade.cli;"
            "load_config({'HOME': sys.argv[1]}, sys.argv[1]);"
            "print(' '.join(sorted(set(sys.modules) & {'json', 'hashlib', 're', 'typing'})))")
    src = str(Path(__file__).resolve().parents[2] / "src")
    out = subprocess.run([sys.executable, "-I", "-c", code, str(tmp_path)], capture_output=True,
                         text=True, check=True, env={"PYTHONPATH": src}, cwd=tmp_path)
    assert out.stdout.strip() == ""


@pytest.mark.skipif(os.geteuid() != 0, reason="the isolation run is as root")
def test_installed_cli_as_root_keeps_the_boundary(tmp_path, outside):
    """The venv's own `stockade` entry point, the way a person runs it."""
    exe = Path(sys.executable).parent / "stockade"
    ws = tmp_path / "ws"
    ws.mkdir()
    env = clean_env(tmp_path / "home")
    marker = outside / "escaped"
    script = f"echo escaped > {marker}; echo done"
    # Without a project file the default read-only sandbox denies the write.
    plain = cli("run", "--", "sh", "-c", script, cwd=ws, env=env, exe=(str(exe),))
    assert plain.returncode == 0 and "done" in plain.stdout and not marker.exists(), plain.stderr
    (ws / "stockade.toml").write_text('[sandbox]\nbackend = "none"\nmode = "full-access"\n')
    out = cli("run", "--", "sh", "-c", script, cwd=ws, env=env, exe=(str(exe),))
    assert out.returncode == 78 and "backend" in out.stderr and "mode" in out.stderr
    assert out.stdout == "" and not marker.exists()


def test_a_project_link_to_the_users_own_config_is_the_users(home):
    env, ws = home
    os.symlink(os.path.join(env["HOME"], ".config", "stockade", "config.toml"),
               ws / "stockade.toml")
    c = load_config(env, str(ws))
    assert c.mode == "workspace-write" and c.project_sources == []
