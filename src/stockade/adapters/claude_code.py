"""Claude Code: a PreToolUse hook that runs every shell command inside stockade.

    stockade hook claude-code --install --project --mode workspace-write

Claude Code runs each command of its Bash tool (and of Monitor, a watch) on
the host, in a shell it keeps in step with the session (the directory it is
in, the person's environment). Before each call it runs this hook with the
call as JSON on stdin, and the hook answers with the call's `updatedInput`:
the same command, handed to `stockade hook claude-code --run`, which runs it
inside the sandbox in the session's workspace and mode. Claude Code's own
shell still runs the line, so its quoting, its environment, the exit status
and the output stay Claude Code's; a `cd` inside the sandbox is carried back
to that shell through a descriptor the sandbox never sees.

A command the command policy or the person's own Claude Code rules refuse,
or one stockade would refuse to run here (a cwd outside the workspace, a
home workspace in a writing mode), is a `deny` whose reason says why and
what to ask the person for. Any failure of the hook itself is a `deny` too,
and the installed hook blocks the call when it cannot run at all
(`onFailure`): Claude Code would otherwise run it unchanged, unsandboxed.

The same JSON shapes (PreToolUse, `hookSpecificOutput.updatedInput`) are
read by harnesses that adopted Claude Code's hook format; the tests run
Claude Code itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import sys

from .claude_settings import TOOL

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator, Mapping
    from typing import Any

    from ..fsroot import Root

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
#: Claude Code's other tool that runs a shell command (a watch whose every line
#: of output is an event); without it, the agent had a way around the hook.
MONITOR = "Monitor"
#: What the installed hook's matcher names: every tool that runs a command.
MATCHER = f"{TOOL}|{MONITOR}"
#: Claude Code's longest watch, and its default (`timeout_ms`).
MONITOR_MAX_MS = 1_800_000
MONITOR_DEFAULT_MS = 300_000
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
            payload.get("tool_name") not in (TOOL, MONITOR):
        return None
    tool_input = payload.get("tool_input")
    if payload.get("tool_name") == MONITOR and isinstance(tool_input, dict) and \
            "command" not in tool_input:
        return None  # a WebSocket watch: Claude Code's own connection, no command
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
    from ..ledger import DENIED
    from ..sync import SyncWorkspaceSandbox
    from .claude_settings import ASK, DENY, person_rule

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
    ruled = person_rule(command, root, env)
    with SyncWorkspaceSandbox(config, env=env) as sandbox:
        ws = sandbox.session(session, root, ephemeral_tmp=True)
        cmd = SandboxCommand("/bin/bash", ["-c", command], session_id=session, cwd=cwd)
        denial, _ = sandbox.command_policy(cmd, session)
        reason = denial.reason if denial is not None else ""
        if not reason and ruled is not None and ruled[0] == DENY:
            reason = ruled[1]
        ask = ("Do not retry it as is: do the task another way, or ask the person to run it "
               "themselves or to change stockade's command policy.")
        if not reason:
            ask = ("Ask the person to start Claude Code in the project, or to give the hook "
                   "another --workspace or mode.")
            try:
                sandbox.resolve_cwd(ws, cwd)
                if ws.cwd == "/":
                    raise CapabilityDenied(ROOT_WORKSPACE)
                if mode != "read-only":
                    refuse_home_workspace(ws.cwd, env, config.allow_home_workspace)
            except CapabilityDenied as exc:
                reason = exc.reason
        if reason:
            text = f"stockade refused this command: {reason}. {ask}"
            sandbox.record(cmd, ws, mode, None, "unresolved", DENIED, _now(), denied=True,
                           detail={"reason": reason, "hint": text, "hook": HARNESS})
            return deny(text)
    line = rewrite(command, program=program, workspace=ws.cwd, mode=mode, session=session,
                   timeout=_timeout(payload.get("tool_name"), tool_input),
                   config_path=config_path, background=_background(payload, tool_input))
    asked = ruled is not None and ruled[0] == ASK
    because = f"; {ruled[1]}" if asked and ruled else ""
    return {"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": ASK if asked else "allow",
        "permissionDecisionReason": f"stockade runs it sandboxed ({mode}, {ws.cwd}){because}",
        "updatedInput": {**tool_input, "command": line},
    }}


def _background(payload: Mapping[str, Any], tool_input: Mapping[str, Any]) -> bool:
    """Whether the call has no directory to carry back: a watch, or a background call."""
    return payload.get("tool_name") == MONITOR or bool(tool_input.get("run_in_background"))


def _timeout(tool: object, tool_input: Mapping[str, Any]) -> float:
    """Seconds before stockade ends the call's process tree, Claude Code's own deadline."""
    given = tool_input.get("timeout_ms" if tool == MONITOR else "timeout")
    if not isinstance(given, int | float) or isinstance(given, bool) or not given > 0:
        given = None
    if tool == MONITOR:
        return min(given or MONITOR_DEFAULT_MS, MONITOR_MAX_MS) / 1000
    if tool_input.get("run_in_background"):
        return BACKGROUND_TIMEOUT_S
    return (given or DEFAULT_TIMEOUT_MS) / 1000


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

    The `cd` is the shell's builtin, without zsh's `chpwd` hooks (`-q`), and
    only when the directory changed: Claude Code's shell has the person's
    functions, and a `cd` that activates a project's `.venv` on the way in
    ran on the host what the command had just written there. Where it landed
    is checked after: a name swapped for a link (by a background call) since
    `--run` checked it goes back to where the shell was.
    """
    argv = [*program, "hook", HARNESS, "--run", "--workspace", workspace, "--mode", mode,
            "--session", session, "--timeout", f"{timeout:g}"]
    if config_path:
        argv += ["--config", config_path]
    if background:
        return shlex.join([*argv, "--", command])
    run_line = shlex.join([*argv, "--cwd-fd", str(CWD_FD), "--", command])
    return ("{ __stockade_cwd=$(" + run_line + " 3>&1 1>&4 4>&-); __stockade_rc=$?; } 4>&1; "
            'if [ -n "$__stockade_cwd" ] && [ "$__stockade_cwd" != "$PWD/." ]; then '
            f'__stockade_was=$PWD; {_enter("__stockade_cwd")}; '
            'if [ "$(builtin pwd -P)/." != "$__stockade_cwd" ]; then '
            f'{_enter("__stockade_was")}; fi; fi; (exit $__stockade_rc)')


