"""What is hidden and scrubbed by default: pure functions of a described machine."""

import pytest

from stockade import hostpaths
from stockade.capabilities import capabilities_for_mode
from stockade.profile import (
    DEFAULT_SECRET_ENV,
    DIR,
    FILE,
    MISSING,
    build_profile,
    has_url_password,
    sandbox_env,
)

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
    env = {"HOME": HOME, **(env or {})}
    return hostpaths.default_unreadable(env, list(granted), listing({SSH: ssh}))


def test_private_keys_hidden_by_name_public_files_and_settings_kept():
    hidden = defaults()
    keys = {p[len(SSH) + 1:] for p in hidden if p.startswith(SSH + "/")}
    assert keys == {"id_rsa", "id_ed25519_sk", "github", "aws-prod.pem", "server.key",
                    "putty.ppk", "identity"}
    assert SSH not in hidden  # ssh keeps reading config and known_hosts


def test_whole_ssh_dir_hidden_when_agent_granted_and_not_listed():
    def refuse(path: str) -> list[str]:
        raise AssertionError(f"listed {path}: the whole directory is hidden anyway")

    env = {"HOME": HOME, "SSH_AUTH_SOCK": "/run/agent.sock"}
    hidden = hostpaths.default_unreadable(env, ["/run/agent.sock"], refuse)
    assert SSH in hidden
    assert not any(p.startswith(SSH + "/") for p in hidden)


def test_missing_or_unlistable_ssh_dir_hides_no_key():
    assert not any(".ssh" in p for p in hostpaths.default_unreadable(
        {"HOME": HOME}, [], listing({})))


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
    assert f"{HOME}/{rel}" in defaults()


def test_ordinary_settings_stay_readable():
    hidden = defaults()
    for rel in (".bashrc", ".gitconfig", ".config/git/config", ".cargo/config.toml",
                ".ssh/config", ".ssh/known_hosts", ".config", ".local/share", ".cargo"):
        assert f"{HOME}/{rel}" not in hidden, rel


def test_xdg_locations_hidden_where_they_move_the_store():
    hidden = defaults({"XDG_CONFIG_HOME": "/x/conf", "XDG_DATA_HOME": "/x/data"})
    assert {"/x/conf/gh", "/x/conf/git/credentials", "/x/data/keyrings",
            "/x/data/fish/fish_history", f"{HOME}/.config/gh"} <= set(hidden)
    # A relative value is not a location (the XDG spec says ignore it).
    assert not any(p.startswith("rel/") for p in defaults({"XDG_CONFIG_HOME": "rel/conf"}))


def test_profile_masks_keys_as_files_and_keeps_ssh_config():
    entries = {SSH: DIR, f"{SSH}/id_rsa": FILE, f"{SSH}/config": FILE,
               f"{SSH}/known_hosts": FILE, f"{HOME}/.pgpass": FILE, f"{HOME}/.mozilla": DIR}
    p = profile(entries=entries, listdir=listing({SSH: ["id_rsa", "config", "known_hosts"]}))
    assert {(f"{SSH}/id_rsa", FILE), (f"{HOME}/.pgpass", FILE),
            (f"{HOME}/.mozilla", DIR)} <= set(p.hidden)
    assert not any(path in (SSH, f"{SSH}/config", f"{SSH}/known_hosts") for path, _ in p.hidden)


def test_explicit_read_grant_of_a_key_unhides_it():
    caps = capabilities_for_mode("read-only", "/work/proj").replace(
        fs_read=(f"{SSH}/id_rsa",))
    p = profile("read-only", entries={f"{SSH}/id_rsa": FILE}, capabilities=caps,
                listdir=listing({SSH: ["id_rsa"]}))
    assert p.hidden == ()


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
