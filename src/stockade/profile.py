"""The decided boundary: `Profile`, the value a driver confines a command by.

`boundary.build_profile` decides it from a request and the host's facts;
a driver only reads it. The vocabulary both sides share lives here: the
kinds of path a decision sees, the kinds of protection it hands down, and
the proxy endpoint one command is given.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

    from .capabilities import NetworkPolicy
    from .drivers.session import Session

HOST = "host"
STRICT = "strict"

# The strict read scope: what a dynamically linked program needs to start.
SYSTEM_READ_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")

# Path kinds reported by `kind()`.
DIR, FILE, SOCKET, LINK, MISSING = "dir", "file", "socket", "link", "missing"

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


#: A directory that must stay where it is: writable inside, but a mount point,
#: so it cannot be renamed aside and replaced (`mv .git .old && mkdir .git`
#: would otherwise give a fresh .git whose hooks the host runs).
PIN = "pin"
#: A protected name that does not exist: the command may create it, and the
#: driver's guard neutralises what it leaves there once the command has ended
#: (see drivers/linux/host/guard.py).
WATCH = "watch"
#: A protected name that is a symbolic link (a dotfile kept in a dotfiles
#: repository): its target is protected where it lives, and the link itself
#: is put back after the run if the command replaced it.
KEEP_LINK = "link"

#: A real directory above a protected path, inside a writable root: bound onto
#: itself so it cannot be renamed aside and rebuilt (`mv sub sub.old; mkdir
#: sub; git init sub` would leave the read-only `sub/.git` mount behind in
#: `sub.old`). Writable inside; not itself protected.
HOLD = "hold"


class Protected:
    """A path under a writable root that must stay read-only (or uncreatable)."""

    __slots__ = ("kind", "path")

    def __init__(self, path: str, kind: str) -> None:
        self.path = path
        self.kind = kind  # DIR or FILE when it exists, PIN, WATCH when missing, KEEP_LINK

    def __repr__(self) -> str:
        return f"Protected({self.path!r}, {self.kind!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Protected) and (self.path, self.kind) == (other.path, other.kind)

    def __hash__(self) -> int:
        return hash((self.path, self.kind))


class ProxyEndpoint:
    """Where one command reaches the session's managed proxy (network "hosts").

    A value, so the endpoint the pipeline audited is the one the driver
    hands over: `unix_path` is bound into a backend's network namespace;
    `port` is on loopback, where every local user can connect, so it asks
    for `secret`, which only this command is given. "" and 0 mean none.
    """

    __slots__ = ("port", "secret", "unix_path")

    def __init__(self, *, unix_path: str = "", port: int = 0, secret: str | None = None
                 ) -> None:
        object.__setattr__(self, "unix_path", unix_path)
        object.__setattr__(self, "port", port)
        object.__setattr__(self, "secret", secret)

    unix_path: str
    port: int
    secret: str | None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("ProxyEndpoint is frozen")

    def __repr__(self) -> str:
        return f"ProxyEndpoint(unix_path={self.unix_path!r}, port={self.port!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProxyEndpoint) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash((self.unix_path, self.port, self.secret))

    def to_json(self) -> dict[str, object]:
        return {"unix_path": self.unix_path, "port": self.port, "secret": self.secret}


class Profile:
    """Everything a driver needs, decided: paths are canonical, lists are final."""

    __slots__ = (
        "absent", "caches", "cwd", "env", "granted_sockets", "hidden", "home",
        "mask_other_homes", "max_file_size_mb", "max_memory_mb", "mode", "network",
        "private_around", "protected", "proxy", "publish", "read_extra", "read_roots",
        "read_scope", "runtime_dir", "session", "session_tmp", "shown",
        "sockets", "spawn_subprocess", "system_links", "tmp_size_mb", "workspace",
        "workspace_writable", "write_roots",
    )

    def __init__(
        self,
        *,
        mode: str,
        workspace: str,
        workspace_writable: bool,
        cwd: str,
        read_scope: str,
        read_roots: tuple[str, ...],
        read_extra: tuple[str, ...],
        system_links: tuple[tuple[str, str], ...],
        write_roots: tuple[str, ...],
        hidden: tuple[tuple[str, str], ...],
        sockets: tuple[str, ...],
        granted_sockets: tuple[str, ...],
        protected: tuple[Protected, ...],
        mask_other_homes: bool,
        runtime_dir: str,
        home: str,
        network: NetworkPolicy,
        session_tmp: str | None,
        max_memory_mb: int | None,
        env: dict[str, str],
        proxy: ProxyEndpoint | None = None,
        tmp_size_mb: int | None = None,
        max_file_size_mb: int | None = None,
        spawn_subprocess: bool = True,
        private_around: tuple[str, ...] = (),
        caches: tuple[tuple[str, str, str], ...] = (),
        shown: tuple[tuple[str, str], ...] = (),
        absent: tuple[str, ...] = (),
        publish: tuple[tuple[str, int, int], ...] = (),
        session: Session | None = None,
    ) -> None:
        for name, value in locals().items():
            if name != "self":
                object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        # A value: the driver that reads it must see what the pipeline
        # decided and audited, not what something changed in between.
        raise AttributeError(f"Profile is frozen: use replace({name}=...)")

    def replace(self, **changes: Any) -> Profile:
        """A copy with `changes` (keyword names are the fields)."""
        fields: dict[str, Any] = {name: getattr(self, name) for name in self.__slots__}
        fields.update(changes)
        return Profile(**fields)

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
    #: Paths inside a hidden directory that come back read-only, after its
    #: mask (what toolchains read in `~/.config`, a grant inside `~/.aws`).
    shown: tuple[tuple[str, str], ...]
    #: Hidden names that do not exist yet: Landlock's rules leave room for
    #: them, so one the host makes while the command runs has no rule.
    absent: tuple[str, ...]
    #: stockade's own directories that hold the workspace (a provisioned
    #: session's): hidden whole, with the workspace shown inside.
    private_around: tuple[str, ...]
    #: (a toolchain cache, this session's private layer over it, the variable
    #: that moves it): bubblewrap lays the layer over the cache, the other
    #: backends point the variable at the layer's `upper` and keep the cache
    #: read-only.
    caches: tuple[tuple[str, str, str], ...]
    sockets: tuple[str, ...]
    granted_sockets: tuple[str, ...]
    protected: tuple[Protected, ...]
    mask_other_homes: bool
    runtime_dir: str
    home: str
    network: NetworkPolicy
    #: This command's managed-proxy endpoint on the host (network "hosts").
    proxy: ProxyEndpoint | None
    session_tmp: str | None
    #: Size of a fresh /tmp (a session's /tmp is a host directory, uncapped).
    tmp_size_mb: int | None
    #: RLIMIT_FSIZE: the largest file a command may write.
    max_file_size_mb: int | None
    max_memory_mb: int | None
    #: False: the command may not start processes (seccomp, after the init's own forks).
    spawn_subprocess: bool
    #: (host address, host port, sandbox port) forwarded while the command
    #: runs (publish.py): a backend without a network namespace refuses it.
    publish: tuple[tuple[str, int, int], ...]
    env: dict[str, str]
    #: The session the command runs in, which a driver keys its per-session
    #: state by; an identity, not a setting, so never in `to_json`.
    session: Session | None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            if name == "network":
                value = value.to_json()
            elif name == "proxy":
                value = value.to_json() if value is not None else None
            elif name == "protected":
                value = [[p.path, p.kind] for p in value]
            elif name in ("env", "session"):
                continue
            out[name] = value
        return out
