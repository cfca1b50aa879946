"""What is hidden and scrubbed by default: pure functions of a described machine."""

import pytest

from stockade import hiddenset
from stockade.boundary import build_profile
from stockade.capabilities import capabilities_for_mode, is_under
from stockade.envscrub import DEFAULT_SECRET_ENV, has_url_password, sandbox_env
from stockade.profile import DIR, FILE, MISSING

HOME = "/home/u"
WS = "/work/proj"
SSH = f"{HOME}/.ssh"
SSH_LISTING = ["config", "known_hosts", "known_hosts.old", "authorized_keys", "id_rsa",
               "id_rsa.pub", "id_ed25519_sk", "id_ed25519_sk.pub", "id_ed25519-cert.pub",
               "github", "github.pub", "aws-prod.pem", "server.key", "putty.ppk", "identity",
               "notes.txt"]


def listing(entries: dict[str, list[str]]):
    def listdir(path: str) -> list[str]:
        if path not in entries:
            raise FileNotFoundError(path)
        return list(entries[path])
    return listdir


def profile(mode="workspace-write", entries=None, **kw):
    files = {WS: DIR, "/usr": DIR, "/etc": DIR, **(entries or {})}
    caps = kw.pop("capabilities", None) or capabilities_for_mode(mode, WS)
    return build_profile(mode=mode, workspace=WS, cwd=WS, capabilities=caps, read_scope="host",
                         host_env={"HOME": HOME, "PATH": "/usr/bin"},
                         kind=lambda p: files.get(p, MISSING), use_scratch=False, **kw)


def defaults(env=None, granted=(), ssh=SSH_LISTING):
    """The default hidden set as (hidden, shown)."""
    env = {"HOME": HOME, **(env or {})}
    return hiddenset.default_hidden(env, list(granted), listing({SSH: ssh}))


def covered(path, env=None, granted=(), ssh=SSH_LISTING):
    """Whether `path` is hidden: under a hidden path, and not under one shown back
    inside it -- unless hidden again by name beneath that."""
    hidden, shown = defaults(env, granted, ssh)
    best = max((h for h in hidden if is_under(path, h)), key=len, default=None)
    if best is None:
        return False
    return not any(is_under(path, s) and is_under(s, best) and s != best for s in shown)


def test_in_ssh_only_public_names_stay_readable():
    for name in ("id_rsa", "id_ed25519_sk", "github", "aws-prod.pem", "server.key",
                 "putty.ppk", "identity", "notes.txt", "deploy_key", "a-key-added-later"):
        assert covered(f"{SSH}/{name}"), name
    for name in ("config", "known_hosts", "known_hosts.old", "authorized_keys", "id_rsa.pub",
                 "id_ed25519-cert.pub", "github.pub"):
        assert not covered(f"{SSH}/{name}"), name


def test_whole_ssh_dir_hidden_when_agent_granted_and_not_listed():
    def refuse(path: str) -> list[str]:
        raise AssertionError(f"listed {path}: the whole directory is hidden anyway")

    env = {"HOME": HOME, "SSH_AUTH_SOCK": "/run/agent.sock"}
    hidden, shown = hiddenset.default_hidden(env, ["/run/agent.sock"], refuse)
    assert SSH in hidden
    assert not any(is_under(p, SSH) for p in shown)


def test_unlistable_ssh_dir_shows_nothing_back():
    hidden, shown = hiddenset.default_hidden({"HOME": HOME}, [], listing({}))
    assert SSH in hidden and not any(is_under(p, SSH) for p in shown)


@pytest.mark.parametrize("rel", [
    ".config/git/credentials", ".config/containers/auth.json", ".cargo/credentials",
    ".cargo/credentials.toml", ".gem/credentials", ".local/share/gem/credentials",
    ".nuget/NuGet/NuGet.Config", ".terraform.d/credentials.tfrc.json", ".vault-token",
    ".pgpass", ".my.cnf", ".mylogin.cnf", ".bash_history", ".zsh_history",
    ".local/share/fish/fish_history", ".python_history", ".node_repl_history",
    ".psql_history", ".mysql_history", ".sqlite_history", ".lesshst", ".irb_history",
    ".rediscli_history", ".mozilla", ".config/google-chrome", ".config/chromium",
    ".config/BraveSoftware", ".config/microsoft-edge", ".thunderbird",
    ".local/share/keyrings", ".password-store", ".config/keepassxc", ".local/share/kwalletd",
    ".claude/.credentials.json", ".claude.json", ".codex/auth.json", ".config/github-copilot",
    ".gemini/oauth_creds.json", ".config/gcloud",
])
def test_credential_store_hidden_by_default(rel):
    assert covered(f"{HOME}/{rel}")


