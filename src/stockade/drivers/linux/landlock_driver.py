"""The Landlock backend: stockade's kernel layers without bubblewrap.

For hosts that forbid user namespaces (Ubuntu 24.04's AppArmor default,
most containers), where bwrap cannot start. The same init runs -- no_new_privs,
Landlock, seccomp, the descriptor check -- but directly under stockade, with
no namespace around it, so Landlock is the filesystem boundary rather than a
second wall behind bwrap's mounts. What that costs is listed in `WEAKNESSES`
(shown by `stockade doctor`) and explained in docs/landlock-backend.md.

Landlock only ever allows; it cannot take a credential back out of a
directory granted above it. So nothing is granted wholesale that contains
something to hide: `split_grant` grants the siblings of every hidden path,
listing only the directories on the way down to one (`/`, `/home`, `$HOME`,
`/etc`, ...), never walking a tree. A path with no rule is simply out of
reach, by any spelling: `/proc/self/root/...` and symlinks resolve to the
same inode, and `/proc/<pid>/root` of a process outside the sandbox is
refused by Landlock's ptrace rule.

Everything above the driver class is a pure function of its inputs (the
filesystem is read through `listdir` and `kind` arguments), so the rules
are unit-tested without a kernel; tests/landlock_backend/ runs the real thing.
"""

from __future__ import annotations

import os
import sys

from ...capabilities import NetworkPolicy, is_under
from ...errors import SandboxUnavailable
from ...profile import DIR, LINK, MISSING, STRICT, path_kind
from .. import PreparedLaunch
from .fstree import remove_tree
from .guard import MetadataGuard
from .landlock import LandlockRules, unavailable_reason
from .limits import (
    ExecCgroup,
    ScopeCgroup,
    exec_cgroup,
    mechanism,
    nproc_limit,
    prime_migration,
)
from .seccomp import NO_UNIX, TCP_ONLY, UNIX_NO_CONNECT, native_arch

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from ...profile import Profile

#: The lowest Landlock ABI the backend accepts unless `landlock_min_abi`
#: says otherwise: ABI 3 is the first that can refuse truncate(2), without
#: which a read-only file can still be emptied.
DEFAULT_MIN_ABI = 3
#: Landlock ABI of TCP port rules (network hosts needs them) and of signal
#: and abstract-socket scoping (the reaper needs them).
TCP_ABI, SCOPE_ABI = 4, 6

#: The host's /dev holds disks (/dev/sda, /dev/mem for root), terminals of
#: other sessions (/dev/pts/N of the same uid, whose input could be read)
#: and shared memory of other programs (/dev/shm): only these come in.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
#: The parts of /sys tools read (CPU count, cgroup limits, hugepages for
#: JVMs); the rest lists the host's network interfaces and hardware.
SYS_READ_PATHS = ("/sys/devices/system/cpu", "/sys/devices/system/node", "/sys/fs/cgroup",
                  "/sys/kernel/mm/transparent_hugepage")
#: Never part of the host read scope: /dev and /sys (see above), /proc
#: (granted read-only on its own), /tmp (the host's, shared with every other
#: program; the command gets a TMPDIR of its own instead).
SPECIAL_ROOTS = ("/dev", "/proc", "/sys", "/tmp")

#: What this backend does not do that bubblewrap does, one line each; shown
#: by `stockade doctor` and expanded in docs/landlock-backend.md.
WEAKNESSES = (
    "no PID namespace: host processes and their command lines are visible in /proc "
    "(not their environment, memory or files: Landlock's ptrace rule)",
    "no private /tmp: TMPDIR is a directory of the command's (or the session's) own; "
    "the host's /tmp is neither readable nor writable, so programs that ignore TMPDIR fail",
    "protected names (.git/hooks, .git/config, .envrc, stockade.toml, .vscode, ...) in a "
    "writable workspace are writable while the command runs; stockade restores them "
    "when it ends",
    "chmod, chown, utime and extended attributes of files the user owns are not "
    "mediated by Landlock, outside the workspace too (only setuid/setgid modes are "
    "refused, by seccomp)",
    "every unix-socket connect() is refused (Landlock cannot tell sockets apart): "
    "granted sockets such as ssh-agent cannot be used",
    "network hosts: Landlock's TCP rule is a port number, so a remote listener on the "
    "proxy's port is reachable too; UDP is refused outright",
    "no /dev/pts or /dev/shm: programs that open a pseudo-terminal or POSIX shared "
    "memory fail",
    "Landlock ABI < 6: no signal scoping (the command can signal your other processes) "
    "and no reaper for setsid daemons; ABI < 4: network hosts is refused",
)


