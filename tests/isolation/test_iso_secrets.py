"""Credential stores in HOME are unreadable inside, however the path is spelled.

HOME itself stays readable (that is the host read scope's design), so every
test here also reads a non-secret decoy and requires its marker: the sandbox
could see the directory, and only the hiding kept the secrets out.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import (
    HIDDEN_DECOYS,
    SH_TRY,
    SSH_KEY,
    SYSTEM_PYTHON,
    VISIBLE_DECOY,
    Box,
    Listener,
    attempts,
    text,
    unix_listener,
)

pytestmark = pytest.mark.isolation

# $1: workspace-relative symlink to HOME; $2: symlink to ~/.aws; rest: decoy paths
# relative to HOME. Every spelling of every decoy is read; the output must not
# carry a hidden marker.
READ_EVERY_SPELLING = r"""
homelink=$1; awslink=$2; shift 2
for rel in "$@"; do
  first=${rel%%/*}; rest=${rel#*/}
  for p in "$HOME/$rel" "/proc/self/root$HOME/$rel" "/proc/1/root$HOME/$rel" \
           "$HOME/./$first//$rest" "$HOME/$first/../$rel" "$homelink/$rel" \
           "../$(basename "$HOME")/$rel" "$PWD/../$(basename "$HOME")/./$rel"; do
    cat "$p" 2>/dev/null
  done
done
cat "$awslink/credentials" "$awslink/./credentials" 2>/dev/null
# Wholesale: anything readable anywhere under HOME, and a directory listing.
grep -r -h DECOY "$HOME" "$homelink/" 2>/dev/null
ls -laR "$HOME" 2>/dev/null | grep -i decoy
true
"""


def _link_home(box: Box) -> tuple[str, str]:
    os.symlink(box.home, box.ws / "homelink")
    os.symlink(box.home / ".aws", box.ws / "awslink")
    box.runner.own(box.ws / "homelink", box.ws / "awslink")
    return "homelink", "awslink"


@pytest.mark.parametrize("mode", ["read-only", "workspace-write"])
def test_hidden_credentials_unreadable_by_any_spelling(box: Box, mode: str) -> None:
    homelink, awslink = _link_home(box)
    res = box.sh(READ_EVERY_SPELLING, homelink, awslink, *HIDDEN_DECOYS, VISIBLE_DECOY,
                 mode=mode)
    out = text(res)
    # Control in the same run: HOME was readable, so the reads were real.
    assert box.markers[VISIBLE_DECOY] in out, out
    leaked = [rel for rel in HIDDEN_DECOYS if box.markers[rel] in out]
    assert leaked == [], f"readable inside the sandbox: {leaked}"


def test_control_without_hiding_the_same_reads_find_every_secret(box: Box) -> None:
    """`unreadable = "none"` turns hiding off: the reads above would then leak."""
    cfg = box.write(box.state / "none.toml", '[sandbox]\nunreadable = "none"\n')
    homelink, awslink = _link_home(box)
    res = box.sh(READ_EVERY_SPELLING, homelink, awslink, *HIDDEN_DECOYS,
                 options=["--config", str(cfg)])
    out = text(res)
    missing = [rel for rel in HIDDEN_DECOYS if box.markers[rel] not in out]
    assert missing == [], out


def test_hidden_credentials_cannot_be_replaced_or_added(box: Box) -> None:
    """Hidden stores are read-only too: a planted ~/.aws/config would be read by the host."""
    before = {rel: (box.home / rel).read_bytes() for rel in HIDDEN_DECOYS}
    script = r"""
for rel in "$@"; do
  echo PWNED > "$HOME/$rel" 2>/dev/null && echo "WROTE $rel"
done
echo PWNED > "$HOME/.aws/config" 2>/dev/null && echo "WROTE aws-config"
true
"""
    res = box.sh(script, *HIDDEN_DECOYS, mode="workspace-write")
    assert "WROTE" not in text(res), text(res)
    assert {rel: (box.home / rel).read_bytes() for rel in HIDDEN_DECOYS} == before
    assert not (box.home / ".aws" / "config").exists()


# -- ssh: the key is hidden exactly when the agent is granted -----------------------------

AGENT_PROBE = r"""
import os, socket, sys
home = os.environ["HOME"]
for p in (f"{home}/.ssh/id_rsa", f"/proc/self/root{home}/.ssh/id_rsa", f"{home}/./.ssh//id_rsa",
          "homelink/.ssh/id_rsa"):
    try:
        print(open(p).read())
    except OSError as exc:
        print("unreadable", p, exc.errno)
