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

from ...capabilities import NetworkPolicy
from ...errors import SandboxUnavailable
from ...paths import private_paths
from ...paths import state_dir as state_dir_of
from ..base import Launch
from ..owned import owned_dir, remove_owned
from .host.guard import MetadataGuard
from .host.landlock_rules import (
    SCOPE_ABI,
    TCP_ABI,
    landlock_backend_rules,
)
from .host.limits import (
    ExecCgroup,
    ScopeCgroup,
    exec_cgroup,
    mechanism,
    memory_in_force,
    nproc_limit,
    prime_migration,
    read_limits,
)
from .host.options import DEFAULT_MIN_ABI, LANDLOCK_OPTIONS
from .init.landlock import unavailable_reason
from .init.seccomp import SECCOMP_MODES, native_arch
from .parking import ParkingDriver

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from ...profile import Profile

#: What this backend does not do that bubblewrap does, one line each; shown
#: by `stockade doctor` and expanded in docs/landlock-backend.md.
WEAKNESSES = (
    "no PID namespace: host processes and their command lines are visible in /proc "
    "(not their environment, memory or files: Landlock's ptrace rule)",
    "no private /tmp: TMPDIR is a directory of the command's (or the session's) own; "
    "the host's /tmp is neither readable nor writable, so programs that ignore TMPDIR fail; "
    "a command's own is bounded per file (max_file_size_mb), not as a whole (tmp_size_mb); "
    "a session's is one tmpfs where a namespace can be made for it",
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
    proxy = profile.proxy
    if profile.network.kind == NetworkPolicy.HOSTS and proxy is not None and proxy.port:
        from ...proxy.env import proxy_env

        # One port serves HTTP and SOCKS5: the proxy tells them apart.
        env.update(proxy_env("127.0.0.1", proxy.port, socks_port=proxy.port,
                             secret=proxy.secret, grants=profile.network.hosts))
    return env


class LandlockDriver(ParkingDriver):
    """The init's layers with no namespace: Landlock is the filesystem boundary."""

    name = "landlock"
    options = LANDLOCK_OPTIONS
    # No mount namespace: protected names stay writable during the run, so
    # the guard keeps copies and puts them back.
    RESTORE_CONTENT = True

    @classmethod
    def from_config(cls, config: Any, *, env: Mapping[str, str], workspace: str,
                    state_dir: str, **overrides: Any) -> LandlockDriver:
        from ...config import config_paths
        from ..base import accepted

        kwargs: dict[str, Any] = {
            "env": env, "workspace": workspace, "state_dir": state_dir,
            "max_pids": config.max_pids, "cpu_percent": config.cpu_quota_percent,
            "memory_default_mb": config.memory_default_mb(),
            "min_abi": config.landlock_min_abi,
            # stockade's own files, kept out of the host read scope: without
            # a mount namespace nothing else hides them.
            "ledger": config.ledger_path(env),
            "workspace_root": config.resolved_workspace_root(env),
            "warm_sandboxes": config.warm_sandboxes,
            "warm_idle_seconds": config.warm_idle_seconds,
            # The user's config file; the project's is watched per workspace.
            "warm_watch": tuple(config_paths(env, "/")[:1]),}
        kwargs.update(accepted(cls, overrides))
        return cls(**kwargs)

    def __init__(self, *, env: Mapping[str, str] | None = None, workspace: str = "",
                 state_dir: str = "", max_pids: int | None = 200,
                 cpu_percent: int | None = None, memory_default_mb: int | None = None,
                 min_abi: int = DEFAULT_MIN_ABI,
                 ledger: str | None = None, workspace_root: str = "",
                 abi: Callable[[], int] | None = None, warm_sandboxes: int = 0,
                 warm_idle_seconds: float = 300.0, warm_watch: tuple[str, ...] = ()) -> None:
        """`ledger` and `workspace_root`: stockade's own files, kept out of the
        host read scope with its state directory; `abi` replaces the kernel's
        answer (tests); `memory_default_mb`: the tree's bound when the profile sets
        none (see `memory_in_force`)."""
        self._env = dict(env) if env is not None else dict(os.environ)
        self._workspace = workspace
        self._state_dir = os.path.realpath(state_dir or state_dir_of(self._env))
        self._max_pids = max_pids
        self._cpu_percent = cpu_percent
        self._memory_default = memory_default_mb
        self._min_abi = min_abi
        self._private = private_paths(self._env, state=self._state_dir, ledger=ledger,
                                      workspace_root=workspace_root)
        self._abi = abi
        self._start_parking(warm_sandboxes, warm_idle_seconds, warm_watch)

    @property
    def abi(self) -> int:
        if self._abi is not None:
            return self._abi()
        from .layers import host_landlock_abi

        return host_landlock_abi(self._state_dir)

    def available(self) -> None:
        check_landlock(self.abi, self._min_abi)
        prime_migration()

    def explain_denial(self, stderr: bytes) -> str | None:
        return explain_no_namespace(stderr)

    def _prepare(self, argv: list[str], profile: Profile, *, park_fd: int | None = None,
                 guard: bool | MetadataGuard = True) -> Launch:
        """The cold launch (see `ParkingDriver._prepare`)."""
        from .layers import init_argv, init_config, init_python, launch_env

        if profile.publish:
            from ...publish import LANDLOCK

            raise SandboxUnavailable(LANDLOCK)
        undo = _Undo()
        if not isinstance(guard, bool):
            undo.guard = guard  # released with the launch, or below if it cannot be built
        try:
            abi = self.abi
            check_landlock(abi, self._min_abi)
            check_profile(profile, abi)
            python = init_python()
            reaper = abi >= SCOPE_ABI
            tmpdir, made = self._tmpdir(profile)
            undo.tmpdir = made
            backend_rules = landlock_backend_rules(
                profile, tmpdir=tmpdir, private=self._private,
                python_prefix=python)
            rules = backend_rules.rules
            env = command_env(profile, tmpdir)
            mode = SECCOMP_MODES["landlock"][profile.network.kind]
            # No namespace of the command's own, but a session's may hold its
            # /tmp: there TMPDIR is the session's tmpfs, bounded as a whole.
            session, tmp_how = self._session_namespaces.of(profile)
            nsenter, undo.owned = session.enter([]) if session is not None else ([], [])
            userns = session.user_namespace if session is not None else 0
            nproc = nproc_limit(self._max_pids, own_user_namespace=False,
                                joined_user_namespace=userns)
            undo.cgroup = self._cgroup(profile)
            scope = isinstance(undo.cgroup, ScopeCgroup)
            extra_fds: dict[int, int] = {}
            if reaper:
                # The reaper holds the write end; its end-of-file says every
                # process the command left has been killed.
                undo.reaper_r, undo.reaper_w = os.pipe2(os.O_CLOEXEC)
                extra_fds[undo.reaper_w] = undo.reaper_w
            if guard is True:
                undo.guard = self._guard(profile)
            # nsenter's own failure exits 1 with "nsenter: ..." on stderr, as a
            # command may: the init says it started, which tells them apart.
            undo.ready_r, ready_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
            undo.owned.append(ready_w)
            extra_fds[ready_w] = ready_w
            # No namespace to bridge into (bridge=False): the proxy is on loopback.
            config = init_config(profile, env=env, require_landlock=True, nproc=nproc,
                                 park_fd=park_fd, ready_fd=ready_w,
                                 rules=(rules, backend_rules.listed), seccomp=mode,
                                 bridge=False, cwd=profile.cwd,
                                 parent="scope" if scope else os.getpid(), drop_caps=True,
                                 reaper=reaper,
                                 reaper_fd=undo.reaper_w if reaper else None)
            _ensure_bytecode()
            args = [*nsenter, *init_argv(python, _init_path(), config, argv)]
        except BaseException:
            undo.run(None)
            raise
        report = rules.plan(abi)
        audit: dict[str, object] = {"landlock_abi": report.abi, "seccomp": mode,
                                    "reaper": reaper}
        if tmp_how:
            audit["session_tmp"] = tmp_how
        if undo.guard is not None and undo.guard.unwatched:
            audit["guard_watch"] = undo.guard.unwatched
        if report.dropped:
            audit["landlock_dropped"] = list(report.dropped)
        if undo.cgroup is not None:
            args = undo.cgroup.enter_argv(args, env)
        launch = Launch(args, launch_env(env), profile.cwd, extra_fds=extra_fds,
                        cleanup=undo.run)
        audit["memory_mb"], audit["memory_from"] = memory_in_force(
            profile.max_memory_mb, self._memory_default, mechanism()[0])
        launch.report.audit.update(audit, limits=undo.cgroup.kind if undo.cgroup is not None
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
            made = owned_dir(base, "cmd-")
        except OSError as exc:
            raise SandboxUnavailable(
                f"cannot create the command's temporary directory in {base}: {exc.strerror}"
            ) from exc
        return made, made

    def _cgroup(self, profile: Profile) -> ExecCgroup | None:
        memory_mb, _ = memory_in_force(profile.max_memory_mb, self._memory_default,
                                       mechanism()[0])
        return exec_cgroup(memory_mb, self._max_pids, self._cpu_percent,
                           prefix="stockade-ll", report_dir=self._state_dir)


#: How long cleanup waits for the reaper before going on without it.
REAPER_WAIT = 5.0


class _Undo:
    """What one launch leaves to undo, in the order it must happen.

    First the reaper must be done (every process the command left is dead),
    then the cgroup is read and emptied (its rmdir comes later), then
    protected names are restored -- nothing can change them any more -- and
    the TMPDIR goes.
    """

    def __init__(self) -> None:
        self.reaper_r = self.reaper_w = -1
        self.cgroup: ExecCgroup | None = None
        self.guard: MetadataGuard | None = None
        self.tmpdir = ""
        #: Descriptors to close after the run: the session namespace's, and the
        #: write end of the init's ready pipe, whose read end `ready_r` is read.
        self.owned: list[int] = []
        self.ready_r = -1

    def run(self, launch: Launch | None) -> None:
        try:
            if launch is not None and self.ready_r >= 0:
                from .layers import init_started

                launch.report.sandbox_started = init_started(self.ready_r)
            if self.reaper_w >= 0:
                os.close(self.reaper_w)
                self.reaper_w = -1
                if launch is not None:
                    _wait_eof(self.reaper_r, REAPER_WAIT)
            if self.cgroup is not None:
                if launch is not None:
                    read_limits(self.cgroup, launch.report)
                self.cgroup.dispose()
            if self.guard is not None:
                done = self.guard.release()
                if launch is not None:
                    launch.report.neutralised += done
        finally:
            if self.reaper_r >= 0:
                os.close(self.reaper_r)
                self.reaper_r = -1
            for fd in (*self.owned, self.ready_r):
                if fd >= 0:
                    os.close(fd)
            self.owned, self.ready_r = [], -1
            remove_owned(self.tmpdir)
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


#: What tools print when ptrace, or a loopback listener, was refused (gdb,
#: strace, LeakSanitizer; node, Python, curl's server side).
_PTRACE_WORDS = (b"under ptrace", b"ptrace: Operation not permitted", b"PTRACE_TRACEME",
                 b"ptrace(PTRACE_", b"PTRACE_ATTACH", b"PTRACE_SEIZE")
_LISTEN_WORDS = (b"listen EPERM", b"listen EACCES", b"bind EPERM", b"bind EACCES",
                 b"Operation not permitted", b"Permission denied")
_SOCKET_WORDS = (b"listen", b"bind", b"createServer", b"socket", b"connect", b"Connection")


def explain_no_namespace(stderr: bytes) -> str | None:
    """This backend's words for what it refuses because it has no namespace (pure).

    Under bubblewrap a command has a PID and a network namespace of its own,
    so it may trace its own processes and run a server on its own loopback.
    Here it has neither: its 127.0.0.1 is the host's, and ptrace would reach
    every process of the user that Landlock's ptrace rule does not close.
    """
    tail = stderr[-4096:]
    if any(word in tail for word in _PTRACE_WORDS):
        return ("blocked by the sandbox: the Landlock backend refuses ptrace (gdb, strace, "
                "LeakSanitizer's leak check): with no PID namespace of its own, a traced "
                "process could be any of your user's. Use the bubblewrap backend, where a "
                "command may trace its own processes (or ASAN_OPTIONS=detect_leaks=0)")
    if any(word in tail for word in _LISTEN_WORDS[:4]) or (
            any(word in tail for word in _LISTEN_WORDS[4:])
            and any(word in tail for word in _SOCKET_WORDS)):
        return ("blocked by the sandbox: the Landlock backend has no network namespace, so "
                "127.0.0.1 there is the host's loopback: a command may not listen on it, and "
                "with network none may open no IP socket at all (request a host with "
                "--allow-host HOST:PORT). For a server and its client on loopback, use the "
                "bubblewrap backend, whose commands have a loopback of their own")
    return None


def check_landlock(abi: int, min_abi: int) -> None:
    """Raise unless this is Linux with Landlock at `min_abi` or newer and a seccomp table."""
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailable("the landlock backend needs Linux")
    if abi < 1:
        from .init.landlock import ENOSYS

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

