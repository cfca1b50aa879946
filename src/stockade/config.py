"""`[sandbox]` configuration: defaults, the files that override them, and their errors.

Read from the user's config dir, then `./stockade.toml` (which the sandbox
keeps read-only, so a command cannot choose the boundary of the next one).
The project's file is content an agent may have written before, or outside,
the sandbox, so it may only narrow the user's settings unless trusted, and it
is read as the workspace's content is (`fsroot`): a link there is not
followed. No settings file is waited on (a FIFO, a device) or read past
`MAX_SETTINGS_BYTES`.
Unknown keys and wrong types are errors naming the key and the file: a
misspelt `unreadable` that silently did nothing would hide nothing.
"""

from __future__ import annotations

import os

from .errors import ConfigError
from .settingsfile import MAX_SETTINGS_BYTES, settings_problem

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any, ParamSpec, TypeVar

    P = ParamSpec("P")
    R = TypeVar("R")

_STR_LIST = "list of strings"

# key: (type name, default)
FIELDS: dict[str, tuple[str, object]] = {
    "enabled": ("bool", True),
    "workspace_root": ("path", ""),
    "default_timeout_seconds": ("number", 60.0),
    "max_output_bytes": ("int", 1 << 20),
    # What `stockade run` streams to a pipe or file before it ends the command.
    "stream_output_bytes": ("int", 64 << 20),
    "backend": ("str", "auto"),
    "mode": ("str", "read-only"),
    "read_scope": ("str", "auto"),
    "unreadable": ("paths-or-none", None),
    "writable": (_STR_LIST, []),
    "granted_sockets": (_STR_LIST, []),
    "scratch": ("bool", True),
    "allow_home_workspace": ("bool", False),
    "secret_env": (_STR_LIST, None),
    "commands_per_minute": ("int", 300),
    "ledger": ("path-or-false", ""),
    "approval_timeout_seconds": ("number", 120.0),
    # Unset: a bound derived from the machine (`memory_default_mb`); 0: none.
    "max_memory_mb": ("count-or-none", None),
    "tmp_size_mb": ("int", 1024),
    # A default, so one runaway file cannot fill the filesystem holding your
    # home (RLIMIT_FSIZE: the write that passes it fails with EFBIG).
    "max_file_size_mb": ("int-or-none", 4096),
    "allow_hosts": (_STR_LIST, []),
    "deny_hosts": (_STR_LIST, []),
    # `stockade run` through the per-user service (serviceclient.py reads it
    # from the user's file itself, before anything else is imported).
    "service": ("bool", False),
}


def _backend_fields() -> dict[str, tuple[str, object]]:
    """The keys the backends read, declared with each driver (see `drivers.registry`)."""
    from .drivers.registry import config_options

    kinds = {"str": "str", "int?": "int-or-none"}
    return {o.key: (kinds.get(o.kind, o.kind), o.default) for o in config_options().values()}


FIELDS.update(_backend_fields())


def _backend_maxima() -> dict[str, float]:
    from .drivers.registry import config_options

    return {o.key: o.maximum for o in config_options().values() if o.maximum is not None}


#: The keys whose numbers have an upper bound, and the bound.
_MAXIMA = _backend_maxima()
_TABLES = ("command_policy",)
#: Where a file was found: the user's own config, or inside the project (the
#: workspace), which the agent may have written.
USER = "user"
PROJECT = "project"


def _only_known_settings(init: Callable[P, R]) -> Callable[P, R]:
    """A keyword no setting has is a `ConfigError` naming it, not Python's TypeError:
    the same error a config file's unknown key gets."""
    code = init.__code__
    known = frozenset(code.co_varnames[1:code.co_argcount + code.co_kwonlyargcount])
    _KEYWORDS_OF[init.__qualname__] = known

    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        unknown = sorted(k for k in kwargs if k not in known)
        if unknown:
            raise ConfigError(f"unknown sandbox setting(s): {', '.join(unknown)}")
        return init(*args, **kwargs)

    checked.__doc__ = init.__doc__
    return checked


_KEYWORDS_OF: dict[str, frozenset[str]] = {}


