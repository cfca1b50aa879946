"""`stockade completion bash|zsh|fish`: completion scripts from the parsers' own tables.

Written out from the same option tables `stockade` parses with (and, for the
subcommands built on argparse, from their parsers), so a new flag completes
the day it exists and a removed one stops completing.
"""

from __future__ import annotations

import sys

from .cli import AUDIT_OPTIONS, CHOICES, COMMANDS, DOCTOR_OPTIONS, RUN_OPTIONS, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

USAGE = "usage: stockade completion bash|zsh|fish"
SHELLS = ("bash", "zsh", "fish")


def command_options() -> dict[str, list[tuple[str, bool, tuple[str, ...]]]]:
    """Per subcommand: (option, takes a value, the values it may take)."""
    from .shell import SHELL_OPTIONS

    tables = {"run": RUN_OPTIONS, "shell": SHELL_OPTIONS, "audit": AUDIT_OPTIONS,
              "doctor": DOCTOR_OPTIONS}
    out: dict[str, list[tuple[str, bool, tuple[str, ...]]]] = {}
    for name, table in tables.items():
        out[name] = [(opt, spec[0], CHOICES.get(opt, ()) if spec[0] else ())
                     for opt, spec in table.items()]
    for name, module in (("policy", "command_policy.cli"), ("proxy", "proxy.cli"),
                         ("mcp", "mcp_server")):
        out[name] = _argparse_options(module)
    out["completion"] = [("--help", False, ())]
    return out


def _argparse_options(module: str) -> list[tuple[str, bool, tuple[str, ...]]]:
    import importlib

    try:
        parser = importlib.import_module(f"stockade.{module}")._parser()
    except ImportError:  # an optional extra that is not installed
        return [("--help", False, ())]
    return list(dict.fromkeys(_walk(parser)))


def _walk(parser: Any) -> Iterator[tuple[str, bool, tuple[str, ...]]]:
    """Options of a parser and of its subcommands (`policy check --stdin`)."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _walk(sub)
            continue
        for opt in action.option_strings:
            if opt.startswith("--"):
                yield opt, action.nargs != 0, tuple(map(str, action.choices or ()))


def bash(table: dict[str, list[tuple[str, bool, tuple[str, ...]]]]) -> str:
    lines = ["# stockade completion for bash: eval \"$(stockade completion bash)\"",
             "_stockade() {",
             "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}",
             "    local cmd=${COMP_WORDS[1]} i",
             "    for ((i = 2; i < COMP_CWORD; i++)); do",
             "        [[ ${COMP_WORDS[i]} == -- ]] && { COMPREPLY=($(compgen -c -- \"$cur\")); "
             "return; }",
             "    done",
             "    if ((COMP_CWORD == 1)); then",
             f"        COMPREPLY=($(compgen -W '{' '.join(COMMANDS)} --help --version' "
             "-- \"$cur\"))",
             "        return",
             "    fi",
             "    case $cmd in"]
    for name, opts in table.items():
        choice_cases = [f"            {opt}) COMPREPLY=($(compgen -W '{' '.join(ch)}' -- "
                        "\"$cur\")); return;;" for opt, _, ch in opts if ch]
        path_opts = [opt for opt, takes, ch in opts if takes and not ch]
        lines.append(f"        {name})")
        lines.append("            case $prev in")
        lines += ["    " + c for c in choice_cases]
        if path_opts:
            lines.append(f"                {'|'.join(path_opts)}) COMPREPLY=($(compgen -f -- "
                         "\"$cur\")); return;;")
        lines.append("            esac")
        if name == "completion":
            lines.append(f"            COMPREPLY=($(compgen -W '{' '.join(SHELLS)} --help' -- "
                         "\"$cur\"));;")
        else:
            words = " ".join(opt for opt, _, _ in opts)
            lines.append(f"            COMPREPLY=($(compgen -W '{words} --' -- \"$cur\"));;")
    lines += ["    esac", "}", "complete -F _stockade stockade", ""]
    return "\n".join(lines)


def zsh(table: dict[str, list[tuple[str, bool, tuple[str, ...]]]]) -> str:
    lines = ["#compdef stockade", "# stockade completion for zsh: "
             "eval \"$(stockade completion zsh)\"", "_stockade() {",
             "    if (( CURRENT == 2 )); then",
             f"        compadd -- {' '.join(COMMANDS)} --help --version",
             "        return",
             "    fi",
             "    case ${words[2]} in"]
    for name, opts in table.items():
        specs = []
        for opt, takes, choices in opts:
            if choices:
                specs.append(f"'{opt}[]:value:({' '.join(choices)})'")
            elif takes:
                specs.append(f"'{opt}[]:value:_files'")
            else:
                specs.append(f"'{opt}[]'")
        if name == "completion":
            specs.append(f"'1:shell:({' '.join(SHELLS)})'")
        lines.append(f"        {name}) shift words; (( CURRENT-- )); _arguments -s "
                     f"{' '.join(specs)} '*::command:_normal';;")
    lines += ["    esac", "}", "compdef _stockade stockade", ""]
    return "\n".join(lines)


def fish(table: dict[str, list[tuple[str, bool, tuple[str, ...]]]]) -> str:
    lines = ["# stockade completion for fish: stockade completion fish | source",
             "complete -c stockade -f",
             f"complete -c stockade -n __fish_use_subcommand -a '{' '.join(COMMANDS)}'",
             "complete -c stockade -n __fish_use_subcommand -l version"]
    for name, opts in table.items():
        cond = f"-n '__fish_seen_subcommand_from {name}'"
        for opt, takes, choices in opts:
            extra = f" -x -a '{' '.join(choices)}'" if choices else " -r -F" if takes else ""
            lines.append(f"complete -c stockade {cond} -l {opt[2:]}{extra}")
        if name == "completion":
            lines.append(f"complete -c stockade {cond} -a '{' '.join(SHELLS)}'")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(f"{USAGE}\n\nPrint a completion script. bash: eval \"$(stockade completion "
              "bash)\"; zsh: the same with zsh; fish: stockade completion fish | source")
        return 0
    if len(argv) != 1 or argv[0] not in SHELLS:
        got = f", got {argv[0]!r}" if argv else ""
        raise UsageError(f"completion needs one of {', '.join(SHELLS)}{got}", USAGE)
    script = {"bash": bash, "zsh": zsh, "fish": fish}[argv[0]](command_options())
    sys.stdout.write(script)
    return 0
