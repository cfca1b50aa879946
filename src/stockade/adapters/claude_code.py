"""Claude Code: a PreToolUse hook that runs every `Bash` call inside stockade.

    stockade hook claude-code --install --project --mode workspace-write

Claude Code runs each command of its Bash tool on the host, in a shell it
keeps in step with the session (the directory it is in, the person's
environment). Before each call it runs this hook with the call as JSON on
stdin, and the hook answers with the call's `updatedInput`: the same
command, handed to `stockade hook claude-code --run`, which runs it inside
the sandbox in the session's workspace and mode. Claude Code's own shell
still runs the line, so its quoting, its environment, the exit status and
the output stay Claude Code's; a `cd` inside the sandbox is carried back to
that shell through a descriptor the sandbox never sees.

A command the command policy refuses, or one stockade would refuse to run
here (a cwd outside the workspace, a home workspace in a writing mode), is
a `deny` whose reason says why and what to ask the person for. Any failure
of the hook itself is a `deny` too: Claude Code runs a call unchanged when
a hook fails in any other way, which here would mean unsandboxed.

The same JSON shapes (PreToolUse, `hookSpecificOutput.updatedInput`) are
read by harnesses that adopted Claude Code's hook format; the tests feed
Claude Code's payloads.
"""

from __future__ import annotations

import json
import os
import shlex
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping
    from typing import Any

__all__ = ["decide", "install", "main", "rewrite", "run"]

#: Claude Code's own timeout for a Bash call without one (two minutes).
DEFAULT_TIMEOUT_MS = 120_000
#: A call run with `run_in_background` lives until the person or the agent
#: stops it; stockade's default 60 s would end a dev server a minute in.
BACKGROUND_TIMEOUT_S = 24 * 3600
#: What `--run` captures of a command. Claude Code keeps 30,000 characters of
#: it, but a build that prints more must not be killed for it, as it would be
#: past the library's 1 MiB default.
CAPTURE_BYTES = 64 << 20
#: The descriptor the rewritten line reads the command's last directory from.
CWD_FD = 3
#: What a matcher names: the tool this hook is for.
TOOL = "Bash"
HARNESS = "claude-code"


class HookError(Exception):
    """A payload this hook cannot act on; it becomes a deny, never a pass."""


# -- the decision ------------------------------------------------------------------


def decide(payload: Mapping[str, Any], *, program: list[str], workspace: str | None,
           mode: str | None, config_path: str | None,
           env: Mapping[str, str]) -> dict[str, Any] | None:
    """The hook's answer to one PreToolUse payload; None for a call it has no view on.

    Raises nothing a caller must handle for a Bash call: whatever goes wrong
    is a deny (see the module docstring).
    """
    if payload.get("hook_event_name", "PreToolUse") != "PreToolUse" or \
            payload.get("tool_name") != TOOL:
        return None
    try:
        return _decide_bash(payload, program=program, workspace=workspace, mode=mode,
                            config_path=config_path, env=env)
    except Exception as exc:  # fail closed: an error here must not let the call run as is
        from ..errors import SandboxError

        kind = type(exc).__name__ if isinstance(exc, SandboxError | HookError) else "error"
        return deny(f"stockade could not check this command ({kind}: {exc}), so it was not "
                    "run. Ask the person to look at the stockade hook's setup.")


