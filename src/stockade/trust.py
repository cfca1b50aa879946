"""Project configuration may narrow the boundary; only a trusted file may widen it.

A `stockade.toml` inside the workspace is content the agent may have
written, so reading it as the user's word would let one command choose the
boundary of the next. Here a project file is compared, key by key, with what
the user's own config and the caller's arguments allow; anything wider is an
error unless the person trusted that exact file (path and SHA-256, like
`direnv allow`). An edit makes it untrusted again.

The comparisons take plain dicts and the environment as a mapping, so they
consult nothing else. json and hashlib are imported only once a project file
needs them: `stockade run` pays for every import on every command.
"""

from __future__ import annotations

import os

from .errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

_MODES = ("read-only", "workspace-write", "full-access")
# `auto` may resolve to host on this machine, so it ranks between the two.
_READ_SCOPES = ("strict", "auto", "host")
_ENFORCEMENTS = ("off", "warn", "block")
# A larger value allows more; None is "no limit".
_LIMITS = ("max_pids", "max_memory_mb", "tmp_size_mb", "max_file_size_mb", "cpu_quota_percent",
           "default_timeout_seconds", "max_output_bytes", "stream_output_bytes",
           "commands_per_minute", "approval_timeout_seconds")
# Who builds the boundary, who records it, whether it runs at all: any change is wider.
_FIXED = ("backend", "bwrap", "workspace_root", "ledger", "enabled")

# (key, project value, allowed value) -> a widening as "key = value", "allowed"
Widening = tuple[str, object, str]


