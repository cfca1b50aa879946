"""One description of the whole command line, as an argparse parser.

`stockade run` parses its flags by hand (argparse costs more start-up time
than bubblewrap takes to build the sandbox), from the option tables in
cli.py; `policy`, `proxy` and `mcp` are argparse parsers of their own. This
module joins both into one parser that nothing on the per-command path
imports. It renders every subcommand's `--help` in one style, and the
completion scripts are generated from it (shtab for bash and zsh, see
`completion.py`), so a flag added to a table has help, completes and is
documented the day it exists.
"""

from __future__ import annotations

# argparse has no public way to list a parser's actions or to tell its subcommand
# action from the others: `_actions` and `_SubParsersAction` are read here and in
# completion.py for want of one.
import argparse
import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

#: The commands, in the order `stockade --help` lists them, and what each does.
SUMMARIES: dict[str, str] = {
    "run": "run one command inside the sandbox",
    "explain": "show the profile a command would get, without running it",
    "shell": "an interactive shell inside the sandbox",
    "doctor": "report which backends can run here, and why not",
    "audit": "show the capability ledger",
    "config": "show each effective setting and where it came from",
    "trust": "let a project's stockade.toml widen your own config (like direnv allow)",
    "policy": "check a command against the command policy, list its rules",
    "proxy": "run the managed network proxy alone, with a live log",
    "mcp": "serve the sandbox to an MCP client over stdio",
    "hook": "a harness's command hook (claude-code) that runs its shell calls in the sandbox",
    "completion": "print a bash, zsh or fish completion script",
}

#: What a value of each flag is called in help (argparse's metavar).
METAVARS: dict[str, str] = {
    "--mode": "MODE", "--workspace": "DIR", "--cwd": "DIR", "--session": "ID",
    "--allow-read": "PATH", "--allow-write": "PATH", "--network": "NET",
    "--allow-host": "HOST[:PORT]", "--deny-host": "HOST[=REASON]", "--timeout": "SECONDS",
    "--max-output": "BYTES", "--backend": "BACKEND", "--config": "FILE", "--last": "N",
    "--revoke": "PATH", "--publish": "[HOST_ADDR:]PORT[:SANDBOX_PORT]",
}

#: What a flag's value completes to: a file, a directory, or nothing (a name,
#: a number, a host: offering the directory's files there only misleads).
FILE_VALUES = frozenset({"--allow-read", "--allow-write", "--config", "--revoke", "--unix"})
DIR_VALUES = frozenset({"--workspace", "--cwd"})

#: Completion functions the generated scripts define (see completion.py).
COMPLETE_COMMAND = {"bash": "_stockade_command_then_files", "zsh": "_stockade_command_then_files"}
COMPLETE_FILE = {"bash": "_shtab_compgen_files", "zsh": "_files"}
COMPLETE_DIR = {"bash": "_shtab_compgen_dirs", "zsh": "_files -/"}
COMPLETE_NONE = {"bash": "_stockade_nothing", "zsh": "_nothing"}

Table = dict[str, tuple[bool, bool, str]]


class HelpFormatter(argparse.HelpFormatter):
    """argparse's own layout, a little wider: the style of every `stockade X -h`."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32, width=100)


def table_parser(prog: str, usage: str, options: Mapping[str, tuple[bool, bool, str]],
                 description: str | None = None, epilog: str | None = None,
                 parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """An argparse parser equivalent to one of cli.py's option tables."""
    from .clitables import CHOICES, SHORT

    if parser is None:
        parser = argparse.ArgumentParser(prog=prog, formatter_class=HelpFormatter)
    parser.usage = usage.removeprefix("usage: ")
    parser.description = description
    parser.epilog = epilog
    for name, (takes, repeat, text) in options.items():
        if name == "--help":
            continue  # argparse's own
        flags = [k for k, v in SHORT.items() if v == name and k != "-h"] + [name]
        help_text = text + (" (repeatable)" if repeat else "")
        if not takes:
            parser.add_argument(*flags, action="store_true", help=help_text)
            continue
        action = parser.add_argument(
            *flags, action="append" if repeat else "store", help=help_text,
            metavar=METAVARS.get(name, name[2:].upper().replace("-", "_")),
            choices=CHOICES.get(name))
        _complete(action, name)
    return parser


def _complete(action: argparse.Action, name: str) -> None:
    if action.choices:
        return
    action.complete = (  # type: ignore[attr-defined]
        COMPLETE_FILE if name in FILE_VALUES else COMPLETE_DIR if name in DIR_VALUES
        else COMPLETE_NONE)


def _command_argument(parser: argparse.ArgumentParser, optional: bool = False) -> None:
    action = parser.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]" if not optional
        else "-- SHELL [ARGS...]",
        help="the program and its arguments, after --" if not optional
        else "the shell to start and its arguments, after -- (default: bash, else sh)")
    action.complete = COMPLETE_COMMAND  # type: ignore[attr-defined]