def _decide_bash(payload: Mapping[str, Any], *, program: list[str], workspace: str | None,
                 mode: str | None, config_path: str | None,
                 env: Mapping[str, str]) -> dict[str, Any] | None:
    from ..capabilities import parse_mode
    from ..command import SandboxCommand
    from ..config import load_config
    from ..core import ROOT_WORKSPACE, refuse_home_workspace
    from ..errors import CapabilityDenied
    from ..hooks import run_before_hooks
    from ..ledger import DENIED
    from ..sync import SyncWorkspaceSandbox

    tool_input = payload.get("tool_input")
    if not isinstance(tool_input, dict) or not isinstance(tool_input.get("command"), str):
        raise HookError("the payload's tool_input has no command string")
    command: str = tool_input["command"]
    cwd = payload.get("cwd")
    if not isinstance(cwd, str) or not os.path.isabs(cwd):
        raise HookError("the payload has no absolute cwd")
    root = workspace or env.get("CLAUDE_PROJECT_DIR") or cwd
    where = own_code_inside(root)
    if where:
        return deny(f"stockade refused this command: {own_code_refusal(where)}. Ask the "
                    "person to do that.")
    config = load_config(env, root, paths=[config_path] if config_path else None, mode=mode)
    mode = parse_mode(config.mode)
    if mode == "full-access":
        # Nothing to confine: Claude Code's own permission rules decide, not an
        # allow from here that would skip them.
        return None
    session = session_id(payload)
    with SyncWorkspaceSandbox(config, env=env) as sandbox:
        ws = sandbox.session(session, root, ephemeral_tmp=True)
        core = sandbox.core
        cmd = SandboxCommand("/bin/bash", ["-c", command], session_id=session, cwd=cwd)
        denial, _ = run_before_hooks(core.hooks, cmd, session)
        reason = denial.reason if denial is not None else ""
        ask = ("Do not retry it as is: do the task another way, or ask the person to run it "
               "themselves or to change stockade's command policy.")
        if not reason:
            ask = ("Ask the person to start Claude Code in the project, or to give the hook "
                   "another --workspace or mode.")
            try:
                core.validate_cwd(ws, cwd)
                if ws.cwd == "/":
                    raise CapabilityDenied(ROOT_WORKSPACE)
                if mode != "read-only":
                    refuse_home_workspace(ws.cwd, env, config.allow_home_workspace)
            except CapabilityDenied as exc:
                reason = exc.reason
        if reason:
            text = f"stockade refused this command: {reason}. {ask}"
            core.audit(cmd, ws, mode, None, "unresolved", DENIED, _now(), denied=True,
                       detail={"reason": reason, "hint": text, "hook": HARNESS})
            return deny(text)
    background = bool(tool_input.get("run_in_background"))
    timeout_ms = tool_input.get("timeout")
    if not isinstance(timeout_ms, int | float) or isinstance(timeout_ms, bool) or timeout_ms <= 0:
        timeout_ms = DEFAULT_TIMEOUT_MS
    line = rewrite(command, program=program, workspace=ws.cwd, mode=mode, session=session,
                   timeout=BACKGROUND_TIMEOUT_S if background else timeout_ms / 1000,
                   config_path=config_path, background=background)
    return {"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "allow",
        "permissionDecisionReason": f"stockade runs it sandboxed ({mode}, {ws.cwd})",
        "updatedInput": {**tool_input, "command": line},
    }}


def deny(reason: str) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                   "permissionDecision": "deny",
                                   "permissionDecisionReason": reason}}


def session_id(payload: Mapping[str, Any]) -> str:
    """One stockade session per Claude Code session, named after it in the ledger."""
    raw = payload.get("session_id")
    text = "".join(c for c in str(raw or "") if c.isalnum() or c in "-_")[:64]
    return f"claude-{text or 'unknown'}"


def _now() -> float:
    import time

    return time.monotonic()


# -- the rewritten line -------------------------------------------------------------


def rewrite(command: str, *, program: list[str], workspace: str, mode: str, session: str,
            timeout: float, config_path: str | None, background: bool) -> str:
    """The line Claude Code's shell runs instead of `command`.

    A foreground call reads the directory the command ended in from `--run`'s
    descriptor 3 and `cd`s there, as Claude Code's shell would have after the
    command itself; a background call has no directory to carry back. Every
    piece is quoted with `shlex.quote`, so the line means the same under
    Claude Code's `eval` in bash or zsh.
    """
    argv = [*program, "hook", HARNESS, "--run", "--workspace", workspace, "--mode", mode,
            "--session", session, "--timeout", f"{timeout:g}"]
    if config_path:
        argv += ["--config", config_path]
    if background:
        return shlex.join([*argv, "--", command])
    run_line = shlex.join([*argv, "--cwd-fd", str(CWD_FD), "--", command])
    return ("{ __stockade_cwd=$(" + run_line + " 3>&1 1>&4 4>&-); __stockade_rc=$?; } 4>&1; "
            '[ -n "$__stockade_cwd" ] && cd -- "$__stockade_cwd"; (exit $__stockade_rc)')


