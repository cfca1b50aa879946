"""The Landlock backend's rules are a pure function of the profile and a filesystem view.

These tests describe a machine as a dict and check what would be granted;
nothing is run. The kernel's agreement is the isolation tests' business.
"""

from __future__ import annotations

import os

import pytest

from stockade.boundary import build_profile
from stockade.capabilities import NetworkPolicy, capabilities_for_mode
from stockade.drivers.linux.host.landlock_rules import (
    DEVICES,
    SPECIAL_ROOTS,
    TCP_ABI,
    BackendRules,
    landlock_backend_rules,
    other_homes,
    split_grant,
)
from stockade.drivers.linux.init.landlock import FS_READ, FS_READ_DIR
from stockade.drivers.linux.init.seccomp import NO_UNIX, SECCOMP_MODES, TCP_ONLY, UNIX_NO_CONNECT
from stockade.drivers.linux.landlock_driver import check_landlock, check_profile, command_env
from stockade.errors import SandboxUnavailable
from stockade.paths import private_paths
from stockade.profile import DIR, FILE, LINK, MISSING, SOCKET, ProxyEndpoint, path_kind

HOME = "/home/u"
WS = "/home/u/proj"
TMP = "/home/u/.local/state/stockade/tmp/cmd-1"

MACHINE = {
    "/": DIR, "/bin": LINK, "/usr": DIR, "/usr/bin": DIR, "/etc": DIR, "/etc/passwd": FILE,
    "/etc/shadow": FILE, "/etc/ssl": DIR, "/home": DIR, "/home/u": DIR, "/home/v": DIR,
    "/home/v/notes": FILE, "/root": DIR, "/tmp": DIR, "/tmp/x11.sock": SOCKET, "/dev": DIR,
    "/dev/null": FILE, "/dev/zero": FILE, "/dev/urandom": FILE, "/dev/random": FILE,
    "/dev/full": FILE, "/dev/tty": FILE, "/dev/sda": FILE, "/dev/pts": DIR, "/dev/shm": DIR,
    "/proc": DIR, "/sys": DIR, "/sys/class": DIR, "/sys/fs": DIR, "/sys/fs/cgroup": DIR,
    "/sys/devices": DIR, "/sys/devices/system": DIR, "/sys/devices/system/cpu": DIR,
    "/run": DIR, "/run/docker.sock": SOCKET, "/run/user": DIR, "/run/user/1000": DIR,
    "/run/dbus": DIR, "/var": DIR, "/var/tmp": DIR,
    "/home/u/.aws": DIR, "/home/u/.aws/credentials": FILE, "/home/u/.bashrc": FILE,
    "/home/u/.config": DIR, "/home/u/.config/gh": DIR, "/home/u/.config/git": DIR,
    "/home/u/.local": DIR, "/home/u/.local/share": DIR, "/home/u/.local/share/stockade": DIR,
    "/home/u/.local/state": DIR, "/home/u/.local/state/stockade": DIR,
    "/home/u/aws-link": LINK, "/home/u/proj": DIR, "/home/u/proj/src": DIR,
    "/home/u/proj/.git": DIR, "/home/u/proj/.git/hooks": DIR,
    "/home/u/proj/.git/config": FILE, "/home/u/other": DIR,
}


def kind(path: str) -> str:
    return MACHINE.get(path, MISSING)


def listdir(path: str) -> list[str]:
    prefix = path.rstrip("/") + "/"
    return sorted({p[len(prefix):].split("/")[0] for p in MACHINE
                   if p.startswith(prefix) and p != path})


def profile(mode: str = "workspace-write", *, scope: str = "host",
            network: NetworkPolicy | None = None, **kw: object):  # type: ignore[no-untyped-def]
    env = {"HOME": HOME, "PATH": "/usr/bin", "XDG_RUNTIME_DIR": "/run/user/1000"}
    caps = capabilities_for_mode(mode, WS)
    if network is not None:
        caps = caps.replace(network=network)
    return build_profile(mode=mode, workspace=WS, cwd=WS, capabilities=caps, read_scope=scope,
                         host_env=env, kind=kind, use_scratch=False, backend="landlock",
                         **kw)  # type: ignore[arg-type]


PRIVATE = ["/home/u/.local/state/stockade", "/home/u/.local/share/stockade"]


def rules(p=None, **kw: object) -> BackendRules:  # type: ignore[no-untyped-def]
    return landlock_backend_rules(p or profile(), tmpdir=TMP, private=PRIVATE,
                                  listdir=listdir, kind=kind, **kw)  # type: ignore[arg-type]


def covered(path: str, grants: tuple[str, ...] | list[str]) -> bool:
    return any(path == g or path.startswith(g.rstrip("/") + "/") for g in grants)


# -- split_grant -------------------------------------------------------------------------