def split_grant(root: str, excluded: Iterable[str], *,
                listdir: Callable[[str], list[str]] | None = None,
                kind: Callable[[str], str] = path_kind) -> tuple[list[str], list[str]]:
    """(grants, listed): paths that together cover `root` minus every `excluded`
    subtree, and the directories that had to be split to get there.

    A directory is listed only when an excluded path lies strictly beneath
    it, so the work is the depth of the exclusions, not the size of the
    tree. Symbolic links get no rule: a rule follows the link, and a link
    in $HOME pointing at ~/.aws would grant ~/.aws; the target is granted,
    or not, where it really lives. An entry that cannot be listed grants
    nothing beneath it: what cannot be examined is not handed out.

    The split directories themselves get no read grant (it would reach the
    excluded paths beneath); the caller may let them be listed.
    """
    listdir = listdir or _listdir
    excluded = sorted({os.path.normpath(e) for e in excluded})
    grants: list[str] = []
    listed: list[str] = []
    stack = [os.path.normpath(root)]
    while stack:
        path = stack.pop()
        if any(is_under(path, e) for e in excluded):
            continue
        if not any(is_under(e, path) for e in excluded):
            grants.append(path)
            continue
        if kind(path) != DIR:
            continue
        listed.append(path)
        for name in listdir(path):
            child = os.path.join(path, name)
            if kind(child) not in (LINK, MISSING):
                stack.append(child)
    return sorted(grants), sorted(listed)


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def other_homes(home: str, *, listdir: Callable[[str], list[str]] | None = None,
                kind: Callable[[str], str] = path_kind,
                realpath: Callable[[str], str] = os.path.realpath) -> list[str]:
    """/home/* except the one holding $HOME, and /root unless $HOME is there.

    Resolved: where /home is a link (/home -> /data/home), the homes are
    wherever it leads, and that is where the rules are.
    """
    listdir = listdir or _listdir
    home = realpath(home) if home else ""
    out = []
    homes = realpath("/home")
    if kind(homes) == DIR:
        for name in listdir(homes):
            path = os.path.join(homes, name)
            if not (home and is_under(home, path)):
                out.append(path)
    root = realpath("/root")
    if kind(root) == DIR and not (home and is_under(home, root)):
        out.append(root)
    return out


def private_paths(env: Mapping[str, str], *, state_dir: str = "", ledger: str | None = None,
                  workspace_root: str = "") -> list[str]:
    """stockade's own files: its state (locks, session TMPDIRs), ledger and workspaces.

    A command that could read the ledger would read every other session's
    commands; one that could read the workspace root, other sessions' work.
    """
    home = env.get("HOME") or "/tmp"
    data = env.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share")
    out = [state_dir or _default_state_dir(env), os.path.join(data, "stockade")]
    if workspace_root:
        out.append(workspace_root)
    if ledger:
        # SQLite's companions hold the newest records before a checkpoint.
        out += [ledger + suffix for suffix in ("", "-wal", "-shm", "-journal")]
    return [os.path.realpath(p) for p in out]


class BackendRules:
    """The Landlock backend's rules: `LandlockRules` plus the directories that may
    only be listed (READ_DIR alone), which the init adds (see initcore)."""

    __slots__ = ("listed", "rules")

    def __init__(self, rules: LandlockRules, listed: Sequence[str]) -> None:
        self.rules = rules
        self.listed = tuple(sorted(set(listed)))


