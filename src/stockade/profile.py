"""The decided boundary: `Profile`, built from a request, consulted by drivers.

`build_profile` is the one place that turns capabilities, mode and host
facts into concrete paths. It looks at the filesystem only through the
`kind` function it is given (lstat by default), so tests can describe a
machine without building one, and a driver never decides anything.
"""

from __future__ import annotations

import os
import sys

from . import hostpaths
from .capabilities import FULL_ACCESS, READ_ONLY, NetworkPolicy, is_under
from .errors import SandboxUnavailable

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import ClassVar

    from .capabilities import SandboxCapabilities

HOST = "host"
STRICT = "strict"
READ_SCOPES = (HOST, STRICT)

# The strict read scope: what a dynamically linked program needs to start.
SYSTEM_READ_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")

# Path kinds reported by `kind()`.
DIR, FILE, SOCKET, LINK, MISSING = "dir", "file", "socket", "link", "missing"

# Variables that make a program load code it was not asked to run. The
# caller's environment is not the command's: a host shell's LD_PRELOAD or
# PYTHONSTARTUP would run inside every sandboxed command.
_INJECTION_PREFIXES = ("LD_", "DYLD_", "BASH_FUNC_", "PYTHON")
_INJECTION_NAMES = ("BASH_ENV", "ENV", "NODE_OPTIONS", "PERL5OPT", "RUBYOPT", "MallocNanoZone")
_PYTHON_HARMLESS = ("PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING",
                    "PYTHONUTF8", "PYTHONHASHSEED")

#: Variables naming the extra CA certificates a user's tools must trust.
CA_BUNDLE_VARS = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                  "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "PIP_CERT")

#: Names that carry secrets by convention; glob with `*` at either end.
DEFAULT_SECRET_ENV = ("*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*API_KEY*",
                      "*APIKEY*", "*PRIVATE_KEY*", "*CREDENTIAL*", "*ACCESS_KEY*",
                      "AWS_*", "GITHUB_TOKEN", "GH_TOKEN", "*DATABASE_URL*")


def path_kind(path: str) -> str:
    try:
        st = os.lstat(path)
    except OSError:
        return MISSING
    mode = st.st_mode
    if mode & 0o170000 == 0o040000:
        return DIR
    if mode & 0o170000 == 0o120000:
        return LINK
    if mode & 0o170000 == 0o140000:
        return SOCKET
    return FILE


def _glob(pattern: str, name: str) -> bool:
    """`*X*`, `X*`, `*X` or exact: all a secret pattern needs, without importing `re`."""
    lead, trail = pattern.startswith("*"), pattern.endswith("*") and len(pattern) > 1
    core = pattern.strip("*")
    if lead and trail:
        return core in name
    if lead:
        return name.endswith(core)
    if trail:
        return name.startswith(core)
    return name == core


def sandbox_env(
    host_env: Mapping[str, str],
    explicit: Mapping[str, str],
    secret_patterns: tuple[str, ...] | list[str] = DEFAULT_SECRET_ENV,
    *,
    backend: str,
) -> dict[str, str]:
    """The command's environment: the caller's, scrubbed, then what was passed explicitly.

    A variable passed explicitly is the caller's decision and is kept even
    when its name looks secret; inheriting one by accident is what the scrub
    prevents.
    """
    env: dict[str, str] = {}
    for name, value in host_env.items():
        upper = name.upper()
        if name.startswith(_INJECTION_PREFIXES) and name not in _PYTHON_HARMLESS:
            continue
        if name in _INJECTION_NAMES:
            continue
        if any(_glob(p.upper(), upper) for p in secret_patterns):
            continue
        env[name] = value
    env.update(explicit)
    env["STOCKADE_SANDBOX"] = backend
    if backend != "none":
        env["TMPDIR"] = "/tmp"
    return env


class Protected:
    """A path under a writable root that must stay read-only (or uncreatable)."""

    __slots__ = ("kind", "path")

    def __init__(self, path: str, kind: str) -> None:
        self.path = path
        self.kind = kind  # DIR or FILE when it exists; "missing-dir"/"missing-file" when not

    def __repr__(self) -> str:
        return f"Protected({self.path!r}, {self.kind!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Protected) and (self.path, self.kind) == (other.path, other.kind)

    def __hash__(self) -> int:
        return hash((self.path, self.kind))


