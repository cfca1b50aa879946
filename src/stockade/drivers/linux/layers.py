"""The host side of stockade-init: what it is told, how it is started, what it will report.

`init_config` and `init_argv` are pure functions of a `Profile`; the init
itself (init/init.py, init/initcore.py) runs inside bwrap and never imports this.
"""

from __future__ import annotations

import os
import sys

from ...capabilities import NetworkPolicy
from ...jsontext import to_json
from ...profile import SYSTEM_READ_PATHS
from .init.initschema import ARGV_INLINE, ARGV_PIECE, CONFIG_VERSION, PACKED_ARGV, config_problem
from .init.landlock import LandlockReport, LandlockRules, landlock_abi
from .init.seccomp import SECCOMP_MODES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ...profile import Profile
    from .init.initschema import InitConfig

#: The init and only the init (init/): the one directory of stockade the sandbox is shown.
INIT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "init")
INIT_PATH = os.path.join(INIT_DIR, "init.py")
#: Where INIT_DIR appears inside bubblewrap's sandbox, and the init there.
#: Not at its host path: bwrap makes a mount point's missing parents in
#: whatever holds them, and for a checkout under /tmp that is the sandbox's
#: /tmp -- the session's, which lives on after the command (on the host, or
#: in the session's tmpfs) -- so every command left a skeleton of the
#: checkout's path there. /dev is bwrap's own tmpfs, made read-only after
#: the init's mounts and gone with the sandbox; the proxy's socket is there too.
INIT_MOUNT = "/dev/stockade-init"
INNER_INIT_PATH = INIT_MOUNT + "/init.py"
#: Where the init's interpreter appears when its own path would put a mount
#: point in the sandbox's /tmp (an interpreter installed under /tmp).
PYTHON_MOUNT = "/dev/stockade-python"
#: What the init imports from INIT_DIR, all before the first layer is in place.
INIT_MODULES = ("initcore", "initschema", "landlock", "seccomp", "bridge", "renames")

#: Where the session's proxy socket appears inside the sandbox, and the
#: loopback ports the bridge listens on there (HTTP and SOCKS5; the proxy
#: tells the protocols apart itself).
BRIDGE_SOCKET = "/dev/stockade-proxy.sock"
BRIDGE_PORTS = (3128, 1080)


# /dev/null, /dev/urandom and the pty devices are opened by nearly every
# program; /proc by ps, by every runtime that sizes its thread pool, and by
# the init's own checks; /tmp is the sandbox's private scratch.
ALWAYS_READ = ("/dev", "/proc", "/tmp")
# /dev is writable for /dev/null, /dev/tty and the POSIX shared memory
# in /dev/shm that Python's multiprocessing needs; bwrap's --dev holds no disk.
ALWAYS_WRITE = ("/tmp", "/dev")

# Variables that make the dynamic loader or glibc load code. The command may
# keep them (the caller passed them on purpose), but bwrap runs outside the
# sandbox and the init before any layer: an LD_LIBRARY_PATH pointing into
# the workspace would let a library planted by an earlier command run there.
# So they travel as config, and the init sets them for the command alone.
_LOADER_PREFIX = "LD_"
_LOADER_NAMES = ("GCONV_PATH",)


def _is_loader_var(name: str) -> bool:
    return name.startswith(_LOADER_PREFIX) or name in _LOADER_NAMES


def env_changes(env: Mapping[str, str]) -> dict[str, str | None]:
    """What the init sets (a string) or unsets (None) just before exec.

    LC_CTYPE is always listed: Python's locale coercion (PEP 538) writes
    LC_CTYPE=C.UTF-8 into its own environment when the locale is C, even
    under -I, and the command would inherit it -- changing `sort` order
    and what `ls` prints.
    """
    changes: dict[str, str | None] = {k: v for k, v in sorted(env.items()) if _is_loader_var(k)}
    changes["LC_CTYPE"] = env.get("LC_CTYPE")
    return changes


def launch_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment bwrap and the init start with: the command's, minus loader variables."""
    return {k: v for k, v in env.items() if not _is_loader_var(k)}


