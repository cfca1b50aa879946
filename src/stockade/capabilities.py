"""What a command may do: `SandboxCapabilities`, `NetworkPolicy` and the modes.

Kept free of heavy imports (no dataclasses, enum, typing or pathlib at run
time): the CLI's `run` path imports this module on every command, and each of
those costs milliseconds of interpreter start-up.
"""

from __future__ import annotations

import os

from .errors import InvalidCommand

READ_ONLY = "read-only"
WORKSPACE_WRITE = "workspace-write"
FULL_ACCESS = "full-access"
MODES = (READ_ONLY, WORKSPACE_WRITE, FULL_ACCESS)


def parse_mode(value: str) -> str:
    if value not in MODES:
        raise InvalidCommand(f"unknown mode {value!r}: choose one of {', '.join(MODES)}")
    return value


def canonical_path(path: str, *, what: str = "path") -> str:
    """The one spelling of `path` every comparison uses: absolute, symlinks resolved.

    Comparing spellings instead of places is how `/work/../etc` or a symlink
    named like the workspace slips past a prefix check.
    """
    if not isinstance(path, str):
        path = os.fspath(path)
    if "\x00" in path:
        raise InvalidCommand(f"{what} contains a NUL byte: {path!r}")
    if not os.path.isabs(path):
        raise InvalidCommand(f"{what} must be absolute: {path!r}")
    return os.path.realpath(path)


def is_under(path: str, root: str) -> bool:
    """True when `path` is `root` or beneath it, lexically after normalising both:
    `/a/bc` is not under `/a/b`, and neither is `/a/b/../c`."""
    if _normal(path) and _normal(root):
        # Already normal (the profile's paths are canonical): a prefix test.
        return path == root or path.startswith("/" if root == "/" else root + "/")
    return within(path, root) is not None


def within(path: str, root: str) -> str | None:
    """`path` relative to `root` ("" for the root itself), or None when it is not beneath it.

    Lexical, on normalised absolute paths, component by component: `/a/bc` is
    not beneath `/a/b`, and `/a/b/../c` is not beneath `/a/b`.
    """
    if not (path.startswith("/") and root.startswith("/")):
        return None
    p = os.path.normpath(path).split("/")
    r = [] if root == "/" else os.path.normpath(root).split("/")[1:]
    p = [x for x in p[1:] if x]
    if p[:len(r)] != r:
        return None
    return "/".join(p[len(r):])


def _normal(path: str) -> bool:
    return (path.startswith("/") and "//" not in path and "/./" not in path
            and "/../" not in path and not path.endswith(("/.", "/.."))
            and (path == "/" or not path.endswith("/")))


def paths_within(inner: tuple[str, ...], outer: tuple[str, ...]) -> bool:
    return all(any(is_under(p, root) for root in outer) for p in inner)


_RANK = {"none": 0, "hosts": 1, "all": 2}


class NetworkPolicy:
    """None ⊆ AllowHosts ⊆ AllowAll. Construct with `none()`, `allow_hosts()`, `allow_all()`."""

    __slots__ = ("hosts", "kind")

    NONE = "none"
    HOSTS = "hosts"
    ALL = "all"

    def __init__(self, kind: str, hosts: tuple[str, ...] = ()) -> None:
        if kind not in _RANK:
            raise InvalidCommand(f"unknown network policy {kind!r}: choose none, hosts or all")
        if kind != self.HOSTS and hosts:
            raise InvalidCommand(f"network policy {kind!r} takes no host list")
        self.kind = kind
        self.hosts = tuple(sorted({h.strip().lower().rstrip(".") for h in hosts if h.strip()}))

    @classmethod
    def none(cls) -> NetworkPolicy:
        return cls(cls.NONE)

    @classmethod
    def allow_all(cls) -> NetworkPolicy:
        return cls(cls.ALL)

    @classmethod
    def allow_hosts(cls, hosts: tuple[str, ...] | list[str]) -> NetworkPolicy:
        return cls(cls.HOSTS, tuple(hosts))

    def is_within(self, other: NetworkPolicy) -> bool:
        if self.kind == self.HOSTS and other.kind == self.HOSTS:
            return all(_host_covered(h, other.hosts) for h in self.hosts)
        return _RANK[self.kind] <= _RANK[other.kind]

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, NetworkPolicy)
            and self.kind == other.kind
            and self.hosts == other.hosts
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.hosts))

    def __repr__(self) -> str:
        return f"NetworkPolicy.allow_hosts({list(self.hosts)!r})" if self.hosts else (
            f"NetworkPolicy.{'allow_all' if self.kind == self.ALL else 'none'}()"
        )

    def to_json(self) -> object:
        return {"kind": self.kind, "hosts": list(self.hosts)} if self.hosts else self.kind


