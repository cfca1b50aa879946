"""The `stockade` command line.

Parsed by hand rather than with argparse: `stockade run` is paid for on every
command an agent runs, and argparse (with the gettext and re it pulls in)
costs more start-up time than bubblewrap takes to build the sandbox. The
option tables (clitables.py) drive both parsing and `--help`, so they cannot
drift.
"""

from __future__ import annotations

import os
import sys

from .clitables import (
    AUDIT_OPTIONS,
    AUDIT_USAGE,
    DOCTOR_OPTIONS,
    DOCTOR_USAGE,
    RUN_OPTIONS,
    RUN_USAGE,
    TRUST_OPTIONS,
    TRUST_USAGE,
    leading_run_options,
)
from .cliutil import (
    UsageError,
    check_host_flags,
    command_help,
    escape,
    explicit_env,
    open_session,
    parse_options,
    positive_number,
    requested_capabilities,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from .command import SandboxCommand, SandboxOutput
    from .core import Run
    from .errors import SandboxError
    from .process import Outcome
    from .sync import SyncWorkspaceSandbox


USAGE = """usage: stockade <command> [options]

commands:
  run         run one command inside the sandbox
  explain     show the profile a command would get, without running it
  shell       an interactive shell inside the sandbox
  doctor      report which backends can run here, and why not
  audit       show the capability ledger
  config      show each effective setting and where it came from
  trust       let a project's stockade.toml widen your own config (like direnv allow)
  policy      check a command against the command policy, list its rules
  proxy       run the managed network proxy alone, with a live log
  mcp         serve the sandbox to an MCP client over stdio
  hook        a harness's command hook (claude-code) that runs its shell calls in the sandbox
  completion  print a bash, zsh or fish completion script

`stockade <command> --help` describes each one; `stockade --version` names this one."""

EXIT_USAGE = 2


def _published(entries: list[str], usage: str) -> tuple[tuple[str, int, int], ...]:
    """`--publish` values, parsed before anything starts: a malformed one is usage (2)."""
    if not entries:
        return ()
    from .errors import InvalidCommand
    from .publish import parse_all

    try:
        return parse_all(entries)
    except InvalidCommand as exc:
        raise UsageError(str(exc), usage) from None


def cmd_run(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        values: dict[str, object] = {"help": True}
        command: list[str] = []
    else:
        values, command = parse_options(argv, RUN_OPTIONS, RUN_USAGE)
    if values.get("help"):
        print(command_help("run"))
        return 0
    if not command:
        raise UsageError("no command given (put it after --)", RUN_USAGE)
    if sys.platform.startswith("linux"):
        # Before the config and the rest of the imports: they are what the
        # kernel's wait for the command's cgroup move can overlap.
        from .drivers.linux.host.limits import prime_migration

        prime_migration()
    timeout = positive_number(values, "timeout", float, RUN_USAGE)
    max_output = positive_number(values, "max_output", int, RUN_USAGE)
    check_host_flags(values, RUN_USAGE)
    publish = _published(values.get("publish", []), RUN_USAGE)  # type: ignore[arg-type]

    from .command import SandboxCommand

    sandbox, ws, mode = open_session(values, prefix="cli", max_output_bytes=max_output,
                                     probe=False)
    session = ws.session_id
    caps = requested_capabilities(values, sandbox, ws, mode, RUN_USAGE)
    cmd = SandboxCommand(command[0], command[1:], session_id=session, capabilities=caps,
                         timeout=timeout, cwd=str(values["cwd"]) if values.get("cwd") else None,
                         env=explicit_env(values.get("env", []), RUN_USAGE),  # type: ignore[arg-type]
                         publish=publish)
    capture = bool(values.get("json") or max_output)
    quiet = bool(values.get("quiet"))
    try:
        if capture:
            return _run_captured(sandbox, cmd, bool(values.get("json")), quiet)
        return _run_passthrough(sandbox, cmd, quiet)
    finally:
        # Its /tmp goes with it: a `--session` run left one behind in the
        # state directory at every invocation, files and all.
        sandbox.close_session(session)


def _run_captured(sandbox: SyncWorkspaceSandbox, cmd: SandboxCommand, as_json: bool,
                  quiet: bool) -> int:
    from .errors import CommandTimeout

    try:
        out = sandbox.execute(cmd)
    except CommandTimeout as exc:
        if not as_json or exc.output is None:
            raise
        import json

        from .core import output

        print(json.dumps(output(exc.output).to_json()))
        return exc.exit_status
    if as_json:
        import json

        print(json.dumps(out.to_json()))
    else:
        sys.stdout.buffer.write(out.stdout)
        sys.stderr.buffer.write(out.stderr)
    return _report(out, quiet)


def _run_passthrough(sandbox: SyncWorkspaceSandbox, cmd: SandboxCommand, quiet: bool) -> int:
    """stdin, stdout and stderr are the terminal's; stockade only supervises."""
    out = sandbox.execute_with(cmd, lambda run: _supervise_inherited(run, sandbox))
    return _report(out, quiet)


def _report(out: SandboxOutput, quiet: bool) -> int:
    """The one `stockade:` line, and `run`'s exit status: the command's own.

    No sandbox can refuse the creation of one name in a directory the command
    may write, so the guard takes a `.vscode/` away after it appeared, and the
    command, unaware, often exits 0: the line says that 0 does not cover it.
    The status stays the command's: a sweep also undoes what an overlapping
    command, or a killed stockade, left, and a `/bin/true` that ended such a
    sweep must not fail (the result's `neutralised` lists each item).
    """
    hint = out.denial_hint
    if out.returncode == 0 and out.neutralised and hint:
        hint += "; the command exited 0, but what is named here did not stay"
    if hint and not quiet:
        print(f"stockade: {hint}", file=sys.stderr)
    return out.returncode


def _supervise_inherited(run: Run, sandbox: SyncWorkspaceSandbox) -> Outcome:
    """Run with the terminal's stdin; stderr, and stdout unless it is a terminal,
    go through pipes we copy on.

    stderr is copied rather than inherited so its tail is there afterwards:
    without it the pipeline cannot tell "Read-only file system" from any
    other failure, and the person sees the command's error with no word on
    which rule did it. What reaches a pipe or a file is bounded by
    `stream_output_bytes` (stdout and stderr together): past it the process
    tree is killed, as a captured command's is past `max_output_bytes`, so a
    flood never reaches the program reading us. A terminal's stdout stays the
    command's own (a person is watching it, and `ls`, `git` and editors ask
    whether they write to one).
    """
    launch = run.launch
    budget = _Budget(int(getattr(sandbox.config, "stream_output_bytes", 64 << 20)))
    relays: list[_Relay] = []
    stdio: dict[int, int] = {}
    ends: list[int] = []
    try:
        targets = (2,) if os.isatty(1) else (1, 2)
    except OSError:
        targets = (1, 2)
    try:
        for target in targets:
            read_end, write_end = os.pipe()
            ends.append(write_end)
            stdio[target] = write_end
            relays.append(_Relay(read_end, target, budget, keep=_Relay.KEEP if target == 2
                                 else 0))
        tail = relays[-1]
        try:
            proc = launch.start(stdin=0, capture=False, stdio=stdio)
        finally:
            for fd in ends:
                os.close(fd)
        budget.kill = proc.kill
        for relay in relays:
            relay.start()
        sandbox.ledger.warm()  # while the command runs
        outcome = proc.communicate(timeout=run.timeout)
        for relay in relays[:-1]:
            relay.finish()
        outcome.stderr = tail.finish()
    finally:
        for relay in relays:
            relay.finish()
        launch.cleanup()
    if budget.exceeded:
        outcome.truncated = True
        # Said on our stderr, which a reader of stdout does not mistake for output.
        print(f"stockade: the command's output passed stream_output_bytes "
              f"({budget.limit} bytes); its process tree was killed", file=sys.stderr)
    # A driver's own refusal to start (bwrap's, exit 125 here, not the
    # command's 1) is the first thing on stderr: only a tail that still
    # holds the start may be read for it.
    outcome.diagnostic = outcome.stderr if tail.whole else b""
    return outcome


class _Budget:
    """Bytes the relays may still pass on; past the limit, the tree is killed."""

    def __init__(self, limit: int) -> None:
        import _thread

        self.limit = limit
        self.left = limit
        self.exceeded = False
        self.kill: Callable[[], None] | None = None
        self.lock = _thread.allocate_lock()

    def take(self, size: int) -> int:
        """How many of `size` bytes may pass; the first refusal kills the command."""
        with self.lock:
            allowed = min(size, self.left)
            self.left -= allowed
            first = allowed < size and not self.exceeded
            if allowed < size:
                self.exceeded = True
        if first and self.kill is not None:
            self.kill()
        return allowed


class _Relay:
    """Copies a pipe to one of our descriptors on a thread, within a budget,
    keeping the last `keep` bytes (stderr's 4 KiB tail)."""

    KEEP = 4096

    def __init__(self, fd: int, target: int, budget: _Budget, keep: int = 0) -> None:
        import _thread

        self.fd = fd
        self.target = target
        self.budget = budget
        self.keep = keep
        self.data = b""
        self.whole = True  # False once the start has scrolled out of the tail
        self.done = _thread.allocate_lock()
        self.started = False

    def start(self) -> None:
        import _thread

        self.done.acquire()
        self.started = True
        _thread.start_new_thread(self._pump, ())

    def _pump(self) -> None:
        try:
            while True:
                try:
                    chunk = os.read(self.fd, 65536)
                except InterruptedError:
                    continue
                except OSError:
                    break
                if not chunk:
                    break
                if self.keep:
                    self.data += chunk
                    if len(self.data) > self.keep:
                        self.data = self.data[-self.keep:]
                        self.whole = False
                # Past the budget, keep draining so the command never blocks
                # before the kill lands, and pass nothing on.
                chunk = chunk[:self.budget.take(len(chunk))]
                try:
                    _write_all(self.target, chunk)
                except OSError:
                    pass  # our end is gone; keep draining so the command never blocks
        finally:
            self.done.release()

    def finish(self) -> bytes:
        if self.fd >= 0:
            # A daemon the command left behind may hold the pipe open: its
            # later output is left to the thread rather than waited for, and
            # the fd stays open under it (the CLI exits right after).
            finished = not self.started or self.done.acquire(timeout=0.5)
            if finished:
                if self.started:
                    self.done.release()
                os.close(self.fd)
            self.fd = -1
        return self.data


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# -- doctor, audit -------------------------------------------------------------

def cmd_doctor(argv: list[str]) -> int:
    values, _ = parse_options(argv, DOCTOR_OPTIONS, DOCTOR_USAGE)
    if values.get("help"):
        print(command_help("doctor"))
        return 0
    from .config import load_config
    from .doctor import report

    # The bwrap `run` would use from here, configured or found.
    config = load_config(os.environ, os.getcwd())
    return report(as_json=bool(values.get("json")), configured_bwrap=config.bwrap, config=config)


def cmd_audit(argv: list[str]) -> int:
    values, rest = parse_options(argv, AUDIT_OPTIONS, AUDIT_USAGE)
    if values.get("help"):
        print(command_help("audit"))
        return 0
    if rest:
        raise UsageError(f"unexpected argument {rest[0]!r}", AUDIT_USAGE)
    import json

    from .config import load_config
    from .ledger import Ledger, decoded

    last = int(positive_number(values, "last", int, AUDIT_USAGE) or 20)
    config = load_config()
    path = config.ledger_path(os.environ)
    if values.get("web"):
        if path is None:
            from .errors import ConfigError

            raise ConfigError("the ledger is off (ledger = false in the config): there is "
                              "nothing to show")
        from .auditweb import serve

        return serve(path, port=int(positive_number(values, "port", int, AUDIT_USAGE) or 8765))
    if values.get("follow"):
        if values.get("last") or values.get("network"):
            raise UsageError("--follow shows every new event; it takes no --last or --network",
                             AUDIT_USAGE)
        if path is None:
            from .errors import ConfigError

            raise ConfigError("the ledger is off (ledger = false in the config): there is "
                              "nothing to follow")
        from .auditfollow import follow

        return follow(path, as_json=bool(values.get("json")),
                      session=values.get("session"))  # type: ignore[arg-type]
    ledger = Ledger(path)
    table = "network" if values.get("network") else "executions"
    rows = [decoded(row) for row in ledger.query(
        session=values.get("session"), last=last, table=table)]  # type: ignore[arg-type]
    if not rows and not values.get("json"):
        print("no network records" if table == "network" else "no execution records",
              file=sys.stderr)
    for row in rows:
        if values.get("json"):
            print(json.dumps(row))
            continue
        import time

        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(row["ts"])))  # type: ignore[arg-type]
        detail = row.get("detail")
        # A pool's records come from many machines: say which one ran it.
        node = (f" node={str(detail['node'])[:12]}"
                if isinstance(detail, dict) and detail.get("node") else "")
        if table == "network":
            verdict = "allow" if row["allowed"] else "DENY"
            extra = " ".join(str(row[k]) for k in ("address", "rule") if row[k])
            print(escape(f"{when} {row['session']} {verdict} {row['host']}:{row['port']}"
                         + node + (f" {extra}" if extra else "")))
        else:
            argv_text = " ".join(map(str, row["argv"]))  # type: ignore[call-overload]
            if row["exit_code"] is not None:
                status = f" exit={row['exit_code']}"
            elif row["signal"] is not None:
                status = f" signal={row['signal']}"
            else:
                status = ""
            why = f"  ({row['reason']})" if row["reason"] else ""
            print(escape(f"{when} {row['session']} {row['mode']} {row['backend']}{node} "
                         f"{row['verdict']}{status} {row['duration_ms']}ms  {argv_text}{why}"))
    return 0