def landlock_rules(profile: Profile) -> tuple[LandlockRules, list[str]]:
    """(rules, listed): read+execute on what the profile shows minus what it
    hides (`inner_reads`), everything on what it lets the command write, and
    the directories split on the way, which may be listed but not read.
    """
    from .host.landlock_rules import inner_reads

    # The init's interpreter and modules, which it imports from after Landlock,
    # where bubblewrap shows them (the Landlock backend plans its own rules).
    python = init_python()
    parts = [_inner(part, python) for part in interpreter_parts(python)]
    reads, listed = inner_reads(profile, extra=(*parts, INIT_MOUNT))
    read = [*reads, *ALWAYS_READ]
    write = [profile.workspace] if profile.workspace_writable else []
    write += [*profile.write_roots, *ALWAYS_WRITE]
    # The caches as bwrap shows them: the session's private layer, mounted there.
    write += [cache for cache, _layer, _var in profile.caches]
    if profile.runtime_dir:
        # bwrap puts an empty private tmpfs there; tools that keep sockets
        # and locks in XDG_RUNTIME_DIR would fail on it for no gain.
        write.append(profile.runtime_dir)
    # TCP is left alone in every mode. Under "none" and "hosts" the command's
    # network namespace has only `lo`, which the init checks before exec
    # (config key "namespaces"), so a port rule could only refuse the
    # command its own loopback: a test suite's server and its client, a dev
    # server and the tests run against it. Landlock's TCP rules have no
    # address, so they cannot tell that loopback from a route out, and
    # there is none to tell it from. (They once held "none" to no port and
    # "hosts" to the bridge's; the Landlock backend, with no namespace,
    # still does: landlock_rules.py.)
    return LandlockRules(read, write, restrict_tcp=False), listed


def init_config(profile: Profile, *, proxy_ports: Sequence[int] = (),
                keep_fds: Sequence[int] = (), require_landlock: bool = False,
                env: Mapping[str, str] | None = None,
                nproc: int | None = None, lifeline_fd: int | None = None,
                ready_fd: int | None = None, park_fd: int | None = None,
                namespaces: Sequence[str] = (),
                publish: tuple[int, Sequence[int]] | None = None,
                private: Sequence[str] = (),
                rules: tuple[LandlockRules, Sequence[str]] | None = None,
                seccomp: str | None = None, bridge: bool = True,
                cwd: str | None = None, parent: int | str | None = None,
                drop_caps: bool = False, reaper: bool | None = None,
                reaper_fd: int | None = None) -> InitConfig:
    """The init's config for `profile` (pure), for bubblewrap's sandbox unless told otherwise.

    `proxy_ports`: loopback ports of the proxy bridge (network "hosts").
    `keep_fds`: descriptors stockade passes to the command on purpose.
    `env`: the command's environment, `profile.env` when not given.
    `nproc`: RLIMIT_NPROC, where no cgroup bounds the process count.
    `lifeline_fd`: the read end of a pipe whose write end only stockade holds.
    `ready_fd`: where the init says it started, so the sandbox came up.
    `park_fd`: a socket the init waits on for the argv, every layer applied (warm.py).
    `namespaces`: what bubblewrap gave the command of its own, which the init
    checks and builds on (`own_namespaces`); empty for the Landlock backend.
    `publish`: (descriptor, sandbox ports) for the relay of published ports
    (drivers/linux/host/publish.py), forked before the command's layers.
    `private`: files bound from private copies, which renames onto are done
    in place (init/renames.py).

    The Landlock backend, with no bubblewrap around the init, passes the rest:
    `rules` (its own rules and listed directories), `seccomp` (its network
    mode), `bridge=False` (the proxy is on loopback), `cwd` (no --chdir),
    `parent` (stockade's pid, or "scope"), `drop_caps`, `reaper`, `reaper_fd`.
    """
    kind = profile.network.kind
    if seccomp is None:
        if kind not in SECCOMP_MODES["bubblewrap"]:
            raise ValueError(f"no seccomp socket gate for network policy {kind!r}")
        seccomp = SECCOMP_MODES["bubblewrap"][kind]
    ruleset, listed = rules if rules is not None else landlock_rules(profile)
    config: InitConfig = {
        "v": CONFIG_VERSION,
        "seccomp": seccomp,
        "landlock": ruleset.to_json(),
        "landlock_list": list(listed),
        "require_landlock": require_landlock,
        "keep_fds": sorted(set(keep_fds)),
        "env": env_changes(profile.env if env is None else env),
    }
    if kind == NetworkPolicy.HOSTS and bridge:
        config["bridge"] = {"unix": BRIDGE_SOCKET, "ports": list(proxy_ports)}
    if namespaces:
        config["namespaces"] = sorted(set(namespaces))
    if not profile.spawn_subprocess:
        config["no_spawn"] = True
    if lifeline_fd is not None:
        config["lifeline_fd"] = lifeline_fd
    if ready_fd is not None:
        config["ready_fd"] = ready_fd
    if park_fd is not None:
        config["park_fd"] = park_fd
    if publish is not None:
        config["publish"] = {"fd": publish[0], "ports": sorted(set(publish[1]))}
    if private:
        config["private_files"] = sorted(set(private))
    if rlimits := _rlimits(profile, nproc):
        config["rlimits"] = rlimits
    if cwd is not None:
        config["cwd"] = cwd
    if parent is not None:
        config["parent"] = parent
    if drop_caps:
        config["drop_caps"] = True
    if reaper is not None:
        config["reaper"] = reaper
    if reaper_fd is not None:
        config["reaper_fd"] = reaper_fd
    return config


