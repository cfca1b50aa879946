"""`[sandbox]` configuration: defaults, the files that override them, and their errors.

Read from the user's config dir, then `./stockade.toml` (which the sandbox
keeps read-only, so a command cannot choose the boundary of the next one).
Unknown keys and wrong types are errors naming the key and the file: a
misspelt `unreadable` that silently did nothing would hide nothing.
"""

from __future__ import annotations

import os

from .errors import ConfigError

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Mapping

_STR_LIST = "list of strings"

# key: (type name, default)
_FIELDS: dict[str, tuple[str, object]] = {
    "enabled": ("bool", True),
    "workspace_root": ("path", ""),
    "default_timeout_seconds": ("number", 60.0),
    "max_output_bytes": ("int", 1 << 20),
    "backend": ("str", "auto"),
    "mode": ("str", "read-only"),
    "read_scope": ("str", "auto"),
    "unreadable": ("paths-or-none", None),
    "writable": (_STR_LIST, []),
    "granted_sockets": (_STR_LIST, []),
    "scratch": ("bool", True),
    "secret_env": (_STR_LIST, None),
    "commands_per_minute": ("int", 300),
    "ledger": ("path-or-false", ""),
    "approval_timeout_seconds": ("number", 120.0),
    "bwrap": ("path", ""),
    "max_pids": ("int", 200),
    "max_memory_mb": ("int-or-none", None),
    "tmp_size_mb": ("int", 1024),
    "max_file_size_mb": ("int-or-none", None),
    "allow_hosts": (_STR_LIST, []),
    "deny_hosts": (_STR_LIST, []),
    "cpu_quota_percent": ("int-or-none", None),
    # The landlock backend (and `auto` falling back to it) needs at least this ABI.
    "landlock_min_abi": ("int", 3),
    "require_landlock": ("bool", False),
}
_TABLES = ("command_policy",)


class SandboxConfig:
    """The settings in force. Construct with keywords, or `load_config()`."""

    enabled: bool
    workspace_root: str
    default_timeout_seconds: float
    max_output_bytes: int
    backend: str
    mode: str
    read_scope: str
    unreadable: str | list[str] | None
    writable: list[str]
    granted_sockets: list[str]
    scratch: bool
    secret_env: list[str] | None
    commands_per_minute: int
    ledger: str | bool
    approval_timeout_seconds: float
    bwrap: str
    max_pids: int
    max_memory_mb: int | None
    tmp_size_mb: int
    max_file_size_mb: int | None
    allow_hosts: list[str]
    deny_hosts: list[str]
    cpu_quota_percent: int | None
    landlock_min_abi: int
    require_landlock: bool
    command_policy: dict[str, object]
    sources: list[str]

    def __init__(self, **values: object) -> None:
        for key, (_kind, default) in _FIELDS.items():
            value = values.pop(key, default)
            setattr(self, key, list(value) if isinstance(value, list) else value)
        self.command_policy = dict(values.pop("command_policy", {}) or {})  # type: ignore[call-overload]
        self.sources = list(values.pop("sources", []) or [])  # type: ignore[call-overload]
        if values:
            raise ConfigError(f"unknown sandbox setting(s): {', '.join(sorted(values))}")
        _validate(self.__dict__, "arguments")

    def resolved_workspace_root(self, env: Mapping[str, str]) -> str:
        if self.workspace_root:
            return os.path.expanduser(self.workspace_root)
        base = env.get("XDG_DATA_HOME") or os.path.join(env.get("HOME") or "/tmp", ".local",
                                                        "share")
        return os.path.join(base, "stockade", "workspaces")

    def ledger_path(self, env: Mapping[str, str]) -> str | None:
        if self.ledger is False:
            return None
        if isinstance(self.ledger, str) and self.ledger:
            return os.path.expanduser(self.ledger)
        from .ledger import default_ledger_path

        return default_ledger_path(env)


