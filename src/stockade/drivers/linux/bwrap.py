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
from ...paths import state_dir as state_dir_of
from ...profile import DIR, FILE, HOLD, LINK, PIN, STRICT
from ..base import Launch
from .host.bwrap_binary import (
    bwrap_has_size,
    locate_bwrap,
    probe_userns,
    userns_diagnosis,
)
from .host.limits import (
    ExecCgroup,
    exec_cgroup,
    mechanism,
    memory_in_force,
    nproc_limit,
    prime_migration,
    read_limits,
)
from .host.options import BUBBLEWRAP_OPTIONS
from .parking import ParkingDriver

SYS_READ_PATHS = ("/sys/devices/system/cpu", "/sys/devices/system/node", "/sys/fs/cgroup",
                  "/sys/kernel/mm/transparent_hugepage")


TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from ...profile import Profile
    from .host.gitconfig import PrivateConfigs
    from .host.guard import MetadataGuard
    from .host.publish import PortForward
    from .layers import InitLaunch

# The only directories inside /dev a command gets: bwrap's --dev provides
# null, zero, full, random, urandom, tty, pts/ptmx and shm, and no disk.


def build_bwrap_args(profile: Profile, bwrap: str, *, inner: list[str] | None = None,
                     extra_mounts: list[str] | tuple[str, ...] = (),
                     tmp_size_mb: int | None = None, overlay: bool = False,
                     unmasked: tuple[str, ...] = (), shared_net: bool = False,
                     copies: Mapping[str, str] | None = None) -> list[str]:
    """bwrap's command line for `profile`, ending in `-- inner` (pure).

    `extra_mounts` are bwrap mount arguments applied after the profile's own
    (the init's read-only view of itself and its interpreter); `tmp_size_mb`
    caps a fresh /tmp and `overlay` lays the caches' private layers over
    them (bwrap 0.10 and newer understand `--size` and `--overlay`).
    `unmasked`: hidden directories the init's Landlock layer alone hides
    (`landlock_areas`), which get no mount here. `copies`: protected files
    bound writable from a private copy instead (path -> copy, gitconfig.py).
    `shared_net`: the launch joins its session's network namespace (only `lo`,
    sessionns.py) instead of bwrap making one.
    """
    a: list[str] = [bwrap]
    # A user namespace even for root: without it root's capabilities would be
    # real ones, and a read-only bind could simply be remounted read-write.
    a += ["--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc",
          "--unshare-uts", "--unshare-cgroup-try"]
    if profile.network.kind != NetworkPolicy.ALL and not shared_net:
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
    #    /dev is a tmpfs too (bwrap's --size cannot bound --dev) and writing
    #    there fills RAM: it is made read-only at the very end, after the
    #    proxy's socket is bound in, and /dev/shm gets a tmpfs of /tmp's size.
    #    Every bwrap stockade accepts (--disable-userns: 0.8) knows --size.
    a += ["--dev", "/dev"]
    if profile.tmp_size_mb:
        a += ["--size", str(profile.tmp_size_mb << 20)]
    a += ["--tmpfs", "/dev/shm", "--proc", "/proc", "--tmpfs", "/sys"]
    remount.append("/dev")
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
    # stockade's directory that holds a provisioned workspace goes under an
    #    empty tmpfs first, shallowest first, so that only the workspace bound
    #    next shows inside it -- not the other sessions' workspaces, not one
    #    created while this command runs.
    for path in profile.private_around:
        a += ["--tmpfs", path]
        remount.append(path)
    ws = profile.workspace
    a += ["--bind" if profile.workspace_writable else "--ro-bind", ws, ws]

    # 5. Writable roots outside the workspace (fs_write, writable), then the
    #    toolchain caches the host's own builds read without checking: a
    #    private layer over each, so a build reuses them and changes none.
    #    Without overlays (bwrap before 0.10) the layer starts empty.
    for root in profile.write_roots:
        a += ["--bind-try", root, root]
    masked = [p for p, kind in profile.hidden if kind == DIR and p not in unmasked]
    for cache, private, _var in profile.caches:
        if not any(is_under(cache, d) for d in masked):  # else after the mask, in 7
            a += _cache_layer(cache, private, overlay)

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
        if copies and item.path in copies:
            a += ["--bind", copies[item.path], item.path]
        elif item.kind in (DIR, FILE):
            a += ["--ro-bind", item.path, item.path]

    # 7. Hidden credentials and runtime sockets, over anything writable and over
    #    the protected mounts: a read-only bind of ~/.ssh (a workspace of ~)
    #    would otherwise bring back the private keys masked inside it.
    #    A hidden directory's shown paths (what toolchains read in ~/.config,
    #    a grant inside ~/.aws) and caches come back inside its empty tmpfs
    #    before it turns read-only; a store the host makes there meanwhile
    #    lands in the real directory, which nothing shows.
    for path, kind in profile.hidden:
        if kind != DIR:
            a += ["--ro-bind", "/dev/null", path]
            continue
        if path in unmasked:
            continue
        a += ["--tmpfs", path]
        for back, back_kind in profile.shown:
            if is_under(back, path) and back != path:
                a += _show(back, back_kind)
        for cache, private, _var in profile.caches:
            if is_under(cache, path):
                a += _cache_layer(cache, private, overlay)
        for sock in profile.granted_sockets:
            if is_under(sock, path):
                a += ["--bind", sock, sock]
        a += ["--remount-ro", path]
    for sock in profile.sockets:
        # connect() to a character device fails with ECONNREFUSED. One inside a
        # mask is hidden with it, and its mount point could not be made there
        # (Docker Desktop's ~/.docker/run/docker.sock stopped every command).
        if not any(is_under(sock, d) for d in masked):
            a += ["--ro-bind", "/dev/null", sock]

    # 8. Granted sockets come back last, through whatever hid their directory.
    for sock in profile.granted_sockets:
        if not any(is_under(sock, d) for d in masked):
            a += ["--bind", sock, sock]

    a += [*extra_mounts]
    for path in remount:
        a += ["--remount-ro", path]
    a += ["--chdir", profile.cwd, "--"]
    a += inner if inner is not None else []
    return a


