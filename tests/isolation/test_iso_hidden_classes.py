"""The default hidden set by class: the areas tools keep logins in, ~/.ssh's keys by
any name, the curated top-level names, for the command's whole life.

Three attacks, each beside an unconfined control that proves it could succeed:

- a store the host replaces by rename, deletes and recreates, or creates for
  the first time while a command runs (`git credential-store`, a shell
  writing its history, a new key in ~/.ssh, a whole ~/.aws swapped in),
  read from inside after the host is done, cold, warm and `start()`ed;
- one canary in each of the credential locations of common CLIs, all read
  by one command;
- `unreadable` replacing the default, and an approved `fs_read` bringing back
  exactly the path it names.

And the other side of the trade: what toolchains read in those areas stays
readable, and `git config --global` works.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from pathlib import Path

import pytest

from .conftest import (
    RUN_TIMEOUT,
    RUNNER_PARAMS,
    VISIBLE_DECOY,
    Box,
    Runner,
    make_runner,
    populate,
    text,
)

pytestmark = pytest.mark.isolation


# The harness runs warm runners only for the suites it lists; these attacks
# are about how long a mask holds, so a parked sandbox (built before the
# command, served later) is exactly the case to cover. A fixture of this
# module's own name keeps them collected.
@pytest.fixture(scope="session", params=RUNNER_PARAMS)
def who(request: pytest.FixtureRequest, iso_root: Path) -> Runner:
    return make_runner(request, iso_root)


@pytest.fixture
def box(who: Runner, iso_root: Path) -> Box:
    return populate(Box, who, iso_root)


def _own_tree(box: Box, top: Path) -> None:
    for dirpath, _dirs, _files in os.walk(top):
        os.chmod(dirpath, 0o755)
        box.runner.own(dirpath)


# -- 1. a store the host replaces during the run -------------------------------------------

# Each kind of change a person's tools make to a store while a command runs,
# as (name, path relative to HOME). What the host does for each is in `_change`.
CHANGES = (
    ("rename-file", ".git-credentials"),  # git credential-store: temp file renamed over it
    ("rename-history", ".bash_history"),  # a shell writing its history on exit
    ("rename-in-area", ".config/gh/hosts.yml"),  # a CLI rewriting its login in ~/.config
    ("rename-dir", ".aws/credentials"),  # a whole ~/.aws swapped in by rename
    ("recreate", ".netrc"),  # deleted, then written afresh
    ("new-key", ".ssh/id_ed25519_new"),  # ssh-keygen while the command runs
    ("new-top-level", ".pgpass"),  # a store that did not exist at start
    ("new-in-area", ".config/newcli/token"),  # the next CLI's login, made during the run
    ("new-named", ".claude/.credentials.json"),  # a named store, its directory already there
    ("new-in-shown", ".config/git/credentials"),  # a store inside a path shown back
)

# Signals it runs (a file in the workspace), waits for the host's `go`
# (bounded: 30 s), then reads every store by two spellings, sweeps HOME for
# any canary, and reads a file that is not hidden: the control inside.
READ_AFTER_GO = r"""
: > ready
i=0
while [ ! -e go ]; do
  i=$((i+1)); [ "$i" -gt 600 ] && { echo "NO GO"; exit 9; }
  sleep 0.05
done
for rel in "$@"; do
  cat "$HOME/$rel" "/proc/self/root$HOME/$rel" 2>/dev/null