def cmd_trust(argv: list[str]) -> int:
    values, rest = parse_options(argv, TRUST_OPTIONS, TRUST_USAGE)
    if values.get("help"):
        print(command_help("trust"))
        return 0
    if len(rest) > 1 or (rest and (values.get("list") or values.get("revoke"))) or (
            values.get("list") and values.get("revoke")):
        raise UsageError("give one PATH, or --list, or --revoke PATH", TRUST_USAGE)
    from . import trustcmd

    env, cwd = os.environ, os.getcwd()
    if values.get("list"):
        lines = trustcmd.list_trusted(env)
    elif values.get("revoke"):
        lines = trustcmd.revoke_file(str(values["revoke"]), env)
    else:
        lines = trustcmd.trust_file(rest[0] if rest else os.path.join(cwd, "stockade.toml"),
                                    env, cwd)
    print("\n".join(lines))
    return 0


def _delegate(module: str, argv: list[str], entry: str = "main") -> int:
    import importlib

    try:
        mod = importlib.import_module(f"stockade.{module}")
    except ImportError as exc:
        print(f"stockade: {module.split('.')[0]} is not available: {exc}", file=sys.stderr)
        return 69  # MissingDependency's status: an installation to complete, not a sandbox
    return int(getattr(mod, entry)(argv))


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "run": cmd_run,
    "explain": lambda argv: _delegate("explain", argv),
    "config": lambda argv: _delegate("explain", argv, "config_main"),
    "doctor": cmd_doctor,
    "audit": cmd_audit,
    "trust": cmd_trust,
    "policy": lambda argv: _delegate("command_policy.cli", argv),
    "proxy": lambda argv: _delegate("proxy.cli", argv),
    "mcp": lambda argv: _delegate("mcp_server", argv),
    "hook": lambda argv: _delegate("adapters.claude_code", argv),
    "shell": lambda argv: _delegate("shell", argv),
    "completion": lambda argv: _delegate("completion", argv),
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["run"] and sys.platform.startswith("linux"):
        from . import serviceclient

        if serviceclient.wanted(args[1:], dict(os.environ)):
            served = serviceclient.run(args[1:])
            if served is not None:
                return served
    try:
        return dispatch(args)
    except Terminated as exc:
        import _signal

        # The command's tree is gone and the guard has swept (the `finally`s
        # ran): now end as the signal would have, for whoever waits on us.
        _signal.signal(exc.signum, _signal.SIG_DFL)
        os.kill(os.getpid(), exc.signum)
        return 128 + exc.signum