def stockade_program() -> list[str]:
    """How the rewritten line starts stockade again: this interpreter on this copy of
    the package, isolated (`-I`: no PYTHONPATH, no `stockade/` in the current
    directory) and without `site` (`-S`: no `.pth` file of an environment runs)."""
    import site

    # The environment's own directories, named here: stockade's dependencies
    # live there, and without `site` nothing else would put them on the path.
    where = [_package_top(), *(p for p in site.getsitepackages() if os.path.isdir(p))]
    boot = (f"import sys; sys.path[:0] = {list(dict.fromkeys(where))!r}; "
            "from stockade.cli import main; sys.exit(main())")
    return [sys.executable, "-I", "-S", "-c", boot]


def _package_top() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def own_code_inside(workspace: str) -> str:
    """Where this stockade's interpreter or package lies inside `workspace`, or "".

    The hook runs on the host before every Bash call, so code a sandboxed
    command can write must never be what it runs: a project's `.venv` or an
    editable checkout would hand the next call's host process to the command.
    """
    from ..capabilities import is_under

    real = os.path.realpath(workspace)
    for path in (sys.executable, os.path.realpath(sys.executable), sys.prefix,
                 _package_top()):
        if path and (is_under(os.path.abspath(path), real)
                     or is_under(os.path.realpath(path), real)):
            return path
    return ""


def own_code_refusal(where: str) -> str:
    return (f"stockade runs from {where}, inside the project, where a sandboxed command "
            "can write: the hook would run what a command left there on the host. "
            "Install stockade outside the project (`pipx install stockade` or "
            "`uv tool install stockade`) and install the hook from there")


# -- --run: the command inside the sandbox ----------------------------------------------


def run(command: str, *, workspace: str, mode: str, session: str, timeout: float,
        config_path: str | None, cwd_fd: int | None, env: Mapping[str, str]) -> int:
    """Run `command` in the sandbox from the current directory; its exit status.

    Writes its stdout and stderr as they were (bytes, not decoded), then the
    `stockade:` line of a denial, and the directory it ended in on `cwd_fd`.
    """
    from ..command import SandboxCommand
    from ..config import load_config
    from ..errors import CommandTimeout, SandboxError
    from ..sync import SyncWorkspaceSandbox

    # The descriptor is the host's: one inherited by the sandbox is refused by
    # its init as a leak (and would be one).
    _keep_to_ourselves(cwd_fd)
    nonce = os.urandom(16).hex().encode()
    config = load_config(env, workspace, paths=[config_path] if config_path else None,
                         mode=mode, max_output_bytes=CAPTURE_BYTES)
    argv = ["-c", _WRAP, "bash", command, nonce.decode()]
    try:
        with SyncWorkspaceSandbox(config, env=env) as sandbox:
            ws = sandbox.session(session, workspace, ephemeral_tmp=True)
            cmd = SandboxCommand(_shell(), argv, session_id=session, cwd=os.getcwd(),
                                 timeout=timeout)
            try:
                out = sandbox.execute(cmd)
            except CommandTimeout as exc:
                if exc.output is not None:
                    _emit(exc.output, nonce, None, ws.cwd)
                raise
            _emit(out, nonce, cwd_fd, ws.cwd)
            return out.returncode
    except SandboxError as exc:
        message = " ".join(str(exc).split())
        print(f"stockade: {type(exc).__name__}: {message}", file=sys.stderr)
        return exc.exit_status


#: The shell inside: the command is eval'd with no positional parameters, as
#: Claude Code's shell evals it, and the directory it ended in is the last
#: line on stdout, after a token the line's reader knows (stdout, not stderr:
#: the denial hint is read from the tail of stderr, which this line would end).
_WRAP = ('__stockade_c=$1; __stockade_n=$2; shift 2; eval "$__stockade_c"; __stockade_rc=$?; '
         'printf "\\n%s%s\\n" "$__stockade_n" "$PWD"; exit $__stockade_rc')