@pytest.mark.parametrize("rel", [
    # The classes: stores no list named, in the areas where tools keep logins.
    ".m2/settings.xml", ".gradle/gradle.properties", ".cache/huggingface/token",
    ".config/sops/age/keys.txt", ".minikube/profiles/minikube/client.key",
    ".config/rclone/rclone.conf", ".s3cfg", ".boto", ".oci/config", ".config/hcloud/cli.toml",
    ".config/doctl/config.yaml", ".config/pypoetry/auth.toml", ".composer/auth.json",
    ".databrickscfg", ".snowsql/config", ".config/netlify/config.json",
    ".local/share/com.vercel.cli/auth.json", ".fly/config.yml", ".local/share/opencode/auth.json",
    ".config/goose/secrets.yaml", ".config/a-cli-from-next-year/token",
    ".local/share/a-cli-from-next-year/token", ".local/state/a-tool/history",
    ".cache/a-tool/session", ".local/share/jupyter/runtime/kernel-1.json",
])
def test_stores_of_a_class_are_hidden_without_a_name(rel):
    assert covered(f"{HOME}/{rel}")


def test_ordinary_settings_stay_readable():
    for rel in (".bashrc", ".gitconfig", ".config/git/config", ".cargo/config.toml",
                ".cargo/registry/index", ".ssh/config", ".ssh/known_hosts", ".cache/pip/http",
                ".cache/go-build/00", ".m2/repository/org", ".gradle/caches/modules-2",
                ".local/share/uv/python", ".config/pypoetry/config.toml",
                ".cache/huggingface/hub/models--x", ".local/share/jupyter/kernels/python3"):
        assert not covered(f"{HOME}/{rel}"), rel


def test_xdg_locations_hidden_where_they_move_the_area():
    env = {"XDG_CONFIG_HOME": "/x/conf", "XDG_DATA_HOME": "/x/data", "XDG_CACHE_HOME": "/x/c"}
    for path in ("/x/conf/gh/hosts.yml", "/x/conf/git/credentials", "/x/data/keyrings/k",
                 "/x/data/fish/fish_history", "/x/c/huggingface/token",
                 f"{HOME}/.config/gh/hosts.yml"):
        assert covered(path, env), path
    assert not covered("/x/conf/git/config", env)
    # A relative value is not a location (the XDG spec says ignore it).
    hidden, _shown = defaults({"XDG_CONFIG_HOME": "rel/conf"})
    assert not any(p.startswith("rel/") for p in hidden)


def test_profile_masks_areas_and_shows_back_what_tools_read():
    entries = {SSH: DIR, f"{SSH}/id_rsa": FILE, f"{SSH}/config": FILE,
               f"{SSH}/known_hosts": FILE, f"{HOME}/.pgpass": FILE, f"{HOME}/.mozilla": DIR,
               f"{HOME}/.config": DIR, f"{HOME}/.config/git": DIR,
               f"{HOME}/.config/git/credentials": FILE}
    p = profile(entries=entries, listdir=listing({SSH: ["id_rsa", "config", "known_hosts"]}))
    assert {(SSH, DIR), (f"{HOME}/.pgpass", FILE), (f"{HOME}/.mozilla", DIR),
            (f"{HOME}/.config", DIR), (f"{HOME}/.config/git/credentials", FILE)} <= set(p.hidden)
    assert set(p.shown) == {(f"{SSH}/config", FILE), (f"{SSH}/known_hosts", FILE),
                            (f"{HOME}/.config/git", DIR)}


def test_explicit_read_grant_of_a_key_shows_it_back():
    caps = capabilities_for_mode("read-only", "/work/proj").replace(
        fs_read=(f"{SSH}/id_rsa",))
    p = profile("read-only", entries={SSH: DIR, f"{SSH}/id_rsa": FILE}, capabilities=caps,
                listdir=listing({SSH: ["id_rsa"]}))
    assert p.hidden == ((SSH, DIR),) and p.shown == ((f"{SSH}/id_rsa", FILE),)


def test_a_workspace_inside_an_area_opens_it_up_around_itself():
    ws = f"{HOME}/.config/nvim"
    entries = {f"{HOME}/.config": DIR, ws: DIR, f"{HOME}/.config/gh": DIR,
               f"{HOME}/.config/git": DIR}
    files = {"/usr": DIR, "/etc": DIR, **entries}
    p = build_profile(mode="workspace-write", workspace=ws, cwd=ws,
                      capabilities=capabilities_for_mode("workspace-write", ws),
                      read_scope="host", host_env={"HOME": HOME, "PATH": "/usr/bin"},
                      kind=lambda q: files.get(q, MISSING), use_scratch=False,
                      listdir=listing({f"{HOME}/.config": ["nvim", "gh", "git"], SSH: []}))
    assert (f"{HOME}/.config/gh", DIR) in p.hidden
    assert not any(is_under(ws, h) for h, _ in p.hidden)
    assert (f"{HOME}/.config/git", DIR) not in p.hidden  # shown by the default anyway


# -- the environment ----------------------------------------------------------------------


def scrub(env):
    return sandbox_env(env, {}, DEFAULT_SECRET_ENV, backend="bubblewrap")


@pytest.mark.parametrize("name", [
    "MYSQL_PWD", "DB_PWD", "CI_JOB_JWT", "CI_JOB_JWT_V2", "SENTRY_DSN", "npm_config__auth",
    "PROXY_AUTHORIZATION", "FLASK_SESSION_KEY", "COOKIE_SECRET_BASE", "BORG_PASSPHRASE",
    "GITLAB_PAT", "RELEASE_SIGNING_KEY", "SLACK_WEBHOOK_URL",
    "AZURE_STORAGE_CONNECTION_STRING", "STRIPE_KEY", "PGPASSWORD",
])
def test_secret_names_dropped(name):
    assert name not in scrub({name: "x", "KEEP": "y"})