def dispatch(args: list[str]) -> int:
    """Run one subcommand in this process; `Terminated` propagates to the caller,
    which ends the process by that signal (`main`, or the service's child)."""
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else EXIT_USAGE
    if args[0] in ("-V", "--version"):
        from . import __version__

        print(f"stockade {__version__}")
        return 0
    handler = COMMANDS.get(args[0])
    if handler is None:
        print(f"stockade: unknown command {args[0]!r}\n\n{USAGE}", file=sys.stderr)
        return EXIT_USAGE
    if args[0] in ENDED_BY_SIGNAL:
        _end_by_signal_after_cleanup()
    try:
        return handler(args[1:])
    except UsageError as exc:
        print(f"stockade: {escape(str(exc))}\n{exc.usage}", file=sys.stderr)
        _json_failure(args, "UsageError", str(exc), EXIT_USAGE)
        return EXIT_USAGE
    except KeyboardInterrupt:
        _json_failure(args, "KeyboardInterrupt", "interrupted", 130)
        return 130
    except BrokenPipeError:
        # `stockade audit | head`: the reader is done; no traceback for that.
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        return 141
    except Exception as exc:
        from .errors import SandboxError

        if isinstance(exc, SandboxError):
            _json_failure(args, type(exc).__name__, str(exc), exc.exit_status)
            return _fail(exc)
        raise