try:
    print("ssh dir:", os.listdir(f"{home}/.ssh"))
except OSError as exc:
    print("ssh dir unreadable", exc.errno)
s = socket.socket(socket.AF_UNIX)
s.settimeout(3)
try:
    s.connect(os.environ["SSH_AUTH_SOCK"])
    s.sendall(b"\0\0\0\1\x0b")  # SSH_AGENTC_REQUEST_IDENTITIES
    print("AGENT CONNECTED")
except OSError as exc:
    print("AGENT UNREACHABLE", exc.errno)
"""


@pytest.fixture
def agent(box: Box, listeners: list[Listener]) -> Iterator[tuple[Listener, str]]:
    # Under the host's /tmp, where real agents put it: the sandbox's /tmp is a
    # fresh tmpfs, so reaching it at all depends on stockade binding it back.
    d = Path(f"/tmp/stockade-iso-agent-{secrets.token_hex(6)}")
    d.mkdir(mode=0o755)
    box.runner.own(d)
    sock = d / "agent.sock"
    listener = unix_listener(listeners, sock, box.runner)
    os.symlink(box.home, box.ws / "homelink")
    box.runner.own(box.ws / "homelink")
    yield listener, str(sock)
    shutil.rmtree(d, ignore_errors=True)


def test_ssh_key_hidden_when_agent_socket_granted(box: Box, agent: tuple[Listener, str]) -> None:
    listener, sock = agent
    cfg = box.write(box.state / "agent.toml", '[sandbox]\ngranted_sockets = ["ssh-agent"]\n')
    res = box.py(AGENT_PROBE, options=["--config", str(cfg)], env=box.env(SSH_AUTH_SOCK=sock))
    out = text(res)
    assert box.markers[SSH_KEY] not in out, out
    # The grant is real: the agent was reachable, so ssh would not need the key.
    assert "AGENT CONNECTED" in out, out
    assert listener.settle() >= 1


def test_control_ssh_key_readable_when_hiding_is_off(box: Box,
                                                    agent: tuple[Listener, str]) -> None:
    """`unreadable = "none"`: the same probe reads the key, so the tests around it can fail."""
    _listener, sock = agent
    cfg = box.write(box.state / "none.toml", '[sandbox]\nunreadable = "none"\n')
    res = box.py(AGENT_PROBE, options=["--config", str(cfg)], env=box.env(SSH_AUTH_SOCK=sock))
    assert box.markers[SSH_KEY] in text(res), text(res)


# Reads every private key by several spellings, then uses ssh's own config and
# known_hosts the way ssh does. $1: workspace symlink to HOME; rest: key names.
SSH_WITHOUT_AGENT = r"""
homelink=$1; shift
for k in "$@"; do
  for p in "$HOME/.ssh/$k" "/proc/self/root$HOME/.ssh/$k" "$HOME/.ssh/../.ssh/$k" \
           "$homelink/.ssh/$k"; do
    cat "$p" 2>/dev/null
  done
  ssh-keygen -y -f "$HOME/.ssh/$k" </dev/null >/dev/null 2>&1 && echo "KEY USABLE $k"
done
grep -r -h -e DECOY -e PRIVATE "$HOME/.ssh" 2>/dev/null
ssh -G -F "$HOME/.ssh/config" decoyhost 2>&1 | grep -i '^hostname'
ssh-keygen -F decoyhost.example -f "$HOME/.ssh/known_hosts" 2>&1 | grep -q 'found: line' \
  && echo KNOWN HOST MATCHED