def landlock_backend_rules(profile: Profile, *, tmpdir: str, private: Sequence[str] = (),
                           python_prefix: str = "",
                           listdir: Callable[[str], list[str]] | None = None,
                           kind: Callable[[str], str] = path_kind) -> BackendRules:
    """The whole boundary as Landlock rules (pure given `listdir` and `kind`).

    Host scope: `/` split around the hidden credentials, runtime sockets,
    other users' homes, $XDG_RUNTIME_DIR, stockade's private paths and
    SPECIAL_ROOTS. Strict scope: only the read roots. Then, in both, the few
    devices, /proc, the useful parts of /sys, the interpreter, the
    workspace, the writable roots and the TMPDIR.

    The directories split on the way ($HOME, /etc, ~/.config, ...) may be
    listed but not read: without that `ls ~` fails. READ_DIR reaches
    everything beneath a directory, so the names inside a hidden directory
    (never their contents) show -- but a directory above the host's /tmp,
    /dev, /sys, $XDG_RUNTIME_DIR or another user's home (`/`, `/home`,
    `/run`) stays unlistable: those names are other people's business.
    """
    hidden = [p for p, _kind in profile.hidden]
    reads: list[str] = []
    listed: list[str] = []
    unlistable: list[str] = []

    def split(root: str, excluded: Sequence[str]) -> None:
        grants, dirs = split_grant(root, excluded, listdir=listdir, kind=kind)
        reads.extend(grants)
        listed.extend(dirs)

    if profile.read_scope == STRICT:
        for root in profile.read_roots:
            split(root, hidden)
    else:
        # /run/user holds every user's runtime dir (session bus, keyring,
        # podman): hidden whole, as bubblewrap masks it.
        unlistable = [*SPECIAL_ROOTS, "/run/user"]
        if profile.runtime_dir:
            unlistable.append(os.path.realpath(profile.runtime_dir))
        if profile.mask_other_homes:
            unlistable += other_homes(profile.home, listdir=listdir, kind=kind)
        split("/", [*unlistable, *hidden, *profile.sockets, *private])
        for extra in profile.read_extra:
            split(extra, hidden)
    reads += [p for p in SYS_READ_PATHS if kind(p) == DIR]
    reads.append("/proc")
    if python_prefix:
        # The init's interpreter may sit under an excluded home
        # (/root/.pyenv), and the init imports `resource` after Landlock.
        reads.append(python_prefix)

    writes = [d for d in DEVICES if kind(d) not in (MISSING, LINK)]
    writes.append(tmpdir)
    writable = ([profile.workspace] if profile.workspace_writable else []) + list(
        profile.write_roots)
    for root in writable:
        if any(is_under(h, root) for h in hidden):
            # The profile never hides anything under a writable grant (an
            # explicit grant wins); if it did, Landlock could not honour it.
            raise SandboxUnavailable(
                f"{root} is writable but holds a hidden path; the landlock backend cannot "
                "hide a path inside a writable directory. Use backend = \"bubblewrap\"")
        writes.append(root)
    if not profile.workspace_writable:
        split(profile.workspace, hidden)

    kind_net = profile.network.kind
    ports: tuple[int, ...] = ()
    if kind_net == NetworkPolicy.HOSTS:
        if not profile.proxy_port:
            raise SandboxUnavailable(
                "network hosts needs the managed proxy's TCP port, which was not started")
        ports = (profile.proxy_port,)
    rules = LandlockRules(reads, writes, restrict_tcp=kind_net != NetworkPolicy.ALL,
                          tcp_connect=ports)
    granted = set(rules.read) | set(rules.write)
    return BackendRules(rules, [d for d in listed if d not in granted
                                and not any(is_under(u, d) for u in unlistable)])


#: NetworkPolicy kind -> this backend's seccomp socket gate (see seccomp.py).
SECCOMP_MODES = {NetworkPolicy.NONE: UNIX_NO_CONNECT, NetworkPolicy.HOSTS: TCP_ONLY,
                 NetworkPolicy.ALL: NO_UNIX}


def command_env(profile: Profile, tmpdir: str) -> dict[str, str]:
    """The command's environment here: its own TMPDIR, the proxy on host loopback."""
    env = dict(profile.env)
    env["TMPDIR"] = tmpdir
    for name in ("TMP", "TEMP"):
        if name in env:
            env[name] = tmpdir
    # The user's runtime dir is out of reach (session bus, keyring, podman);
    # pointing tools at it would only turn "not set" into "permission denied".
    env.pop("XDG_RUNTIME_DIR", None)
    if profile.network.kind == NetworkPolicy.HOSTS and profile.proxy_port:
        from ...proxy.env import proxy_env

        # One port serves HTTP and SOCKS5: the proxy tells them apart.
        env.update(proxy_env("127.0.0.1", profile.proxy_port, socks_port=profile.proxy_port,
                             secret=profile.proxy_secret, grants=profile.network.hosts))
    return env


def _default_state_dir(env: Mapping[str, str]) -> str:
    base = env.get("XDG_STATE_HOME") or os.path.join(env.get("HOME") or "/tmp", ".local", "state")
    return os.path.join(base, "stockade")


