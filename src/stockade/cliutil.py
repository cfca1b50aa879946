"""What every subcommand's argument handling shares: its usage error and the checks of
flag values that `run`, `shell` and `explain` take alike.

Kept apart from cli.py so that the subcommands in modules of their own
(shell.py, explain.py, completion.py) use them without reaching into the CLI.
"""

from __future__ import annotations

import os


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
