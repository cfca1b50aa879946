"""`stockade completion bash|zsh|fish`: completion scripts from one description of the CLI.

The description is `clispec.parser()`, the argparse parser that also renders
every `--help`. bash's and zsh's scripts are generated from it by shtab
(https://github.com/iterative/shtab) and shipped in `completions/`, so
printing one costs no import of argparse or shtab; fish, which shtab does
not write, is generated here from the same parser. A test regenerates all
three and compares (`python -m stockade.completion --write` rewrites them).

What completes: subcommands and their options with descriptions; each
option's values (modes, backends, networks); a file where a value is a path
(`--config`, `--allow-read`), a directory for `--workspace` and `--cwd`,
nothing where it is a name, a number or a host (`--session`, `--timeout`,
`--allow-host`, `--last`); after `--`, a command and then files.
"""

from __future__ import annotations

import os
import sys

from .cliutil import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

USAGE = "usage: stockade completion bash|zsh|fish"
SHELLS = ("bash", "zsh", "fish")
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "completions")
FILES = {"bash": "stockade.bash", "zsh": "_stockade", "fish": "stockade.fish"}

#: Functions the generated bash and zsh scripts call (clispec's COMPLETE_*).
PREAMBLE = {
    "bash": """\
# After `--`: the command's name, then files.
_stockade_command_then_files() {
  local i
  for ((i = 1; i < COMP_CWORD; i++)); do
    if [[ ${COMP_WORDS[i]} == -- ]]; then
      if ((COMP_CWORD == i + 1)); then compgen -c -- "$1"; else compgen -f -- "$1"; fi
      return
    fi
  done
}
# A value that is a name, a number or a host: nothing to offer.
_stockade_nothing() { :; }
""",
    "zsh": """\
# After `--`: the command's name and its own completion.
_stockade_command_then_files() {
  local i=${words[(i)--]}
  if (( i < CURRENT )); then
    shift $i words; (( CURRENT -= i )); _normal
  fi
}
""",
}


def generate(shell: str) -> str:
    """The script for `shell`, generated from clispec's parser (needs shtab for bash, zsh)."""
    from .clispec import parser

    root = parser()
    if shell == "fish":
        return fish(root)
    import shtab

    return str(shtab.complete(root, shell=shell, preamble=PREAMBLE))  # type: ignore[arg-type]


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fish(root: argparse.ArgumentParser) -> str:
    """fish's script: one `complete` line per subcommand and option."""
    import argparse

    from .clispec import COMPLETE_COMMAND, COMPLETE_DIR, COMPLETE_FILE, subparsers

    subs = subparsers(root)
    lines = ["# stockade completion for fish: stockade completion fish | source",
             "complete -c stockade -f"]
    for name, sub in subs.items():
        lines.append(f"complete -c stockade -n __fish_use_subcommand -a {name} "
                     f"-d {_fish_quote(sub.description or '')}")
    lines.append("complete -c stockade -n __fish_use_subcommand -s V -l version "
                 "-d 'print the version'")
    for name, sub in subs.items():
        cond = f"-n '__fish_seen_subcommand_from {name}; and not contains -- -- (commandline -opc)'"
        for action in _actions(sub):
            longs = [o[2:] for o in action.option_strings if o.startswith("--")]
            shorts = [o[1:] for o in action.option_strings if len(o) == 2]
            complete = getattr(action, "complete", None)
            if not action.option_strings:
                if action.choices and not isinstance(action, argparse._SubParsersAction):
                    lines.append(f"complete -c stockade {cond} -a "
                                 f"{_fish_quote(' '.join(map(str, action.choices)))}")
                elif complete is COMPLETE_FILE:
                    lines.append(f"complete -c stockade {cond} -F")
                continue
            if not longs:
                continue
            flags = " ".join([*(f"-s {s}" for s in shorts), *(f"-l {x}" for x in longs)])
            extra = ""
            if action.nargs != 0:
                if action.choices:
                    extra = f" -x -a {_fish_quote(' '.join(map(str, action.choices)))}"
                elif complete is COMPLETE_FILE:
                    extra = " -r -F"
                elif complete is COMPLETE_DIR:
                    extra = " -x -a '(__fish_complete_directories)'"
                else:
                    extra = " -x"
            lines.append(f"complete -c stockade {cond} {flags}{extra} "
                         f"-d {_fish_quote(action.help or '')}")
        if name in ("run", "explain", "shell") and any(
                getattr(a, "complete", None) is COMPLETE_COMMAND for a in sub._actions):
            after = (f"-n '__fish_seen_subcommand_from {name}; "
                     "and contains -- -- (commandline -opc)'")
            lines.append(f"complete -c stockade {after} -F -a '(__fish_complete_subcommand "
                         "--fcs-skip=1)'")
    return "\n".join(lines) + "\n"


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    import argparse

    out: list[argparse.Action] = []
    for action in parser._actions:
        out.append(action)
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                out.extend(a for a in _actions(child) if a.option_strings)
    return out


def command_options() -> dict[str, list[tuple[str, bool, tuple[str, ...]]]]:
    """Per subcommand: (option, takes a value, the values it may take); for the docs' test."""
    from .clispec import parser, subparsers

    out: dict[str, list[tuple[str, bool, tuple[str, ...]]]] = {}
    for name, sub in subparsers(parser()).items():
        rows = []
        for action in _actions(sub):
            for opt in action.option_strings:
                if opt.startswith("--"):
                    rows.append((opt, action.nargs != 0,
                                 tuple(map(str, action.choices or ()))))
        out[name] = list(dict.fromkeys(rows))
    return out


def write() -> None:
    """Regenerate the shipped scripts (a maintainer's step, with shtab installed)."""
    os.makedirs(HERE, exist_ok=True)
    for shell, name in FILES.items():
        with open(os.path.join(HERE, name), "w") as fh:
            fh.write(generate(shell))


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        from .cliutil import command_help

        print(command_help("completion"))
        return 0
    if argv == ["--write"]:
        write()
        return 0
    if len(argv) != 1 or argv[0] not in SHELLS:
        got = f", got {argv[0]!r}" if argv else ""
        raise UsageError(f"completion needs one of {', '.join(SHELLS)}{got}", USAGE)
    with open(os.path.join(HERE, FILES[argv[0]])) as fh:
        sys.stdout.write(fh.read())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