ls "$HOME/.ssh"
true
"""
SSH_KEYS = ("id_rsa", "id_ed25519", "deploy")


def _ssh_home(box: Box) -> str:
    """A ~/.ssh as ssh-keygen leaves it: real keys beside the decoy, config, known_hosts."""
    ssh = box.home / ".ssh"
    for name in ("id_ed25519", "deploy"):
        res = box.host(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f",
                        str(ssh / name)])
        assert res.returncode == 0, text(res)
        box.runner.own(ssh / name, ssh / f"{name}.pub")
    tag = box.markers[SSH_KEY].rsplit("-", 1)[1]
    box.write(ssh / "config", f"Host decoyhost\n  HostName cfg-{tag}.example\n")
    key_type, key = (ssh / "deploy.pub").read_text().split()[:2]
    box.write(ssh / "known_hosts", f"decoyhost.example {key_type} {key}\n")
    os.symlink(box.home, box.ws / "homelink")
    box.runner.own(box.ws / "homelink")
    return tag


def test_ssh_private_keys_hidden_without_the_agent_config_still_works(box: Box) -> None:
    tag = _ssh_home(box)
    res = box.sh(SSH_WITHOUT_AGENT, "homelink", *SSH_KEYS)
    out = text(res)
    assert box.markers[SSH_KEY] not in out, out
    assert "PRIVATE KEY" not in out and "KEY USABLE" not in out, out
    # ssh keeps what it reads before it ever needs a key.
    assert f"hostname cfg-{tag}.example" in out, out
    assert "KNOWN HOST MATCHED" in out, out
    assert "deploy.pub" in out and "config" in out, out


def test_control_ssh_private_keys_readable_without_hiding(box: Box) -> None:
    _ssh_home(box)
    cfg = box.write(box.state / "none.toml", '[sandbox]\nunreadable = "none"\n')
    res = box.sh(SSH_WITHOUT_AGENT, "homelink", *SSH_KEYS, options=["--config", str(cfg)])
    out = text(res)
    assert box.markers[SSH_KEY] in out and "PRIVATE KEY" in out, out
    assert "KEY USABLE deploy" in out and "KEY USABLE id_ed25519" in out, out


# -- the other stores hidden by default ---------------------------------------------------

# A representative store of each kind: forge and registry logins, a database
# password file, a history, a browser profile (a directory), an agent's login.
MORE_STORES = (
    ".config/git/credentials",
    ".config/containers/auth.json",
    ".cargo/credentials.toml",
    ".pgpass",
    ".my.cnf",
    ".bash_history",
    ".local/share/fish/fish_history",
    ".mozilla/firefox/decoy.default/logins.json",
    ".config/google-chrome/Default/Cookies",
    ".claude/.credentials.json",
    ".claude.json",
    ".codex/auth.json",
    ".gemini/oauth_creds.json",
)


def _plant(box: Box, rels: tuple[str, ...]) -> dict[str, str]:
    markers = {}
    for rel in rels:
        markers[rel] = f"STORE-{rel.strip('.').replace('/', '_')}-{secrets.token_hex(6)}"
        box.write(box.home / rel, f"{markers[rel]}\n", 0o600)
    for dirpath, _dirs, _files in os.walk(box.home):
        os.chmod(dirpath, 0o755)
        box.runner.own(dirpath)
    return markers


@pytest.mark.parametrize("rel", MORE_STORES)
def test_more_credential_stores_unreadable(box: Box, rel: str) -> None:
    markers = _plant(box, (rel,))
    homelink, awslink = _link_home(box)
    res = box.sh(READ_EVERY_SPELLING, homelink, awslink, rel, VISIBLE_DECOY)
    out = text(res)
    assert box.markers[VISIBLE_DECOY] in out, out
    assert markers[rel] not in out, f"{rel} readable inside the sandbox"


def test_control_more_credential_stores_readable_without_hiding(box: Box) -> None:
    markers = _plant(box, MORE_STORES)
    cfg = box.write(box.state / "none.toml", '[sandbox]\nunreadable = "none"\n')
    homelink, awslink = _link_home(box)
    res = box.sh(READ_EVERY_SPELLING, homelink, awslink, *MORE_STORES,
                 options=["--config", str(cfg)])
    out = text(res)
    missing = [rel for rel in MORE_STORES if markers[rel] not in out]
    assert missing == [], out


#: Links that lead a path the allowlist shows back (`~/.cache/huggingface/hub`) into
#: the `~/.aws` store: (link, target), made in the home in turn.
LINKED_INTO_A_STORE = {
    # realpath stops at a loop and keeps the rest of the name: `~/huggingface/hub`,
    # through the second link.
    "loop": ((".cache", ".cache/.."), ("huggingface", ".aws")),
    "link": ((".cache/huggingface", ".aws"),),
}


@pytest.mark.parametrize("layout", LINKED_INTO_A_STORE)
def test_a_link_never_puts_a_stores_directory_back_in_view(box: Box, layout: str) -> None:
    """The allowlist names where tools keep things, not where they are: a link on the way
    put `~/.aws/hub` in view as `~/.cache/huggingface/hub`. The control reads the file
    unconfined, as the same user."""
    marker = f"STORE-aws-hub-{secrets.token_hex(6)}"
    secret = box.write(box.home / ".aws" / "hub" / "secret", f"{marker}\n", 0o600)
    _plant(box, (".aws/credentials",))
    for link, target in LINKED_INTO_A_STORE[layout]:
        (box.home / link).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(f"{box.home}/{target}", box.home / link)
    assert marker.encode() in box.host(["cat", str(secret)]).stdout
    res = box.sh('cat "$1" "$2"/.cache/huggingface/hub/secret', str(secret), str(box.home))
    assert marker not in text(res), text(res)


def test_a_store_kept_elsewhere_stays_hidden_around_a_writable_path_in_it(box: Box) -> None:
    """`~/.aws -> ~/dotfiles/aws` and a grant to write `~/dotfiles/aws/cli`: a link at a
    store's name that led to a directory holding a writable root hid nothing (a rule
    meant for `ln -s ~ ~/.azure`), and the credentials beside it were readable.
    Control: the same user reads them unconfined."""
    markers = _plant(box, ("dotfiles/aws/credentials",))
    shutil.rmtree(box.home / ".aws", ignore_errors=True)
    os.symlink(box.home / "dotfiles" / "aws", box.home / ".aws")
    box.mkdir(str((box.home / "dotfiles" / "aws" / "cli").relative_to(box.root)))
    secret = str(box.home / ".aws" / "credentials")
    assert markers["dotfiles/aws/credentials"].encode() in box.host(["cat", secret]).stdout
    res = box.sh('cat "$1"', secret, mode="workspace-write",
                 options=["--allow-write", str(box.home / "dotfiles" / "aws" / "cli"), "--yes"])
    assert markers["dotfiles/aws/credentials"] not in text(res), text(res)


def test_a_cache_over_its_whole_area_does_not_show_the_area(box: Box) -> None:
    """`~/.cache/pip -> .` laid the cache's private layer over all of ~/.cache, and the
    Hugging Face login beside the caches was read through it. Control: the same user
    reads it unconfined."""
    markers = _plant(box, (".cache/huggingface/token",))
    os.symlink(".", box.home / ".cache" / "pip")
    token = str(box.home / ".cache/huggingface/token")
    assert markers[".cache/huggingface/token"].encode() in box.host(["cat", token]).stdout
    out = text(box.sh('cat "$1"', token, mode="workspace-write"))
    assert markers[".cache/huggingface/token"] not in out, out


def test_an_area_linked_to_another_shows_none_of_its_logins(box: Box) -> None:
    """`~/.cache -> ~/.config`: the cache area's list (`pypoetry`, `composer`) came back
    inside ~/.config, where it names Poetry's and Composer's logins. Control: the same
    user reads them unconfined."""
    markers = _plant(box, (".config/pypoetry/auth.toml", ".config/composer/auth.json"))
    os.symlink(".config", box.home / ".cache")
    files = [str(box.home / rel) for rel in markers]
    control = box.host(["cat", *files]).stdout.decode()
    assert all(m in control for m in markers.values()), control
    out = text(box.sh('cat "$@"', *files))
    assert not [m for m in markers.values() if m in out], out


def test_a_cache_linked_into_a_store_does_not_show_the_store(box: Box) -> None:
    """A toolchain cache gets a private layer over it in workspace-write: one whose name
    was a link into a store (`~/.cache/pip -> ~/.aws`) got it over the store, and the
    command read the store there. Control: the same user reads it unconfined."""
    _plant(box, (".aws/credentials",))
    (box.home / ".cache").mkdir()
    box.runner.own(box.home / ".cache")
    os.symlink(f"{box.home}/.aws", box.home / ".cache" / "pip")
    secret = box.home / ".aws" / "credentials"
    assert b"STORE-aws" in box.host(["cat", str(secret)]).stdout  # the control
    res = box.sh('cat "$1" "$2"/credentials', str(secret), str(box.home / ".cache" / "pip"),
                 mode="workspace-write")
    assert "STORE-aws" not in text(res), text(res)


# -- the host's own secrets and the environment -------------------------------------------


def test_root_only_host_secrets_unreadable(box: Box) -> None:
    """As root, the sandbox is still uid 0: without hiding it would read /etc/shadow."""
    res = box.sh("cat /etc/shadow /etc/gshadow /proc/self/root/etc/shadow 2>/dev/null; true")
    assert res.stdout == b"", "host password hashes readable inside the sandbox"
    if box.runner.uid == 0:
        # ... and there was something to read: the test could fail as root.
        assert Path("/etc/shadow").read_bytes()


def test_secret_environment_not_inherited(box: Box) -> None:
    tag = secrets.token_hex(6)
    secret_vars = {"AWS_SECRET_ACCESS_KEY": f"S1-{tag}", "GITHUB_TOKEN": f"S2-{tag}",
                   "OPENAI_API_KEY": f"S3-{tag}", "DATABASE_URL": f"S4-{tag}",
                   "MY_PASSWORD": f"S5-{tag}", "MYSQL_PWD": f"S6-{tag}",
                   "CI_JOB_JWT": f"S7-{tag}", "SENTRY_DSN": f"https://S8-{tag}@sentry.example/1",
                   "BORG_PASSPHRASE": f"S9-{tag}", "GITLAB_PAT": f"S10-{tag}",
                   # Named like nothing secret: the password in the value gives it away.
                   "REDIS_URL": f"redis://:S11-{tag}@cache:6379/0",
                   "MONGODB_URI": f"mongodb://app:S12-{tag}@db1,db2/prod"}
    env = box.env(**secret_vars, HARMLESS_SETTING=f"visible-{tag}")
    res = box.sh("env; cat /proc/self/environ | tr '\\0' '\\n'", env=env)
    out = text(res)
    assert f"visible-{tag}" in out, out
    leaked = [k for k, v in secret_vars.items() if v in out]
    assert leaked == [], f"secret variables inherited: {leaked}"
    # Control: unconfined, the same variables arrive (the scrub is what stopped them).
    res = box.host(["/bin/sh", "-c", "env"], env=env)
    assert [k for k, v in secret_vars.items() if v not in text(res)] == [], text(res)


def test_variables_that_only_look_secret_pass(box: Box) -> None:
    """`*PWD*` and the like must not take the shell's directories or the agent's path."""
    tag = secrets.token_hex(6)
    passed = {"PWD": str(box.ws), "OLDPWD": f"/old-{tag}", "SSH_AUTH_SOCK": f"/agent-{tag}",
              "GIT_AUTHOR_NAME": f"author-{tag}", "SOME_URL": f"https://host-{tag}/x",
              "GIT_REMOTE": f"ssh://git@host-{tag}/r.git"}
    env = box.env(**passed)
    res = box.py("import os, json; print(json.dumps(dict(os.environ)))", env=env)
    assert res.returncode == 0, text(res)
    inside = json.loads(res.stdout)
    assert {k: inside.get(k) for k in passed} == passed, inside
    assert inside["HOME"] == str(box.home) and inside["PATH"] == env["PATH"], inside


# -- the kernel keyring ------------------------------------------------------------------

# Plants a secret in a fresh session keyring, then execs the rest of argv (the
# "plant" half, run on the host); or looks for that secret (the "read" half).
KEYRING = r"""
import ctypes, os, platform, sys
ADD_KEY, KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
JOIN_SESSION, SEARCH, READ, SESSION = 1, 10, 11, -3
libc = ctypes.CDLL(None, use_errno=True)
def sys_(nr, *args):
    r = libc.syscall(nr, *args)
    if r < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return r
