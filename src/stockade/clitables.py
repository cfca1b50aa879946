"""The option tables, usages and descriptions of the hand-parsed subcommands.

One table per subcommand drives both its parsing (cli.py, shell.py,
explain.py) and its `--help` and completion (clispec.py), so they cannot
drift. Here rather than beside each command so that clispec.py reads them
without importing the commands, which import clispec.py for their help.
"""

from __future__ import annotations

from .drivers import registry as _backends

# name: (takes a value, repeatable, help)
RUN_OPTIONS: dict[str, tuple[bool, bool, str]] = {
    "--mode": (True, False, "read-only | workspace-write | full-access (default from config: "
               "read-only)"),
    "--workspace": (True, False, "the directory the command may work in (default: current dir)"),
    "--cwd": (True, False, "directory inside the workspace to run in (default: the workspace)"),
    "--session": (True, False, "session id, named in the audit record (stockade audit "
                               "--session ID)"),
    "--allow-read": (True, True, "also let the command read PATH (asks for approval)"),
    "--allow-write": (True, True, "also let the command write PATH (asks for approval)"),
    "--network": (True, False, "none | proxy | all (default: none; proxy = only the allowed "
                  "hosts, through stockade's proxy)"),
    "--allow-host": (True, True, "let the command reach HOST[:PORT] through the proxy "
                     "(asks for approval)"),
    "--deny-host": (True, True, "never let the command reach HOST, whatever else allows it"),
    "--no-subprocess": (False, False, "the command may start no process of its own (seccomp)"),
    "--env": (True, True, "pass NAME with your value, or NAME=VALUE, to the command, though "
              "it looks secret; the audit record names it, never its value"),
    "--publish": (True, True, "forward the host's 127.0.0.1:PORT (or HOST_ADDR:PORT) to the "
                  "sandbox's SANDBOX_PORT (default PORT) while the command runs: open a dev "
                  "server from the host"),
    "--timeout": (True, False, "seconds before the whole process tree is killed (default 60)"),
    "--max-output": (True, False, "capture output and stop past BYTES (split stdout/stderr)"),
    "--backend": (True, False, _backends.choices_help()),
    "--config": (True, False, "read this TOML file instead of the usual ones"),
    "--json": (False, False, "capture output and print one JSON result"),
    "--yes": (False, False, "approve the requested capabilities without asking"),
    "--quiet": (False, False, "print no `stockade:` line about a denial after the command"),
    "--service": (False, False, "hand the command to the per-user service, which saves "
                  "the start-up (default: the config's `service`, else off)"),
    "--no-service": (False, False, "run the command in this process, not through the service"),
    "--help": (False, False, "show this help"),
}
# One-letter spellings, for whichever of these a parser's table has.
SHORT = {"-h": "--help", "-q": "--quiet"}
# The values a flag may take; anything else is a usage error (exit 2).
CHOICES: dict[str, tuple[str, ...]] = {
    "--mode": ("read-only", "workspace-write", "full-access"),
    "--network": ("none", "proxy", "all"),
    "--backend": _backends.choices(),
}


