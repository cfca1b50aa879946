"""The stockade-init config's schema: its version and keys, defined once.

`layers.init_config` and the Landlock driver write these keys, the init
(`initcore.main`) reads them, and both sides refuse a key outside the
list: a misspelt or stale key the init silently ignored would be a layer
silently not applied. Its own module because the init imports it as a
top-level sibling (only built-ins, never the stockade package), and the
host must not pay for importing the whole init to learn two constants.
"""

CONFIG_VERSION = 1
CONFIG_KEYS = frozenset((
    "v", "seccomp", "landlock", "landlock_list", "require_landlock", "keep_fds", "env",
    "bridge", "no_spawn", "lifeline_fd", "rlimits", "cwd", "parent", "drop_caps", "reaper",
    "reaper_fd", "timing", "ready_fd", "park_fd", "publish", "namespaces", "private_files"))

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