class Profile:
    """Everything a driver needs, decided: paths are canonical, lists are final."""

    __slots__ = (
        "cwd", "env", "granted_sockets", "hidden", "home", "mask_other_homes",
        "max_file_size_mb", "max_memory_mb", "mode", "network", "protected", "proxy_port",
        "proxy_secret", "proxy_socket", "read_extra", "read_roots", "read_scope", "runtime_dir",
        "session_tmp", "sockets", "spawn_subprocess", "system_links", "tmp_size_mb", "workspace",
        "workspace_writable", "write_roots",
    )

    _OPTIONAL: ClassVar[dict[str, object]] = {"proxy_socket": None, "proxy_port": None,
                                              "proxy_secret": None,
                                              "tmp_size_mb": None, "max_file_size_mb": None,
                                              "spawn_subprocess": True}

    def __init__(self, **fields: object) -> None:
        for name in self.__slots__:
            if name in self._OPTIONAL and name not in fields:
                setattr(self, name, self._OPTIONAL[name])
                continue
            setattr(self, name, fields.pop(name))
        if fields:
            raise TypeError(f"unknown profile fields: {sorted(fields)}")

    mode: str
    workspace: str
    workspace_writable: bool
    cwd: str
    read_scope: str
    read_roots: tuple[str, ...]
    read_extra: tuple[str, ...]
    system_links: tuple[tuple[str, str], ...]
    write_roots: tuple[str, ...]
    hidden: tuple[tuple[str, str], ...]
    sockets: tuple[str, ...]
    granted_sockets: tuple[str, ...]
    protected: tuple[Protected, ...]
    mask_other_homes: bool
    runtime_dir: str
    home: str
    network: NetworkPolicy
    #: The session's managed-proxy endpoints on the host (network "hosts").
    proxy_socket: str | None
    proxy_port: int | None
    #: The password the proxy's TCP listener asks of this command (not on the unix socket).
    proxy_secret: str | None
    session_tmp: str | None
    #: Size of a fresh /tmp (a session's /tmp is a host directory, uncapped).
    tmp_size_mb: int | None
    #: RLIMIT_FSIZE: the largest file a command may write.
    max_file_size_mb: int | None
    max_memory_mb: int | None
    #: False: the command may not start processes (seccomp, after the init's own forks).
    spawn_subprocess: bool
    env: dict[str, str]

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            if name == "network":
                value = value.to_json()
            elif name == "protected":
                value = [[p.path, p.kind] for p in value]
            elif name == "env":
                continue
            out[name] = value
        return out


_FILE_NAMES = (".envrc", "stockade.toml")


def protected_under(root: str, kind: Callable[[str], str] = path_kind,
                    writable: tuple[str, ...] = ()) -> list[Protected]:
    """Protected metadata in one writable root, resolving `.git` pointer files.

    git itself must keep working in workspace-write -- objects, index and refs
    are written by every `git add` and `git commit` -- so a `.git` directory is
    not frozen whole: its hooks and config are, because those are what run
    code on the host the next time a person types `git`. `writable` are all
    the roots the command may write; only git directories inside them need
    (or get) protection.
    """
    roots = writable or (root,)
    out: list[Protected] = []
    for name in hostpaths.PROTECTED_NAMES:
        path = os.path.join(root, name)
        k = kind(path)
        if k == LINK:
            # A mount follows the link, so the link itself -- an entry in a
            # writable directory -- could be replaced by a real directory that
            # the host then reads. Refusing is the only answer that holds.
            raise SandboxUnavailable(
                f"{path} is a symbolic link; stockade cannot keep a symlinked {name} read-only "
                "in a writable workspace. Replace the link with the real directory or file, "
                "or run in read-only mode."
            )
        if name == ".git" and k == DIR:
            out.extend(_git_dir_protection(path, kind, roots))
        elif name == ".git" and k == FILE:
            out.append(Protected(path, FILE))
            gitdir = _read_gitdir_pointer(path)
            if gitdir:
                out.extend(_git_dir_protection(gitdir, kind, roots))
        elif k == MISSING:
            out.append(Protected(path, "missing-file" if name in _FILE_NAMES else "missing-dir"))
        else:
            out.append(Protected(path, k if k in (DIR, FILE) else FILE))
    return out


#: A directory that must stay where it is: writable inside, but a mount point,
#: so it cannot be renamed aside and replaced (`mv .git .old && mkdir .git`
#: would otherwise give a fresh .git whose hooks the host runs).
PIN = "pin"
#: A name that must not appear but cannot be blocked by a mount: checked and
#: removed after each run (see the bwrap driver's cleanup).
ABSENT = "absent"