def mounted_over_writable(profile: Profile) -> list[tuple[str, bool]]:
    """Each path under a writable root that bwrap mounts over, and whether the mount
    shows the host's own object there (a read-only or pinning bind) rather than a
    cover (a mask, a private copy); the last mount at a path is the one seen.

    bwrap mounts by name: a name a parallel writer swapped before the mount and
    back after it leaves the mount on the other object and the path open
    inside. A parked sandbox is served only once its init has found every one
    of these mounted, on the object the host has there now.
    """
    from ..writers import writable_roots
    from .host.gitconfig import private_paths

    roots = writable_roots(profile)
    copies = set(private_paths(profile))
    own: dict[str, bool] = {}
    for item in profile.protected:
        if item.kind in (PIN, HOLD, DIR, FILE):
            own[item.path] = item.path not in copies
    for path, _kind in profile.hidden:  # (no `landlock_areas` is under a writable root)
        own[path] = False
    for sock in profile.sockets:
        own[sock] = False
    for sock in profile.granted_sockets:
        own[sock] = True
    # Mounted before the masks, or not at all: beneath one they are not seen.
    # (A granted socket is bound again inside it: checked.)
    masks = [path for path, kind in profile.hidden if kind == DIR]
    hidden_below = {p.path for p in profile.protected} | set(profile.sockets)
    return [(path, same) for path, same in own.items()
            if any(is_under(path, root) for root in roots)
            and not (path in hidden_below and any(is_under(path, d) and path != d
                                                  for d in masks))]


def landlock_areas(profile: Profile) -> tuple[str, ...]:
    """The hidden directories with something shown back inside (`~/.config`,
    `~/.cache`), which the init's Landlock layer can hide alone.

    bwrap pays for each mount by rereading every mount made so far: an
    empty tmpfs per area and a bind per path shown back cost a command 8 ms
    on a developer's home (bench/hidden.py), where Landlock's rules, which
    the init builds anyway, hide the same and cost nothing more.
    """
    inside = [p for p, _k in profile.shown] + [c for c, _l, _v in profile.caches]
    # Not under a writable root: Landlock's write rule there reads everything
    # beneath, so only the mount hides an area of a workspace of ~.
    writable = ([profile.workspace] if profile.workspace_writable else []) + list(
        profile.write_roots)
    return tuple(d for d, k in profile.hidden
                 if k == DIR and any(is_under(p, d) and p != d for p in inside)
                 and not any(is_under(d, w) for w in writable))


