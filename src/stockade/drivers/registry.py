"""Every backend in one table: its name, its driver class, the config keys it reads.

Config validation, the CLI's and the MCP server's `--backend` choices and
their help all read this table, so a backend added here is accepted,
offered and documented everywhere at once; before it, each of them kept a
list of its own, and one of them (the MCP server's) had lost a backend.

Entries name their driver as `module:Class` and their options as
`module:NAME`, so reading the table imports no driver: the Linux layers
cost start-up time a command that ends in a usage error should not pay.
"""

from __future__ import annotations

import sys

from ..errors import ConfigError, SandboxUnavailable
from .base import Driver, DriverOption

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

AUTO = "auto"


class Backend:
    """One registry entry, and what the core may count on from its driver.

    `platforms`: `sys.platform` prefixes it runs on (empty: any).
    `namespaces`: mount and network namespaces of its own, so layers and masks
    can sit beneath a writable root and the proxy is reached over a unix
    socket bound in; without them a cache stays read-only and the proxy is a
    loopback port guarded by a secret.
    `linux_layers`: Landlock, seccomp and a cgroup inside.
    `confines`: False for the backend that is no boundary at all.
    `fallback`: what `auto` runs when this one cannot start here.
    The core asks these instead of comparing names, so a backend added here
    is treated by what it does.
    """

    __slots__ = ("_options", "confines", "driver", "fallback", "linux_layers", "name",
                 "namespaces", "options_ref", "platforms", "summary")

    def __init__(self, name: str, driver: str, summary: str, *,
                 options: str | tuple[DriverOption, ...] = "",
                 platforms: tuple[str, ...] = (), namespaces: bool = False,
                 linux_layers: bool = False, confines: bool = True,
                 fallback: str = "") -> None:
        self.name = name
        self.driver = driver
        self.summary = summary
        self.options_ref = options
        self.platforms = platforms
        self.namespaces = namespaces
        self.linux_layers = linux_layers
        self.confines = confines
        self.fallback = fallback
        self._options: tuple[DriverOption, ...] | None = None

    def load(self) -> type[Driver]:
        """The driver class (imports its module)."""
        cls = _resolve(self.driver)
        assert isinstance(cls, type) and issubclass(cls, Driver), self.driver
        return cls

    def options(self) -> tuple[DriverOption, ...]:
        """The config keys it reads: the entry's own tuple, or the table `options_ref`
        names, without importing the driver (every command's config reads every
        backend's keys); from the driver class when the entry says nothing."""
        if self._options is None:
            ref = self.options_ref
            found = (ref if isinstance(ref, tuple) else _resolve(ref) if ref
                     else self.load().options)
            self._options = tuple(found)  # type: ignore[arg-type]
        return self._options

    def runs_here(self, platform: str | None = None) -> bool:
        platform = sys.platform if platform is None else platform
        return not self.platforms or platform.startswith(self.platforms)


def _resolve(ref: str) -> object:
    module, _, attr = ref.partition(":")
    __import__(module)
    return getattr(sys.modules[module], attr)


_LINUX = ("linux",)

#: The backends, in the order help lists them.
REGISTRY: dict[str, Backend] = {b.name: b for b in (
    Backend("bubblewrap", "stockade.drivers.linux.bwrap:BubblewrapDriver",
            "Linux: namespaces and mounts, then Landlock, seccomp and a cgroup",
            options="stockade.drivers.linux.host.options:BUBBLEWRAP_OPTIONS", platforms=_LINUX,
            namespaces=True, linux_layers=True, fallback="landlock"),
    Backend("landlock", "stockade.drivers.linux.landlock_driver:LandlockDriver",
            "Linux without user namespaces: Landlock, seccomp and a cgroup",
            options="stockade.drivers.linux.host.options:LANDLOCK_OPTIONS", platforms=_LINUX,
            linux_layers=True),
    Backend("seatbelt", "stockade.drivers.macos.seatbelt:SeatbeltDriver",
            "macOS: a Seatbelt profile per command", options=(), platforms=("darwin",)),
    Backend("windows", "stockade.drivers.windows.driver:WindowsDriver",
            "Windows: an AppContainer (or a Low-integrity restricted token) in a job object",
            options="stockade.drivers.windows.options:WINDOWS_OPTIONS", platforms=("win32",)),
    Backend("none", "stockade.drivers.none:NoneDriver",
            "no boundary: the command runs as it is (the audit says so)", options=(),
            confines=False),
)}


