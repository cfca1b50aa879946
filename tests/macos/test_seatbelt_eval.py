"""What the generated Seatbelt profile means, case by case, without a Mac.

Each row asks the evaluator one question about one profile -- "may this
process create ~/.bashrc?", "may it connect to 1.1.1.1:443?" -- mirroring the
Linux isolation suite's escapes. Every row runs under both readings of rule
order (the `precedence` fixture), because the profile is written to mean the
same under either.

Controls are in the table too: rows that must be ALLOWED (writing the
workspace, git's own objects, the agent socket with the grant). A profile
that denied everything would fail them, so the denials above mean something.
"""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from macos_fakes import (
    AGENT,
    DOCKER_SOCKS,
    GOCACHE,
    HIDDEN_DECOYS,
    HOME,
    PROXY_PORT,
    SCRATCH,
    SIBLING,
    WS,
    mac_profile,
    policy,
)
from sbpl_eval import Policy, Request, disk_key

from stockade.capabilities import NetworkPolicy, SandboxCapabilities
from stockade.profile import Profile

PTY = frozenset({"com.apple.sandbox.pty"})


def _profiles() -> dict[str, object]:
    hosts = NetworkPolicy.allow_hosts(["example.com"])
    return {
        "ww": lambda: mac_profile("workspace-write"),
        "ww-strict": lambda: mac_profile("workspace-write", scope="strict"),
        "ro": lambda: mac_profile("read-only"),
        "ro-strict": lambda: mac_profile("read-only", scope="strict"),
        "ww-proxy": lambda: mac_profile("workspace-write", network=hosts),
        "ww-all": lambda: mac_profile("workspace-write", network=NetworkPolicy.allow_all()),
        "ww-no-agent": lambda: mac_profile("workspace-write", granted=()),
        # A scratch root that contains a hidden store: the hidden store still wins.
        "ww-config-writable": lambda: mac_profile("workspace-write", writable=("~/.config",)),
        # A granted read of a hidden store gives it back (and only that one).
        "ww-aws-granted": lambda: mac_profile(
            "workspace-write",
            capabilities=SandboxCapabilities(fs_write=(WS,), fs_read=(f"{HOME}/.aws",))),
        "full": lambda: mac_profile("full-access"),
    }


@cache
def _profile(name: str) -> Profile:
    return _profiles()[name]()  # type: ignore[operator,no-any-return]


def _go_layer() -> str:
    """Where the profile points GOCACHE: the session's private copy of the build cache."""
    return _profile("ww").env["GOCACHE"]


@cache
def _policy(name: str, precedence: str) -> Policy:
    profile = _profile(name)
    ports = (PROXY_PORT,) if name == "ww-proxy" else ()
    return policy(profile, precedence, proxy_ports=ports)


def row(case_id: str, profile: str, question, expected: bool):
    return pytest.param(profile, question, expected, id=case_id)