def _show(path: str, kind: str) -> list[str]:
    """A shown path inside a mask: a link as the link itself, never through
    its target (which is shown, or not, where it lives)."""
    if kind != LINK:
        return ["--ro-bind-try", path, path]
    try:
        return ["--symlink", os.readlink(path), path]
    except OSError:
        return []


def _cache_layer(cache: str, private: str, overlay: bool) -> list[str]:
    if overlay:
        return ["--overlay-src", cache, "--overlay", os.path.join(private, "upper"),
                os.path.join(private, "work"), cache]
    return ["--bind", os.path.join(private, "upper"), cache]


def publish_forward(profile: Profile) -> PortForward:
    """The host's listeners for `profile.publish`, bound now: a port in use is
    refused before the sandbox starts (SandboxUnavailable, exit 125)."""
    from ...publish import NETWORK_ALL
    from .host.publish import PortForward

    if profile.network.kind == NetworkPolicy.ALL:
        raise SandboxUnavailable(NETWORK_ALL)
    return PortForward(profile.publish)


class BubblewrapDriver(ParkingDriver):
    """bwrap with a user, pid, ipc, uts, cgroup and (unless granted) network namespace."""

    name = "bubblewrap"
    options = BUBBLEWRAP_OPTIONS
    # Existing protected names are read-only mounts; the guard neutralises
    # what the command creates where one was missing.
    RESTORE_CONTENT = False
    _mounted_view = staticmethod(mounted_over_writable)

    @classmethod
    def from_config(cls, config: Any, *, env: Mapping[str, str], workspace: str,
                    state_dir: str, **overrides: Any) -> BubblewrapDriver:
        from ...config import config_paths
        from ..base import accepted

        kwargs: dict[str, Any] = {
            "env": env, "workspace": workspace, "state_dir": state_dir,
            "bwrap_path": config.bwrap, "max_pids": config.max_pids,
            "cpu_percent": config.cpu_quota_percent,
            "memory_default_mb": config.memory_default_mb(),
            # A kernel without Landlock is reported, not fatal, while bwrap
            # stands -- unless the user said it must hold.
            "require_landlock": bool(config.require_landlock),
            "warm_sandboxes": config.warm_sandboxes,
            "warm_idle_seconds": config.warm_idle_seconds,
            # The user's config file; the project's is watched per workspace.
            "warm_watch": tuple(config_paths(env, "/")[:1]),}
        kwargs.update(accepted(cls, overrides))
        return cls(**kwargs)

    def __init__(self, *, env: Mapping[str, str] | None = None, workspace: str = "",
                 bwrap_path: str = "", state_dir: str = "", probe: bool = True,
                 max_pids: int | None = 200, cpu_percent: int | None = None,
                 memory_default_mb: int | None = None,
                 require_landlock: bool = False, warm_sandboxes: int = 0,
                 warm_idle_seconds: float = 300.0, warm_watch: tuple[str, ...] = ()) -> None:
        self._require_landlock = require_landlock
        self._max_pids = max_pids
        self._cpu_percent = cpu_percent
        self._memory_default = memory_default_mb
        self._env = dict(env) if env is not None else dict(os.environ)
        self._workspace = workspace
        self._configured = bwrap_path
        self._state_dir = state_dir or state_dir_of(self._env)
        self._bwrap: str | None = None
        # The probe costs one extra sandbox; a one-shot CLI skips it and
        # reads bwrap's own refusal after a failed start instead (see
        # `explain_failure`).
        self._probe = probe
        self._start_parking(warm_sandboxes, warm_idle_seconds, warm_watch)

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

    def _prepare(self, argv: list[str], profile: Profile, *, park_fd: int | None = None,
                 guard: bool | MetadataGuard = True) -> Launch:
        """The cold launch (see `ParkingDriver._prepare`)."""
        from .host.gitconfig import PrivateConfigs, private_paths
        from .layers import init_started

        profile, meta = self._baseline(profile, guard)
        configs = private_paths(profile)
        private = PrivateConfigs(configs, self._state_dir) if configs else None
        if private is not None and meta is not None:
            meta.adopt(private)
        # The child gets the read end under the same number (see
        # Launch.extra_fds); the write end is stockade's alone.
        lifeline = os.pipe2(os.O_CLOEXEC)
        ready = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        ns_fds: list[int] = []
        forward = None
        try:
            if profile.publish:
                forward = publish_forward(profile)
            built = self._command_line(argv, profile, configs, private, lifeline[0], ready[1],
                                       park_fd, forward)
            ns_fds = built.ns_fds
            cgroup = self._cgroup(profile)
        except BaseException:
            if meta is not None:
                meta.release()
            if private is not None:
                private.close()
            for fd in (*lifeline, *ready, *ns_fds):
                os.close(fd)
            if forward is not None:
                forward.close()
            raise
        audit = self._audit(profile, built, meta)
        if forward is not None:
            from ...publish import describe

            audit["publish"] = [describe(item) for item in profile.publish]
            forward.start()

        def release(launch: Launch) -> None:
            if forward is not None:
                forward.close()  # the command has ended: so does every forward
            launch.report.sandbox_started = init_started(ready[0])
            for fd in (*lifeline, *ready, *ns_fds):
                os.close(fd)
            try:
                if meta is not None:
                    launch.report.neutralised += meta.release()
            finally:
                if private is not None and private.owner is None:
                    private.close()  # else its guard's, which merges it first

        fds = {lifeline[0]: lifeline[0], ready[1]: ready[1]}
        if forward is not None:
            fds[forward.child_fd] = forward.child_fd
        launch = _limited(built.args, built.init.env, profile.cwd, fds, cgroup, release, audit)
        launch.private = private
        return launch

    def _baseline(self, profile: Profile, guard: bool | MetadataGuard
                  ) -> tuple[Profile, MetadataGuard | None]:
        """The profile to build from, and the guard the launch owns (see `_prepare`)."""
        from .host.placeholders import hold_git_names

        profile = hold_git_names(profile)
        meta = guard if not isinstance(guard, bool) else self._guard(profile) if guard else None
        if meta is not None and meta.stale:
            # The sweep of a killed run's leftovers just moved away names the
            # profile found existing: bwrap would fail to find their sources.
            profile = profile.replace(protected=tuple(
                p for p in profile.protected
                if p.kind not in (DIR, FILE, PIN, HOLD) or os.path.lexists(p.path)))
        return profile, meta

    def _command_line(self, argv: list[str], profile: Profile, configs: Any,
                      private: PrivateConfigs | None, lifeline_fd: int, ready_fd: int,
                      park_fd: int | None, forward: PortForward | None) -> _Built:
        """bwrap's argv around the init's, entered into the session's namespaces.

        Its `ns_fds` are the caller's to close from the moment it returns.
        """
        from .layers import host_landlock_abi, init_launch

        # Behind bwrap's namespaces, the init adds no_new_privs, Landlock
        # and seccomp before it execs the command: a hole in one wall is
        # not an escape.
        # Where the kernel has Landlock, the tools' areas are its to hide (see
        # `landlock_areas`), and a sandbox where it then fails must not start.
        areas = landlock_areas(profile) if host_landlock_abi(self._state_dir) else ()
        init = init_launch(profile, list(argv),
                           require_landlock=self._require_landlock or bool(areas),
                           nproc=nproc_limit(self._max_pids, own_user_namespace=True),
                           lifeline_fd=lifeline_fd, ready_fd=ready_fd,
                           park_fd=park_fd,
                           publish=(forward.child_fd, forward.sandbox_ports)
                           if forward is not None else None,
                           private=configs)
        newer = bwrap_has_size(self.bwrap, self._state_dir)  # --size and --overlay: 0.10
        session, tmp_how = self._session_namespaces.of(profile)
        # Network none only: with hosts each command's proxy bridge listens
        # on its loopback, which a shared one would hand to the others.
        shared_net = session is not None and profile.network.kind == NetworkPolicy.NONE
        args = build_bwrap_args(profile, self.bwrap, inner=init.argv,
                                extra_mounts=init.mounts, overlay=newer,
                                tmp_size_mb=profile.tmp_size_mb if newer else None,
                                unmasked=areas, shared_net=shared_net,
                                copies=private.copies if private is not None else None)
        ns_fds: list[int] = []
        if session is not None:
            args, ns_fds = session.enter(args, net=shared_net)
        return _Built(init, args, ns_fds, tmp_how, shared_net)

    def _audit(self, profile: Profile, built: _Built, meta: MetadataGuard | None
               ) -> dict[str, object]:
        from .layers import host_landlock_abi

        landlock = built.init.landlock_report(host_landlock_abi(self._state_dir))
        # ptrace of the command's own processes: where Landlock holds (see
        # seccomp.TRACE_SYSCALLS), as the init decides on the same kernel.
        audit: dict[str, object] = {"landlock_abi": landlock.abi,
                                    "seccomp": built.init.config["seccomp"],
                                    "ptrace": "own-processes" if landlock.abi else "refused"}
        if built.tmp_how:
            audit["session_tmp"] = built.tmp_how
        if profile.network.kind != NetworkPolicy.ALL:
            audit["loopback"] = "the session's" if built.shared_net else "the command's own"
        if meta is not None and meta.unwatched:
            audit["guard_watch"] = meta.unwatched
        if landlock.dropped:
            audit["landlock_dropped"] = list(landlock.dropped)
        audit["memory_mb"], audit["memory_from"] = memory_in_force(
            profile.max_memory_mb, self._memory_default, mechanism()[0])
        return audit

    def explain_failure(self, returncode: int, stderr: bytes) -> str | None:
        """bwrap's own setup errors are the sandbox failing, not the command.

        bwrap exits 1 with "bwrap: ..." first on stderr when it cannot build
        the namespaces; an agent reading that as its command's exit 1 would
        retry forever what this machine cannot do.
        """
        entering = super().explain_failure(returncode, stderr)
        if entering is not None:
            return entering
        if returncode != 1 or not stderr.startswith(b"bwrap: "):
            return None
        why = userns_diagnosis(stderr.decode("utf-8", "replace"))
        if not why.startswith("bwrap could not"):
            why = "bubblewrap could not create a user namespace: " + why
        return why

    @property
    def state_dir(self) -> str:
        return self._state_dir

    def probe(self) -> None:
        """The probe `auto` selection runs, cached per boot in the state directory."""
        probe_userns(self.bwrap, cache_dir=self._state_dir)

    def auto_choice(self, min_abi: int) -> str:
        """bubblewrap if its probe passes, else Landlock at `min_abi` or newer
        (see `choose_linux_backend`)."""
        from .. import choose_linux_backend
        from .layers import host_landlock_abi

        cache = self.state_dir
        return choose_linux_backend(self.probe, lambda: host_landlock_abi(cache), min_abi)

    def _cgroup(self, profile: Profile) -> ExecCgroup | None:
        memory_mb, _ = memory_in_force(profile.max_memory_mb, self._memory_default,
                                       mechanism()[0])
        return exec_cgroup(memory_mb, self._max_pids, self._cpu_percent,
                           prefix="stockade", report_dir=self._state_dir)