def _validate_arguments(given: dict[str, object]) -> None:
    """The keywords' values and `backend_options`' keys and values, checked as a
    file's are: "false" as a string is true, and for windows_allow_job_only that is
    the tier with no filesystem boundary."""
    _validate(given, "arguments")
    backend_options = dict(given.get("backend_options") or {})  # type: ignore[call-overload]
    _check_backend_options(backend_options, "arguments")
    _validate(backend_options, "arguments")


class SandboxConfig:
    """The settings in force. Construct with keywords, or `load_config()`.

    Every setting is a keyword with its type and default, so a type checker
    and an IDE know them; a key no setting has is a `ConfigError` at run
    time too, naming the key (a misspelt `unreadable` that silently did
    nothing would hide nothing). The keys a backend reads are declared with
    its driver (`drivers.registry`); `backend_options` carries those of a
    registered backend that have no keyword here.
    """

    @_only_known_settings
    def __init__(
        self,
        *,
        enabled: bool = True,
        workspace_root: str = "",
        default_timeout_seconds: float = 60.0,
        max_output_bytes: int = 1 << 20,
        stream_output_bytes: int = 64 << 20,
        backend: str = "auto",
        mode: str = "read-only",
        read_scope: str = "auto",
        unreadable: str | list[str] | None = None,
        writable: Sequence[str] = (),
        granted_sockets: Sequence[str] = (),
        scratch: bool = True,
        allow_home_workspace: bool = False,
        secret_env: Sequence[str] | None = None,
        commands_per_minute: int = 300,
        ledger: str | bool = "",
        approval_timeout_seconds: float = 120.0,
        max_memory_mb: int | None = None,
        tmp_size_mb: int = 1024,
        # A default, so one runaway file cannot fill the filesystem holding your
        # home (RLIMIT_FSIZE: the write that passes it fails with EFBIG).
        max_file_size_mb: int | None = 4096,
        allow_hosts: Sequence[str] = (),
        deny_hosts: Sequence[str] = (),
        service: bool = False,
        # The Linux backends' keys (declared in drivers/linux/host/options.py).
        bwrap: str = "",
        max_pids: int = 200,
        cpu_quota_percent: int | None = None,
        landlock_min_abi: int = 3,
        require_landlock: bool = False,
        warm_sandboxes: int = 1,
        warm_idle_seconds: float = 300.0,
        command_policy: Mapping[str, object] | None = None,
        backend_options: Mapping[str, object] | None = None,
        sources: Sequence[str] = (),
        project_sources: Sequence[str] = (),
    ) -> None:
        _validate_arguments({k: v for k, v in locals().items() if k != "self"})
        self.enabled = enabled
        self.workspace_root = workspace_root
        self.default_timeout_seconds = default_timeout_seconds
        self.max_output_bytes = max_output_bytes
        #: The pass-through budget: what `stockade run` without `--json` lets
        #: through to a pipe or file (stdout and stderr together), nothing held.
        self.stream_output_bytes = stream_output_bytes
        self.backend = backend
        self.mode = mode
        self.read_scope = read_scope
        self.unreadable = (list(unreadable) if isinstance(unreadable, list | tuple)
                           else unreadable)
        self.writable = list(writable or ())
        self.granted_sockets = list(granted_sockets or ())
        self.scratch = scratch
        #: A workspace holding the home may be written only when the person says
        #: so: every dotfile a login, a shell, `less` or a build reads is in it.
        self.allow_home_workspace = allow_home_workspace
        self.secret_env = list(secret_env) if secret_env is not None else None
        self.commands_per_minute = commands_per_minute
        self.ledger = ledger
        self.approval_timeout_seconds = approval_timeout_seconds
        self.max_memory_mb = max_memory_mb
        self.tmp_size_mb = tmp_size_mb
        self.max_file_size_mb = max_file_size_mb
        self.allow_hosts = list(allow_hosts or ())
        self.deny_hosts = list(deny_hosts or ())
        #: Whether `stockade run` hands its commands to the per-user service.
        self.service = service
        self._set_linux_keys(bwrap, max_pids, cpu_quota_percent, landlock_min_abi,
                             require_landlock, warm_sandboxes, warm_idle_seconds)
        self.command_policy: dict[str, object] = dict(command_policy or {})
        #: Keys of registered backends that have no keyword above.
        self.backend_options: dict[str, object] = dict(backend_options or {})
        self.sources = list(sources or ())
        #: The files in `sources` found in the project rather than the user's config.
        self.project_sources = list(project_sources or ())

    def _set_linux_keys(self, bwrap: str, max_pids: int, cpu_quota_percent: int | None,
                        landlock_min_abi: int, require_landlock: bool, warm_sandboxes: int,
                        warm_idle_seconds: float) -> None:
        self.bwrap = bwrap
        self.max_pids = max_pids
        self.cpu_quota_percent = cpu_quota_percent
        self.landlock_min_abi = landlock_min_abi
        self.require_landlock = require_landlock
        self.warm_sandboxes = warm_sandboxes
        self.warm_idle_seconds = warm_idle_seconds

    def option(self, key: str) -> object:
        """A backend's setting by its key: a keyword above, or one of `backend_options`
        (its registry default when unset)."""
        if key in _KEYWORDS:
            return getattr(self, key)
        if key in self.backend_options:
            return self.backend_options[key]
        option = FIELDS.get(key)
        if option is None:
            raise ConfigError(f"no backend declares the setting {key!r}")
        return option[1]

    def memory_default_mb(self) -> int | None:
        """The bound on a command's tree where neither this config nor the command
        sets max_memory_mb: the machine's (Linux), unless max_memory_mb = 0."""
        if self.max_memory_mb is not None:
            return None  # 0: no bound; a number reaches every command as its ceiling
        from .drivers.linux.host.limits import machine_memory_default

        return machine_memory_default()

    def resolved_workspace_root(self, env: Mapping[str, str], platform: str = "") -> str:
        if self.workspace_root:
            return os.path.expanduser(self.workspace_root)
        from .paths import data_dir

        return os.path.join(data_dir(env, platform), "workspaces")

    def ledger_path(self, env: Mapping[str, str], platform: str = "") -> str | None:
        if self.ledger is False:
            return None
        if isinstance(self.ledger, str) and self.ledger:
            return os.path.expanduser(self.ledger)
        from .ledger import default_ledger_path

        return default_ledger_path(env, platform)