def _rlimits(profile: Profile, nproc: int | None) -> dict[str, int]:
    rlimits: dict[str, int] = {}
    if profile.max_memory_mb:
        # The seed's cap on address space, on every platform; the cgroup's
        # memory.max (RSS) catches what a reservation trick slips past it.
        rlimits["as"] = profile.max_memory_mb << 20
    if getattr(profile, "max_file_size_mb", None):
        # One runaway file cannot fill the disk a writable root lives on.
        rlimits["fsize"] = int(profile.max_file_size_mb or 0) << 20
    if nproc:
        rlimits["nproc"] = nproc
    return rlimits


def own_namespaces(profile: Profile) -> tuple[str, ...]:
    """What bubblewrap's sandbox for `profile` has of its own that the init builds on (pure).

    "pid": a PID namespace (always: `--unshare-pid`), in which the command may
    trace its own processes (seccomp's `trace`). "net": a network namespace
    with only `lo` (network none and hosts: `--unshare-net`), in which IP
    sockets reach the command's own loopback and nothing else. The init
    refuses to run when either is not what it was told.
    """
    return ("net", "pid") if profile.network.kind != NetworkPolicy.ALL else ("pid",)


def init_argv(python: str, init_path: str, config: Mapping[str, object],
              argv: Sequence[str]) -> list[str]:
    """The command line that starts the init, to follow bwrap's `--` (pure).

    -I ignores PYTHON* variables and the user's site directory, which the
    command's environment controls; -S skips site-packages, whose .pth files
    run code, and the directory scan that costs milliseconds on every command.
    """
    if not argv:
        raise ValueError("the init needs a command to run")
    problem = config_problem(dict(config))
    if problem:
        raise ValueError(problem)
    text = to_json(config)
    if len(argv) > ARGV_INLINE:
        packed = to_json(list(argv))
        return [python, "-I", "-S", init_path, text, PACKED_ARGV,
                *(packed[i:i + ARGV_PIECE] for i in range(0, len(packed), ARGV_PIECE))]
    return [python, "-I", "-S", init_path, text, "--", *argv]


def init_started(ready_r: int) -> bool:
    """Whether the init said, on the read end of its ready pipe (`ready_fd`), that it
    started: a command's own "bwrap: ..." or "nsenter: ..." cannot say so."""
    try:
        return os.read(ready_r, 1) == b"R"
    except BlockingIOError:
        return False


def init_python() -> str:
    """The interpreter for the init: this one, resolved past venv links (a venv's
    bin/python makes Python look for pyvenv.cfg on every start; the init uses no
    site-packages anyway), or the distribution's build of the same version.

    That build is taken when this one links libpython as a shared library
    (pyenv's, a source build with --enable-shared): such an interpreter
    starts slower by the library's relocations (14 ms against 8.5 here),
    and the init's interpreter starts for every command. Same major and
    minor version, so the init's bytecode cache serves both.
    """
    python = os.path.realpath(sys.executable)
    chosen = _INIT_PYTHONS.get(python)
    if chosen is None:
        chosen = _INIT_PYTHONS[python] = _system_build(python) or python
    return chosen


#: The init's interpreter for stockade's, chosen once per process.
_INIT_PYTHONS: dict[str, str] = {}
#: The C modules of the standard library that the init and the shells' helpers
#: import and a distribution may build as files of their own (a minimal Python
#: package lacks them; seccomp.py calls syscall(2) through `_ctypes`).
_INIT_NEEDS = ("_ctypes.", "resource.", "termios.")