def _host_covered(host: str, allowed: tuple[str, ...]) -> bool:
    for entry in allowed:
        if host == entry:
            return True
        # A `*.example.com` grant covers `a.example.com` and `*.a.example.com`.
        if entry.startswith("*.") and host.endswith(entry[1:]) and host != entry[2:]:
            return True
    return False


class SandboxCapabilities:
    """The privileges a command asks for, beyond what its workspace already gives.

    `fs_read` and `fs_write` are path prefixes outside the default view;
    the workspace itself is implicit for reading, and is in `fs_write` when the
    mode lets the command write it. `max_memory_mb` and `timeout_secs` are
    limits, not privileges: they travel with the request but are not part of
    `is_within`, which is the seed's four monotonic checks.
    """

    __slots__ = ("fs_read", "fs_write", "max_memory_mb", "network", "spawn_subprocess",
                 "timeout_secs")

    def __init__(
        self,
        fs_read: tuple[str, ...] | list[str] = (),
        fs_write: tuple[str, ...] | list[str] = (),
        network: NetworkPolicy | None = None,
        spawn_subprocess: bool = False,
        max_memory_mb: int | None = None,
        timeout_secs: float | None = None,
    ) -> None:
        self.fs_read = tuple(sorted({canonical_path(p, what="fs_read path") for p in fs_read}))
        self.fs_write = tuple(sorted({canonical_path(p, what="fs_write path") for p in fs_write}))
        self.network = network if network is not None else NetworkPolicy.none()
        self.spawn_subprocess = bool(spawn_subprocess)
        if max_memory_mb is not None and max_memory_mb <= 0:
            raise InvalidCommand(f"max_memory_mb must be positive, got {max_memory_mb}")
        if timeout_secs is not None and not timeout_secs > 0:
            raise InvalidCommand(f"timeout_secs must be positive, got {timeout_secs}")
        self.max_memory_mb = max_memory_mb
        self.timeout_secs = timeout_secs

    @classmethod
    def strict(cls) -> SandboxCapabilities:
        """The seed's baseline: nothing outside the workspace, no network, no subprocess."""
        return cls()

    def is_within(self, other: SandboxCapabilities) -> bool:
        """True when every privilege asked here is also given by `other`.

        Writing a path implies reading it, so a read is within a write grant.
        """
        return (
            paths_within(self.fs_read, other.fs_read + other.fs_write)
            and paths_within(self.fs_write, other.fs_write)
            and self.network.is_within(other.network)
            and (other.spawn_subprocess or not self.spawn_subprocess)
        )

    def _key(self) -> tuple[object, ...]:
        return (self.fs_read, self.fs_write, self.network, self.spawn_subprocess,
                self.max_memory_mb, self.timeout_secs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SandboxCapabilities) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"SandboxCapabilities(fs_read={list(self.fs_read)!r}, "
            f"fs_write={list(self.fs_write)!r}, "
            f"network={self.network!r}, spawn_subprocess={self.spawn_subprocess}, "
            f"max_memory_mb={self.max_memory_mb}, timeout_secs={self.timeout_secs})"
        )

    def replace(self, **changes: object) -> SandboxCapabilities:
        fields: dict[str, object] = {name: getattr(self, name) for name in self.__slots__}
        fields.update(changes)
        return SandboxCapabilities(**fields)  # type: ignore[arg-type]

    def to_json(self) -> dict[str, object]:
        return {
            "fs_read": list(self.fs_read),
            "fs_write": list(self.fs_write),
            "network": self.network.to_json(),
            "spawn_subprocess": self.spawn_subprocess,
            "max_memory_mb": self.max_memory_mb,
            "timeout_secs": self.timeout_secs,
        }


def capabilities_for_mode(mode: str, workspace: str) -> SandboxCapabilities:
    """The baseline a mode gives a command in `workspace` (canonical)."""
    if mode == READ_ONLY:
        return SandboxCapabilities(spawn_subprocess=True)
    if mode == WORKSPACE_WRITE:
        return SandboxCapabilities(fs_write=(workspace,), spawn_subprocess=True)
    if mode == FULL_ACCESS:
        return SandboxCapabilities(
            fs_read=("/",), fs_write=("/",), network=NetworkPolicy.allow_all(),
            spawn_subprocess=True,
        )
    raise InvalidCommand(f"unknown mode {mode!r}: choose one of {', '.join(MODES)}")