def _git_dir_protection(gitdir: str, kind: Callable[[str], str], roots: tuple[str, ...],
                        depth: int = 0) -> list[Protected]:
    # A git directory outside every writable root is already read-only, and
    # stockade must not create placeholders there: a planted `gitdir:` pointer
    # would otherwise steer stockade itself into making directories anywhere.
    if depth > 4 or not any(is_under(gitdir, r) for r in roots):
        return []
    out = [Protected(gitdir, PIN)]
    for name, want in (("hooks", DIR), ("config", FILE), ("commondir", FILE)):
        path = os.path.join(gitdir, name)
        k = kind(path)
        if k == LINK:
            raise SandboxUnavailable(
                f"{path} is a symbolic link; stockade cannot keep it read-only in a writable "
                "workspace. Replace the link, or run in read-only mode."
            )
        if k == want:
            out.append(Protected(path, k))
        elif name == "commondir":
            # git dies on any placeholder it can see at this name, so a
            # missing commondir cannot be made uncreatable by a mount; it is
            # watched instead and removed if a command plants one.
            out.append(Protected(path, ABSENT))
        else:
            out.append(Protected(path, f"missing-{want}"))
    for extra in ("info", "config.worktree"):
        path = os.path.join(gitdir, extra)
        k = kind(path)
        if k in (DIR, FILE):
            out.append(Protected(path, k))
    common = os.path.join(gitdir, "commondir")
    if kind(common) == FILE:
        target = _read_first_line(common)
        if target:
            target = os.path.realpath(os.path.join(gitdir, target))
            if target != gitdir:
                out.extend(_git_dir_protection(target, kind, roots, depth + 1))
    modules = os.path.join(gitdir, "modules")
    if kind(modules) == DIR:
        # Submodules keep their own git directories, hooks and config included.
        for entry in sorted(os.listdir(modules)):
            sub = os.path.join(modules, entry)
            if kind(sub) == DIR:
                out.extend(_git_dir_protection(sub, kind, roots, depth + 1))
    return out