def test_split_covers_everything_but_the_excluded() -> None:
    grants, listed = split_grant("/", ["/home/u/.aws", "/etc/shadow"], listdir=listdir,
                                 kind=kind)
    assert not covered("/home/u/.aws/credentials", grants)
    assert not covered("/etc/shadow", grants)
    for visible in ("/etc/passwd", "/etc/ssl", "/usr/bin", "/home/u/.bashrc", "/home/v/notes",
                    "/home/u/proj/src"):
        assert covered(visible, grants), visible
    # Only the ancestors of what is excluded were listed: no tree walk.
    assert listed == ["/", "/etc", "/home", "/home/u"]


def test_split_never_grants_through_a_symlink() -> None:
    """$HOME/aws-link -> ~/.aws: a rule on the link would be a rule on ~/.aws."""
    grants, _ = split_grant(HOME, [f"{HOME}/.aws"], listdir=listdir, kind=kind)
    assert f"{HOME}/aws-link" not in grants
    assert "/bin" not in split_grant("/", ["/etc/shadow"], listdir=listdir, kind=kind)[0]


def test_split_with_nothing_to_exclude_is_the_root_itself() -> None:
    assert split_grant("/usr", ["/etc/shadow"], listdir=listdir, kind=kind) == (["/usr"], [])
    assert split_grant("/etc/shadow", ["/etc/shadow"], listdir=listdir, kind=kind) == ([], [])


def test_split_of_an_unlistable_directory_grants_nothing_beneath() -> None:
    grants, _ = split_grant(HOME, [f"{HOME}/.aws"], listdir=lambda p: [], kind=kind)
    assert grants == []


def test_split_on_the_real_filesystem(tmp_path: os.PathLike[str]) -> None:
    root = os.fspath(tmp_path)
    for rel in ("a/secret/key", "a/visible/file", "b/file"):
        os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(root, rel), "w") as fh:
            fh.write("x")
    os.symlink(os.path.join(root, "a/secret"), os.path.join(root, "a/link"))
    grants, listed = split_grant(root, [os.path.join(root, "a/secret")], kind=path_kind)
    assert grants == [os.path.join(root, "a/visible"), os.path.join(root, "b")]
    assert listed == [root, os.path.join(root, "a")]


# -- homes and stockade's own files ------------------------------------------------------


def test_other_homes_are_everyone_but_you() -> None:
    assert other_homes(HOME, listdir=listdir, kind=kind) == ["/home/v", "/root"]
    assert other_homes("/root", listdir=listdir, kind=kind) == ["/home/u", "/home/v"]
    assert other_homes("", listdir=listdir, kind=kind) == ["/home/u", "/home/v", "/root"]


def test_other_homes_follow_a_linked_home_directory() -> None:
    machine = {"/data/home": DIR, "/data/home/u": DIR, "/data/home/v": DIR, "/root": DIR}

    def real(path: str) -> str:  # /home -> /data/home
        return "/data" + path if path == "/home" or path.startswith("/home/") else path

    got = other_homes("/home/u", kind=lambda p: machine.get(p, MISSING), realpath=real,
                      listdir=lambda p: ["u", "v"] if p == "/data/home" else [])
    assert got == ["/data/home/v", "/root"]


def test_private_paths_cover_state_ledger_and_workspaces() -> None:
    env = {"HOME": "/nonexistent-home"}
    got = private_paths(env, ledger="/x/led.db", workspace_root="/x/ws")
    assert "/nonexistent-home/.local/state/stockade" in got
    assert "/nonexistent-home/.local/share/stockade" in got
    assert {"/x/led.db", "/x/led.db-wal", "/x/led.db-shm", "/x/ws"} <= set(got)


# -- the whole rule set ------------------------------------------------------------------


def test_host_scope_hides_credentials_homes_runtime_sockets_and_stockade() -> None:
    r = rules()
    reads, writes = r.rules.read, r.rules.write
    for hidden in ("/home/u/.aws/credentials", "/etc/shadow", "/home/v/notes", "/root",
                   "/run/user/1000", "/run/user", "/run/docker.sock", "/tmp/x11.sock", "/dev/sda",
                   "/dev/pts", "/dev/shm", "/sys/class", "/home/u/.local/state/stockade",
                   "/home/u/.local/share/stockade"):
        assert not covered(hidden, reads + writes), hidden
    for visible in ("/usr/bin", "/etc/passwd", "/home/u/.bashrc", "/run/dbus", "/var/tmp",
                    "/proc", "/sys/fs/cgroup", "/sys/devices/system/cpu"):
        assert covered(visible, reads), visible


def test_only_harmless_devices_and_the_tmpdir_are_writable_outside_the_workspace() -> None:
    writes = rules().rules.write
    assert set(writes) == {*DEVICES, TMP, WS}
    assert "/dev" not in writes and "/tmp" not in writes


def test_read_only_mode_writes_nothing_of_the_workspace() -> None:
    r = rules(profile("read-only"))
    assert WS not in r.rules.write
    assert covered(f"{WS}/src", r.rules.read)