def toml_value(value: object) -> str:
    """A value as it would be written in stockade.toml (json would cost an import)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if value is None:
        return "unset"
    return str(value)


def _rank(order: tuple[str, ...]) -> Callable[[object, object], bool]:
    def wider(project: object, allowed: object) -> bool:
        # An unrecognised value is wider: validation catches typos first.
        p = order.index(project) if project in order else len(order)
        a = order.index(allowed) if allowed in order else len(order)
        return p > a
    return wider


def _limit_wider(project: object, allowed: object) -> bool:
    if project is None:
        return allowed is not None
    if allowed is None:
        return False
    return float(project) > float(allowed)  # type: ignore[arg-type]


def _paths(spec: object, env: Mapping[str, str]) -> set[str]:
    from .hostpaths import paths

    if not spec:
        return set()
    return {os.path.normpath(p) for p in paths(spec, env)}  # type: ignore[arg-type]


def _hosts(spec: object) -> set[str]:
    return {str(h).strip().lower() for h in (spec or [])}  # type: ignore[attr-defined]


def _unreadable(spec: object, env: Mapping[str, str], granted: object) -> set[str]:
    from .hostpaths import paths, unreadable

    sockets = paths(granted, env) if granted else []  # type: ignore[arg-type]
    # What the default shows back inside its areas is left out: a list that
    # hides an area whole is narrower than the default, never wider.
    hidden, _shown = unreadable(spec, env, sockets)  # type: ignore[arg-type]
    # Workspace patterns count too: a project file that drops `dotenv`, or adds
    # a `!` taking a match back, shows the person's `.env` (patterns.py).
    from .patterns import workspace_patterns

    patterns = workspace_patterns(spec)  # type: ignore[arg-type]
    return {os.path.normpath(p) for p in hidden} | {
        f"pattern {p}" for p in patterns if not p.startswith("!")}


def _exceptions(spec: object) -> set[str]:
    """The `!` patterns of an `unreadable`: each one shows what a pattern hid."""
    from .patterns import workspace_patterns

    return {p for p in workspace_patterns(spec) if p.startswith("!")}  # type: ignore[arg-type]


def _secret_env(spec: object) -> set[str]:
    if spec is None:
        from .envscrub import DEFAULT_SECRET_ENV

        return set(DEFAULT_SECRET_ENV)
    return {str(s) for s in spec}  # type: ignore[attr-defined]


def sandbox_widenings(allowed: Mapping[str, object], project: Mapping[str, object],
                      env: Mapping[str, str]) -> list[Widening]:
    """Each `[sandbox]` key of `project` that allows more than `allowed` does.

    `allowed` holds every setting in force before the project file (defaults,
    the user's files, the caller's arguments); `project` only the keys the
    file sets. Keys are checked in the file's order so the message follows it.
    """
    out: list[Widening] = []
    mode_wider, scope_wider = _rank(_MODES), _rank(_READ_SCOPES)
    for key, value in project.items():
        if key == "command_policy":
            continue
        have = allowed.get(key)
        wider: bool
        shown = have if isinstance(have, str) else toml_value(have)
        if key == "mode":
            wider = mode_wider(value, have)
        elif key == "read_scope":
            wider = scope_wider(value, have)
        elif key in _FIXED:
            wider = value != have
            if key in ("bwrap", "workspace_root", "ledger") and have == "":
                shown = "the default"
        elif key in _LIMITS:
            wider = _limit_wider(value, have)
            if have is None:
                shown = "no limit"
        elif key in ("writable", "granted_sockets"):
            extra = _paths(value, env) - _paths(have, env)
            wider, shown = bool(extra), toml_value(have or [])
        elif key == "allow_hosts":
            wider, shown = bool(_hosts(value) - _hosts(have)), toml_value(have or [])
        elif key == "deny_hosts":
            wider, shown = bool(_hosts(have) - _hosts(value)), toml_value(have or [])
        elif key == "unreadable":
            granted = allowed.get("granted_sockets")
            wider = bool(_unreadable(have, env, granted) - _unreadable(value, env, granted)
                         or _exceptions(value) - _exceptions(have))
            if have is None:
                shown = "the default list"
        elif key == "secret_env":
            wider = bool(_secret_env(have) - _secret_env(value))
            if have is None:
                shown = "the default patterns"
        elif key == "scratch":
            wider = value is True and have is False
        elif key == "require_landlock":
            wider = value is False and have is True
        elif key == "landlock_min_abi":
            wider = int(value) < int(have)  # type: ignore[call-overload]
        else:
            # A key this table does not know yet cannot be shown to be narrower.
            wider = value != have
        if wider:
            out.append((f"[sandbox] {key} = {toml_value(value)}", value, shown))
    return out


def _policy_value(policy: Mapping[str, object], key: str) -> object:
    defaults: dict[str, object] = {"enabled": True, "enforcement": "block",
                                   "use_default_rules": True, "custom_rules": []}
    return policy.get(key, defaults[key])


def policy_widenings(allowed: Mapping[str, object], project: Mapping[str, object]
                     ) -> list[Widening]:
    """Each `[sandbox.command_policy]` key of `project` that filters less than `allowed`."""
    out: list[Widening] = []
    table = "[sandbox.command_policy]"
    for key, value in project.items():
        if key.startswith("_"):
            continue
        have = _policy_value(allowed, key)
        if key == "enforcement":
            wider = _rank(_ENFORCEMENTS)(have, value)
        elif key in ("enabled", "use_default_rules"):
            wider = value is False and have is not False
        elif key == "custom_rules":
            mine = value if isinstance(value, list) else []
            missing = [r for r in have if r not in mine]  # type: ignore[attr-defined]
            if missing:
                names = [str(r.get("name", "?")) if isinstance(r, dict) else "?"
                         for r in missing]
                out.append((f"{table} custom_rules (drops {', '.join(names)})", value,
                            "every rule of yours"))
            continue
        else:
            wider = value != have
        if wider:
            out.append((f"{table} {key} = {toml_value(value)}", value,
                        have if isinstance(have, str) else toml_value(have)))
    return out


def widenings(allowed: Mapping[str, object], project: Mapping[str, object],
              env: Mapping[str, str]) -> list[Widening]:
    """Everything in the `[sandbox]` table `project` that is wider than `allowed`."""
    out = sandbox_widenings(allowed, project, env)
    policy = project.get("command_policy")
    if isinstance(policy, dict):
        have = allowed.get("command_policy")
        out += policy_widenings(have if isinstance(have, dict) else {}, policy)
    return out


def shown_path(path: str, cwd: str) -> str:
    """`./stockade.toml` for the file in cwd, else the path; quoted for a shell if needed."""
    if os.path.dirname(os.path.abspath(path)) == os.path.abspath(cwd):
        path = "./" + os.path.basename(path)
    safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./-_~"
    if path and all(c in safe for c in path):
        return path
    return "'" + path.replace("'", "'\"'\"'") + "'"


def digest(data: bytes) -> str:
    from .paths import sha256_hex

    return sha256_hex(data)


def real_path(path: str) -> str:
    """`path` with the links above it resolved and its own name kept, whatever it is now.

    A project file is read without following a link at its name, and its
    record is looked up by the same name: a link planted there after the
    read must not turn the lookup into one for the file it points to,
    another project's trusted file with the same bytes.
    """
    head, name = os.path.split(os.path.abspath(path))
    return os.path.join(os.path.realpath(head), name)


#: Far past any number of files a person trusts; a bound on what a damaged store costs.
MAX_STORE_BYTES = 16 << 20


def store_path(env: Mapping[str, str]) -> str:
    from .paths import state_dir

    # No HOME: "/", never a shared /tmp, where another user could plant the
    # file that says what is trusted.
    return os.path.join(state_dir(env, no_home="/"), "trusted.json")


class TrustStore:
    """The files a person trusted: real path -> SHA-256 of the content they reviewed."""

    def __init__(self, path: str, env: Mapping[str, str] | None = None) -> None:
        self.path = path
        #: Where XDG_STATE_HOME came from, for the directory's rules (`make_own_dir`).
        self.env: Mapping[str, str] = env or {}

    @classmethod
    def for_env(cls, env: Mapping[str, str]) -> TrustStore:
        return cls(store_path(env), env)

    def entries(self) -> dict[str, str]:
        import json
        from errno import EFBIG

        from .fsroot import read_fd
        from .settingsfile import settings_problem

        try:
            # Non-blocking: a FIFO here would hold every start-up in a project that
            # widens anything, waiting for a writer.
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
                         | os.O_NOCTTY)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot read the trust store: {exc.strerror}"
                              ) from exc
        try:
            st = os.fstat(fd)
            # Whoever can write this file can widen every project's boundary.
            if st.st_uid != os.geteuid() or st.st_mode & 0o022:
                raise ConfigError(f"{self.path}: the trust store must be yours and writable "
                                  f"only by you; remove it and trust the files again")
            try:
                raw = read_fd(fd, MAX_STORE_BYTES, self.path)
            except OSError as exc:
                problem = (f"larger than {MAX_STORE_BYTES >> 20} MiB" if exc.errno == EFBIG
                           else settings_problem(self.path, exc, follow=False).removesuffix(
                               "; remove it"))
                raise ConfigError(f"{self.path}: the trust store is {problem}; remove it and "
                                  "trust the files again") from exc
        finally:
            os.close(fd)
        try:
            data = json.loads(raw)
            files = data["files"]
            if not isinstance(files, dict) or not all(
                    isinstance(k, str) and isinstance(v, dict)
                    and isinstance(v.get("sha256"), str) for k, v in files.items()):
                raise ValueError("files")
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{self.path}: the trust store is damaged ({exc}); remove it "
                              f"and trust the files again") from exc
        return {path: entry["sha256"] for path, entry in files.items()}

    def recorded(self, path: str) -> str | None:
        return self.entries().get(real_path(path))

    def is_trusted(self, path: str, sha256: str) -> bool:
        return self.recorded(path) == sha256

    def trust(self, path: str, sha256: str) -> None:
        entries = self.entries()
        entries[real_path(path)] = sha256
        self._write(entries)

    def revoke(self, path: str) -> bool:
        entries = self.entries()
        key = next((k for k in (real_path(path), os.path.realpath(path),
                                os.path.abspath(path)) if k in entries), "")
        if entries.pop(key, None) is None:
            return False
        self._write(entries)
        return True

    def _write(self, entries: dict[str, str]) -> None:
        import json

        from .paths import make_own_dir

        directory = os.path.dirname(self.path)
        make_own_dir(directory, self.env, "XDG_STATE_HOME")
        text = json.dumps({"version": 1, "files": {p: {"sha256": d} for p, d in
                                                   sorted(entries.items())}}, indent=1)
        tmp = f"{self.path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(text + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            # A reader sees the old store or the new one, never half of one.
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def check_project(allowed: Mapping[str, object], table: Mapping[str, object], path: str,
                  data: bytes, env: Mapping[str, str], cwd: str) -> None:
    """Raise ConfigError if the project file `path` widens `allowed` and is not trusted.

    `cwd` only shortens the path in the message.
    """
    found = widenings(allowed, table, env)
    if not found:
        return
    sha = digest(data)
    store = TrustStore.for_env(env)
    recorded = store.recorded(path)
    if recorded == sha:
        return
    shown = shown_path(path, cwd)
    what = "; ".join(f"{setting} is wider than your own config allows ({have})"
                     for setting, _value, have in found)
    changed = " (it changed since you trusted it)" if recorded is not None else ""
    raise ConfigError(f"{shown}: {what}{changed}; review the file and run: "
                      f"stockade trust {shown}")
