"""What every subcommand's argument handling shares: its usage error, option parsing,
the session `run`, `shell` and `explain` open, and the checks of flag values they take
alike.

Kept apart from cli.py so that the subcommands in modules of their own
(shell.py, explain.py, completion.py) use them without reaching into the CLI.
"""

from __future__ import annotations

import os

from .clitables import CHOICES, SHORT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .capabilities import SandboxCapabilities
    from .core import SessionWorkspace
    from .sync import SyncWorkspaceSandbox


class UsageError(Exception):
    def __init__(self, message: str, usage: str) -> None:
        super().__init__(message)
        self.usage = usage


def command_help(command: str) -> str:
    """`stockade COMMAND --help`, from the one description of the CLI (clispec.py):
    argparse renders it, so every subcommand's help has one style."""
    from .clispec import help_text

    return help_text(command)


def positive_number(values: dict[str, object], key: str, kind: type, usage: str
                    ) -> float | int | None:
    """A finite number above zero: every numeric flag, one rule, one message."""
    raw = values.get(key)
    if raw is None:
        return None
    what = "a positive integer" if kind is int else "a positive number"
    try:
        number = kind(raw)
    except ValueError:
        number = None
    # `nan > 0` is false and `inf - inf` is nan: both fall out here.
    if number is None or not number > 0 or number - number != 0:
        raise UsageError(f"--{key.replace('_', '-')} must be {what}, got {str(raw)!r}",
                         usage)
    return number  # type: ignore[no-any-return]


def check_host_flags(values: dict[str, object], usage: str) -> None:
    """`--allow-host` and `--deny-host` entries, refused as usage before anything starts."""
    from .config import host_entry_problem

    for key in ("allow_host", "deny_host"):
        for entry in values.get(key, []):  # type: ignore[attr-defined]
            # A deny entry may carry its reason: `host=why`.
            host = str(entry).partition("=")[0].strip() if key == "deny_host" else str(entry)
            problem = host_entry_problem(host)
            if problem:
                flag = "--" + key.replace("_", "-")
                if problem.startswith("give a host name"):
                    problem = problem.replace("try ", f"try {flag} ")
                raise UsageError(f"{flag} {str(entry)!r}: {problem}", usage)


def explicit_env(entries: list[str], usage: str) -> dict[str, str]:
    """`--env NAME` (the caller's value) and `--env NAME=VALUE`, for one command.

    The way to hand a command a secret the scrub would drop: `env NAME=value
    cmd` put the value in argv, which the ledger keeps and `stockade audit`
    prints. Here the value travels in the command's environment only.
    """
    env: dict[str, str] = {}
    for entry in entries:
        name, eq, value = str(entry).partition("=")
        if not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise UsageError(f"--env {str(entry)!r}: give NAME or NAME=VALUE", usage)
        if not eq:
            if name not in os.environ:
                raise UsageError(f"--env {name}: {name} is not set here, so there is no "
                                 f"value to pass (use --env {name}=VALUE)", usage)
            value = os.environ[name]
        env[name] = value
    return env