done
grep -r -h CANARY "$HOME" 2>/dev/null
ls -la "$HOME/.ssh" "$HOME/.aws" 2>/dev/null
cat "$HOME/.bashrc"
echo "SANDBOX=$STOCKADE_SANDBOX"
echo DONE
"""


def _before(box: Box) -> None:
    """What exists at start: every store but the new ones (populate wrote the rest)."""
    box.write(box.home / ".bash_history", "echo old history\n", 0o600)
    for name, rel in CHANGES:
        if name.startswith("new"):
            assert not (box.home / rel).exists(), rel
        if name in ("new-named", "new-in-shown"):
            (box.home / rel).parent.mkdir(parents=True, exist_ok=True)
    _own_tree(box, box.home)


def _change(box: Box, tag: str) -> dict[str, str]:
    """The host's tools at work: each store now holds a fresh canary. -> name: canary."""
    canaries = {name: f"CANARY-{name}-{tag}" for name, _rel in CHANGES}
    home = box.home
    for name, rel in CHANGES:
        path = home / rel
        data = f"{canaries[name]}\n"
        if name.startswith("rename-") and name != "rename-dir":
            tmp = box.write(path.with_name(path.name + ".tmp"), data, 0o600)
            os.rename(tmp, path)
        elif name == "rename-dir":
            fresh = home / ".aws.new"
            box.write(fresh / "credentials", data, 0o600)
            _own_tree(box, fresh)
            os.rename(home / ".aws", home / ".aws.old")
            os.rename(fresh, home / ".aws")
        elif name == "recreate":
            path.unlink()
            box.write(path, data, 0o600)
        else:  # new-*
            box.write(path, data, 0o600)
            _own_tree(box, path.parent)
    return canaries