def _foreign(module: str) -> argparse.ArgumentParser | None:
    """A subcommand's own argparse parser; None when its extra is not installed."""
    try:
        return importlib.import_module(f"stockade.{module}").argument_parser()  # type: ignore[no-any-return]
    except ImportError:
        return None


def _graft(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str,
           own: argparse.ArgumentParser | None) -> None:
    """Add a subcommand whose parser lives in its own module."""
    if own is None:
        sub.add_parser(name, help=SUMMARIES[name], description=SUMMARIES[name])
        return
    parser = sub.add_parser(name, help=SUMMARIES[name], description=own.description,
                            parents=[own], add_help=False, formatter_class=HelpFormatter)
    for action in _actions(parser):
        for opt in action.option_strings:
            if opt.startswith("--") and action.nargs != 0 and not action.choices:
                _complete(action, opt)
        if not action.option_strings and action.dest == "command":
            action.complete = COMPLETE_COMMAND  # type: ignore[attr-defined]


def _actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        yield action
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _actions(child)


def parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line: every subcommand, option, value and help text.

    `only` builds that subcommand alone (a `--help` need not import the MCP
    server's modules to describe `run`).
    """
    from . import clitables

    root = argparse.ArgumentParser(
        prog="stockade", formatter_class=HelpFormatter,
        description="Run the shell commands an AI agent writes inside a boundary the "
                    "operating system enforces.",
        epilog="`stockade <command> --help` describes each one.")
    root.add_argument("-V", "--version", action="store_true",
                      help="print stockade's version and exit")
    sub = root.add_subparsers(dest="subcommand", metavar="<command>")

    def local(name: str, usage: str, table: Table, description: str | None = None,
              epilog: str | None = None) -> argparse.ArgumentParser:
        child = sub.add_parser(name, help=SUMMARIES[name], formatter_class=HelpFormatter)
        return table_parser(f"stockade {name}", usage, table, parser=child,
                            description=description or SUMMARIES[name], epilog=epilog)

    for name in SUMMARIES:
        if only is not None and name != only:
            continue
        if name == "run":
            _command_argument(local("run", clitables.RUN_USAGE, clitables.RUN_OPTIONS,
                                    clitables.RUN_DESCRIPTION))
        elif name == "explain":
            from .clitables import EXPLAIN_DESCRIPTION, EXPLAIN_OPTIONS, EXPLAIN_USAGE

            _command_argument(local("explain", EXPLAIN_USAGE, EXPLAIN_OPTIONS,
                                    EXPLAIN_DESCRIPTION))
        elif name == "shell":
            from .clitables import SHELL_DESCRIPTION, SHELL_OPTIONS, SHELL_USAGE

            _command_argument(local("shell", SHELL_USAGE, SHELL_OPTIONS, SHELL_DESCRIPTION),
                              optional=True)
        elif name == "doctor":
            local("doctor", clitables.DOCTOR_USAGE, clitables.DOCTOR_OPTIONS,
                  clitables.DOCTOR_DESCRIPTION)
        elif name == "audit":
            local("audit", clitables.AUDIT_USAGE, clitables.AUDIT_OPTIONS)
        elif name == "config":
            from .clitables import CONFIG_DESCRIPTION, CONFIG_OPTIONS, CONFIG_USAGE

            config = local("config", CONFIG_USAGE, CONFIG_OPTIONS, CONFIG_DESCRIPTION)
            config.add_argument("action", choices=("show",),
                                help="show: each setting, its value and the file or flag it "
                                     "came from")
        elif name == "trust":
            trust = local("trust", clitables.TRUST_USAGE, clitables.TRUST_OPTIONS,
                          epilog=clitables.TRUST_EPILOG)
            path = trust.add_argument("path", nargs="?", metavar="PATH",
                                      help="the stockade.toml to trust (default: "
                                           "./stockade.toml)")
            path.complete = COMPLETE_FILE  # type: ignore[attr-defined]
        elif name in FOREIGN:
            _graft(sub, name, _foreign(FOREIGN[name]))
        elif name == "completion":
            completion = sub.add_parser(
                "completion", help=SUMMARIES["completion"], formatter_class=HelpFormatter,
                usage="stockade completion bash|zsh|fish",
                description=SUMMARIES["completion"] + '. bash: eval "$(stockade completion '
                'bash)"; zsh: the same with zsh; fish: stockade completion fish | source')
            completion.add_argument("shell", choices=("bash", "zsh", "fish"),
                                    help="the shell to print the script for")
    return root


#: The subcommands whose parser lives in their own module.
FOREIGN = {"policy": "command_policy.cli", "proxy": "proxy.cli", "mcp": "mcp_server",
           "hook": "adapters.claude_code"}


def subparsers(root: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in root._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def help_text(name: str) -> str:
    """`stockade NAME --help`, as every subcommand prints it."""
    return subparsers(parser(only=name))[name].format_help().rstrip("\n")
