"""A Mac described, not built: profiles for a made-up machine, through the real core.

The described machine is laid out on disk and `SandboxCore.make_profile`
decides for it (hidden stores, protected metadata, stockade's own state, the
session's TMPDIR, the cache layers) exactly as it would on a Mac; the
Seatbelt driver then turns that decision into a profile these tests evaluate.
"""

from __future__ import annotations

import os

from sbpl_eval import Policy

from described_machine import OnDisk, laid_out, remembered
from stockade.capabilities import NetworkPolicy, SandboxCapabilities, capabilities_for_mode
from stockade.command import SandboxCommand
from stockade.config import SandboxConfig
from stockade.core import SandboxCore
from stockade.drivers.macos.seatbelt import seatbelt_profile
from stockade.profile import DIR, FILE, SOCKET, Profile

HOME = "/Users/dev"
WS = "/Users/dev/work/proj"
SIBLING = "/Users/dev/work/sibling"
AGENT = "/private/tmp/com.apple.launchd.Xy12Ab/Listeners"
DOCKER_SOCKS = ("/Users/dev/.docker/run/docker.sock", "/private/var/run/docker.sock")
SCRATCH = "/private/var/folders/zz/abc123/T/stockade-k3y"
PROXY_PORT = 43123
GOCACHE = "/Users/dev/Library/Caches/go-build"

# Every store hostpaths hides by default, as the Linux isolation suite plants them.
HIDDEN_DECOYS = (
    ".aws/credentials",
    ".config/gcloud/application_default_credentials.json",
    ".kube/config",
    ".docker/config.json",
    ".netrc",
    ".git-credentials",
    ".gnupg/private-keys-v1.d/decoy.key",
    ".npmrc",
    ".pypirc",
    ".config/gh/hosts.yml",
    ".config/hub",
    ".azure/accessTokens.json",
    ".password-store/decoy.gpg",
    ".vault-token",
    ".terraform.d/credentials.tfrc.json",
    ".config/op/config",
    ".local/share/keyrings/login.keyring",
)
_HIDDEN_ROOTS = {".aws": DIR, ".config/gcloud": DIR, ".kube": DIR, ".docker/config.json": FILE,
                 ".netrc": FILE, ".git-credentials": FILE, ".gnupg": DIR, ".npmrc": FILE,
                 ".pypirc": FILE, ".config/gh": DIR, ".config/hub": FILE, ".azure": DIR,
                 ".password-store": DIR, ".vault-token": FILE,
                 ".terraform.d/credentials.tfrc.json": FILE, ".config/op": DIR,
                 ".local/share/keyrings": DIR, ".ssh": DIR}


def machine(workspace: str = WS, extra: dict[str, str] | None = None) -> dict[str, str]:
    fs = {
        "/usr": DIR, "/bin": DIR, "/sbin": DIR,
        HOME: DIR, workspace: DIR, SIBLING: DIR,
        f"{workspace}/.git": DIR, f"{workspace}/.git/hooks": DIR,
        f"{workspace}/.git/config": FILE, f"{workspace}/.vscode": DIR,
        f"{HOME}/.cargo": DIR, f"{HOME}/.cargo/registry": DIR, GOCACHE: DIR, f"{HOME}/.config": DIR,
        AGENT: SOCKET, **{s: SOCKET for s in DOCKER_SOCKS},
    }
    fs.update({f"{HOME}/{rel}": kind for rel, kind in _HIDDEN_ROOTS.items()})
    fs.update(extra or {})
    # A file's directories exist too, as on a disk: the hidden set is by area now.
    for path in list(fs):
        parent = os.path.dirname(path)
        while parent not in ("/", "") and parent not in fs:
            fs[parent] = DIR
            parent = os.path.dirname(parent)
    return fs


#: The described Mac's own directories: the rest is read where this host has it.
MAC_TOPS = ("/Users", "/private", "/var/folders")


def mac_profile(
    mode: str = "workspace-write",
    *,
    scope: str = "host",
    network: NetworkPolicy | None = None,
    workspace: str = WS,
    capabilities: SandboxCapabilities | None = None,
    writable: tuple[str, ...] = (),
    granted: tuple[str, ...] = ("ssh-agent",),
    extra_fs: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> Profile:
    """The profile `SandboxCore.make_profile` builds on the described Mac.

    The machine is laid out on disk under a scratch root and the core runs
    there with a Mac's environment (HOME, a per-user TMPDIR, no XDG
    variables), its own state and ledger included; the profile's paths are
    then spelled as on the Mac itself, the root taken off.
    """
    key = repr(("mac", mode, scope, network, workspace, capabilities, writable, granted,
                sorted((extra_fs or {}).items()), sorted((env or {}).items())))
    return remembered(key, lambda: _built(mode, scope, network, workspace, capabilities,
                                          writable, granted, extra_fs, env))


def _built(mode: str, scope: str, network: NetworkPolicy | None, workspace: str,
           capabilities: SandboxCapabilities | None, writable: tuple[str, ...],
           granted: tuple[str, ...], extra_fs: dict[str, str] | None,
           env: dict[str, str] | None) -> Profile:
    host_env = {"HOME": HOME, "PATH": "/usr/bin:/bin", "SSH_AUTH_SOCK": AGENT,
                "GOCACHE": GOCACHE, "TMPDIR": "/var/folders/zz/abc123/T/",
                "DOCKER_HOST": f"unix://{DOCKER_SOCKS[0]}", **(env or {})}
    caps = capabilities or capabilities_for_mode(mode, workspace)
    if network is not None:
        caps = caps.replace(network=network)
    with laid_out(machine(workspace, extra_fs)) as root:
        on_disk = OnDisk(root, MAC_TOPS)
        config = SandboxConfig(backend="seatbelt", read_scope=scope,
                               writable=[on_disk.path(w) for w in writable],
                               granted_sockets=list(granted))
        core = SandboxCore(config, env={k: on_disk.text(v) for k, v in host_env.items()})
        try:
            ws = core.new_session("s1", on_disk.path(workspace))
            caps = caps.replace(fs_read=tuple(map(on_disk.path, caps.fs_read)),
                                fs_write=tuple(map(on_disk.path, caps.fs_write)))
            profile = core.make_profile(ws, SandboxCommand("/bin/sh", ["-c", "true"]), mode,
                                        caps, ws.cwd, "seatbelt")
        finally:
            core.close()
        return on_disk.taken_off(profile)


def policy(profile: Profile, precedence: str = "last-match", *,
           proxy_ports: tuple[int, ...] = (), scratch: str | None = SCRATCH) -> Policy:
    text, params = seatbelt_profile(profile, proxy_ports=proxy_ports, scratch=scratch)
    return Policy(text, params, precedence=precedence)