def _read_first_line(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.readline().strip()
    except OSError:
        return ""


def _read_gitdir_pointer(path: str) -> str:
    line = _read_first_line(path)
    if not line.startswith("gitdir:"):
        return ""
    target = line[len("gitdir:"):].strip()
    return os.path.realpath(os.path.join(os.path.dirname(path), target))


def runtime_dir(env: Mapping[str, str], kind: Callable[[str], str] = path_kind) -> str:
    """The user's runtime directory, also when XDG_RUNTIME_DIR is unset.

    It holds the session bus, the keyring and rootless docker's and podman's
    sockets; a caller that lost the variable (sudo, cron, a service) must not
    thereby hand them over.
    """
    value = env.get("XDG_RUNTIME_DIR", "")
    if value:
        return value
    default = f"/run/user/{os.getuid()}"
    return default if kind(default) == DIR else ""


def interpreter_prefixes() -> tuple[str, ...]:
    return tuple(sorted({os.path.realpath(p) for p in
                         (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}))


def build_profile(
    *,
    mode: str,
    workspace: str,
    cwd: str,
    capabilities: SandboxCapabilities,
    read_scope: str,
    host_env: Mapping[str, str],
    command_env: Mapping[str, str] | None = None,
    unreadable: str | list[str] | None = None,
    writable: list[str] | tuple[str, ...] = (),
    granted_sockets: list[str] | tuple[str, ...] = (),
    use_scratch: bool = True,
    secret_env: tuple[str, ...] | list[str] = DEFAULT_SECRET_ENV,
    session_tmp: str | None = None,
    backend: str = "bubblewrap",
    kind: Callable[[str], str] = path_kind,
    extra_read: tuple[str, ...] = (),
    proxy_socket: str | None = None,
    proxy_port: int | None = None,
    proxy_secret: str | None = None,
    private: tuple[str, ...] | list[str] = (),
    tmp_size_mb: int | None = None,
    max_file_size_mb: int | None = None,
) -> Profile:
    """Decide the boundary for one command. All paths in are canonical."""
    writable_ws = mode != READ_ONLY and any(is_under(workspace, w) for w in capabilities.fs_write)
    home = host_env.get("HOME", "")
    granted = [os.path.realpath(p) for p in hostpaths.paths(list(granted_sockets), host_env)]

    write_roots: list[str] = []
    if mode != READ_ONLY:
        write_roots.extend(w for w in capabilities.fs_write if not is_under(w, workspace))
        extras = hostpaths.paths(list(writable), host_env)
        if use_scratch:
            extras += hostpaths.scratch(host_env,
                                        network=capabilities.network.kind != NetworkPolicy.NONE)
        for p in extras:
            real = os.path.realpath(p)
            if kind(real) == DIR and (not home or real != os.path.realpath(home)):
                write_roots.append(real)
    write_roots = sorted(set(write_roots))

    # What is explicitly granted is never hidden: asking for fs_read of ~/.aws
    # (and being approved) is how a session gets it back.
    grants = capabilities.fs_read + capabilities.fs_write
    # A company's TLS-intercepting CA, named by the variables tools read:
    # without it every HTTPS request through that network fails to verify.
    ca_bundles = tuple(sorted({
        os.path.realpath(host_env[var]) for var in CA_BUNDLE_VARS
        if host_env.get(var, "").startswith("/") and kind(os.path.realpath(host_env[var]))
        in (FILE, DIR)}))
    hidden: list[tuple[str, str]] = []
    for p in private:
        # stockade's own records: the ledger holds every earlier command's
        # argv, the state directory every other session's /tmp. A private
        # path that holds this workspace stays visible (the workspace wins).
        real = os.path.realpath(p)
        k = kind(real)
        if k != MISSING and not is_under(workspace, real):
            hidden.append((real, DIR if k == DIR else FILE))
    for p in hostpaths.unreadable(unreadable, host_env, granted):
        real = os.path.realpath(p)
        if any(is_under(real, g) and g != "/" for g in grants):
            continue
        if any(is_under(ca, real) for ca in ca_bundles):
            continue  # a CA bundle kept under a hidden directory stays readable
        k = kind(real)
        if k != MISSING:
            hidden.append((real, DIR if k == DIR else FILE))
    sockets = []
    for s in hostpaths.local_sockets(host_env):
        real = os.path.realpath(s)
        if real not in granted and kind(real) != MISSING:
            sockets.append(real)

    if read_scope == STRICT:
        roots = [p for p in SYSTEM_READ_PATHS if kind(p) == DIR]
        links = tuple((p, os.readlink(p)) for p in SYSTEM_READ_PATHS if kind(p) == LINK)
        roots.extend(interpreter_prefixes())
        roots.extend(capabilities.fs_read)
        roots.extend(extra_read)
        roots.extend(ca_bundles)
        roots.append(workspace)
        read_roots = tuple(sorted(set(roots)))
    else:
        read_roots, links = ("/",), ()

    protected: list[Protected] = []
    if writable_ws or write_roots:
        roots = ([workspace] if writable_ws else []) + list(capabilities.fs_write)
        writable_all = tuple(roots) + tuple(write_roots)
        for root in roots:
            if kind(root) == DIR and not any(is_under(root, d) for d, _ in hidden):
                protected.extend(protected_under(root, kind, writable_all))

    return Profile(
        mode=mode,
        workspace=workspace,
        workspace_writable=writable_ws,
        cwd=cwd,
        read_scope=read_scope,
        read_roots=read_roots,
        read_extra=tuple(p for p in capabilities.fs_read + tuple(extra_read) + ca_bundles
                         if p != "/"),
        system_links=links,
        write_roots=tuple(write_roots),
        hidden=tuple(sorted(set(hidden))),
        sockets=tuple(sorted(set(sockets))),
        granted_sockets=tuple(g for g in granted if kind(g) == SOCKET),
        protected=tuple(dict.fromkeys(protected)),
        mask_other_homes=read_scope == HOST,
        runtime_dir=runtime_dir(host_env, kind),
        home=home,
        network=capabilities.network if mode != FULL_ACCESS else NetworkPolicy.allow_all(),
        session_tmp=session_tmp,
        proxy_socket=proxy_socket,
        proxy_port=proxy_port,
        proxy_secret=proxy_secret,
        tmp_size_mb=tmp_size_mb,
        max_file_size_mb=max_file_size_mb,
        max_memory_mb=capabilities.max_memory_mb,
        spawn_subprocess=capabilities.spawn_subprocess or mode == FULL_ACCESS,
        env=sandbox_env(host_env, command_env or {}, secret_env, backend=backend),
    )