W = f"{WS}"
CASES = [
    # -- the workspace works (controls) ------------------------------------------------
    row("ww-create-source", "ww", lambda p: p.create(f"{W}/src/main.py"), True),
    row("ww-overwrite-source", "ww", lambda p: p.write(f"{W}/README.md"), True),
    row("ww-delete-source", "ww", lambda p: p.unlink(f"{W}/old.txt"), True),
    row("ww-mkdir", "ww", lambda p: p.create(f"{W}/build"), True),
    row("ww-rename-inside", "ww", lambda p: p.rename(f"{W}/a.txt", f"{W}/b.txt"), True),
    row("ww-git-index", "ww", lambda p: p.write(f"{W}/.git/index"), True),
    row("ww-git-objects", "ww", lambda p: p.create(f"{W}/.git/objects/ab/cdef"), True),
    row("ww-git-refs", "ww", lambda p: p.write(f"{W}/.git/refs/heads/main"), True),
    row("ww-git-rename-object", "ww",
        lambda p: p.rename(f"{W}/.git/objects/tmp_obj", f"{W}/.git/objects/ab/cd"), True),
    row("ww-read-workspace", "ww", lambda p: p.read(f"{W}/src/main.py"), True),
    row("ww-exec-workspace-script", "ww", lambda p: p.execute(f"{W}/configure"), True),
    row("ww-scratch-tmpdir", "ww", lambda p: p.create(f"{SCRATCH}/pip-build/x"), True),
    # Source caches are writable only when the command may fetch (network).
    row("ww-cargo-scratch", "ww", lambda p: p.create(f"{HOME}/.cargo/registry/x.crate"), False),
    # The host's build cache is read, never written: GOCACHE names the session's copy.
    row("ww-go-build-cache", "ww", lambda p: p.create(f"{GOCACHE}/01/abc-d"), False),
    row("ww-go-build-cache-read", "ww", lambda p: p.read(f"{GOCACHE}/01/abc-d"), True),
    row("ww-go-build-private", "ww", lambda p: p.create(f"{_go_layer()}/01/abc-d"), True),
    row("ww-dev-null-write", "ww", lambda p: p.write("/dev/null"), True),
    row("ww-dev-fd-write", "ww", lambda p: p.write("/dev/fd/2"), True),
    row("ww-urandom-read", "ww", lambda p: p.read("/dev/urandom"), True),
    row("ww-own-pty", "ww", lambda p: p.file("file-write-data", "/dev/ttys004", PTY), True),
    row("ww-ptmx", "ww", lambda p: p.file("file-ioctl", "/dev/ptmx"), True),
    # -- writes outside the workspace ----------------------------------------------------
    row("bashrc-overwrite", "ww", lambda p: p.write(f"{HOME}/.bashrc"), False),
    row("zshrc-create", "ww", lambda p: p.create(f"{HOME}/.zshrc"), False),
    row("home-new-file", "ww", lambda p: p.create(f"{HOME}/.profile"), False),
    row("launch-agent-plant", "ww",
        lambda p: p.create(f"{HOME}/Library/LaunchAgents/evil.plist"), False),
    row("sibling-write", "ww", lambda p: p.write(f"{SIBLING}/notes.txt"), False),
    row("sibling-new", "ww", lambda p: p.create(f"{SIBLING}/new.txt"), False),
    row("sibling-rm", "ww", lambda p: p.unlink(f"{SIBLING}/notes.txt"), False),
    row("sibling-chmod", "ww", lambda p: p.file("file-write-mode", f"{SIBLING}/notes.txt"),
        False),
    row("prefix-sibling", "ww", lambda p: p.create(f"{WS}-evil/x"), False),
    row("parent-new", "ww", lambda p: p.create(f"{HOME}/work/planted.txt"), False),
    row("rename-out-of-workspace", "ww",
        lambda p: p.rename(f"{W}/payload", f"{HOME}/.zshenv"), False),
    row("host-tmp-shared", "ww", lambda p: p.create("/private/tmp/planted"), False),
    row("etc-hosts", "ww", lambda p: p.write("/private/etc/hosts"), False),
    row("usr-local-bin", "ww", lambda p: p.create("/usr/local/bin/git"), False),
    row("data-volume-spelling-write", "ww",
        lambda p: p.create(f"/System/Volumes/Data{HOME}/.bashrc"), False),
    row("workspace-rename-itself", "ww", lambda p: p.rename(W, f"{W}-moved"), False),
    row("workspace-chmod-itself", "ww", lambda p: p.file("file-write-mode", W), False),
    row("hardlink-in-workspace", "ww",
        lambda p: p.link(f"{W}/.git/config", f"{W}/cfg-alias"), False),
    row("hardlink-from-home", "ww", lambda p: p.link(f"{HOME}/.bashrc", f"{W}/hl"), False),
    row("other-tty-write", "ww", lambda p: p.write("/dev/ttys001"), False),
    row("other-tty-read", "ww", lambda p: p.read("/dev/ttys001"), False),
    row("raw-disk-read", "ww", lambda p: p.read("/dev/disk0"), False),
    # -- protected metadata ----------------------------------------------------------------
    row("git-hook-write", "ww", lambda p: p.create(f"{W}/.git/hooks/pre-commit"), False),
    row("git-hook-overwrite", "ww", lambda p: p.write(f"{W}/.git/hooks/post-checkout"), False),
    row("git-hooks-rm", "ww", lambda p: p.unlink(f"{W}/.git/hooks"), False),
    row("git-config-append", "ww", lambda p: p.write(f"{W}/.git/config"), False),
    row("git-config-chmod", "ww", lambda p: p.file("file-write-mode", f"{W}/.git/config"),
        False),
    row("git-config-replace", "ww",
        lambda p: p.rename(f"{W}/cfg.new", f"{W}/.git/config"), False),
    row("git-hooks-casefold", "ww", lambda p: p.create(f"{W}/.git/HOOKS/pre-commit"), False),
    row("git-config-casefold", "ww", lambda p: p.write(f"{W}/.Git/Config"), False),
    row("git-rename-aside", "ww", lambda p: p.rename(f"{W}/.git", f"{W}/git-aside"), False),
    row("git-rename-back", "ww", lambda p: p.rename(f"{W}/git-aside", f"{W}/.git"), False),
    row("git-hooks-rename-aside", "ww",
        lambda p: p.rename(f"{W}/.git/hooks", f"{W}/.git/hooks-old"), False),
    row("stockade-dir-create", "ww", lambda p: p.create(f"{W}/.stockade"), False),
    row("stockade-dir-casefold", "ww", lambda p: p.create(f"{W}/.STOCKADE/policy.toml"), False),
    row("stockade-toml-create", "ww", lambda p: p.create(f"{W}/stockade.toml"), False),
    row("stockade-toml-mv", "ww", lambda p: p.rename(f"{W}/t", f"{W}/stockade.toml"), False),
    row("envrc-create", "ww", lambda p: p.create(f"{W}/.envrc"), False),
    row("envrc-casefold", "ww", lambda p: p.create(f"{W}/.EnvRC"), False),
    row("vscode-settings", "ww", lambda p: p.create(f"{W}/.vscode/settings.json"), False),
    row("vscode-mv-dir", "ww", lambda p: p.rename(f"{W}/v", f"{W}/.vscode"), False),
    row("claude-settings", "ww", lambda p: p.create(f"{W}/.claude/settings.json"), False),
    row("codex-config", "ww", lambda p: p.create(f"{W}/.codex/config.toml"), False),
    row("agents-dir", "ww", lambda p: p.create(f"{W}/.agents"), False),
    row("idea-dir", "ww", lambda p: p.create(f"{W}/.idea/workspace.xml"), False),
    row("protected-stays-readable", "ww", lambda p: p.read(f"{W}/.git/config"), True),
    row("gitignore-not-protected", "ww", lambda p: p.write(f"{W}/.gitignore"), True),
    row("github-dir-not-protected", "ww",
        lambda p: p.create(f"{W}/.github/workflows/ci.yml"), True),
    # -- hidden credentials --------------------------------------------------------------
    *[row(f"hidden-read-{rel}", "ww", lambda p, rel=rel: p.read(f"{HOME}/{rel}"), False)
      for rel in HIDDEN_DECOYS],
    row("hidden-write-aws-config", "ww", lambda p: p.create(f"{HOME}/.aws/config"), False),
    row("hidden-exec", "ww", lambda p: p.execute(f"{HOME}/.aws/cli-helper"), False),
    row("hidden-data-volume-spelling", "ww",
        lambda p: p.read(f"/System/Volumes/Data{HOME}/.aws/credentials"), False),
    row("hidden-inside-writable-root", "ww-config-writable",
        lambda p: p.create(f"{HOME}/.config/gh/hosts.yml"), False),
    row("control-writable-root-itself", "ww-config-writable",
        lambda p: p.create(f"{HOME}/.config/mytool/settings.toml"), True),
    row("granted-read-gives-it-back", "ww-aws-granted",
        lambda p: p.read(f"{HOME}/.aws/credentials"), True),
    row("granted-read-only-that-one", "ww-aws-granted",
        lambda p: p.read(f"{HOME}/.netrc"), False),
    row("ssh-key-hidden-with-agent", "ww", lambda p: p.read(f"{HOME}/.ssh/id_ed25519"), False),
    # Without the agent a key is hidden all the same: only ~/.ssh's public names show.
    row("ssh-key-hidden-without-agent-too", "ww-no-agent",
        lambda p: p.read(f"{HOME}/.ssh/id_ed25519"), False),
    row("bashrc-still-readable", "ww", lambda p: p.read(f"{HOME}/.bashrc"), True),
    row("other-user-home", "ww", lambda p: p.read("/Users/alice/notes.txt"), False),
    row("other-user-home-data-volume", "ww",
        lambda p: p.read("/System/Volumes/Data/Users/alice/notes.txt"), False),
    row("users-shared-readable", "ww", lambda p: p.read("/Users/Shared/readme"), True),
    row("root-home", "ww", lambda p: p.read("/private/var/root/.bash_history"), False),
    # -- strict read scope ------------------------------------------------------------------
    row("strict-system-readable", "ww-strict", lambda p: p.read("/usr/bin/git"), True),
    row("strict-framework-readable", "ww-strict",
        lambda p: p.file("file-map-executable",
                         "/System/Library/Frameworks/Security.framework/Security"), True),
    row("strict-etc-readable", "ww-strict", lambda p: p.read("/private/etc/hosts"), True),
    row("strict-sh-select", "ww-strict", lambda p: p.read("/private/var/select/sh"), True),
    row("strict-homebrew", "ww-strict", lambda p: p.execute("/opt/homebrew/bin/rg"), True),
    row("strict-workspace", "ww-strict", lambda p: p.read(f"{W}/src/main.py"), True),
    row("strict-bashrc-unreadable", "ww-strict", lambda p: p.read(f"{HOME}/.bashrc"), False),
    row("strict-sibling-unreadable", "ww-strict", lambda p: p.read(f"{SIBLING}/notes.txt"),
        False),
    row("strict-ancestor-metadata", "ww-strict",
        lambda p: p.file("file-read-metadata", f"{HOME}/work"), True),
    row("strict-ancestor-not-listable", "ww-strict", lambda p: p.read(f"{HOME}/work"), False),
    row("strict-data-volume", "ww-strict",
        lambda p: p.read(f"/System/Volumes/Data{W}/src/main.py"), False),
    row("strict-hidden", "ww-strict", lambda p: p.read(f"{HOME}/.aws/credentials"), False),
    row("strict-scratch", "ww-strict", lambda p: p.create(f"{SCRATCH}/x"), True),
    # -- read-only mode blocks every write ----------------------------------------------------
    *[row(f"ro-{name}", "ro", q, False) for name, q in [
        ("create", lambda p: p.create(f"{W}/new.txt")),
        ("append", lambda p: p.write(f"{W}/a.txt")),
        ("delete", lambda p: p.unlink(f"{W}/a.txt")),
        ("chmod", lambda p: p.file("file-write-mode", f"{W}/a.txt")),
        ("rename", lambda p: p.rename(f"{W}/a.txt", f"{W}/b.txt")),
        ("mkdir", lambda p: p.create(f"{W}/newdir")),
        ("touch", lambda p: p.file("file-write-times", f"{W}/a.txt")),
        ("xattr", lambda p: p.file("file-write-xattr", f"{W}/a.txt")),
        ("git-index", lambda p: p.write(f"{W}/.git/index")),
        ("cargo-scratch", lambda p: p.create(f"{HOME}/.cargo/x")),
        ("bashrc", lambda p: p.write(f"{HOME}/.bashrc")),
    ]],
    row("ro-strict-create", "ro-strict", lambda p: p.create(f"{W}/new.txt"), False),
    row("ro-reads-workspace", "ro", lambda p: p.read(f"{W}/a.txt"), True),
    row("ro-tmpdir-still-writable", "ro", lambda p: p.create(f"{SCRATCH}/x"), True),
    row("ro-dev-null", "ro", lambda p: p.write("/dev/null"), True),
    # -- network: none --------------------------------------------------------------------
    row("none-internet", "ww", lambda p: p.connect("1.1.1.1", 443), False),
    row("none-host-loopback", "ww", lambda p: p.connect("127.0.0.1", 5432), False),
    row("none-host-loopback-v6", "ww", lambda p: p.connect("::1", 8080), False),
    row("none-proxy-port", "ww", lambda p: p.connect("127.0.0.1", PROXY_PORT), False),
    row("none-listen", "ww", lambda p: p.listen("127.0.0.1", 3000), False),
    row("none-dns-service", "ww", lambda p: p.lookup("com.apple.dnssd.service"), False),
    row("none-dns-socket", "ww", lambda p: p.connect_unix("/private/var/run/mDNSResponder"),
        False),
    *[row(f"docker-sock-{i}", "ww", lambda p, s=s: p.connect_unix(s), False)
      for i, s in enumerate(DOCKER_SOCKS)],
    row("other-unix-socket", "ww", lambda p: p.connect_unix("/private/tmp/tmux-501/default"),
        False),
    row("agent-socket-granted", "ww", lambda p: p.connect_unix(AGENT), True),
    row("agent-socket-not-granted", "ww-no-agent", lambda p: p.connect_unix(AGENT), False),
    # -- network: through the proxy ---------------------------------------------------------
    row("proxy-port", "ww-proxy", lambda p: p.connect("127.0.0.1", PROXY_PORT), True),
    row("proxy-port-v6", "ww-proxy", lambda p: p.connect("::1", PROXY_PORT), True),
    row("proxy-other-loopback-port", "ww-proxy", lambda p: p.connect("127.0.0.1", 5432), False),
    row("proxy-direct-internet", "ww-proxy", lambda p: p.connect("93.184.216.34", 443), False),
    row("proxy-no-dns", "ww-proxy", lambda p: p.lookup("com.apple.dnssd.service"), False),
    row("proxy-docker-sock", "ww-proxy", lambda p: p.connect_unix(DOCKER_SOCKS[0]), False),
    row("proxy-listen", "ww-proxy", lambda p: p.listen("127.0.0.1", 3000), False),
    # -- network: all ---------------------------------------------------------------------
    row("all-internet", "ww-all", lambda p: p.connect("1.1.1.1", 443), True),
    row("all-loopback", "ww-all", lambda p: p.connect("127.0.0.1", 5432), True),
    row("all-listen", "ww-all", lambda p: p.listen("127.0.0.1", 3000), True),
    row("all-dns-service", "ww-all", lambda p: p.lookup("com.apple.dnssd.service"), True),
    row("all-dns-socket", "ww-all",
        lambda p: p.connect_unix("/private/var/run/mDNSResponder"), True),
    row("all-docker-sock-still-closed", "ww-all", lambda p: p.connect_unix(DOCKER_SOCKS[0]),
        False),
    row("all-docker-var-run-still-closed", "ww-all",
        lambda p: p.connect_unix(DOCKER_SOCKS[1]), False),
    row("all-still-no-bashrc", "ww-all", lambda p: p.write(f"{HOME}/.bashrc"), False),
    # -- system services ----------------------------------------------------------------------
    row("mach-logd", "ww", lambda p: p.lookup("com.apple.logd"), True),
    # trustd fetches intermediates and OCSP on its caller's behalf: a way out with
    # the network closed or behind the proxy, so only network all reaches it.
    row("mach-trustd-network-none", "ww", lambda p: p.lookup("com.apple.trustd.agent"), False),
    row("mach-trustd-proxy", "ww-proxy", lambda p: p.lookup("com.apple.trustd"), False),
    row("mach-trustd-network-all", "ww-all", lambda p: p.lookup("com.apple.trustd.agent"), True),
    row("mach-powerd", "ww", lambda p: p.lookup("com.apple.PowerManagement.control"), False),
    row("all-configd", "ww-all", lambda p: p.lookup("com.apple.SystemConfiguration.configd"),
        True),
    row("all-routetable", "ww-all", lambda p: p.sysctl("net.routetable.0.0.3.0"), True),
    row("none-no-configd", "ww",
        lambda p: p.lookup("com.apple.SystemConfiguration.configd"), False),
    row("none-no-routetable", "ww", lambda p: p.sysctl("net.routetable.0.0.3.0"), False),
    row("strict-library-apple", "ww-strict",
        lambda p: p.read("/Library/Apple/usr/libexec/oah/libRosettaRuntime"), True),
    row("strict-library-frameworks", "ww-strict",
        lambda p: p.read("/Library/Frameworks/Python.framework/Versions/3.12/bin/python3"),
        True),
    row("shm-libomp", "ww", lambda p: p.shm("/__KMP_REGISTERED_LIB_4242"), True),
    row("shm-python-shared-memory", "ww", lambda p: p.shm("/psm_1a2b3c4d"), True),
    row("shm-any-other-name", "ww", lambda p: p.shm("/com.example.host-app.state"), False),
    row("shm-cfprefs", "ww", lambda p: p.shm("apple.cfprefs.501"), False),
    row("sem-multiprocessing", "ww", lambda p: p.sem("/mp-abc123_z"), True),
    row("sem-loky", "ww", lambda p: p.sem("/loky-4242-k1_x9abc"), True),
    # A named semaphore another program of the user's waits on: held, it stalls that program.
    row("sem-any-other-name", "ww", lambda p: p.sem("/com.example.host-app.lock"), False),
    row("sem-a-name-merely-starting-like-one", "ww", lambda p: p.sem("/mp-x/../app"), False),
    row("mach-getpwuid", "ww", lambda p: p.lookup("com.apple.system.opendirectoryd.libinfo"),
        True),
    row("mach-launchservices", "ww",
        lambda p: p.lookup("com.apple.coreservices.launchservicesd"), False),
    row("mach-pasteboard", "ww", lambda p: p.lookup("com.apple.pasteboard.1"), False),
    row("mach-keychain", "ww", lambda p: p.lookup("com.apple.SecurityServer"), False),
    row("mach-cfprefsd", "ww", lambda p: p.lookup("com.apple.cfprefsd.agent"), False),
    row("sysctl-ncpu", "ww", lambda p: p.sysctl("hw.ncpu"), True),
    row("sysctl-osversion", "ww", lambda p: p.sysctl("kern.osversion"), True),
    row("sysctl-procargs", "ww", lambda p: p.sysctl("kern.procargs2"), False),
    row("sysctl-proc-list", "ww", lambda p: p.sysctl("kern.proc.all"), False),
    row("signal-own-sandbox", "ww", lambda p: p.signal("same-sandbox"), True),
    row("signal-host-process", "ww", lambda p: p.signal("other"), False),
    row("process-info-host", "ww",
        lambda p: p.allows(Request("process-info-pidinfo", target="other")), False),
    # -- full-access (REQUIRE'd sandbox): the boundary shrinks to the essentials ------------
    row("full-bashrc-writable", "full", lambda p: p.write(f"{HOME}/.bashrc"), True),
    row("full-git-hook-still-protected", "full",
        lambda p: p.create(f"{W}/.git/hooks/pre-push"), False),
    row("full-home-not-renamable", "full", lambda p: p.rename(HOME, "/Users/dev2"), False),
    row("full-internet", "full", lambda p: p.connect("1.1.1.1", 443), True),
]