def _wait_for(path: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            out, err = proc.communicate(timeout=RUN_TIMEOUT)
            pytest.fail(f"the command never signalled it runs: exit {proc.returncode}\n"
                        f"{out.decode(errors='replace')}{err.decode(errors='replace')}")
        time.sleep(0.02)


def _during(box: Box, argv: list[str]) -> tuple[str, dict[str, str]]:
    """Start `argv` (which runs READ_AFTER_GO), change every store once it runs,
    let it read. -> (its output, name: canary)."""
    _before(box)
    proc = box.runner.popen(argv, cwd=str(box.ws), env=box.env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for(box.ws / "ready", proc)
        canaries = _change(box, secrets.token_hex(6))
        box.write(box.ws / "go", "")
        out, err = proc.communicate(timeout=2 * RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    res = out.decode(errors="replace") + err.decode(errors="replace")
    assert "DONE" in res, res
    return res, canaries


def _assert_all_hidden(box: Box, out: str, canaries: dict[str, str], backend: str) -> None:
    assert f"SANDBOX={backend}\n" in out, out
    # The reads were real: HOME was readable, and only the hiding kept the stores out.
    assert box.markers[VISIBLE_DECOY] in out, out
    leaked = [name for name, canary in canaries.items() if canary in out]
    assert leaked == [], f"readable after the host changed them during the run: {leaked}\n{out}"


def _cli_argv(box: Box, extra: tuple[str, ...] = ()) -> list[str]:
    rels = [rel for _name, rel in CHANGES]
    return box.runner.cli_argv(["run", "--mode", "workspace-write", *extra, "--", "/bin/sh",
                                "-c", READ_AFTER_GO, "sh", *rels], warm=True)


def test_stores_the_host_replaces_during_a_run_stay_hidden(
        box: Box, backend: str = "bubblewrap") -> None:
    """Through `stockade run`, cold or served by a parked sandbox (the warm runners)."""
    out, canaries = _during(box, _cli_argv(box, ("--backend", backend)))
    _assert_all_hidden(box, out, canaries, backend)


def test_control_the_host_side_changes_are_readable_unconfined(box: Box) -> None:
    """The same flow with the reader on the host: every new canary is there to read."""
    rels = [rel for _name, rel in CHANGES]
    out, canaries = _during(box, ["/bin/sh", "-c", READ_AFTER_GO, "sh", *rels])
    missing = [name for name, canary in canaries.items() if canary not in out]
    assert missing == [], out


# The library's background path: a session, parked ahead (warm runners) or not,
# and a `start()`ed command that lives on while the host works.
STARTED = """
import sys
sys.path.insert(0, {site!r})
from stockade import SandboxCommand, SyncWorkspaceSandbox
from stockade.config import load_config
sb = SyncWorkspaceSandbox(load_config(cwd={ws!r}, mode="workspace-write", ledger=False,
                                      warm_sandboxes={warm}, backend={backend!r}))
sb.open_session("s", {ws!r})
def cmd(argv):
    return SandboxCommand(argv[0], argv[1:], session_id="s", timeout=60)
pool = None
if {warm}:
    # Twice: as the warm harness does, so the second parks for the command's view.
    for _ in range(2):
        sb.execute(cmd(["/bin/true"]))
        pool = getattr(sb.core._driver, "_warm", None)
        if pool is not None:
            pool.settle(30)
hits = pool.hits if pool is not None else 0
proc = sb.start(cmd({argv!r}))
proc.wait(60)
sys.stdout.buffer.write(proc.output("stdout")[0] + proc.output("stderr")[0])
served = pool is not None and pool.hits == hits + 1
print("SERVED", "warm" if served else "cold", flush=True)
sb.close()
"""


def test_stores_the_host_replaces_stay_hidden_from_a_started_command(
        box: Box, backend: str = "bubblewrap") -> None:
    rels = [rel for _name, rel in CHANGES]
    code = STARTED.format(site=box.runner.site, ws=str(box.ws), warm=int(box.runner.warm),
                          backend=backend,
                          argv=["/bin/sh", "-c", READ_AFTER_GO, "sh", *rels])
    out, canaries = _during(box, [box.runner.python, "-I", "-c", code])
    _assert_all_hidden(box, out, canaries, backend)
    assert f"SERVED {'warm' if box.runner.warm else 'cold'}" in out, out


# -- 2. the credential locations of common CLIs ---------------------------------------------

#: One canary each, relative to HOME. Grouped as the issue's sweep found them;
#: most lie in an area (hidden whole), the rest are top-level names or keys in
#: ~/.ssh under names no list could hold.
CREDENTIAL_LOCATIONS = (
    # Cloud and storage CLIs.
    ".aws/credentials", ".aws/config", ".aws/sso/cache/token.json",
    ".config/gcloud/application_default_credentials.json", ".config/gcloud/credentials.db",
    ".azure/msal_token_cache.json", ".azure/accessTokens.json", ".oci/config",
    ".oci/oci_api_key.pem", ".config/hcloud/cli.toml", ".config/doctl/config.yaml",
    ".config/scw/config.yaml", ".config/linode-cli", ".ibmcloud/config.json",
    ".config/rclone/rclone.conf", ".s3cfg", ".boto", ".passwd-s3fs", ".mc/config.json",
    ".config/exoscale/exoscale.toml",
    # Clusters and containers.
    ".kube/config", ".minikube/profiles/minikube/client.key", ".talos/config",
    ".docker/config.json", ".config/containers/auth.json", ".config/helm/repositories.yaml",
    ".config/k9s/config.yaml",
    # Forges.
    ".config/gh/hosts.yml", ".config/glab-cli/config.yml", ".config/hub", ".git-credentials",
    ".config/git/credentials", ".netrc", ".config/tea/config.yml",
    # Package registries and build tools.
    ".npmrc", ".yarnrc.yml", ".pypirc", ".config/pypoetry/auth.toml",
    ".cargo/credentials.toml", ".cargo/credentials", ".gem/credentials",
    ".local/share/gem/credentials", ".nuget/NuGet/NuGet.Config", ".composer/auth.json",
    ".m2/settings.xml", ".m2/settings-security.xml", ".gradle/gradle.properties",
    ".bundle/config", ".ivy2/.credentials", ".sbt/.credentials",
    ".config/dart/pub-tokens.json", ".terraform.d/credentials.tfrc.json", ".vault-token",
    # Data platforms, databases, model hubs.
    ".databrickscfg", ".snowsql/config", ".dbt/profiles.yml", ".pgpass", ".my.cnf",
    ".mylogin.cnf", ".kaggle/kaggle.json", ".cache/huggingface/token", ".huggingface/token",
    ".config/sops/age/keys.txt",
    # Deploy CLIs and tunnels.
    ".config/netlify/config.json", ".netlify/config.json",
    ".local/share/com.vercel.cli/auth.json", ".vercel/auth.json", ".fly/config.yml",
    ".pulumi/credentials.json", ".cloudflared/cert.pem", ".wrangler/config/default.toml",
    ".config/ngrok/ngrok.yml", ".doppler/.doppler.yaml", ".config/stripe/config.toml",
    ".circleci/cli.yml", ".sentryclirc", ".railway/config.json", ".heroku/config.json",
    # Coding agents' logins.
    ".claude/.credentials.json", ".claude.json", ".codex/auth.json",
    ".gemini/oauth_creds.json", ".config/github-copilot/hosts.json",
    ".local/share/opencode/auth.json", ".config/goose/config.yaml", ".aider/oauth-keys.env",
    ".continue/config.json", ".codeium/config.json", ".cursor/mcp.json",
    # Histories.
    ".bash_history", ".zsh_history", ".python_history", ".psql_history", ".mysql_history",
    ".node_repl_history", ".local/share/fish/fish_history", ".lesshst",
    # Browsers, mail, keyrings, password managers.
    ".mozilla/firefox/x.default/logins.json", ".config/google-chrome/Default/Cookies",
    ".config/chromium/Default/Cookies", "snap/firefox/common/.mozilla/firefox/profiles.ini",
    ".thunderbird/x.default/logins.json", ".gnupg/private-keys-v1.d/x.key",
    ".password-store/x.gpg", ".local/share/keyrings/login.keyring",
    ".local/share/kwalletd/kdewallet.kwl", ".config/keepassxc/keepassxc.ini",
    ".config/op/config", ".pki/nssdb/key4.db", ".msmtprc",
    # Found beyond the sweep: Gerrit's cookies, Ansible Galaxy, WakaTime,
    # VNC, database and time-series clients, NetworkManager's VPN keys, IRC,
    # the EC2 tools, Neovim's old shada.
    ".gitcookies", ".ansible/galaxy_token", ".wakatime.cfg", ".vnc/passwd", ".esmtprc",
    ".cassandra/cqlshrc", ".clickhouse-client/config.xml", ".influxdbv2/configs",
    ".sqlcmd/sqlconfig", ".cert/nm-openvpn/client.key", ".irssi/config", ".ec2/pk.pem",
    ".local/share/nvim/shada/main.shada",
    # ssh keys under names no list has: only the public names stay readable.
    ".ssh/deploy_key", ".ssh/id_ed25519", ".ssh/github", ".ssh/identity",
    ".ssh/work.pem",
)

# Reads each path given; prints `READ rel` for every one it could read, then
# the contents, which the test also searches for canaries.
READ_ALL = r"""
for rel in "$@"; do
  cat "$HOME/$rel" >/dev/null 2>&1 && echo "READ $rel"
done
for rel in "$@"; do cat "$HOME/$rel" 2>/dev/null; done
grep -r -h CANARY "$HOME" 2>/dev/null
cat "$HOME/.bashrc"
true
"""


def _plant_canaries(box: Box, rels: tuple[str, ...]) -> dict[str, str]:
    tag = secrets.token_hex(6)
    canaries = {rel: f"CANARY-{i}-{tag}" for i, rel in enumerate(rels)}
    for rel, canary in canaries.items():
        box.write(box.home / rel, f"{canary}\n", 0o600)
    _own_tree(box, box.home)
    return canaries


def _read(out: str) -> list[str]:
    return [line[5:] for line in out.splitlines() if line.startswith("READ ")]


def test_credential_locations_of_common_clis_unreadable(box: Box) -> None:
    assert len(CREDENTIAL_LOCATIONS) >= 80
    canaries = _plant_canaries(box, CREDENTIAL_LOCATIONS)
    res = box.sh(READ_ALL, *CREDENTIAL_LOCATIONS)
    out = text(res)
    assert box.markers[VISIBLE_DECOY] in out, out
    assert _read(out) == [], f"readable inside the sandbox: {_read(out)}"
    leaked = [rel for rel, canary in canaries.items() if canary in out]
    assert leaked == [], f"canaries read inside the sandbox: {leaked}"


def test_control_credential_locations_readable_unconfined(box: Box) -> None:
    canaries = _plant_canaries(box, CREDENTIAL_LOCATIONS)
    res = box.host(["/bin/sh", "-c", READ_ALL, "sh", *CREDENTIAL_LOCATIONS])
    out = text(res)
    assert sorted(_read(out)) == sorted(CREDENTIAL_LOCATIONS), out
    assert [rel for rel, canary in canaries.items() if canary not in out] == [], out


#: What toolchains, ssh and git read in the hidden areas: shown back.
TOOL_SETTINGS = (
    ".config/git/config", ".gitconfig", ".ssh/config", ".ssh/known_hosts",
    ".ssh/id_ed25519.pub", ".ssh/authorized_keys", ".cargo/config.toml",
    ".cache/pip/http-v2/x", ".cache/uv/x", ".m2/repository/org/x.pom",
    ".gradle/caches/modules-2/x", ".config/pip/pip.conf", ".local/share/uv/python/x",
    ".config/pypoetry/config.toml", ".cache/huggingface/hub/x", ".config/nvim/init.lua",
)


def test_tool_settings_in_the_areas_stay_readable(box: Box) -> None:
    tag = secrets.token_hex(6)
    canaries = _plant_canaries(box, TOOL_SETTINGS)
    # git's own identity, read through the shown files. (HOME's XDG_CONFIG_HOME
    # is elsewhere in this harness, so git reads ~/.gitconfig here.)
    box.write(box.home / ".gitconfig", f"[user]\n\tname = Dev {tag}\n# {canaries['.gitconfig']}\n")
    script = READ_ALL + 'git config --global user.name\n'
    res = box.sh(script, *TOOL_SETTINGS)
    out = text(res)
    unread = sorted(set(TOOL_SETTINGS) - set(_read(out)))
    assert unread == [], f"shown back but unreadable inside: {unread}\n{out}"
    assert f"Dev {tag}\n" in res.stdout.decode(), out


# -- 3. `unreadable` replaces the default; `fs_read` brings back exactly a path -------------

# The granted file, its sibling in the same directory, another tool's login in
# the same area, and a store elsewhere.
GRANT_PROBE = (".config/gh/hosts.yml", ".config/gh/config.yml", ".config/hub",
               ".aws/credentials")


def _grant_world(box: Box) -> dict[str, str]:
    box.write(box.home / ".config/gh/config.yml", f"CANARY-ghconfig-{secrets.token_hex(6)}\n")
    _own_tree(box, box.home)
    return {rel: box.markers.get(rel) or (box.home / rel).read_text().strip()
            for rel in GRANT_PROBE}


def test_fs_read_brings_back_exactly_the_path_it_names(box: Box) -> None:
    canaries = _grant_world(box)
    granted = str(box.home / ".config/gh/hosts.yml")
    res = box.sh(READ_ALL, *GRANT_PROBE, options=["--allow-read", granted, "--yes"])
    out = text(res)
    assert _read(out) == [".config/gh/hosts.yml"], out
    assert canaries[".config/gh/hosts.yml"] in out, out
    # Control: without the grant the same read fails, so the grant is what opened it.
    res = box.sh(READ_ALL, *GRANT_PROBE)
    assert _read(text(res)) == [], text(res)


def test_unreadable_replaces_the_default(box: Box) -> None:
    canaries = _grant_world(box)
    cfg = box.write(box.state / "only-aws.toml",
                    f'[sandbox]\nunreadable = ["{box.home}/.aws"]\n')
    res = box.sh(READ_ALL, *GRANT_PROBE, options=["--config", str(cfg)])
    out = text(res)
    assert sorted(_read(out)) == sorted(r for r in GRANT_PROBE if r != ".aws/credentials"), out
    assert canaries[".aws/credentials"] not in out, out

