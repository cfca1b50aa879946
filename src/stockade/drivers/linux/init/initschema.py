"""The stockade-init config's schema: its version, keys and types, defined once.

`layers.init_config` writes an `InitConfig` (for either backend), the init
(`initcore.main`) reads it, and both sides refuse a key outside the list:
a misspelt or stale key the init silently ignored would be a layer
silently not applied. Its own module because the init imports it as a
top-level sibling (only built-ins, never the stockade package), and the
host must not pay for importing the whole init to learn two constants.
"""

TYPE_CHECKING = False  # typing costs the init 3 ms; mypy treats this name as True

CONFIG_VERSION = 1
CONFIG_KEYS = frozenset((
    "v", "seccomp", "landlock", "landlock_list", "require_landlock", "keep_fds", "env",
    "bridge", "no_spawn", "lifeline_fd", "rlimits", "cwd", "parent", "drop_caps", "reaper",
    "reaper_fd", "timing", "ready_fd", "park_fd", "publish", "namespaces", "private_files"))

if TYPE_CHECKING:
    from typing import NotRequired, TypedDict

    class BridgeConfig(TypedDict):
        unix: str  #: the proxy's socket as the sandbox shows it
        ports: list[int]  #: loopback ports the bridge listens on

    class PublishConfig(TypedDict):
        fd: int  #: the relay's control socket
        ports: list[int]  #: sandbox ports the host may forward to

    class InitConfig(TypedDict):
        """The config as it travels, JSON, into the sandbox: keys exactly CONFIG_KEYS.

        Types only, so the init pays nothing for it; a key added here and not
        to CONFIG_KEYS is refused by `config_problem` before any sandbox starts.
        """

        v: int
        seccomp: str  #: the network mode of the seccomp filter (seccomp.ALL_MODES)
        landlock: dict[str, object]  #: LandlockRules.to_json()
        landlock_list: list[str]  #: directories that may be listed, not read
        require_landlock: bool
        keep_fds: list[int]
        env: dict[str, str | None]  #: set (a string) or unset (None) just before exec
        bridge: NotRequired[BridgeConfig]
        namespaces: NotRequired[list[str]]
        no_spawn: NotRequired[bool]
        lifeline_fd: NotRequired[int]
        ready_fd: NotRequired[int]
        park_fd: NotRequired[int]
        publish: NotRequired[PublishConfig]
        private_files: NotRequired[list[str]]
        rlimits: NotRequired[dict[str, int]]
        cwd: NotRequired[str]  #: the Landlock backend's: no bwrap --chdir
        parent: NotRequired[int | str]  #: stockade's pid, or "scope" (the Landlock backend)
        drop_caps: NotRequired[bool]
        reaper: NotRequired[bool]
        reaper_fd: NotRequired[int]
        timing: NotRequired[bool]  #: bench/init_overhead.py's per-stage breakdown

#: Follows CONFIG instead of `--` when the command's argv comes packed: its JSON
#: list, cut into pieces the init joins. bwrap refuses more than 9000 arguments
#: in all (its own, and `--args FD` counts too), so `echo` with 20,000 words
#: failed as a sandbox that could not be built; a few pieces of at most
#: ARGV_PIECE characters (a kernel's one argument stops at 128 KiB) leave only
#: ARG_MAX, the bound of every exec, as under the Landlock backend.
PACKED_ARGV = "--argv-json"
#: Longer argvs are packed; shorter ones stay readable in `ps` as they are.
ARGV_INLINE = 1024
ARGV_PIECE = 65536


def config_problem(value: object) -> str | None:
    """Why `value` is not a config of this version and schema, or None."""
    if not isinstance(value, dict) or value.get("v") != CONFIG_VERSION:
        return f"the config is not a version {CONFIG_VERSION} stockade-init config"
    unknown = sorted(str(k) for k in value if k not in CONFIG_KEYS)
    if unknown:
        return f"the config has keys this init does not know: {', '.join(unknown)}"
    return None