name = ctypes.c_char_p(b"stockade-iso-secret")
if sys.argv[1] == "plant":
    marker = sys.argv[2].encode()
    sys_(KEYCTL, ctypes.c_long(JOIN_SESSION), ctypes.c_char_p(b"stockade-iso"))
    sys_(ADD_KEY, ctypes.c_char_p(b"user"), name, ctypes.c_char_p(marker),
         ctypes.c_size_t(len(marker)), ctypes.c_long(SESSION))
    os.execv(sys.argv[3], sys.argv[3:])
try:
    key = sys_(KEYCTL, ctypes.c_long(SEARCH), ctypes.c_long(SESSION), ctypes.c_char_p(b"user"),
               name, ctypes.c_long(0))
    buf = ctypes.create_string_buffer(256)
    n = sys_(KEYCTL, ctypes.c_long(READ), ctypes.c_long(key), buf, ctypes.c_long(256))
    print("READ", buf.raw[:n].decode(errors="replace"))
except OSError as exc:
    print("DENIED", exc.errno)
"""


def _keyring_run(box: Box, inner: list[str]) -> str:
    marker = f"KEYRING-DECOY-{secrets.token_hex(6)}"
    res = box.host([SYSTEM_PYTHON, "-I", "-c", KEYRING, "plant", marker, *inner])
    out = text(res)
    return out.replace(marker, "<MARKER>") if marker in out else out


def test_session_keyring_secrets_unreadable(box: Box) -> None:
    """The caller's session keyring (Kerberos KEYRING: caches, keyctl tokens) stays out."""
    inner = box.runner.cli_argv(["run", "--", SYSTEM_PYTHON, "-I", "-c", KEYRING, "read"])
    out = _keyring_run(box, inner)
    assert "<MARKER>" not in out, out