@pytest.mark.parametrize(("profile", "question", "expected"), CASES)
def test_profile_answers(profile: str, question, expected: bool, precedence: str) -> None:
    assert question(_policy(profile, precedence)) is expected


def test_the_table_is_large_and_balanced() -> None:
    allowed = sum(1 for c in CASES if c.values[2])
    denied = len(CASES) - allowed
    assert len(CASES) >= 60
    # Controls matter: a profile that denied everything must fail a good share of rows.
    assert allowed >= 20 and denied >= 60, (allowed, denied)


@pytest.mark.parametrize("name", sorted(_profiles()))
def test_every_parameter_is_passed_and_used(name: str, precedence: str) -> None:
    p = _policy(name, precedence)
    # Asking about many paths touches every filter; then every -D was needed.
    for path in (f"{W}/x", f"{HOME}/.aws/x", "/usr/bin/x", f"{SCRATCH}/x", f"{HOME}/.cargo/x"):
        p.read(path), p.create(path)
    p.connect_unix(AGENT)
    for rule in p.rules:
        for f in rule.filters:
            _touch_all(p, f)
    assert p.used_params == set(p.params)


def _touch_all(p: Policy, f: object) -> None:
    if isinstance(f, list):
        if f and f[0] == "param":
            p._string(f)
        for sub in f:
            _touch_all(p, sub)