class LandlockDriver:
    """The init's layers with no namespace: Landlock is the filesystem boundary."""

    name = "landlock"

    def __init__(self, *, env: Mapping[str, str] | None = None, workspace: str = "",
                 state_dir: str = "", max_pids: int | None = 200,
                 cpu_percent: int | None = None, min_abi: int = DEFAULT_MIN_ABI,
                 ledger: str | None = None, workspace_root: str = "",
                 abi: Callable[[], int] | None = None, warm_sandboxes: int = 0,
                 warm_idle_seconds: float = 300.0, warm_watch: tuple[str, ...] = ()) -> None:
        """`ledger` and `workspace_root`: stockade's own files, kept out of the
        host read scope with its state directory; `abi` replaces the kernel's
        answer (tests)."""
        self._env = dict(env) if env is not None else dict(os.environ)
        self._workspace = workspace
        self._state_dir = os.path.realpath(state_dir or _default_state_dir(self._env))
        self._max_pids = max_pids
        self._cpu_percent = cpu_percent
        self._min_abi = min_abi
        self._private = private_paths(self._env, state_dir=self._state_dir, ledger=ledger,
                                      workspace_root=workspace_root)
        self._abi = abi
        self._warm: WarmPool | None = None
        if warm_sandboxes > 0:
            from .warm import WarmPool

            self._warm = WarmPool(self._prepare, self._guard, size=warm_sandboxes,
                                  idle_timeout=warm_idle_seconds, watch=warm_watch)

    @property
    def abi(self) -> int:
        if self._abi is not None:
            return self._abi()
        from .layers import host_landlock_abi

        return host_landlock_abi()

    def available(self) -> None:
        check_landlock(self.abi, self._min_abi)
        prime_migration()

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
        # No mount namespace: protected names stay writable during the run,
        # so the guard keeps copies and puts them back.
        return (MetadataGuard(profile, self._state_dir, restore_content=True)
                if profile.protected else None)

    def _prepare(self, argv: list[str], profile: Profile, *, park_fd: int | None = None,
                 guard: bool = True) -> PreparedLaunch:
        """The cold launch; `park_fd`: park before exec (warm.py), the guard left to dispatch."""
        from .layers import init_argv, init_config, init_python, launch_env

        abi = self.abi
        check_landlock(abi, self._min_abi)
        check_profile(profile, abi)
        python = init_python()
        reaper = abi >= SCOPE_ABI
        undo = _Undo()
        try:
            tmpdir, made = self._tmpdir(profile)
            undo.tmpdir = made
            backend_rules = landlock_backend_rules(
                profile, tmpdir=tmpdir, private=self._private,
                python_prefix=os.path.dirname(os.path.dirname(python)))
            rules = backend_rules.rules
            env = command_env(profile, tmpdir)
            mode = SECCOMP_MODES[profile.network.kind]
            config = init_config(profile, env=env, require_landlock=True,
                                 nproc=nproc_limit(self._max_pids, own_user_namespace=False),
                                 park_fd=park_fd)
            config.pop("bridge", None)  # no namespace to bridge into: the proxy is on loopback
            undo.cgroup = self._cgroup(profile)
            scope = isinstance(undo.cgroup, ScopeCgroup)
            config.update(landlock=rules.to_json(), landlock_list=list(backend_rules.listed),
                          seccomp=mode, cwd=profile.cwd,
                          parent="scope" if scope else os.getpid(), drop_caps=True,
                          reaper=reaper)
            extra_fds: dict[int, int] = {}
            if reaper:
                # The reaper holds the write end; its end-of-file says every
                # process the command left has been killed.
                undo.reaper_r, undo.reaper_w = os.pipe2(os.O_CLOEXEC)
                extra_fds[undo.reaper_w] = undo.reaper_w
                config["reaper_fd"] = undo.reaper_w
            if guard:
                undo.guard = self._guard(profile)
            _ensure_bytecode()
            args = init_argv(python, _init_path(), config, argv)
        except BaseException:
            undo.run(None)
            raise
        report = rules.plan(abi)
        audit: dict[str, object] = {"landlock_abi": report.abi, "seccomp": mode,
                                    "reaper": reaper}
        if report.dropped:
            audit["landlock_dropped"] = list(report.dropped)
        if undo.cgroup is not None:
            args = undo.cgroup.enter_argv(args, env)
        launch = PreparedLaunch(args, launch_env(env), profile.cwd, extra_fds=extra_fds,
                                cleanup=undo.run)
        launch.audit.update(audit, limits=undo.cgroup.kind if undo.cgroup is not None
                            else mechanism()[0])
        return launch

    def _tmpdir(self, profile: Profile) -> tuple[str, str]:
        """The command's TMPDIR and what to remove afterwards ("" when the session owns it).

        Under stockade's state directory, which the host read scope leaves
        out: one command's scratch is no other command's business.
        """
        if profile.session_tmp:
            return os.path.realpath(profile.session_tmp), ""
        base = os.path.join(self._state_dir, "tmp")
        try:
            os.makedirs(base, mode=0o700, exist_ok=True)
            # tempfile.mkdtemp, without the `random`, `shutil` and `re` it imports.
            made = os.path.join(base, f"cmd-{os.urandom(8).hex()}")
            os.mkdir(made, 0o700)
        except OSError as exc:
            raise SandboxUnavailable(
                f"cannot create the command's temporary directory in {base}: {exc.strerror}"
            ) from exc
        return made, made

    def _cgroup(self, profile: Profile) -> ExecCgroup | None:
        return exec_cgroup(profile.max_memory_mb, self._max_pids, self._cpu_percent,
                           prefix="stockade-ll", report_dir=self._state_dir)