#: The commands that run something, and must clean up when asked to end.
ENDED_BY_SIGNAL = ("run", "hook", "shell")


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where the main thread is, so that every `finally`
    runs: killed by default, `stockade run` left its command's tree to bwrap's
    --die-with-parent and never swept what the command had left (a config below
    the top of the workspace stayed, and the next run took it for the person's)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _end_by_signal_after_cleanup() -> None:
    # _signal, not signal: the module wraps its constants in enums, and importing
    # enum costs every `stockade run` milliseconds (tests/unit/test_public_api.py).
    import _signal

    def raise_terminated(signum: int, _frame: object) -> None:
        raise Terminated(signum)

    for sig in (_signal.SIGTERM, _signal.SIGHUP):
        # An ignored signal (nohup) stays ignored.
        if _signal.getsignal(sig) == _signal.SIG_DFL:
            _signal.signal(sig, raise_terminated)


def _fail(exc: SandboxError) -> int:
    """One readable line on stderr and the kind's own exit status."""
    message = escape(" ".join(str(exc).split()))
    print(f"stockade: {type(exc).__name__}: {message}", file=sys.stderr)
    return exc.exit_status


def _json_failure(args: list[str], kind: str, message: str, status: int) -> None:
    """`run --json` that ends without a result still prints its object, with the error
    and the exit status: a refusal left stdout empty, and a caller parsing it got
    nothing to tell a refusal from a crash."""
    if args[:1] != ["run"] or not _wants_json(args[1:]):
        return
    import json

    print(json.dumps({
        "exit_code": None, "signal": None, "stdout": "", "stderr": "", "truncated": False,
        "duration_ms": 0, "likely_sandbox_denied": False, "denial_hint": None,
        "backend": None, "limit_exceeded": None, "timed_out": kind == "CommandTimeout",
        "error": kind, "message": " ".join(message.split()), "status": status}))


def _wants_json(argv: list[str]) -> bool:
    """Whether `run`'s options, before the command, ask for --json: read without
    parsing, since a failure to parse them must print the object too."""
    return any(name == "--json" for name, _ in leading_run_options(argv))


if __name__ == "__main__":
    sys.exit(main())