def _validate(values: dict[str, object], source: str) -> None:
    for key, value in values.items():
        if key not in _FIELDS:
            continue
        kind = _FIELDS[key][0]
        ok = {
            "bool": isinstance(value, bool),
            "number": isinstance(value, int | float) and not isinstance(value, bool)
            and value > 0,
            "int": isinstance(value, int) and not isinstance(value, bool) and value > 0,
            "str": isinstance(value, str),
            "path": isinstance(value, str) and "\x00" not in value,
            "int-or-none": value is None or (isinstance(value, int)
                                             and not isinstance(value, bool) and value > 0),
            "path-or-false": value is False or (isinstance(value, str) and "\x00" not in value),
            _STR_LIST: value is None or (isinstance(value, list)
                                         and all(isinstance(v, str) for v in value)),
            "paths-or-none": value is None or isinstance(value, str)
            or (isinstance(value, list) and all(isinstance(v, str) for v in value)),
        }[kind]
        if not ok:
            want = {"number": "a positive number", "int": "a positive integer",
                    "path-or-false": "a path or false", "int-or-none": "a positive integer",
                    "paths-or-none":
                    "a list of paths or \"none\""}.get(kind, f"a {kind}")
            raise ConfigError(f"{source}: [sandbox] {key} must be {want}, got {value!r}")
    for key, allowed in (("backend", ("auto", "bubblewrap", "landlock", "seatbelt", "none")),
                         ("mode", ("read-only", "workspace-write", "full-access")),
                         ("read_scope", ("auto", "host", "strict"))):
        if key in values and values[key] not in allowed:
            raise ConfigError(
                f"{source}: [sandbox] {key} = {values[key]!r} is not one of {', '.join(allowed)}"
            )


    for key in ("allow_hosts", "deny_hosts"):
        entries = values.get(key)
        if isinstance(entries, list):
            _check_hosts(source, key, [str(e) for e in entries])


def _check_hosts(source: str, key: str, entries: list[str]) -> None:
    """A bad entry named with its file and key now, not as a failed command later."""
    for entry in entries:
        host = entry.partition("=")[0].strip() if key == "deny_hosts" else entry
        problem = host_entry_problem(host)
        if problem:
            raise ConfigError(f"{source}: [sandbox] {key} entry {entry!r}: {problem}")


def host_entry_problem(entry: str) -> str | None:
    """Why `entry` is no allow/deny host entry, or None when it is one."""
    if not entry.strip():
        return "empty host"
    if "://" in entry or "/" in entry.partition("://")[2]:
        host = entry.partition("://")[2].partition("/")[0] or "example.com"
        return f"give a host name, not a URL: try {host}"
    from .proxy.errors import InvalidHostEntry
    from .proxy.hosts import parse_pattern

    try:
        parse_pattern(entry)
    except InvalidHostEntry as exc:
        return str(exc)
    return None


def config_paths(env: Mapping[str, str], cwd: str) -> list[str]:
    base = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME") or "/", ".config")
    return [os.path.join(base, "stockade", "config.toml"), os.path.join(cwd, "stockade.toml")]


def load_config(env: Mapping[str, str] | None = None, cwd: str | None = None,
                paths: list[str] | None = None, **overrides: object) -> SandboxConfig:
    """Defaults, then each existing file in order, then `overrides` (CLI flags)."""
    env = os.environ if env is None else env
    merged: dict[str, object] = {}
    sources: list[str] = []
    for path in paths if paths is not None else config_paths(env, cwd or os.getcwd()):
        if not os.path.isfile(path):
            continue
        table = _read_table(path)
        merged.update({k: v for k, v in table.items() if k != "command_policy"})
        if "command_policy" in table:
            policy = dict(merged.get("command_policy", {}) or {})  # type: ignore[call-overload]
            policy.update(table["command_policy"])
            policy["_source"] = path
            merged["command_policy"] = policy
        sources.append(path)
    merged.update({k: v for k, v in overrides.items() if v is not None})
    merged["sources"] = sources
    return SandboxConfig(**merged)


def _read_table(path: str) -> dict[str, object]:
    import tomllib

    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: malformed TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    extra = [k for k in data if k != "sandbox"]
    if extra:
        raise ConfigError(
            f"{path}: unknown table or key {extra[0]!r} (settings go under [sandbox])"
        )
    table = data.get("sandbox", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: sandbox must be a table")
    unknown = [k for k in table if k not in _FIELDS and k not in _TABLES]
    if unknown:
        raise ConfigError(f"{path}: unknown key [sandbox] {unknown[0]!r}")
    if "command_policy" in table and not isinstance(table["command_policy"], dict):
        raise ConfigError(f"{path}: [sandbox] command_policy must be a table")
    _validate(table, path)
    return table