def _enter(var: str) -> str:
    """The shell's own `cd` into the directory named by `var`, links resolved."""
    return (f'if [ -n "${{ZSH_VERSION-}}" ]; then builtin cd -q -P -- "${var}"; '
            f'else builtin cd -P -- "${var}"; fi')


def stockade_program() -> list[str]:
    """How the rewritten line starts stockade again: this interpreter on this copy of
    the package, isolated (`-I`: no PYTHONPATH, no `stockade/` in the current
    directory) and without `site` (`-S`: no `.pth` file of an environment runs)."""
    # The environment's own directories, named here: stockade's dependencies
    # live there, and without `site` nothing else would put them on the path.
    where = [_package_top(), *(p for p in _site_directories() if os.path.isdir(p))]
    boot = (f"import sys; sys.path[:0] = {list(dict.fromkeys(where))!r}; "
            "from stockade.cli import main; sys.exit(main())")
    return [sys.executable, "-I", "-S", "-c", boot]


def _site_directories() -> list[str]:
    """Where this interpreter's packages are, as `site` would have put them on the path.

    Computed, not asked of `site`: under `-S` (the hook itself runs so)
    nothing reads `pyvenv.cfg`, so `sys.prefix` is the base interpreter's,
    and Debian's `site.getsitepackages` names a virtual environment's
    `site-packages` only when it differs from the base: the line the hook
    wrote from a venv then lacked its packages, and every call failed.
    """
    import site
    import sysconfig

    venv = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    try:
        with open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8") as f:
            cfg = f.read()
    except OSError:
        return site.getsitepackages()
    here = {name: venv for name in ("base", "platbase", "installed_base", "installed_platbase")}
    paths = sysconfig.get_paths("venv", vars=here)
    found = [paths["purelib"], paths["platlib"]]
    if re.search(r"^\s*include-system-site-packages\s*=\s*true\s*$", cfg,
                 re.IGNORECASE | re.MULTILINE):
        found += site.getsitepackages([sys.base_prefix])
    return found


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
        where = env.get("CLAUDE_CONFIG_DIR") or os.path.join(
            env.get("HOME") or os.path.expanduser("~"), ".claude")
        return os.path.join(where, "settings.json")
    return os.path.join(project, ".claude", "settings.json")


