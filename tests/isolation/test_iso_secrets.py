"""Credential stores in HOME are unreadable inside, however the path is spelled.

HOME itself stays readable (that is the host read scope's design), so every
test here also reads a non-secret decoy and requires its marker: the sandbox
could see the directory, and only the hiding kept the secrets out.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import (
    HIDDEN_DECOYS,
    SSH_KEY,
    SYSTEM_PYTHON,
    VISIBLE_DECOY,
    Box,
    Listener,
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


def test_control_ssh_key_readable_without_the_grant(box: Box,
                                                    agent: tuple[Listener, str]) -> None:
    """Documented design: without the agent grant ~/.ssh stays readable (git push needs it).

    This is what makes the test above able to fail: the key is there to be read.
    """
    _listener, sock = agent
    res = box.py(AGENT_PROBE, env=box.env(SSH_AUTH_SOCK=sock))
    assert box.markers[SSH_KEY] in text(res), text(res)


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
                   "MY_PASSWORD": f"S5-{tag}"}
    env = box.env(**secret_vars, HARMLESS_SETTING=f"visible-{tag}")
    res = box.sh("env; cat /proc/self/environ | tr '\\0' '\\n'", env=env)
    out = text(res)
    assert f"visible-{tag}" in out, out
    leaked = [k for k, v in secret_vars.items() if v in out]
    assert leaked == [], f"secret variables inherited: {leaked}"


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