def _shell() -> str:
    return "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"


def _emit(out: Any, nonce: bytes, cwd_fd: int | None, workspace: str) -> None:
    stdout, where = split_cwd(out.stdout, nonce)
    _write(1, stdout)
    _write(2, out.stderr)
    if out.denial_hint:
        hint = out.denial_hint
        if out.returncode == 0 and out.neutralised:
            hint += "; the command exited 0, but what is named here did not stay"
        _write(2, f"stockade: {hint}\n".encode())
    if cwd_fd is not None and where is not None:
        target = inside(where, workspace)
        if target:
            # `/.` keeps a trailing newline of a name from `$(...)`'s trimming.
            _write(cwd_fd, os.fsencode(target) + b"/.")


def split_cwd(stdout: bytes, nonce: bytes) -> tuple[bytes, str | None]:
    """(the command's own stdout, the directory it ended in), from what `_WRAP` printed."""
    at = stdout.rfind(b"\n" + nonce)
    if at < 0 or not stdout.endswith(b"\n"):
        return stdout, None
    return stdout[:at], os.fsdecode(stdout[at + 1 + len(nonce):-1])


def inside(path: str, workspace: str) -> str | None:
    """`path` when it is a directory in the workspace: a `cd` never leaves it."""
    from ..capabilities import is_under

    real = os.path.realpath(os.path.join(workspace, path))
    return real if is_under(real, workspace) and os.path.isdir(real) else None


def _keep_to_ourselves(cwd_fd: int | None) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass  # the listing's own descriptor, closed by now
    if cwd_fd is not None:
        try:
            os.fstat(cwd_fd)
        except OSError as exc:
            from ..errors import InvalidCommand

            raise InvalidCommand(f"--cwd-fd {cwd_fd} is not an open descriptor") from exc


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BrokenPipeError:
            return


# -- --install -------------------------------------------------------------------


def settings_path(scope: str, project: str, env: Mapping[str, str]) -> str:
    if scope == "user":
        return os.path.join(env.get("HOME") or os.path.expanduser("~"), ".claude",
                            "settings.json")
    return os.path.join(project, ".claude", "settings.json")


def merged_settings(current: Mapping[str, Any], hook_command: str) -> dict[str, Any] | None:
    """`current` with this hook added for Bash; None when it is there already.

    Everything else is kept as it was: other events, other matchers, other
    hooks on Bash (ours is added beside them, never in their place).
    """
    out = dict(current)
    hooks = out.get("hooks", {})
    if not isinstance(hooks, dict):
        raise HookError("its \"hooks\" is not an object")
    hooks = dict(hooks)
    entries = hooks.get("PreToolUse", [])
    if not isinstance(entries, list):
        raise HookError("its \"hooks.PreToolUse\" is not a list")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("matcher") == TOOL:
            for hook in entry.get("hooks", []) or []:
                if isinstance(hook, dict) and hook.get("command") == hook_command:
                    return None
    ours = {"matcher": TOOL, "hooks": [{"type": "command", "command": hook_command}]}
    hooks["PreToolUse"] = [*entries, ours]
    out["hooks"] = hooks
    return out


def install(scope: str, *, project: str, program: list[str], mode: str | None,
            env: Mapping[str, str]) -> str:
    """Add the hook to Claude Code's settings; the line that says what was done."""
    from ..errors import ConfigError

    where = own_code_inside(project)
    if where:
        raise ConfigError(own_code_refusal(where) + "; nothing was changed")
    path = settings_path(scope, project, env)
    args = [*program, "hook", HARNESS]
    if mode:
        args += ["--mode", mode]
    hook_command = shlex.join(args)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raw = b""
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from exc
    try:
        current = json.loads(raw) if raw.strip() else {}
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc}); fix it, then run --install "
                          "again (nothing was changed)") from exc
    if not isinstance(current, dict):
        raise ConfigError(f"{path} does not hold a JSON object; nothing was changed")
    try:
        merged = merged_settings(current, hook_command)
    except HookError as exc:
        raise ConfigError(f"{path}: {exc}; nothing was changed") from exc
    if merged is None:
        return f"stockade: the hook is already in {path}"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.stockade-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(merged, f, indent=2)
        f.write("\n")
    if raw:
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
    os.replace(tmp, path)
    return f"stockade: added the Bash hook to {path}: {hook_command}"