def register(backend: Backend) -> None:
    """Add a backend (a driver shipped outside this package)."""
    REGISTRY[backend.name] = backend


def names() -> tuple[str, ...]:
    """Every backend name a config may hold, `auto` first."""
    return (AUTO, *REGISTRY)


def choices(platform: str | None = None) -> tuple[str, ...]:
    """The names a command line offers on this platform, `auto` first."""
    return (AUTO, *(b.name for b in REGISTRY.values() if b.runs_here(platform)))


def choices_help(platform: str | None = None) -> str:
    return " | ".join(choices(platform)) + " (default: auto)"


def config_options() -> dict[str, DriverOption]:
    """Every backend's config keys, once each: a team's one file serves every
    machine, so a key another platform's backend reads is not an error here."""
    out: dict[str, DriverOption] = {}
    for backend in REGISTRY.values():
        for option in backend.options():
            out.setdefault(option.key, option)
    return out


def lookup(name: str) -> Backend:
    backend = REGISTRY.get(name)
    if backend is None:
        raise ConfigError(f"unknown backend {name!r}: choose one of {', '.join(names())}")
    return backend


def declared(name: str) -> Backend:
    """The entry for `name`; for `auto` or an unknown name, one that promises nothing
    beyond confining (the safe reading of a backend the core does not know)."""
    return REGISTRY.get(name) or Backend(name, "", "")


def platform_for(backend: str) -> str:
    """The `sys.platform` whose file-system rules profiles for `backend` follow: a
    profile is built for the OS its driver runs on; `auto` follows this machine."""
    platforms = declared(backend).platforms
    if platforms and not sys.platform.startswith(platforms):
        return platforms[0]
    return sys.platform


def auto_order(platform: str | None = None) -> tuple[str, ...]:
    """What `auto` tries here, in order: the native backend, then its fallback."""
    native = platform_backend(platform)
    fallback = REGISTRY[native].fallback if native else ""
    return tuple(n for n in (native, fallback) if n)


def platform_backend(platform: str | None = None) -> str:
    """This platform's native backend (what `auto` starts from), or "" for none."""
    platform = sys.platform if platform is None else platform
    for backend in REGISTRY.values():
        if backend.platforms and backend.runs_here(platform):
            return backend.name
    return ""


def resolve_auto(make: Callable[[str], Driver], *, min_abi: int,
                 configured_bwrap: bool) -> Driver:
    """`auto`: this platform's backend, or the fallback its driver names
    (`Driver.auto_choice`: on Linux, Landlock when bubblewrap cannot start).

    A bwrap the user configured by path is a choice, not a preference: if it
    cannot start, that is an error to see, not a reason to run under a
    weaker backend instead.
    """
    backend = platform_backend()
    if backend and not configured_bwrap:
        native = make(backend)
        backend = native.auto_choice(min_abi)
        if backend == native.name:
            return native
    if not backend:
        raise SandboxUnavailable(
            f"backend 'auto' is not available on {sys.platform}: stockade confines commands "
            "with bubblewrap or Landlock on Linux and Seatbelt on macOS")
    return make(backend)


def from_config(config: Any, *, env: Mapping[str, str], workspace: str, state_dir: str,
                **overrides: Any) -> Driver:
    """The driver `config.backend` names, built by its class's `from_config`.

    `overrides` are seams (`probe=False` for a one-shot CLI); each backend
    takes the ones it knows.
    """
    def make(name: str) -> Driver:
        return lookup(name).load().from_config(config, env=env, workspace=workspace,
                                               state_dir=state_dir, **overrides)

    if config.backend == AUTO:
        return resolve_auto(make, min_abi=int(config.landlock_min_abi),
                            configured_bwrap=bool(config.bwrap))
    return make(config.backend)
