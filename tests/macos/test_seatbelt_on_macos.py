"""The escape tests, run for real through /usr/bin/sandbox-exec. Needs a Mac.

Nothing in this file has run yet: it was written on Linux, where it is
skipped. It mirrors the Linux isolation suite -- the attack runs inside the
sandbox, the verdict is read from outside -- and each group has a control
that runs the same attack without a boundary, so a test that cannot fail is
noticed.

A fake HOME under a temporary directory holds decoy credentials, so the
user's real home is never the target.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from stockade.capabilities import NetworkPolicy, SandboxCapabilities, capabilities_for_mode
from stockade.command import SandboxCommand
from stockade.config import SandboxConfig
from stockade.core import SandboxCore
from stockade.drivers.macos.seatbelt import SANDBOX_EXEC, SeatbeltDriver
from stockade.drivers.none import NoneDriver
from stockade.process import Process
from stockade.profile import Profile

pytestmark = [
    pytest.mark.macos,
    pytest.mark.skipif(sys.platform != "darwin" or not os.access(SANDBOX_EXEC, os.X_OK),
                       reason="needs a real macOS host with /usr/bin/sandbox-exec"),
]

DECOYS = (".aws/credentials", ".netrc", ".config/gh/hosts.yml", ".docker/config.json")


@dataclass
class Mac:
    root: str
    home: str
    ws: str
    sibling: str

    def run(self, script: str, *, mode: str = "workspace-write", scope: str = "host",
            network: NetworkPolicy | None = None, granted: tuple[str, ...] = (),
            env: dict[str, str] | None = None, sandboxed: bool = True,
            max_memory_mb: int | None = None) -> tuple[int, str]:
        caps = capabilities_for_mode(mode, self.ws)
        if network is not None:
            caps = caps.replace(network=network)
        if max_memory_mb is not None:
            caps = caps.replace(max_memory_mb=max_memory_mb)
        host_env = {"HOME": self.home, "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
                    "TMPDIR": os.environ.get("TMPDIR", "/tmp"), **(env or {})}
        # The profile the core builds, its state under the fake home: the session's
        # TMPDIR and the hidden state directory are part of what is tested.
        config = SandboxConfig(backend="seatbelt", read_scope=scope,
                               granted_sockets=list(granted), scratch=False)
        core = SandboxCore(config, env=host_env)
        try:
            profile = self.profile(core, mode, caps)
            driver = SeatbeltDriver(env=host_env) if sandboxed else NoneDriver()
            launch = driver.prepare(["/bin/sh", "-c", script], profile)
            try:
                proc = Process(launch.argv, launch.env)
                out = proc.communicate(timeout=60)
            finally:
                launch.cleanup()
        finally:
            core.close()
        return out.returncode, (out.stdout + out.stderr).decode("utf-8", "replace")

    def profile(self, core: SandboxCore, mode: str, caps: SandboxCapabilities) -> Profile:
        ws = core.new_session("on-host", self.ws)
        return core.make_profile(ws, SandboxCommand("/bin/sh", ["-c", "true"]), mode, caps,
                                 ws.cwd, "seatbelt")


@pytest.fixture
def mac() -> Iterator[Mac]:
    root = os.path.realpath(tempfile.mkdtemp(prefix="svtest-mac-"))
    home, ws, sibling = (os.path.join(root, n) for n in ("home", "ws", "sibling"))
    for d in (home, ws, sibling, f"{ws}/.git/hooks"):
        os.makedirs(d)
    for rel in DECOYS:
        os.makedirs(os.path.dirname(f"{home}/{rel}"), exist_ok=True)
        with open(f"{home}/{rel}", "w") as fh:
            fh.write(f"SECRET-{rel}\n")
    for path, text in ((f"{home}/.bashrc", "visible\n"), (f"{sibling}/notes.txt", "sib\n"),
                       (f"{ws}/.git/config", "[core]\n")):
        with open(path, "w") as fh:
            fh.write(text)
    yield Mac(root, home, ws, sibling)
    shutil.rmtree(root, ignore_errors=True)


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


TRY = 'try() { n=$1; shift; if "$@" 2>/dev/null; then echo "DID $n"; fi; }\n'

ESCAPES = TRY + r"""
try bashrc     sh -c 'echo PWNED > "$HOME/.bashrc"'
try profile    sh -c 'echo PWNED > "$HOME/.profile"'
try sibling    sh -c 'echo PWNED > ../sibling/notes.txt'
try sibling-rm rm -f ../sibling/notes.txt
try host-tmp   sh -c 'echo PWNED > /private/tmp/stockade-mac-planted'
try hook       sh -c 'echo "touch /tmp/x" > .git/hooks/pre-commit'
try config     sh -c 'echo "[core] fsmonitor=x" >> .git/config'
try stockade   mkdir .stockade
try STOCKADE   mkdir .STOCKADE
try envrc      sh -c 'echo x > .envrc'
try aside      mv .git git-aside
try hardlink   ln .git/config cfg-alias
echo ok > in-workspace.txt && echo "DID workspace"
"""


def test_escapes_fail_and_the_workspace_is_writable(mac: Mac) -> None:
    _code, out = mac.run(ESCAPES)
    assert "DID workspace" in out, out
    assert [ln for ln in out.splitlines() if ln.startswith("DID ") and ln != "DID workspace"] \
        == [], out
    assert _read(f"{mac.home}/.bashrc") == "visible\n"
    assert _read(f"{mac.sibling}/notes.txt") == "sib\n"
    assert not os.path.exists("/private/tmp/stockade-mac-planted")
    assert not os.path.exists(f"{mac.ws}/.git/hooks/pre-commit")
    assert sorted(os.listdir(mac.ws)) == [".git", "in-workspace.txt"]


def test_control_the_same_escapes_succeed_unconfined(mac: Mac) -> None:
    try:
        _, out = mac.run(ESCAPES, sandboxed=False)
        assert "DID bashrc" in out and "DID hook" in out, out
    finally:
        if os.path.exists("/private/tmp/stockade-mac-planted"):
            os.unlink("/private/tmp/stockade-mac-planted")


def test_hidden_credentials_unreadable_bashrc_readable(mac: Mac) -> None:
    script = "".join(f'cat "$HOME/{rel}"; cat "/System/Volumes/Data$HOME/{rel}"\n'
                     for rel in DECOYS) + 'cat "$HOME/.bashrc"\n'
    _, out = mac.run(script, mode="read-only")
    assert "SECRET" not in out, out
    assert "visible" in out, out


def test_read_only_blocks_every_write(mac: Mac) -> None:
    script = TRY + r"""