# -- the command line -----------------------------------------------------------


def argument_parser() -> argparse.ArgumentParser:
    import argparse

    from ..clispec import HelpFormatter

    p = argparse.ArgumentParser(
        prog="stockade hook", formatter_class=HelpFormatter,
        description="A harness's command hook that runs its shell calls inside stockade. "
                    "claude-code: a PreToolUse hook for the Bash tool (JSON on stdin, the "
                    "answer on stdout).")
    p.add_argument("harness", choices=(HARNESS,), help="the harness whose hook this is")
    p.add_argument("--workspace", metavar="DIR",
                   help="the project (default: $CLAUDE_PROJECT_DIR, else the call's cwd)")
    p.add_argument("--mode", choices=("read-only", "workspace-write", "full-access"),
                   help="the mode of every command (default from config: read-only)")
    p.add_argument("--config", metavar="FILE", help="read this TOML file instead of the "
                   "usual ones")
    p.add_argument("--install", action="store_true",
                   help="add this hook to Claude Code's settings, beside any hooks there")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--project", action="store_true",
                       help="with --install: the project's .claude/settings.json (default)")
    where.add_argument("--user", action="store_true",
                       help="with --install: ~/.claude/settings.json, for every project")
    p.add_argument("--run", action="store_true",
                   help="run COMMAND in the sandbox (what the rewritten call does)")
    p.add_argument("--session", metavar="ID", help="with --run: the session to record it in")
    p.add_argument("--timeout", metavar="SECONDS", type=float, help="with --run: seconds "
                   "before the whole process tree is killed")
    p.add_argument("--cwd-fd", metavar="FD", type=int, help="with --run: write the "
                   "directory the command ended in to this descriptor")
    p.usage = ("stockade hook claude-code [--workspace DIR] [--mode MODE] [--config FILE]\n"
               "       stockade hook claude-code --install [--project|--user] [--mode MODE]\n"
               "       stockade hook claude-code --run --workspace DIR --session ID "
               "[--cwd-fd FD] -- COMMAND")
    return p


def main(argv: list[str]) -> int:
    from ..errors import InvalidCommand

    # What follows `--` is the command, whatever it looks like: argparse would
    # read a command such as `-h` as its own option.
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1:]
    else:
        command = []
    args = argument_parser().parse_args(argv)
    args.command = command
    env = os.environ
    program = stockade_program()
    if args.install:
        if args.run:
            raise InvalidCommand("--install and --run do not go together")
        project = args.workspace or os.getcwd()
        print(install("user" if args.user else "project", project=project, program=program,
                      mode=args.mode or "workspace-write", env=env))
        return 0
    if args.run:
        if len(args.command) != 1 or not args.workspace or not args.session:
            raise InvalidCommand("--run needs --workspace, --session and one COMMAND after --")
        if args.timeout is not None and not args.timeout > 0:
            raise InvalidCommand(f"--timeout must be a positive number, got {args.timeout}")
        return run(args.command[0], workspace=args.workspace, mode=args.mode or "read-only",
                   session=args.session, timeout=args.timeout or DEFAULT_TIMEOUT_MS / 1000,
                   config_path=args.config, cwd_fd=args.cwd_fd, env=env)
    if args.command:
        raise InvalidCommand("the hook reads its call on stdin and takes no COMMAND "
                             "(did you mean --run?)")
    raw = sys.stdin.buffer.read()
    try:
        payload = json.loads(raw)
        if not isinstance(payload, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        # Exit 2 is Claude Code's "block this call": unreadable input is no
        # reason to let it run unchecked.
        print(f"stockade: the hook's input is not a JSON object ({exc}); the call is "
              "blocked", file=sys.stderr)
        return 2
    answer = decide(payload, program=program, workspace=args.workspace, mode=args.mode,
                    config_path=args.config, env=env)
    if answer is not None:
        sys.stdout.write(json.dumps(answer) + "\n")
    return 0