class _Built:
    """What `_command_line` made: the init, bwrap's argv, and the namespaces' descriptors."""

    __slots__ = ("args", "init", "ns_fds", "shared_net", "tmp_how")

    def __init__(self, init: InitLaunch, args: list[str], ns_fds: list[int], tmp_how: str,
                 shared_net: bool) -> None:
        self.init = init
        self.args = args
        self.ns_fds = ns_fds
        self.tmp_how = tmp_how
        self.shared_net = shared_net


def _limited(args: list[str], env: dict[str, str], cwd: str, fds: dict[int, int],
             cgroup: ExecCgroup | None, release: Callable[[Launch], None],
             audit: dict[str, object]) -> Launch:
    """The launch, inside `cgroup` when there is one, which its cleanup reads and disposes."""
    if cgroup is None:
        launch = Launch(args, env, cwd, extra_fds=fds, cleanup=release)
        launch.report.audit.update(audit, limits=mechanism()[0])
        return launch

    def cleanup(launch: Launch) -> None:
        try:
            read_limits(cgroup, launch.report)
            cgroup.dispose()
        finally:
            release(launch)

    launch = Launch(cgroup.enter_argv(args, env), env, cwd, extra_fds=fds, cleanup=cleanup)
    launch.report.audit.update(audit, limits=cgroup.kind)
    return launch