#: The settings that are keywords of `SandboxConfig` (the rest of a backend's
#: keys travel in `backend_options`).
_KEYWORDS = _KEYWORDS_OF["SandboxConfig.__init__"]


def _check_backend_options(values: Mapping[str, object], source: str) -> None:
    unknown = sorted(k for k in values if k not in FIELDS or k in _KEYWORDS)
    if unknown:
        raise ConfigError(
            f"{source}: backend_options may hold only keys a backend declares that have no "
            f"setting of their own: {', '.join(unknown)}")


def _validate(values: Mapping[str, object], source: str) -> None:
    for key, value in values.items():
        if key not in FIELDS:
            continue
        kind = FIELDS[key][0]
        ok = {
            "bool": isinstance(value, bool),
            # Finite: an `inf` timeout overflowed the first timed wait it reached.
            "number": isinstance(value, int | float) and not isinstance(value, bool)
            and 0 < value < float("inf"),
            "int": isinstance(value, int) and not isinstance(value, bool) and value > 0,
            "count": isinstance(value, int) and not isinstance(value, bool) and value >= 0,
            "count-or-none": value is None or (isinstance(value, int)
                                               and not isinstance(value, bool) and value >= 0),
            "str": isinstance(value, str),
            "path": isinstance(value, str) and "\x00" not in value,
            "int-or-none": value is None or (isinstance(value, int)
                                             and not isinstance(value, bool) and value > 0),
            "path-or-false": value is False or (isinstance(value, str) and "\x00" not in value),
            _STR_LIST: value is None or (isinstance(value, list | tuple)
                                         and all(isinstance(v, str) for v in value)),
            "paths-or-none": value is None or isinstance(value, str)
            or (isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)),
        }[kind]
        if not ok:
            want = {"number": "a positive finite number", "int": "a positive integer",
                    "count": "0 or a positive integer",
                    "count-or-none": "0 or a positive integer",
                    "path-or-false": "a path or false", "int-or-none": "a positive integer",
                    "paths-or-none":
                    "a list of paths or \"none\""}.get(kind, f"a {kind}")
            raise ConfigError(f"{source}: [sandbox] {key} must be {want}, got {value!r}")
        top = _MAXIMA.get(key)
        if top is not None and not value <= top:  # type: ignore[operator]
            raise ConfigError(
                f"{source}: [sandbox] {key} must be a finite number of at most {top:g}, "
                f"got {value!r}")
    from .drivers.registry import names

    for key, allowed in (("backend", names()),
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
    return [path for path, _kind in config_sources(env, cwd)]


def config_sources(env: Mapping[str, str], cwd: str) -> list[tuple[str, str]]:
    """(path, "user" | "project"): the user's own file, then the project's."""
    from .paths import user_config

    return [(user_config(env), USER),
            (os.path.join(cwd, "stockade.toml"), PROJECT)]


def load_config(env: Mapping[str, str] | None = None, cwd: str | None = None,
                paths: list[str] | None = None, **overrides: object) -> SandboxConfig:
    """Defaults, then each existing file in order, then `overrides` (CLI flags).

    Files named in `paths` are the caller's choice and count as the user's.
    The project's file may only narrow what the rest allows unless trusted
    (see `stockade.trust`).
    """
    env = os.environ if env is None else env
    given = _given(overrides)
    sources = ([(p, USER) for p in paths] if paths is not None
               else config_sources(env, cwd or os.getcwd()))
    merged: dict[str, object] = {}
    used: list[str] = []
    project: list[str] = []
    for path, kind in sources:
        follow = kind == USER
        try:
            data = _read_bytes(path, follow=follow)
        except OSError as exc:
            # A project file that links to the user's own config is the user's word.
            real = "" if follow else _users_own(path, used)
            if not real:
                # A file the caller named is theirs to fix, not to remove.
                fix = "name a TOML file" if paths is not None else "remove it"
                raise ConfigError(f"{path}: {settings_problem(path, exc, follow=follow, fix=fix)}"
                                  ) from exc
            data, kind = read_settings(real, follow=True), USER
        if data is None:
            if paths is not None:
                # Named and missing: the run went on with the defaults, and
                # exited 0 under settings nobody chose.
                raise ConfigError(f"{path}: no such file; name an existing TOML file "
                                  "(--config FILE)")
            continue
        table = parse_settings(data, path)
        if kind == PROJECT:
            if "service" in table:
                # Which process runs the next command is the person's choice.
                raise ConfigError(f"{path}: `service` is read only from your own config "
                                  f"({config_sources(env, '/')[0][0]}); remove it here")
            from .trust import check_project

            # A key the arguments set never takes effect from the file.
            check_project(_allowed(merged, given),
                          _as_limits({k: v for k, v in table.items() if k not in given}),
                          path, data, env, _shell_cwd())
            project.append(path)
        _merge(merged, table, path)
        used.append(path)
    merged.update(given)
    merged["sources"] = used
    merged["project_sources"] = project
    return SandboxConfig(**_as_keywords(merged))


def _as_keywords(values: dict[str, Any]) -> dict[str, Any]:
    """A file's keys as `SandboxConfig` keywords: a backend's key without a keyword
    of its own goes into `backend_options`."""
    out = {k: v for k, v in values.items() if k in _KEYWORDS}
    extra = {k: v for k, v in values.items() if k not in _KEYWORDS}
    if extra:
        out["backend_options"] = {**dict(out.get("backend_options") or {}), **extra}
    return out


def allowed_settings(env: Mapping[str, str], **overrides: object) -> dict[str, object]:
    """Every setting the user's own file (and `overrides`) allow: a project file's yardstick."""
    merged: dict[str, object] = {}
    for path, kind in config_sources(env, "/"):
        data = read_settings(path, follow=True) if kind == USER else None
        if data is not None:
            _merge(merged, parse_settings(data, path), path)
    return _allowed(merged, _given(overrides))


def _given(overrides: Mapping[str, object]) -> dict[str, object]:
    """The caller's settings, a backend's keys among them at the top level.

    A caller's `backend_options` travelled as one value while a file's backend
    keys are top-level, so a project file's `windows_tier` both escaped the
    "a key the arguments set never takes effect from the file" rule and was
    measured against the default instead of the caller's choice.
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    options = given.pop("backend_options", None) or {}
    _check_backend_options(options, "arguments")  # type: ignore[arg-type]
    return {**dict(options), **given}  # type: ignore[call-overload]


def _allowed(merged: dict[str, object], given: dict[str, object]) -> dict[str, object]:
    allowed: dict[str, object] = {key: default for key, (_kind, default) in FIELDS.items()}
    allowed.update(merged)
    allowed.update(given)
    allowed.setdefault("command_policy", {})
    if allowed.get("max_memory_mb") is None:
        from .drivers.linux.host.limits import machine_memory_default

        allowed["max_memory_mb"] = machine_memory_default()
    return _as_limits(allowed)


def _as_limits(values: dict[str, object]) -> dict[str, object]:
    """max_memory_mb as `stockade.trust` ranks a limit: 0 (no bound) is None.

    Without it a project file's `max_memory_mb = 0`, or one above the
    machine's default, would pass for narrower and lift the bound untrusted.
    """
    if values.get("max_memory_mb") == 0:
        return {**values, "max_memory_mb": None}
    return values


def _merge(merged: dict[str, object], table: dict[str, object], path: str) -> None:
    merged.update({k: v for k, v in table.items() if k != "command_policy"})
    if "command_policy" in table:
        policy = dict(merged.get("command_policy", {}) or {})  # type: ignore[call-overload]
        policy.update(table["command_policy"])
        policy["_source"] = path
        merged["command_policy"] = policy


def _shell_cwd() -> str:
    # The message's `./stockade.toml` is relative to where the person typed, not the workspace.
    try:
        return os.getcwd()
    except OSError:
        return "/"


def _users_own(path: str, used: list[str]) -> str:
    """The real path of the user's file `path` links to, or "" when it is no such link."""
    real = os.path.realpath(path)
    return real if any(real == os.path.realpath(u) for u in used) else ""


def _read_bytes(path: str, *, follow: bool) -> bytes | None:
    """A settings file's bytes, None when there is none; OSError when it cannot be one.

    `follow`: the user's own file may be a link into their dotfiles; the
    project's is the workspace's, where a link let a command choose which
    file -- another project's trusted one -- spoke for this workspace.
    """
    from .fsroot import read_fd, read_file

    try:
        if not follow:
            return read_file(path, MAX_SETTINGS_BYTES)
        # Non-blocking either way: a FIFO opened for reading waits for a writer forever.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        if not follow and _empty_directory(path):
            return None
        raise
    try:
        return read_fd(fd, MAX_SETTINGS_BYTES, path)
    finally:
        os.close(fd)


def _empty_directory(path: str) -> bool:
    """Whether `path` is an empty directory, which holds no settings: the Windows
    driver keeps one at a project's missing `stockade.toml` while a command runs
    (and after a crash, until its journal is replayed), and every other stockade
    starting in that workspace meanwhile refused to load its config."""
    import stat

    try:
        return stat.S_ISDIR(os.lstat(path).st_mode) and not os.listdir(path)
    except OSError:
        return False


def read_settings(path: str, *, follow: bool) -> bytes | None:
    """`_read_bytes`, its refusal a ConfigError naming the file and what is wrong with it."""
    try:
        return _read_bytes(path, follow=follow)
    except OSError as exc:
        raise ConfigError(f"{path}: {settings_problem(path, exc, follow=follow)}") from exc


def read_project_file(path: str) -> tuple[bytes, dict[str, object]] | None:
    """The bytes and the parsed table, read as the workspace's (see `_read_bytes`); None
    when there is no file. Trust is judged on exactly what was parsed."""
    data = read_settings(path, follow=False)
    return None if data is None else (data, parse_settings(data, path))


def parse_settings(raw: bytes, path: str) -> dict[str, object]:
    import tomllib

    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: malformed TOML: not UTF-8 ({exc.reason})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: malformed TOML: {exc}") from exc
    extra = [k for k in data if k != "sandbox"]
    if extra:
        raise ConfigError(
            f"{path}: unknown table or key {extra[0]!r} (settings go under [sandbox])"
        )
    table = data.get("sandbox", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: sandbox must be a table")
    unknown = [k for k in table if k not in FIELDS and k not in _TABLES]
    if unknown:
        raise ConfigError(f"{path}: unknown key [sandbox] {unknown[0]!r}")
    if "command_policy" in table and not isinstance(table["command_policy"], dict):
        raise ConfigError(f"{path}: [sandbox] command_policy must be a table")
    _validate(table, path)
    return table