def is_stockade_hook(command: str) -> bool:
    """Whether `command` is stockade's hook itself, however stockade is started: the
    line --install writes (`python -I -S -c '...stockade.cli...'`), a `stockade`
    script, or `python -m stockade`, then `hook claude-code`. A command of the
    person's that only wraps it (`timeout 5 stockade hook claude-code`, a logger
    that runs it) is theirs, and --install keeps it."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return False
    for i in range(1, len(argv) - 1):
        if argv[i:i + 2] == ["hook", HARNESS]:
            start = argv[:i]
            if len(start) == 1:
                return os.path.basename(start[0]) == "stockade"
            python = os.path.basename(start[0]).startswith("python") and all(
                flag.startswith("-") for flag in start[1:-2])
            return python and (start[-2:] == ["-m", "stockade"] or (
                start[-2] == "-c" and "from stockade.cli import main" in start[-1]))
    return False


#: What --install keeps of an earlier stockade hook's entry: the person's timeout and
#: message. `async`, `if` and `once` (a cloned repository's settings could set
#: them) left the hook not deciding the call, and it ran unsandboxed.
KEPT_KEYS = ("timeout", "statusMessage")
#: Set beside the hook: a skill's or slash command's inline `!` command runs on
#: the host without any tool call, so no hook sees it, and a command can write a
#: skill in any directory of the project, where Claude Code finds it.
NO_SKILL_SHELL = "disableSkillShellExecution"


def merged_settings(current: Mapping[str, Any], hook_command: str
                    ) -> tuple[dict[str, Any], bool] | None:
    """(`current` with stockade's Bash hook set to `hook_command`, whether one was there
    before); None when it is set so already.

    Only stockade's own hook changes: the first one keeps its place and takes
    the new command, and any other is removed, since each would rewrite the
    call again and Claude Code would run whichever answer it took last.
    Everything else is kept as it was (other events, matchers and hooks).
    Raises HookError, naming the key, for a part of `hooks.PreToolUse` whose
    type Claude Code's settings do not allow.
    """
    hooks = current.get("hooks", {})
    if not isinstance(hooks, dict):
        raise HookError('its "hooks" is not an object')
    entries = hooks.get("PreToolUse", [])
    if not isinstance(entries, list):
        raise HookError('its "hooks.PreToolUse" is not a list')
    # onFailure: a hook that cannot start (its venv moved, Python upgraded), is
    # killed or times out blocks the call; by default Claude Code ran it as is.
    ours = {"type": "command", "command": hook_command, "onFailure": "block"}
    found = placed = False
    kept_entries = []
    for i, entry in enumerate(entries):
        where = f"hooks.PreToolUse[{i}]"
        if not isinstance(entry, dict):
            raise HookError(f'its "{where}" is not an object')
        if not isinstance(entry.get("matcher", ""), str):
            raise HookError(f'its "{where}.matcher" is not a string')
        inner = entry.get("hooks", [])
        if not isinstance(inner, list):
            raise HookError(f'its "{where}.hooks" is not a list')
        kept = []
        for j, hook in enumerate(inner):
            if not isinstance(hook, dict):
                raise HookError(f'its "{where}.hooks[{j}]" is not an object')
            command = hook.get("command")
            if command is not None and not isinstance(command, str):
                raise HookError(f'its "{where}.hooks[{j}].command" is not a string')
            if command is None or not is_stockade_hook(command):
                kept.append(hook)
                continue
            # In place only under its own matcher: under another (an older
            # install's "Bash") it would not run for every call it is for.
            if not found and entry.get("matcher") == MATCHER:
                kept.append({**{k: v for k, v in hook.items() if k in KEPT_KEYS}, **ours})
                placed = True
            found = True
        if kept or not inner:
            kept_entries.append(entry if kept == inner else {**entry, "hooks": kept})
    if not placed:
        kept_entries.append({"matcher": MATCHER, "hooks": [ours]})
    out = {**current, "hooks": {**hooks, "PreToolUse": kept_entries}, NO_SKILL_SHELL: True}
    return None if out == current else (out, found)


def install(scope: str, *, project: str, program: list[str], mode: str | None,
            env: Mapping[str, str]) -> str:
    """Set the hook in Claude Code's settings; the line that says what was done.

    Any problem is a ConfigError that names the file, with the file left as it was.
    """
    from ..errors import ConfigError

    where = own_code_inside(project)
    if where:
        raise ConfigError(own_code_refusal(where) + "; nothing was changed")
    path = settings_path(scope, project, env)
    args = [*program, "hook", HARNESS]
    if mode:
        args += ["--mode", mode]
    hook_command = shlex.join(args)
    from .claude_settings import hooks_turned_off

    off = hooks_turned_off(project, env)
    if off:
        raise ConfigError(f"{off} turns Claude Code's hooks off, so stockade's hook would "
                          "never run and every call would run unsandboxed; remove that key, "
                          "then run --install again (nothing was changed)")
    target = _settings_target(path, scope, project)
    shown = path if target == os.path.abspath(path) else f"{path} (a link to {target})"
    try:
        with _settings_dir(target, scope, project) as root:
            name = os.path.basename(target)
            raw, st = _read_settings(root, name, path)
            try:
                current = json.loads(raw) if raw.strip() else {}
            except ValueError as exc:
                raise ConfigError(f"{path} is not valid JSON ({exc}); fix it, then run "
                                  "--install again (nothing was changed)") from exc
            if not isinstance(current, dict):
                raise ConfigError(f"{path} does not hold a JSON object; nothing was changed")
            try:
                merged = merged_settings(current, hook_command)
            except HookError as exc:
                raise ConfigError(f"{path}: {exc}; nothing was changed") from exc
            if merged is None:
                return f"stockade: the hook is already in {shown}"
            text = json.dumps(merged[0], indent=2) + "\n"
            # Mode and owner kept: settings can hold secrets in their `env`.
            root.replace(name, text.encode(), 0o666, like=st)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot update it ({exc.strerror or exc}); nothing was "
                          "changed") from exc
    verb = "replaced stockade's Bash hook in" if merged[1] else "added the Bash hook to"
    return f"stockade: {verb} {shown}: {hook_command}"


def _settings_target(path: str, scope: str, project: str) -> str:
    """The regular file --install rewrites for the settings at `path`: the real path of
    `path`, or of the file a symbolic link there points to.

    A link is written through, not replaced by a file, or a settings file kept
    in a dotfiles repository would silently stop being the one in use; one
    that points at nothing or at what is not a regular file is refused, and a
    project's must stay in the project, where a cloned repository's link could
    otherwise pick a file of the person's to rewrite.
    """
    import stat

    from ..capabilities import is_under
    from ..errors import ConfigError

    target = os.path.realpath(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror}); nothing was "
                          "changed") from exc
    if st is not None and stat.S_ISLNK(st.st_mode):
        try:
            regular = stat.S_ISREG(os.stat(target).st_mode)
        except OSError:
            regular = False
        if not regular:
            raise ConfigError(f"{path} is a symbolic link to {target}, which is not an existing "
                              "regular file; point it at the settings file or remove it "
                              "(nothing was changed)")
    elif st is not None and not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{path} is not a regular file; remove it (nothing was changed)")
    if scope == "project" and not is_under(target, os.path.realpath(project)):
        raise ConfigError(f"{path} leads to {target}, outside the project; --install writes a "
                          "project's settings only inside it (nothing was changed)")
    return target


@contextlib.contextmanager
def _settings_dir(target: str, scope: str, project: str) -> Iterator[Root]:
    """The directory of `target`, made if missing, held open and locked against another
    --install until the block ends.

    A project's is opened beneath the project, no link followed on the way:
    checked by its real path and then opened by name, it could be swapped for
    a link in between and the write land outside the project. The lock is on
    the directory, which the rename leaves in place: on the file it would be
    on the inode the first writer renames away, and a second writer waiting
    there would then write back settings read before the first.
    """
    import fcntl

    from ..fsroot import Root

    directory = os.path.dirname(target)
    if scope == "project":
        top = os.path.realpath(project)
        rel = os.path.relpath(directory, top)
        with Root(top) as project_root:
            if rel != ".":
                project_root.makedirs(rel, mode=0o755)
            root = project_root.sub(rel if rel != "." else "")
    else:
        os.makedirs(directory, exist_ok=True)
        root = Root(directory)
    with root:
        fcntl.flock(root.fd, fcntl.LOCK_EX)
        yield root  # closing the descriptor releases the lock


def _read_settings(root: Root, name: str, path: str) -> tuple[bytes, os.stat_result | None]:
    """The settings file's bytes and status; (b"", None) when there is none.

    Opened without following a link and without blocking, and refused unless
    a regular file: a FIFO put there would hold the install forever.
    """
    from ..fsroot import read_fd
    from ..settingsfile import MAX_SETTINGS_BYTES

    try:
        fd = root.open(name)
    except FileNotFoundError:
        return b"", None
    try:
        return read_fd(fd, MAX_SETTINGS_BYTES, path), os.fstat(fd)
    finally:
        os.close(fd)


# -- the command line -----------------------------------------------------------


def argument_parser() -> argparse.ArgumentParser:
    import argparse

    from ..clispec import HelpFormatter

    p = argparse.ArgumentParser(
        prog="stockade hook", formatter_class=HelpFormatter,
        description="A harness's command hook that runs its shell calls inside stockade. "
                    "claude-code: a PreToolUse hook for the Bash and Monitor tools (JSON on "
                    "stdin, the answer on stdout).")
    p.add_argument("harness", choices=(HARNESS,), help="the harness whose hook this is")
    p.add_argument("--workspace", metavar="DIR",
                   help="the project (default: $CLAUDE_PROJECT_DIR, else the call's cwd)")
    p.add_argument("--mode", choices=("read-only", "workspace-write", "full-access"),
                   help="the mode of every command (default from config: read-only)")
    p.add_argument("--config", metavar="FILE", help="read this TOML file instead of the "
                   "usual ones")
    p.add_argument("--install", action="store_true",
                   help="set this hook in Claude Code's settings: stockade's own is replaced, "
                        "every other hook kept")
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