def test_control_keyring_secret_readable_unconfined(box: Box) -> None:
    out = _keyring_run(box, [SYSTEM_PYTHON, "-I", "-c", KEYRING, "read"])
    assert "READ <MARKER>" in out, out


# A workspace inside stockade's own workspace root (a provisioned session's,
# or one an adapter made there): its neighbours are other sessions' workspaces.
NEIGHBOURS = SH_TRY + r"""
try sibling-read   cat "$1/other/secret.txt"
try sibling-list   sh -c 'ls "$0" | grep -qx other' "$1"
try own-write      sh -c 'echo mine > own.txt'
"""


def _neighbours(box: Box) -> tuple[Path, Path]:
    root = box.state / "data" / "stockade" / "workspaces"
    mine, other = box.mkdir(str((root / "mine").relative_to(box.root))), root / "other"
    box.mkdir(str(other.relative_to(box.root)))
    box.write(other / "secret.txt", "OTHER-SESSION-SECRET\n")
    return root, mine


def test_a_workspace_in_stockades_root_does_not_show_its_neighbours(
        box: Box, names_hidden: bool = True) -> None:
    """`names_hidden`: False where only contents can be hidden (Landlock's READ_DIR
    on a directory reaches every directory beneath it)."""
    root, mine = _neighbours(box)
    res = box.sh(NEIGHBOURS, str(root), mode="workspace-write", cwd=mine)
    out = text(res)
    assert "OTHER-SESSION-SECRET" not in out
    seen = attempts(res)
    assert seen.get("own-write") is True, out
    assert seen.get("sibling-read") is False, out
    assert seen.get("sibling-list") is not names_hidden, out
    assert (mine / "own.txt").read_text() == "mine\n"
    assert (root / "other" / "secret.txt").read_text() == "OTHER-SESSION-SECRET\n"


def test_control_the_neighbours_are_there_without_the_sandbox(box: Box) -> None:
    root, mine = _neighbours(box)
    res = box.host(["/bin/sh", "-c", NEIGHBOURS, "sh", str(root)], cwd=mine)
    seen = attempts(res)
    assert seen.get("sibling-read") is True and seen.get("sibling-list") is True, text(res)