try create sh -c 'echo x > new.txt'
try append sh -c 'echo x >> .git/config'
try mkdir  mkdir d
try chmod  chmod 777 .git
try rename mv .git g
try touch  touch .git/config
echo scratch > "$TMPDIR/ok" && echo "SCRATCH OK"
"""
    _, out = mac.run(script, mode="read-only")
    assert "DID" not in out and "SCRATCH OK" in out, out


def test_strict_scope_reads_the_system_not_the_home(mac: Mac) -> None:
    script = 'cat "$HOME/.bashrc" || echo NO-BASHRC; /usr/bin/true && echo TRUE-RUNS\n' \
             'git --version >/dev/null 2>&1 && echo GIT-RUNS\n'
    _, out = mac.run(script, scope="strict")
    assert "visible" not in out and "NO-BASHRC" in out and "TRUE-RUNS" in out, out
    assert "GIT-RUNS" in out, f"xcrun shims need more than the strict scope gives: {out}"


@pytest.fixture
def listener(mac: Mac) -> Iterator[tuple[int, str]]:
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    sock_path = os.path.join(mac.root, "fake-docker.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(sock_path)
    unix.listen()
    stop = threading.Event()

    def accept(s: socket.socket) -> None:
        s.settimeout(0.2)
        while not stop.is_set():
            try:
                s.accept()[0].close()
            except OSError:
                continue

    threads = [threading.Thread(target=accept, args=(s,), daemon=True) for s in (tcp, unix)]
    for t in threads:
        t.start()
    yield tcp.getsockname()[1], sock_path
    stop.set()
    tcp.close()
    unix.close()


CONNECT = r"""
/usr/bin/python3 - "$@" <<'EOF'
import socket, sys
port, path = int(sys.argv[1]), sys.argv[2]
for family, addr, name in ((socket.AF_INET, ("127.0.0.1", port), "tcp"),
                           (socket.AF_UNIX, path, "unix")):
    s = socket.socket(family)
    s.settimeout(3)
    try:
        s.connect(addr)
        print("CONNECTED", name)
    except OSError as exc:
        print("REFUSED", name, exc.errno)