def escape(text: str) -> str:
    """Control characters as escapes: a name from the command line must not move the
    cursor, recolour the terminal or forge a second line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def parse_options(argv: list[str], options: dict[str, tuple[bool, bool, str]],
                  usage: str) -> tuple[dict[str, object], list[str]]:
    """`--name value`, `--name=value`, flags, repeats; everything after `--` is the command."""
    values: dict[str, object] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return values, argv[i + 1:]
        if arg in SHORT and SHORT[arg] in options:
            arg = SHORT[arg]
        if not arg.startswith("--"):
            return values, argv[i:]
        name, eq, inline = arg.partition("=")
        spec = options.get(name)
        if spec is None:
            raise UsageError(f"unknown option {name}", usage)
        takes, repeat, _ = spec
        if takes:
            if eq:
                value: object = inline
            elif i + 1 < len(argv):
                i += 1
                value = argv[i]
            else:
                raise UsageError(f"{name} needs a value", usage)
        else:
            if eq:
                raise UsageError(f"{name} takes no value", usage)
            value = True
        key = name[2:].replace("-", "_")
        allowed = CHOICES.get(name) if takes else None
        if allowed is not None and value not in allowed:
            raise UsageError(f"{name} must be one of {', '.join(allowed)}, got "
                             f"{str(value)!r}", usage)
        if repeat:
            values.setdefault(key, []).append(value)  # type: ignore[attr-defined]
        else:
            values[key] = value
        i += 1
    return values, []


def open_session(values: dict[str, object], *, prefix: str,
                 max_output_bytes: float | None = None, probe: bool = True
                 ) -> tuple[SyncWorkspaceSandbox, SessionWorkspace, str]:
    """(sandbox, session, mode) from the flags `run` and `shell` share.

    `probe=False` for a one-shot command: the bwrap probe costs a sandbox of
    its own, and a failed start is diagnosed afterwards instead.
    """
    from .approval import ApprovalGate
    from .capabilities import parse_mode
    from .config import load_config
    from .sync import SyncWorkspaceSandbox

    env = os.environ
    if values.get("mode") is not None:
        parse_mode(str(values["mode"]))
    workspace = str(values.get("workspace") or os.getcwd())
    config_path = values.get("config")
    config = load_config(env, workspace, paths=[str(config_path)] if config_path else None,
                         mode=values.get("mode"), backend=values.get("backend"),
                         max_output_bytes=max_output_bytes)
    denied_hosts = values.get("deny_host")
    if denied_hosts:
        config.deny_hosts = [*config.deny_hosts, *map(str, denied_hosts)]  # type: ignore[call-overload]
    mode = parse_mode(config.mode)
    approver: object
    if values.get("yes"):
        approver = _AutoApprove()
    else:
        # Asks on /dev/tty only when the command asks for more than the mode;
        # without a terminal it denies with a hint. Small module, os only.
        from .approvers import TerminalApprovalRequester

        approver = TerminalApprovalRequester(config.approval_timeout_seconds)
    sandbox = SyncWorkspaceSandbox(config, env=env, mode_source=lambda: mode,
                                   approval=ApprovalGate(approver,
                                                         config.approval_timeout_seconds),
                                   # One command and exit: a sandbox parked
                                   # for a next command would only be torn down.
                                   driver_options=None if probe else {"probe": False,
                                                                      "warm_sandboxes": 0})
    session = str(values.get("session") or f"{prefix}-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        ws = sandbox.session(session, workspace, ephemeral_tmp=not values.get("session"))
    except BaseException:
        sandbox.close()
        raise
    return sandbox, ws, mode


def requested_capabilities(values: dict[str, object], sandbox: SyncWorkspaceSandbox,
                           ws: SessionWorkspace, mode: str, usage: str
                           ) -> SandboxCapabilities | None:
    """The mode's baseline plus --allow-read/--allow-write/--network/--allow-host, or None."""
    from .capabilities import NetworkPolicy

    extra_read = [_abs(p) for p in values.get("allow_read", [])]  # type: ignore[attr-defined]
    extra_write = [_abs(p) for p in values.get("allow_write", [])]  # type: ignore[attr-defined]
    hosts = [str(h) for h in values.get("allow_host", [])]  # type: ignore[attr-defined]
    network = values.get("network")
    config = sandbox.config
    if network not in (None, "none", "proxy", "all"):
        raise UsageError(f"--network must be none, proxy or all, got {network!r}", usage)
    if network == "proxy" and not (hosts or config.allow_hosts):
        raise UsageError("--network proxy needs --allow-host (or allow_hosts in the config)",
                         usage)
    no_spawn = bool(values.get("no_subprocess"))
    if not (extra_read or extra_write or network in ("all", "none") or hosts or no_spawn):
        return None
    base = sandbox.baseline(ws, mode)
    net = base.network
    if network == "all":
        net = NetworkPolicy.allow_all()
    elif network == "none":
        net = NetworkPolicy.none()
    elif hosts:
        net = NetworkPolicy.allow_hosts([*config.allow_hosts, *hosts])
    return base.replace(fs_read=base.fs_read + tuple(extra_read),
                        fs_write=base.fs_write + tuple(extra_write), network=net,
                        spawn_subprocess=base.spawn_subprocess and not no_spawn)


def _abs(path: object) -> str:
    return os.path.abspath(os.path.expanduser(str(path)))


class _AutoApprove:
    def request(self, request: object) -> str:
        return "approved-once"