def test_strict_scope_is_only_the_read_roots() -> None:
    r = rules(profile(scope="strict"))
    assert covered("/usr/bin", r.rules.read) and covered("/etc/passwd", r.rules.read)
    assert not covered("/etc/shadow", r.rules.read)
    assert not covered("/home/u/.bashrc", r.rules.read)
    assert not covered("/var/tmp", r.rules.read)


def test_split_directories_are_listable_unless_above_someone_elses_files() -> None:
    """ls ~ works (names only); ls / and ls /home would show /tmp and other homes."""
    listed = rules().listed
    assert HOME in listed and "/etc" in listed
    assert "/" not in listed and "/home" not in listed and "/run" not in listed
    # Listing grants READ_DIR and nothing else; the init adds it (initcore.with_listing).
    assert FS_READ_DIR & FS_READ and FS_READ != FS_READ_DIR


def test_the_interpreter_is_readable_even_under_a_hidden_home() -> None:
    r = landlock_backend_rules(profile(), tmpdir=TMP, private=PRIVATE, listdir=listdir,
                               kind=kind, python_prefix="/root/.pyenv/versions/3.11")
    assert "/root/.pyenv/versions/3.11" in r.rules.read


@pytest.mark.parametrize(("network", "mode", "ports", "tcp"), [
    (NetworkPolicy.none(), UNIX_NO_CONNECT, (), True),
    (NetworkPolicy.allow_all(), NO_UNIX, (), False),
])
def test_network_none_and_all(network: NetworkPolicy, mode: str, ports: tuple[int, ...],
                              tcp: bool) -> None:
    r = rules(profile(network=network))
    assert r.rules.tcp_connect == ports and r.rules.restrict_tcp is tcp
    assert SECCOMP_MODES["landlock"][network.kind] == mode


def test_network_hosts_allows_connect_to_the_proxy_port_only() -> None:
    p = profile(network=NetworkPolicy.allow_hosts(["example.com"]), proxy=ProxyEndpoint(
        unix_path="/x.sock", port=40123))
    r = rules(p)
    assert r.rules.restrict_tcp and r.rules.tcp_connect == (40123,) and r.rules.tcp_bind == ()
    assert SECCOMP_MODES["landlock"]["hosts"] == TCP_ONLY
    env = command_env(p, TMP)
    assert env["HTTP_PROXY"] == env["https_proxy"] == "http://127.0.0.1:40123"
    assert env["ALL_PROXY"] == "http://127.0.0.1:40123"  # httpx needs socksio for socks5h://
    p = profile(network=NetworkPolicy.allow_hosts(["localhost:8000"]), proxy=ProxyEndpoint(
        port=40123, secret="pw"))
    env = command_env(p, TMP)
    assert env["ALL_PROXY"] == env["HTTP_PROXY"] == "http://stockade:pw@127.0.0.1:40123"
    assert env["NO_PROXY"] == "127.0.0.1,::1"


def test_network_hosts_without_a_proxy_port_is_refused() -> None:
    p = profile(network=NetworkPolicy.allow_hosts(["example.com"]))
    with pytest.raises(SandboxUnavailable, match="proxy"):
        rules(p)


def test_command_env_points_tmp_at_the_tmpdir_and_drops_the_runtime_dir() -> None:
    env = command_env(profile(), TMP)
    assert env["TMPDIR"] == TMP
    assert "XDG_RUNTIME_DIR" not in env
    assert env["STOCKADE_SANDBOX"] == "landlock"


# -- what the backend refuses --------------------------------------------------------------


def test_granted_sockets_are_refused_by_name() -> None:
    p = profile(granted_sockets=["/tmp/x11.sock"])
    assert p.granted_sockets
    with pytest.raises(SandboxUnavailable, match=r"granted_sockets.*bubblewrap"):
        check_profile(p, 7)


def test_network_hosts_needs_tcp_rules() -> None:
    p = profile(network=NetworkPolicy.allow_hosts(["example.com"]), proxy=ProxyEndpoint(
        unix_path="/x", port=1))
    check_profile(p, TCP_ABI)
    with pytest.raises(SandboxUnavailable, match="ABI 4"):
        check_profile(p, TCP_ABI - 1)


@pytest.mark.parametrize(("abi", "minimum", "message"), [
    (0, 3, "no Landlock"), (2, 3, "ABI 2.*needs ABI 3"), (5, 6, "ABI 5.*needs ABI 6"),
])
def test_too_old_a_landlock_is_refused(abi: int, minimum: int, message: str) -> None:
    with pytest.raises(SandboxUnavailable, match=message):
        check_landlock(abi, minimum)


def test_enough_landlock_passes() -> None:
    check_landlock(3, 3)


def test_special_roots_are_never_in_the_host_scope() -> None:
    reads = rules().rules.read
    for root in SPECIAL_ROOTS:
        if root != "/proc":
            assert not covered(root, reads), root