#: How long cleanup waits for the reaper before going on without it.
REAPER_WAIT = 5.0


class _Undo:
    """What one launch leaves to undo, in the order it must happen.

    First the reaper must be done (every process the command left is dead),
    then the cgroup is read and removed, then protected names are restored
    -- nothing can change them any more -- and the TMPDIR goes.
    """

    def __init__(self) -> None:
        self.reaper_r = self.reaper_w = -1
        self.cgroup: ExecCgroup | None = None
        self.guard: MetadataGuard | None = None
        self.tmpdir = ""

    def run(self, launch: PreparedLaunch | None) -> None:
        try:
            if self.reaper_w >= 0:
                os.close(self.reaper_w)
                self.reaper_w = -1
                if launch is not None:
                    _wait_eof(self.reaper_r, REAPER_WAIT)
            if self.cgroup is not None:
                if launch is not None and not self.cgroup.started():
                    launch.events.append("limits-not-started")
                if launch is not None and self.cgroup.oom_killed():
                    launch.events.append("oom")
                if launch is not None and self.cgroup.pids_exhausted():
                    launch.events.append("pids")
                self.cgroup.kill()
                self.cgroup.remove()
            if self.guard is not None:
                done = self.guard.release()
                if launch is not None:
                    launch.neutralised += done
        finally:
            if self.reaper_r >= 0:
                os.close(self.reaper_r)
                self.reaper_r = -1
            _remove(self.tmpdir)
            self.tmpdir = ""


def _wait_eof(fd: int, timeout: float) -> None:
    import select
    import time

    deadline = time.monotonic() + timeout
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    while (left := deadline - time.monotonic()) > 0:
        if poller.poll(left * 1000) and not os.read(fd, 4096):
            return


def check_landlock(abi: int, min_abi: int) -> None:
    """Raise unless this is Linux with Landlock at `min_abi` or newer and a seccomp table."""
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailable("the landlock backend needs Linux")
    if abi < 1:
        from .landlock import ENOSYS

        raise SandboxUnavailable(unavailable_reason(ENOSYS) + ", so the landlock backend "
                                 "cannot run here")
    if abi < min_abi:
        raise SandboxUnavailable(
            f"this kernel has Landlock ABI {abi}; the landlock backend needs ABI {min_abi} "
            f"or newer (landlock_min_abi = {min_abi}). A newer kernel, or bubblewrap, fixes it")
    if not native_arch():
        raise SandboxUnavailable(f"no seccomp policy for {os.uname().machine}: the landlock "
                                 "backend supports x86_64 and aarch64")


def check_profile(profile: Profile, abi: int) -> None:
    """Refuse what this backend cannot hold, by name, rather than run it weaker."""
    if profile.granted_sockets:
        raise SandboxUnavailable(
            f"granted_sockets ({', '.join(profile.granted_sockets)}) cannot work under the "
            "landlock backend: Landlock does not tell one unix socket from another, so it "
            "refuses connect() to all of them (the Docker socket included). Remove "
            "granted_sockets, or use backend = \"bubblewrap\"")
    if profile.network.kind == NetworkPolicy.HOSTS and abi < TCP_ABI:
        raise SandboxUnavailable(
            f"network hosts under the landlock backend needs Landlock ABI {TCP_ABI} (TCP "
            f"port rules) to keep commands on the proxy; this kernel has ABI {abi}")


def _init_path() -> str:
    from .layers import INIT_PATH

    return INIT_PATH


def _ensure_bytecode() -> None:
    from .layers import ensure_bytecode

    ensure_bytecode()


def _remove(path: str) -> None:
    remove_tree(path)