@pytest.mark.parametrize("name", [
    "PWD", "OLDPWD", "SSH_AUTH_SOCK", "HOME", "PATH", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL",
    "XAUTHORITY", "LANG", "TERM", "GOPATH", "KEYTIMEOUT",
])
def test_ordinary_names_pass(name):
    assert scrub({name: "/some/value"})[name] == "/some/value"


def test_not_secret_names_pass_even_a_users_broad_pattern():
    env = sandbox_env({"PWD": "/w", "SSH_AUTH_SOCK": "/s", "MY_AUTH": "t"}, {}, ["*PWD*", "*AUTH*"],
                      backend="bubblewrap")
    assert env["PWD"] == "/w" and env["SSH_AUTH_SOCK"] == "/s" and "MY_AUTH" not in env


@pytest.mark.parametrize("value", [
    "redis://:hunter2@cache:6379/0",
    "mongodb://app:hunter2@db1:27017,db2:27017/prod?replicaSet=rs0",
    "postgresql://app:hunter2@db/prod",
    "-Durl=jdbc:mysql://root:hunter2@localhost:3306/x",
    "https://x-access-token:ghs_abc@github.com/o/r.git",
    "first http://example.com then amqp://u:p@rabbit/vhost",
])
def test_url_with_password_dropped_whatever_the_name(value):
    assert has_url_password(value)
    assert "CACHE_BACKEND" not in scrub({"CACHE_BACKEND": value})


@pytest.mark.parametrize("value", [
    "https://example.com/path", "ssh://git@github.com/o/r.git", "http://localhost:4873/@scope/pkg",
    "http://host/a?x=u:p@b", "ftp://anonymous:@mirror/", "://u:p@h", "a@b:c", "plain",
    "https://host:8443/",
])
def test_url_without_password_passes(value):
    assert not has_url_password(value)
    assert scrub({"SOME_URL": value})["SOME_URL"] == value


def test_explicit_credentialed_url_is_the_callers_decision():
    env = sandbox_env({}, {"REDIS_URL": "redis://:pw@h"}, DEFAULT_SECRET_ENV, backend="none")
    assert env["REDIS_URL"] == "redis://:pw@h"


def test_doctor_lists_what_is_hidden_here_and_why(tmp_path):
    from stockade import doctor
    from stockade.config import SandboxConfig

    home = tmp_path / "home"
    for rel in (".config/gh", ".config/git", ".ssh", ".aws", ".cache"):
        (home / rel).mkdir(parents=True)
    for rel in (".ssh/id_ed25519", ".ssh/known_hosts", ".git-credentials"):
        (home / rel).write_text("x")
    env = {"HOME": str(home)}
    why = dict(doctor.hidden(SandboxConfig(), env))
    assert "1 shown back" in why[str(home / ".config")]  # git
    assert "tokens and keys" in why[str(home / ".aws")]
    assert "known_hosts" in why[str(home / ".ssh")]
    assert "beside the dotfiles" in why[str(home / ".git-credentials")]
    assert str(home / ".local/share") not in why  # only what exists here
    assert doctor.hidden(SandboxConfig(unreadable="none"), env) == []
    mine = doctor.hidden(SandboxConfig(unreadable=[str(home / ".aws")]), env)
    assert [p for p, _ in mine] == [str(home / ".aws")]


def _one_pattern(pattern: str, name: str) -> bool:
    """The rule each pattern follows, one at a time: `*X*` contains, `*X` ends, `X*`
    starts, else the whole name; case-insensitive."""
    pattern, name = pattern.upper(), name.upper()
    core = pattern.strip("*")
    lead, trail = pattern.startswith("*"), pattern.endswith("*") and len(pattern) > 1
    if lead and trail:
        return core in name
    if lead:
        return name.endswith(core)
    if trail:
        return name.startswith(core)
    return name == core


_PIECES = ["", "*", "**", "KEY", "_KEY", "TOKEN", "A*B", "x", "API_", "SECRET", "PASS"]


@pytest.mark.parametrize("patterns", [
    list(DEFAULT_SECRET_ENV), [], ["*"], ["**"], [""], ["A*B", "x*", "*y", "*Z*"],
    [a + b + c for a in ("", "*") for b in _PIECES for c in ("", "*")],
])
def test_the_patterns_taken_together_match_as_each_alone(patterns: list[str]) -> None:
    from stockade.envscrub import secret_name

    names = ["", "A*B", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "PATH", "HOME", "API_KEY",
             "MY_API_KEY_ID", "KEYRING", "X", "xy", "PWD", "OLDPWD", "DB_PASSWORD", "z",
             *(p.strip("*").upper() for p in _PIECES)]
    match = secret_name(patterns)
    for name in names:
        assert match(name.upper()) == any(_one_pattern(p, name) for p in patterns), (
            patterns, name)