EOF
"""


def test_network_none_reaches_neither_loopback_nor_unix_sockets(
        mac: Mac, listener: tuple[int, str]) -> None:
    port, path = listener
    _, out = mac.run(CONNECT.replace('"$@"', f"{port} {path}"))
    assert "CONNECTED" not in out, out


def test_network_all_reaches_loopback_but_still_no_unix_socket(
        mac: Mac, listener: tuple[int, str]) -> None:
    port, path = listener
    _, out = mac.run(CONNECT.replace('"$@"', f"{port} {path}"),
                     network=NetworkPolicy.allow_all())
    assert "CONNECTED tcp" in out and "CONNECTED unix" not in out, out


def test_a_granted_socket_is_reachable(mac: Mac, listener: tuple[int, str]) -> None:
    port, path = listener
    _, out = mac.run(CONNECT.replace('"$@"', f"{port} {path}"), granted=(path,))
    assert "CONNECTED unix" in out and "CONNECTED tcp" not in out, out


def test_memory_ceiling_is_applied_or_refused_never_ignored(mac: Mac) -> None:
    code, out = mac.run("ulimit -v; echo RAN", max_memory_mb=1024)
    if code == 125:
        assert "refused an address-space limit" in out and "RAN" not in out, out
    else:
        assert out.split()[:2] == [str(1024 * 1024), "RAN"], out


# -- docs/macos-verify.md, item by item -------------------------------------------------------
#
# The same IDs as the checklist, run through the command line (and so through
# SandboxCore, as every command is) with a fake HOME whose ~/Library holds
# decoys. Each case: (ID, stockade run options, the script, what decides).

LIBRARY_DECOYS = ("Library/Application Support/sv-decoy/token",
                  "Library/Keychains/login.keychain-db",
                  "Library/Application Support/Firefox/Profiles/x.default/logins.json")


@pytest.fixture
def host(mac: Mac) -> Mac:
    for rel in LIBRARY_DECOYS:
        os.makedirs(os.path.dirname(f"{mac.home}/{rel}"), exist_ok=True)
        with open(f"{mac.home}/{rel}", "w") as fh:
            fh.write("SECRET\n")
    for rel in ("Library/Caches/x", "Library/LaunchAgents/keep.plist",
                "Library/Preferences/com.apple.Terminal.plist"):
        os.makedirs(os.path.dirname(f"{mac.home}/{rel}"), exist_ok=True)
        with open(f"{mac.home}/{rel}", "w") as fh:
            fh.write("ok\n")
    return mac


def cli(mac: Mac, options: list[str], script: str, *, config: str = "") -> tuple[int, str]:
    import subprocess

    env = {"HOME": mac.home, "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
           "TMPDIR": os.environ.get("TMPDIR", "/tmp")}
    argv = [sys.executable, "-m", "stockade", "run", "--yes", "--backend", "seatbelt",
            "--workspace", mac.ws, *options]
    if config:
        path = os.path.join(mac.root, "config.toml")
        with open(path, "w") as fh:
            fh.write(config)
        argv += ["--config", path]
    out = subprocess.run([*argv, "--", "/bin/sh", "-c", script], env=env, cwd=mac.ws,
                         capture_output=True, timeout=120, check=False)
    return out.returncode, (out.stdout + out.stderr).decode("utf-8", "replace")


WW = ["--mode", "workspace-write"]
M8C = ("/usr/bin/python3 -c 'import os, _posixshmem as p; "
       "p.shm_open(\"/sv-any\", os.O_CREAT | os.O_RDWR, 0o600); print(\"opened\")")
M8D = ("/usr/bin/python3 -c 'import _multiprocessing as m; m.SemLock(1, 1, 1, \"/sv-any\", "
       "True); print(\"opened\")")
CHECKLIST = [
    ("V0", [], "exit 0", lambda code, out: code == 0 and "sandbox-exec:" not in out),
    ("M1a", [*WW, "--session", "v"], 'echo ok > "$TMPDIR/x" && cat "$TMPDIR/x"',
     lambda code, out: "ok" in out and code == 0),
    ("M1b", ["--session", "v"], 'echo ok > "$TMPDIR/x" && cat "$TMPDIR/x"',
     lambda code, out: "ok" in out and code == 0),
    ("M1c", ["--session", "v"], 'ls "$HOME/.local/state/stockade" && echo LISTED',
     lambda code, out: "LISTED" not in out),
    ("M2a", [], 'cat "$HOME/Library/Application Support/sv-decoy/token"',
     lambda code, out: "SECRET" not in out and code != 0),
    ("M2b", [], 'ls "$HOME/Library/Keychains" && echo LISTED',
     lambda code, out: "LISTED" not in out),
    ("M2c", [], 'cat "$HOME"/Library/Application\\ Support/Firefox/Profiles/*/logins.json',
     lambda code, out: "SECRET" not in out),
    ("M2d", [], 'ls "$HOME/Library/Caches" >/dev/null && echo READ',
     lambda code, out: "READ" in out),
    ("M2e", [], "p=$(/usr/bin/python3 -c 'import site; print(site.getusersitepackages())') && "
     'case "$p" in "$HOME/Library/Python/"*) echo "UNDER $p";; *) echo "ELSEWHERE $p";; esac',
     lambda code, out: code == 0 and "UNDER " in out),
    ("M6a", [], 'for d in "$(dirname "$TMPDIR")"/stockade-*; do if [ "$d" != "$TMPDIR" ] '
     '&& ls "$d"; then echo LISTED; fi; done; true', lambda code, out: "LISTED" not in out),
    ("M8a", [], "/usr/bin/python3 -c 'from multiprocessing import shared_memory as s; "
     "m=s.SharedMemory(create=True,size=8); print(\"ok\"); m.unlink()'",
     lambda code, out: "ok" in out),
    ("M8b", [], "/usr/bin/python3 -c 'import multiprocessing as m; m.Lock(); print(\"ok\")'",
     lambda code, out: "ok" in out),
    ("M8c", [], M8C + "'", lambda code, out: "opened" not in out),
    ("M8d", [], M8D + "'", lambda code, out: "opened" not in out),
    ("M9a", ["--network", "all"], "/usr/bin/python3 -c 'import socket; "
     "print(socket.getaddrinfo(\"example.com\", 443)[0][4][0])'", lambda code, out: code == 0),
    ("M9b", ["--network", "all"], "/sbin/ifconfig -l", lambda code, out: "lo0" in out),
    ("M9d", [], "/usr/bin/caffeinate -t 1 && echo AWAKE", lambda code, out: "AWAKE" not in out),
    ("M5a", ["--network", "all"], "/usr/bin/curl -sS -o /dev/null -w '%{http_code}' "
     "https://example.com", lambda code, out: "200" in out),
    # The pinned decision: trustd is closed unless the network is all, so the
    # system curl, which verifies through it, cannot verify example.com here.
    ("M5b", ["--network", "proxy", "--allow-host", "example.com"],
     "/usr/bin/curl -sS -o /dev/null -w '%{http_code}' https://example.com",
     lambda code, out: code != 0 and "200" not in out
     and re.search("certificate|SSL", out, re.I) is not None),
    ("M5c", [], "/usr/bin/security verify-cert -c /etc/ssl/cert.pem 2>&1 | tail -1",
     lambda code, out: out.strip() != "" and "successful" not in out),
    ("B1", [], "/usr/bin/open -a Calculator && echo OPENED", lambda code, out: "OPENED" not in out),
    ("B2", [], "/usr/bin/osascript -e 'tell application \"Terminal\" to do script "
     "\"touch ~/sv-pwned\"' && echo RAN", lambda code, out: "RAN" not in out),
    ("B3", [], "/bin/launchctl submit -l sv.pwn -- /usr/bin/true && echo SUBMITTED",
     lambda code, out: "SUBMITTED" not in out),
    ("B5", [], "/usr/bin/security find-generic-password -s anything && echo FOUND",
     lambda code, out: "FOUND" not in out),
    ("B6", [], "echo x > /tmp/sv-tmp && echo WROTE", lambda code, out: "WROTE" not in out),
    ("B7", WW, "ln .git/config cfg && echo LINKED", lambda code, out: "LINKED" not in out),
]

#: Items whose verdict is a refusal, and the same script run with no sandbox
#: and what it must print there: a refusal that also happens unconfined (a
#: Python without `_posixshmem`, a name the kernel rejects) proves nothing.
#: The control's shared memory object is removed again.
UNCONFINED_CONTROL = {
    "M8c": (M8C + "; p.shm_unlink(\"/sv-any\")'", lambda code, out: "opened" in out),
    "M8d": (M8D + "'", lambda code, out: "opened" in out),
}

#: Every item of docs/macos-verify.md is run here; none is left to a person.
BY_HAND: dict[str, str] = {}


def unconfined(mac: Mac, script: str) -> tuple[int, str]:
    import subprocess

    env = {"HOME": mac.home, "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
           "TMPDIR": os.environ.get("TMPDIR", "/tmp")}
    out = subprocess.run(["/bin/sh", "-c", script], env=env, cwd=mac.ws, capture_output=True,
                         timeout=120, check=False)
    return out.returncode, (out.stdout + out.stderr).decode("utf-8", "replace")


@pytest.mark.parametrize(("item", "options", "script", "passes"), CHECKLIST,
                         ids=[c[0] for c in CHECKLIST])
def test_checklist(host: Mac, item: str, options: list[str], script: str, passes) -> None:
    code, out = cli(host, options, script)
    assert passes(code, out), f"{item}: exit {code}\n{out}"
    if item in UNCONFINED_CONTROL:
        control, works = UNCONFINED_CONTROL[item]
        code, out = unconfined(host, control)
        assert works(code, out), f"{item}: the control fails with no sandbox: exit {code}\n{out}"


# -- M3 on the boot volume (APFS) and on an HFS+ volume ----------------------------------------

#: A directory on a mounted case-insensitive HFS+ volume, for the M3 items
#: (the set-up in docs/macos-verify.md makes /Volumes/sv).
HFS_DIR = os.environ.get("STOCKADE_VERIFY_HFS", "")

# (ID, options, script, passes(code, output, on_hfs))
CHECKLIST_M3 = [
    ("M3a", WW, "mkdir .STOCKADE && echo MADE", lambda code, out, hfs: "MADE" not in out),
    ("M3b", WW, "mkdir \"$(printf '.\\305\\277tockade')\" && echo MADE",
     lambda code, out, hfs: "MADE" not in out),
    ("M3c", WW, "echo x > \".git/hoo$(printf '\\342\\204\\252')s/pre-commit\" && echo MADE",
     lambda code, out, hfs: "MADE" not in out),
    # HFS+ skips U+200C when it compares names, so there the name is .git;
    # APFS does not, and may make an unrelated directory beside an intact .git.
    ("M3d", WW, "mkdir \"$(printf '.g\\342\\200\\214it')\" && echo MADE; "
     "grep -q core .git/config && echo INTACT",
     lambda code, out, hfs: "INTACT" in out and not (hfs and "MADE" in out)),
    ("M3e", WW, "touch \"$(printf '\\357\\254\\206ockade.toml')\" && echo MADE",
     lambda code, out, hfs: "MADE" not in out),
    ("M3f", WW, "touch notes.txt && echo MADE", lambda code, out, hfs: "MADE" in out),
]


def file_system_of(path: str) -> str:
    """The type `mount` names for the volume holding `path` (`apfs`, `hfs`, ...)."""
    import subprocess

    listing = subprocess.run(["/sbin/mount"], capture_output=True, text=True,
                             check=True).stdout
    best, kind = "", ""
    for line in listing.splitlines():
        m = re.match(r"^.+ on (/.*) \(([^,)]+)", line)
        if m and (path == m[1] or path.startswith(m[1].rstrip("/") + "/")) \
                and len(m[1]) > len(best):
            best, kind = m[1], m[2]
    return kind


@pytest.fixture(params=["boot", "hfs"])
def m3_host(request: pytest.FixtureRequest, host: Mac) -> Iterator[tuple[Mac, bool]]:
    if request.param == "boot":
        yield host, False
        return
    if not HFS_DIR:
        pytest.skip("M3 on HFS+: set STOCKADE_VERIFY_HFS to a directory on a case-insensitive "
                    "HFS+ volume (docs/macos-verify.md, Set-up)")
    where = os.path.realpath(HFS_DIR)
    assert file_system_of(where) == "hfs", f"STOCKADE_VERIFY_HFS={HFS_DIR} is not on HFS+"
    ws = tempfile.mkdtemp(prefix="svtest-ws-", dir=where)
    try:
        os.makedirs(f"{ws}/.git/hooks")
        with open(f"{ws}/.git/config", "w") as fh:
            fh.write("[core]\n")
        yield dataclasses.replace(host, ws=ws), True
    finally:
        shutil.rmtree(ws, ignore_errors=True)


@pytest.mark.parametrize(("item", "options", "script", "passes"), CHECKLIST_M3,
                         ids=[c[0] for c in CHECKLIST_M3])
def test_checklist_M3(m3_host: tuple[Mac, bool], item: str, options: list[str], script: str,
                      passes) -> None:
    mac, on_hfs = m3_host
    code, out = cli(mac, options, script)
    assert passes(code, out, on_hfs), f"{item} ({'HFS+' if on_hfs else 'boot'}): exit {code}\n{out}"


# -- items with a set-up of their own ------------------------------------------------------------


@pytest.mark.checklist("M4a", "M4b", "M4c", "M4d")
def test_checklist_M4_a_writable_home_keeps_what_macos_runs_later(host: Mac) -> None:
    config = "allow_home_workspace = true\n"
    for rel in ("Library/LaunchAgents/sv.plist", "Library/Preferences/com.apple.Terminal.plist",
                "Library/Application Support/Code/User/settings.json"):
        _, out = cli(host, [*WW, "--workspace", host.home],
                     f'mkdir -p "$(dirname "$HOME/{rel}")"; echo x >> "$HOME/{rel}" && '
                     "echo WROTE", config=config)
        assert "WROTE" not in out, (rel, out)
    _, out = cli(host, [*WW, "--workspace", host.home], 'touch "$HOME/sv-ok" && echo WROTE',
                    config=config)
    assert "WROTE" in out


@pytest.mark.checklist("M7a")
def test_checklist_M7a_a_detached_process_outlives_the_command(host: Mac) -> None:
    """M7 is a known gap: pinned so that the docs change when macOS or stockade does."""
    import time

    cli(host, WW, '(setsid /bin/sh -c "sleep 3; touch late" &) ; exit 0')
    time.sleep(5)
    assert os.path.exists(os.path.join(host.ws, "late")), (
        "a detached process no longer outlives the command: update docs/macos.md (M7)")


@pytest.mark.checklist("M9c")
def test_checklist_M9c_node_resolves_a_name_with_network_all(host: Mac) -> None:
    import shlex

    node = shutil.which("node")
    if node is None:
        pytest.skip("M9c needs Node on PATH")
    code, out = cli(host, ["--network", "all"],
                    f"{shlex.quote(node)} -e 'require(\"dns\").resolve4(\"example.com\","
                    "(e,a)=>console.log(e?e.code:a[0]))'")
    assert re.search(r"^\d+\.\d+\.\d+\.\d+$", out, re.M), f"exit {code}\n{out}"


@pytest.mark.checklist("M9e")
def test_checklist_M9e_the_shell_s_terminal(host: Mac) -> None:
    """`stty` on the pty `stockade shell` opens outside the sandbox: works, or the known gap."""
    import subprocess

    env = {"HOME": host.home, "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
           "TMPDIR": os.environ.get("TMPDIR", "/tmp")}
    argv = [sys.executable, "-m", "stockade", "shell", "--yes", "--backend", "seatbelt",
            "--workspace", host.ws, "--", "/bin/sh"]
    done = subprocess.run(argv, input=b"stty -a | head -1\nexit\n", env=env, cwd=host.ws,
                          capture_output=True, timeout=120, check=False)
    out = (done.stdout + done.stderr).decode("utf-8", "replace")
    if "speed" in out:
        return
    if "Operation not permitted" in out:
        pytest.xfail("M9e: the shell's pty is opened outside the sandbox and stty is refused on "
                     "it (the known gap in docs/macos-verify.md): record it")
    raise AssertionError(f"M9e: neither a speed line nor the known refusal\n{out}")


@pytest.mark.checklist("M9f")
def test_checklist_M9f_strict_scope_reads_apple_s_library_folders(host: Mac) -> None:
    code, out = cli(host, ["--mode", "read-only"], "/bin/ls /Library/Apple /Library/Frameworks",
                    config='read_scope = "strict"\n')
    assert code == 0 and "/Library/Apple:" in out and "/Library/Frameworks:" in out, out


@pytest.mark.checklist("B4")
def test_checklist_B4_the_pasteboard_is_closed(host: Mac) -> None:
    import subprocess

    subprocess.run(["/usr/bin/pbcopy"], input=b"SECRET-PASTE", check=True)
    _, out = cli(host, [], "/usr/bin/pbpaste")
    assert "SECRET-PASTE" not in out