# -- a property: the text agrees with an oracle built from the Profile object ---------------

_SEGMENTS = (".git", "hooks", "config", ".stockade", "stockade.toml", ".envrc", ".vscode",
             ".claude", "src", "a.b", "index", "objects", "x", ".aws", "credentials", "..x",
             # What APFS or HFS+ takes for a protected name: U+017F (long s),
             # U+212A (Kelvin), U+FB06 (the st ligature), HFS+'s ignorable
             # U+200C, and a decomposed e-acute beside its composed spelling.
             ".\u017ftockade", "hoo\u212as", "\ufb06ockade.toml", ".g\u200cit", ".en\u200dvrc",
             "caf\u00e9", "cafe\u0301")
_ROOTS = (WS, SIBLING, HOME, SCRATCH, "/private/tmp", GOCACHE, f"{HOME}/.cargo", "/usr/bin")


def _oracle_create(profile, path: str) -> bool:
    """Independent of the profile text: may `path` be created, per the decided Profile?"""
    from stockade.capabilities import is_under

    roots = ([WS] if profile.workspace_writable else []) + list(profile.write_roots) + [SCRATCH]
    if not any(is_under(path, r) for r in roots):
        return False
    if any(is_under(path, h) for h, _ in profile.hidden):
        return False
    def key(p: str) -> str:  # the name the file system compares, one component at a time
        return "/".join(disk_key(part) for part in p.split("/"))

    low = key(path)
    for item in profile.protected:
        if item.kind in ("pin", "hold"):  # writable inside; on Linux only a mount point
            continue
        prot = key(item.path)
        if low == prot or low.startswith(prot + "/") or prot.startswith(low + "/"):
            return False  # protected, or a directory above protected metadata
    return True


