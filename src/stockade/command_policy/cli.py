"""`stockade policy check -- CMD...`, `stockade policy check --stdin`, `stockade policy rules`.

`check` shows what the filter sees (the normalised text) and which rules
match and why, so a person can tell a false positive from a real catch and
write a custom rule against the text the engine actually matches.

Exit status: 0 nothing blocks, 1 a block rule matched, 2 usage error,
78 the configuration is wrong (as everywhere in stockade).
"""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import ConfigError
from .config import CommandPolicyConfig
from .engine import CommandPolicy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TextIO

    from .engine import PolicyVerdict

EXIT_OK = 0
EXIT_BLOCKED = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse exits with 2 by itself; raising keeps `main` returning.
        raise _UsageError(f"{self.prog}: {message}\n{self.format_usage().rstrip()}")


class _UsageError(Exception):
    pass


def argument_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="stockade policy",
                     description="Inspect the [sandbox.command_policy] hard filter.")
    sub = parser.add_subparsers(dest="action", required=True, parser_class=_Parser)
    check = sub.add_parser("check", help="show which rules a command matches, and why",
                           description="Normalise a command the way the filter does and "
                                       "report every rule it matches.")
    check.add_argument("--stdin", action="store_true",
                       help="also scan standard input as the command's script (bash -s)")
    check.add_argument("--json", action="store_true", help="print the verdict as JSON")
    check.add_argument("--config", metavar="FILE",
                       help="read [sandbox.command_policy] from FILE only "
                            "(default: the usual stockade config files)")
    check.add_argument("command", nargs="*", metavar="CMD",
                       help="program and arguments, after --")
    rules = sub.add_parser("rules", help="list the rules in force")
    rules.add_argument("--json", action="store_true", help="print the rules as JSON")
    rules.add_argument("--config", metavar="FILE",
                       help="read [sandbox.command_policy] from FILE only")
    return parser


def main(argv: list[str], *, stdin: TextIO | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None, config: CommandPolicyConfig | None = None) -> int:
    """Run `stockade policy ...` (`argv` excludes the word "policy")."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        args = argument_parser().parse_args(argv)
    except _UsageError as exc:
        hint = ""
        if argv[:1] == ["check"] and "--" not in argv:
            # `check rm -rf /` reads `-rf` as an option of `check`.
            hint = "\nput the command after --: stockade policy check -- rm -rf build/"
        print(f"{exc}{hint}", file=err)
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    try:
        cfg = config if config is not None else _load(args.config)
    except ConfigError as exc:
        print(f"stockade policy: {exc}", file=err)
        return ConfigError.exit_status
    for message in cfg.errors:
        print(f"stockade policy: {message}", file=err)
    policy = CommandPolicy.from_config(cfg, report=False)
    if args.action == "rules":
        return _rules(policy, args.json, out)
    if not args.command and not args.stdin:
        print("stockade policy check: give a command after --, or --stdin\n"
              "usage: stockade policy check [--stdin] [--json] -- CMD...", file=err)
        return EXIT_USAGE
    program, rest = (args.command[0], args.command[1:]) if args.command else ("", [])
    data = None
    if args.stdin:
        source = stdin if stdin is not None else sys.stdin
        buffer = getattr(source, "buffer", None)
        data = buffer.read() if buffer is not None else source.read().encode("utf-8")
    verdict = policy.check(program, rest, data, explain=True)
    if args.json:
        print(_printable(json.dumps(verdict.to_json(), indent=2, ensure_ascii=False)), file=out)
    else:
        _print_verdict(verdict, policy, out)
    return EXIT_BLOCKED if verdict.blocked else EXIT_OK


def _load(path: str | None) -> CommandPolicyConfig:
    from ..config import load_config

    loaded = load_config(paths=[path]) if path else load_config()
    table = dict(loaded.command_policy)
    if path and not loaded.sources:
        raise ConfigError(f"{path}: no such file")
    return CommandPolicyConfig.from_table(table, path or "[sandbox.command_policy]")


def _rules(policy: CommandPolicy, as_json: bool, out: TextIO) -> int:
    if as_json:
        print(json.dumps({"enabled": policy.enabled, "enforcement": policy.enforcement,
                          "rules": [r.to_json() for r in policy.rules]}, indent=2), file=out)
        return EXIT_OK
    print(f"enforcement: {policy.enforcement}"
          + ("" if policy.enabled else " (disabled: enabled = false)"), file=out)
    width = max((len(r.name) for r in policy.rules), default=4)
    for rule in policy.rules:
        where = rule.platform or "-"
        print(f"{rule.action:5}  {where:7}  {rule.name:{width}}  {rule.description}", file=out)
    return EXIT_OK


def _print_verdict(verdict: PolicyVerdict, policy: CommandPolicy, out: TextIO) -> None:
    print("normalised:", file=out)
    for line in verdict.normalized.splitlines() or [""]:
        print(f"  {_printable(line)}", file=out)
    if verdict.truncated:
        print("note: only the first 256 KiB of the command and its stdin were scanned",
              file=out)
    if not policy.enabled:
        print("rules: not evaluated ([sandbox.command_policy] enabled = false)", file=out)
    elif policy.enforcement == "off":
        print('rules: not evaluated (enforcement = "off")', file=out)
    elif not verdict.matches:
        print("matches: none", file=out)
    else:
        print("matches:", file=out)
        for m in verdict.matches:
            tier = m.effective if m.effective == m.action else f"{m.effective} (rule: {m.action})"
            print(f"  {tier:5}  {m.name}: {m.description}", file=out)
            if m.excerpt:
                shown = _printable(m.excerpt).replace("\n", "\\n")
                print(f"         matched: {shown}", file=out)
    print("verdict: " + ("blocked" if verdict.blocked else
                         "allowed with warnings" if verdict.matches else "allowed"), file=out)


def _printable(text: str) -> str:
    # A lone surrogate (from an undecodable argument) would make print raise.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")