def _system_build(python: str) -> str:
    """/usr/bin/pythonX.Y when `python` is a shared-library build of X.Y and that one
    is a file root owns and no one else may change, with the modules the init
    needs; "" otherwise."""
    import stat

    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    if not os.path.exists(os.path.join(_python_prefix(python), "lib", f"lib{version}.so.1.0")):
        return ""
    candidate = os.path.realpath(os.path.join("/usr/bin", version))
    stdlib = os.path.join("/usr/lib", version)
    try:
        st = os.stat(candidate)
        if not (stat.S_ISREG(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o022):
            return ""
        found = os.listdir(os.path.join(stdlib, "lib-dynload"))
        if not all(any(name.startswith(need) for name in found) for need in _INIT_NEEDS):
            return ""
    except OSError:
        return ""
    # There itself, not a link to another installation whose library is not this one.
    return candidate if os.path.dirname(candidate) == "/usr/bin" else ""


def _python_prefix(python: str) -> str:
    return os.path.dirname(os.path.dirname(python))


def interpreter_parts(python: str) -> list[str]:
    """What of the interpreter's installation the sandbox needs: the executable
    and the prefix's `lib` (its standard library, and libpython for a shared
    build), never the prefix whole.

    The prefix of a `--prefix=$HOME` build, or of a copy in ~/bin, is the
    home: bound whole after the masks, and granted whole to Landlock, it
    showed every store in it.
    """
    prefix = _python_prefix(python)
    return [python, *(os.path.join(prefix, d) for d in ("lib", "lib64")
                      if os.path.isdir(os.path.join(prefix, d)))]


def _inner(path: str, python: str) -> str:
    """`path`, part of `python`'s installation, where bubblewrap's sandbox shows it."""
    prefix = _python_prefix(python)
    return _python_prefix(inner_python(python)) + path[len(prefix):]


def _under_tmp(path: str) -> bool:
    return path == "/tmp" or path.startswith("/tmp/")


def inner_python(python: str) -> str:
    """Where the interpreter `python` is inside bubblewrap's sandbox (pure).

    At its own path, except under /tmp (see `init_mounts`): there its prefix
    is shown at PYTHON_MOUNT, and Python finds its standard library beside
    the executable it was started as.
    """
    prefix = _python_prefix(python)
    if _under_tmp(prefix):
        return PYTHON_MOUNT + python[len(prefix):]
    return python


def init_mounts(python: str) -> list[str]:
    """bwrap arguments that make the init visible and read-only inside the sandbox (pure).

    The strict read scope shows only system paths and the interpreter, not
    an editable checkout of stockade; and when stockade lives under a
    writable root (a developer's own workspace), one command could rewrite
    the init that confines the next. So INIT_DIR is bound read-only, at
    INIT_MOUNT: never at its host path, whose missing parents bwrap would
    make in the sandbox's /tmp when stockade lives under /tmp.

    The interpreter (`interpreter_parts`) comes back too when it sits outside the system paths
    (/root/.pyenv under a masked home), at its own path: an interpreter
    built with --enable-shared finds libpython through an absolute RUNPATH,
    which a prefix moved elsewhere would break. Under /tmp alone it moves to
    PYTHON_MOUNT, for the same reason as the init; one under /tmp that links
    libpython by absolute path cannot start there (run stockade with another).
    """
    args = ["--ro-bind", INIT_DIR, INIT_MOUNT]
    prefix = _python_prefix(python)
    if not any(prefix == p or prefix.startswith(p + "/") for p in SYSTEM_READ_PATHS):
        for part in interpreter_parts(python):
            args += ["--ro-bind", part, _inner(part, python)]
    return args


class InitLaunch:
    """One command's launch through the init: what follows bwrap's `--`, and around it."""

    __slots__ = ("argv", "config", "env", "mounts")

    def __init__(self, argv: list[str], env: dict[str, str], mounts: list[str],
                 config: InitConfig) -> None:
        self.argv = argv  #: after bwrap's `--`: python -I -S init.py CONFIG -- command...
        #: (the interpreter and init.py as the sandbox shows them, see `init_mounts`)
        self.env = env  #: what bwrap starts with: the command's, minus loader variables
        self.mounts = mounts  #: bwrap arguments, before `--chdir`
        self.config = config

    def landlock_report(self, abi: int | None = None) -> LandlockReport:
        return landlock_report(self.config, abi)


def init_launch(profile: Profile, argv: Sequence[str], *, python: str | None = None,
                proxy_ports: Sequence[int] = (), keep_fds: Sequence[int] = (),
                require_landlock: bool = False, nproc: int | None = None,
                lifeline_fd: int | None = None, ready_fd: int | None = None,
                park_fd: int | None = None,
                publish: tuple[int, Sequence[int]] | None = None,
                private: Sequence[str] = ()) -> InitLaunch:
    """Everything the driver needs to run `argv` behind the init."""
    ensure_bytecode()
    python = python or init_python()
    mounts = init_mounts(python)
    env = dict(profile.env)
    if profile.network.kind == NetworkPolicy.HOSTS:
        if profile.proxy is None or not profile.proxy.unix_path:
            from ...errors import SandboxUnavailable

            raise SandboxUnavailable("network hosts needs the managed proxy, which is not running")
        proxy_ports = proxy_ports or BRIDGE_PORTS
        mounts += ["--ro-bind", profile.proxy.unix_path, BRIDGE_SOCKET]
        from ...proxy.env import proxy_env

        # The bridge's ports are the sandbox's own loopback: no other user
        # reaches them, so the URL carries no secret.
        env.update(proxy_env("127.0.0.1", proxy_ports[0], socks_port=proxy_ports[-1],
                             grants=profile.network.hosts))
    config = init_config(profile, proxy_ports=proxy_ports, keep_fds=keep_fds,
                         require_landlock=require_landlock, env=env, nproc=nproc,
                         lifeline_fd=lifeline_fd, ready_fd=ready_fd, park_fd=park_fd,
                         namespaces=own_namespaces(profile), publish=publish,
                         private=private)
    return InitLaunch(init_argv(inner_python(python), INNER_INIT_PATH, config, argv),
                      launch_env(env), mounts, config)


_ABI: list[int] = []


def host_landlock_abi(cache_dir: str = "") -> int:
    """The kernel's Landlock ABI: asked once per process, and cached per boot.

    Asking means a syscall through ctypes, whose import costs a one-shot CLI
    more than everything else the audit record needs; the answer cannot
    change until the kernel does, and a new boot has a new boot id.
    """
    if not _ABI:
        # `cache_dir`: stockade's state directory, as the caller's env says.
        cache = os.path.join(cache_dir, "landlock-abi") if cache_dir else ""
        try:
            with open("/proc/sys/kernel/random/boot_id") as fh:
                boot = fh.read().strip()
        except OSError:
            boot = ""
        try:
            with open(cache or "/nonexistent") as fh:
                cached_boot, _, value = fh.read().partition(" ")
            if boot and cached_boot == boot and value.strip().isdigit():
                _ABI.append(int(value))
        except OSError:
            pass
        if not _ABI:
            _ABI.append(landlock_abi())
            if boot and cache:
                try:
                    os.makedirs(os.path.dirname(cache), mode=0o700, exist_ok=True)
                    with open(cache, "w") as fh:
                        fh.write(f"{boot} {_ABI[0]}")
                except OSError:
                    pass
    return _ABI[0]


def landlock_report(config: Mapping[str, object], abi: int | None = None) -> LandlockReport:
    """What the init will enforce with `config` on this kernel, for the audit record.

    The init runs on the same kernel, so the host can tell without asking
    it; `skipped` paths are only known inside and stay empty here.
    """
    rules = config.get("landlock")
    if not isinstance(rules, dict):
        raise ValueError("config has no landlock rules")
    return LandlockRules.from_json(rules).plan(host_landlock_abi() if abi is None else abi)


_FRESH: set[str] = set()


def ensure_bytecode() -> None:
    """Write the init modules' bytecode cache when it is missing or stale.

    The init imports them inside a read-only view, where Python cannot
    write the cache itself and would compile about 1,000 lines on every
    command (10 ms on a small VM). pip writes the cache at install time;
    an editable install under PYTHONDONTWRITEBYTECODE never does. The check
    is two stats per module: `importlib.util` would cost more than it saves.
    """
    tag = sys.implementation.cache_tag
    for name in INIT_MODULES:
        if name in _FRESH:
            continue
        source = os.path.join(INIT_DIR, name + ".py")
        cache = os.path.join(INIT_DIR, "__pycache__", f"{name}.{tag}.pyc")
        try:
            fresh = os.stat(cache).st_mtime >= os.stat(source).st_mtime
        except OSError:
            fresh = False
        if not fresh:
            import py_compile

            try:
                py_compile.compile(source, cfile=cache, doraise=True,
                                   invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
            except (OSError, py_compile.PyCompileError):
                continue  # a read-only install without cache: slower, still correct
        _FRESH.add(name)