def leading_run_options(args: list[str]) -> list[tuple[str, str | None]]:
    """`run`'s options before its command, as (long name, value or None), read
    without parsing: what must be known before a parse, or where one fails."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        arg = SHORT.get(args[i], args[i])
        if arg == "--" or not arg.startswith("--"):
            break
        name, eq, value = arg.partition("=")
        spec = RUN_OPTIONS.get(name)
        takes = bool(spec and spec[0]) and not eq
        if takes:
            value = args[i + 1] if i + 1 < len(args) else ""
        out.append((name, value if eq or takes else None))
        i += 2 if takes else 1
    return out


RUN_USAGE = "usage: stockade run [options] -- CMD [ARGS...]"
RUN_DESCRIPTION = ("Run one command inside the sandbox. stdin and stdout pass through, and "
                   "stockade exits with the command's status; `stockade explain` shows what "
                   "the command would get without running it.")

# -- shell --

SHELL_OPTIONS = {k: v for k, v in RUN_OPTIONS.items()
                 if k not in ("--json", "--max-output", "--no-subprocess", "--quiet",
                              "--publish", "--service", "--no-service")}
SHELL_OPTIONS["--timeout"] = (True, False, "seconds before the shell and everything in it is "
                                           "killed (default: none)")
SHELL_USAGE = "usage: stockade shell [options] [-- SHELL [ARGS...]]"
SHELL_DESCRIPTION = ("An interactive shell inside the sandbox, on a pty of its own: the same "
                     "flags, approvals and audit record as `stockade run`.")

# -- explain, config show --

EXPLAIN_OPTIONS = {k: v for k, v in RUN_OPTIONS.items()
                   if k not in ("--yes", "--quiet", "--max-output", "--publish",
                                "--service", "--no-service")}
EXPLAIN_OPTIONS["--json"] = (False, False, "print the explanation as one JSON object")
EXPLAIN_USAGE = "usage: stockade explain [run options] -- CMD [ARGS...]"
EXPLAIN_DESCRIPTION = ("Show the profile `stockade run` would give the command (mode, what it "
                       "may read and write, what is hidden, network, limits, the layers that "
                       "apply, and where each setting came from) without running it, asking "
                       "for approval or recording it.")

CONFIG_OPTIONS: dict[str, tuple[bool, bool, str]] = {
    "--config": (True, False, "read this TOML file instead of the usual ones"),
    "--workspace": (True, False, "the project whose stockade.toml counts (default: current "
                                 "dir)"),
    "--json": (False, False, "print the settings as one JSON object"),
    "--help": (False, False, "show this help"),
}
CONFIG_USAGE = "usage: stockade config show [--config FILE] [--workspace DIR] [--json]"
CONFIG_DESCRIPTION = ("Show each effective setting, its value, and the file or flag it came "
                      "from (default: stockade's own default).")

# -- doctor, audit, trust --

DOCTOR_OPTIONS: dict[str, tuple[bool, bool, str]] = {
    "--json": (False, False, "print the report as one JSON object"),
    "--help": (False, False, "show this help"),
}
DOCTOR_USAGE = "usage: stockade doctor [--json]"
DOCTOR_DESCRIPTION = ("Report each backend's availability and why, kernel features, what is "
                      "hidden on this machine, and the bwrap in use.")

AUDIT_OPTIONS: dict[str, tuple[bool, bool, str]] = {
    "--session": (True, False, "only the records of this session"),
    "--last": (True, False, "how many records, the newest (default 20)"),
    "--network": (False, False, "show network decisions instead of executions"),
    "--json": (False, False, "one JSON object per line"),
    "--follow": (False, False, "show each command's start and end and each denial as it is "
                 "written, until interrupted"),
    "--web": (False, False, "serve the ledger as web pages on 127.0.0.1 (read-only; needs "
              "the web extra)"),
    "--port": (True, False, "with --web: the loopback port (default 8765)"),
    "--help": (False, False, "show this help"),
}
AUDIT_USAGE = ("usage: stockade audit [--session ID] [--last N] [--network] [--json]\n"
               "       stockade audit --follow [--session ID] [--json]\n"
               "       stockade audit --web [--port PORT]")

TRUST_OPTIONS: dict[str, tuple[bool, bool, str]] = {
    "--list": (False, False, "list the trusted files and whether each is unchanged"),
    "--revoke": (True, False, "stop trusting PATH"),
    "--help": (False, False, "show this help"),
}
TRUST_USAGE = "usage: stockade trust [PATH] | --list | --revoke PATH"
TRUST_EPILOG = ("PATH defaults to ./stockade.toml. Trust records the file's real path and "
                "SHA-256; an edit untrusts it.")