@settings(max_examples=300, deadline=None)
# Each other spelling at least once, whatever the random draw.
@example(root=WS, parts=[(".\u017ftockade", False)], precedence="last-match",
         mode="workspace-write")
@example(root=WS, parts=[(".git", False), ("hoo\u212as", False), ("x", False)],
         precedence="deny-wins", mode="workspace-write")
@example(root=WS, parts=[("\ufb06ockade.toml", True)], precedence="deny-wins",
         mode="workspace-write")
@example(root=WS, parts=[(".g\u200cit", False), ("config", False)], precedence="last-match",
         mode="workspace-write")
@given(root=st.sampled_from(_ROOTS),
       parts=st.lists(st.tuples(st.sampled_from(_SEGMENTS), st.booleans()), max_size=4),
       precedence=st.sampled_from(["last-match", "deny-wins"]),
       mode=st.sampled_from(["workspace-write", "read-only"]))
def test_creating_any_path_agrees_with_the_profile_object(
        root: str, parts: list[tuple[str, bool]], precedence: str, mode: str) -> None:
    path = "/".join([root, *(seg.upper() if up else seg for seg, up in parts)])
    name = "ww" if mode == "workspace-write" else "ro"
    profile = _profiles()[name]()  # type: ignore[operator]
    assert _policy(name, precedence).create(path) is _oracle_create(profile, path), path
