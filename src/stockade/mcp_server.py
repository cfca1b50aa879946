"""`stockade mcp`: the sandbox served to one MCP client over stdio.

One process is one connection is one stockade session, bound to a workspace
directory. Tools: `run_command`, `start_process` / `process_output` /
`stop_process`, and `request_capability`, which is the only way a session
gets more than its mode -- and only when a person says so, through MCP
elicitation. The model's own words never approve anything: a client without
elicitation gets a denial naming the flag or config key that grants it.

stdout is the protocol channel. Everything else -- logs, warnings, the
commands' output -- goes to stderr or into tool results; a stray print here
would corrupt the client's stream.

Elicitation comes in two shapes, depending on the protocol version the
client opens with: before 2026-07-28 the server sends `elicitation/create`
mid-call; from 2026-07-28 on, a tool returns `InputRequiredResult` and the
client retries the call with the person's answer. `request_capability`
handles both; the question's digest travels in the (SDK-sealed)
`request_state`, so an answer only counts for the question it was given to.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import ipaddress
import logging
import os
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypedDict, cast

from . import approval as ap
from .approvers import describe_command, printable
from .capabilities import (
    MODES,
    READ_ONLY,
    NetworkPolicy,
    SandboxCapabilities,
    capabilities_for_mode,
    parse_mode,
)
from .command import SandboxCommand
from .errors import CommandTimeout, InvalidCommand, SandboxError

_MCP_MISSING: ImportError | None = None
try:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import (
        ElicitRequest,
        ElicitRequestFormParams,
        ElicitResult,
        InputRequiredResult,
        ToolAnnotations,
    )
    from mcp_types.version import is_version_at_least
    from pydantic import Field
except ImportError as exc:  # the `stockade[mcp]` extra is not installed
    _MCP_MISSING = exc

    def Field(**_metadata: Any) -> Any:  # type: ignore[no-redef]
        """A stand-in, so the argument types below still build and `main` can say
        which extra is missing."""
        return None

log = logging.getLogger("stockade.mcp")

MAX_PROCESSES = 16
MAX_CHUNK = 64 * 1024
APPROVAL_KEY = "stockade_approval"
_MODERN = "2026-07-28"

DECISIONS = {
    "allow-once": ap.APPROVED_ONCE,
    "allow-session": ap.APPROVED_SESSION,
    "deny": ap.DENIED,
}
DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {
            "type": "string",
            "title": "Decision",
            "description": "allow-once: the next command only; allow-session: until this "
                           "MCP connection closes; deny: refuse",
            "enum": list(DECISIONS),
        },
    },
    "required": ["decision"],
}


# -- results -------------------------------------------------------------------

class CommandResult(TypedDict):
    exit_code: int | None
    signal: int | None
    stdout: str
    stderr: str
    truncated: bool
    timed_out: bool
    duration_ms: float
    sandbox_denied: bool
    hint: str | None


class ProcessStarted(TypedDict):
    process_id: str
    pid: int
    running: bool


class ProcessOutput(TypedDict):
    process_id: str
    stdout: str
    stderr: str
    stdout_offset: int
    stderr_offset: int
    running: bool
    exit_code: int | None
    signal: int | None
    skipped_bytes: int


class CapabilityResult(TypedDict):
    granted: bool
    outcome: str
    message: str


# -- the session ---------------------------------------------------------------

class Grants:
    """What a person has approved beyond the starting mode."""

    def __init__(self, hosts: tuple[str, ...] = (), writable: tuple[str, ...] = (),
                 mode: str | None = None) -> None:
        self.hosts = hosts
        self.writable = writable
        self.mode = mode

    def __bool__(self) -> bool:
        return bool(self.hosts or self.writable or self.mode)

    def merged(self, other: Grants) -> Grants:
        return Grants(tuple(sorted({*self.hosts, *other.hosts})),
                      tuple(sorted({*self.writable, *other.writable})),
                      other.mode or self.mode)


class Session:
    """One MCP connection's sandbox, approvals and background processes."""

    def __init__(self, sandbox: Any, session_id: str, workspace: str, mode: str,
                 hosts: tuple[str, ...], notes: dict[str, str]) -> None:
        self.sandbox = sandbox
        self.session_id = session_id
        self.workspace = workspace
        self.mode = mode
        # --allow-host on the command line is the person's own approval.
        self.session_grants = Grants(hosts=hosts)
        self.once = Grants()
        self.processes: dict[str, Any] = {}
        # Each granted writable path's identity when the person approved it.
        self.pinned: dict[str, tuple[int, int]] = {}
        self.notes = notes
        self._next_id = 0
        self.closed = False

    def new_process_id(self) -> str:
        self._next_id += 1
        return f"p{self._next_id}"

    def unchanged(self, writable: tuple[str, ...]) -> tuple[str, ...]:
        """The granted paths that are still the directory the person approved.

        A grant names a place, resolved once when it was asked for: a path
        since swapped for a symlink (or another directory) would otherwise be
        resolved again at use, and the write would land wherever it points.
        """
        kept = []
        for path in writable:
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if (os.path.realpath(path) == path and stat.S_ISDIR(st.st_mode)
                    and self.pinned.get(path) == (st.st_dev, st.st_ino)):
                kept.append(path)
        return tuple(kept)

    def capabilities(self, mode: str, extra: Grants) -> SandboxCapabilities:
        """The mode's baseline plus granted hosts and writable paths."""
        base = capabilities_for_mode(mode, self.workspace)
        if not extra.hosts and not extra.writable:
            return base
        network = base.network
        if extra.hosts and network.kind != NetworkPolicy.ALL:
            network = NetworkPolicy.allow_hosts(extra.hosts)
        return base.replace(fs_write=base.fs_write + extra.writable, network=network)

    def close(self) -> None:
        """Stop every process and drop the session: synchronous, so it also works
        from a cancelled scope at shutdown, where an await would not run."""
        if self.closed:
            return
        self.closed = True
        # Sessions (their processes, then the driver's per-session state), the
        # driver, the proxy and the ledger, in the core's one order.
        self.sandbox.close()


class _Call:
    """Per-tool-call state the standing approver reads (task-local via a contextvar)."""

    def __init__(self, session: Session, once: Grants) -> None:
        self.session = session
        self.once = once


_CALL: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("stockade_mcp_call",
                                                                     default=None)
_MODE: contextvars.ContextVar[str | None] = contextvars.ContextVar("stockade_mcp_mode",
                                                                  default=None)


class StandingApprover:
    """The gate's requester for commands: answers from what a person already approved.

    It never asks and never invents: a command's capabilities are the mode
    plus grants a person gave through `request_capability` (or `--allow-host`),
    and this only confirms that the request is within them. Anything else is
    denied; the model's way to more is `request_capability`.
    """

    def request(self, request: ap.ApprovalRequest) -> str:
        call = _CALL.get()
        if call is None:
            return ap.DENIED
        s = call.session
        if request.capabilities.is_within(s.capabilities(request.mode, s.session_grants)):
            return ap.APPROVED_SESSION
        if call.once and request.capabilities.is_within(
                s.capabilities(request.mode, s.session_grants.merged(call.once))):
            return ap.APPROVED_ONCE
        return ap.DENIED


class _NeedsInput(Exception):
    def __init__(self, result: object) -> None:
        super().__init__("input required")
        self.result = result


class _NoElicitation(Exception):
    pass


# -- helpers ---------------------------------------------------------------------

def _session(ctx: Context[Any, Any]) -> Session:
    return cast(Session, ctx.request_context.lifespan_context)


def _argv(command: str | list[str]) -> list[str]:
    """A string runs with `/bin/sh -c` (no login shell, no rc files); a list is argv."""
    if isinstance(command, str):
        if not command.strip():
            raise ToolError("InvalidCommand: command is empty")
        return ["/bin/sh", "-c", command]
    if not command or not all(isinstance(a, str) for a in command):
        raise ToolError("InvalidCommand: command must be a non-empty string or list of strings")
    return list(command)


def _fail(exc: SandboxError) -> ToolError:
    """The same one line the CLI prints, so a model and a person read the same thing."""
    return ToolError(f"{type(exc).__name__}: {' '.join(str(exc).split())}")


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _utf8_cut(data: bytes) -> int:
    """Length of `data` without a trailing, incomplete UTF-8 sequence.

    Output is read by byte offset while the process is still writing; a
    character split across two reads would otherwise be replaced twice.
    """
    n = len(data)
    for back in range(1, min(4, n) + 1):
        byte = data[n - back]
        if byte & 0xC0 == 0x80:  # continuation byte: keep looking for the lead
            continue
        if byte & 0x80 == 0:
            return n
        need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4
        return n if back >= need else n - back
    return n


def _command_result(out: Any, *, timed_out: bool = False, note: str | None = None
                    ) -> CommandResult:
    hint = out.denial_hint
    if note:
        hint = f"{note}; {hint}" if hint else note
    return CommandResult(
        exit_code=out.exit_code, signal=out.signal, stdout=_decode(out.stdout),
        stderr=_decode(out.stderr), truncated=bool(out.truncated), timed_out=timed_out,
        duration_ms=round(float(out.duration_ms), 3),
        sandbox_denied=bool(out.likely_sandbox_denied), hint=hint,
    )


async def _prepare(ctx: Context[Any, Any], command: str | list[str], cwd: str | None,
                   stdin: str | None, timeout: float | None,
                   publish: list[str] | None = None) -> tuple[Session, SandboxCommand]:
    s = _session(ctx)
    argv = _argv(command)
    # A one-shot grant belongs to exactly one command: taken here, before any
    # await, so two concurrent calls cannot both use it.
    once, s.once = s.once, Grants()
    _CALL.set(_Call(s, once))
    mode = once.mode or s.mode
    _MODE.set(mode)
    extra = s.session_grants.merged(Grants(once.hosts, once.writable))
    extra = Grants(extra.hosts, s.unchanged(extra.writable), extra.mode)
    caps = s.capabilities(mode, extra)
    try:
        cmd = SandboxCommand(argv[0], argv[1:], session_id=s.session_id, cwd=cwd,
                             stdin=stdin.encode() if stdin is not None else None,
                             timeout=timeout, capabilities=caps, publish=publish or ())
    except InvalidCommand as exc:
        raise _fail(exc) from exc
    for addr, _host_port, _port in cmd.publish:
        if not ipaddress.ip_address(addr).is_loopback:
            # The model names these arguments: a server of its own on the
            # person's network is the person's to open, on the command line.
            raise ToolError(f"CapabilityDenied: publish {addr!r}: a model may publish on the "
                            "host's loopback only; another address is the person's to name "
                            "(stockade run --publish ADDR:PORT)")
    return s, cmd


# -- tools -----------------------------------------------------------------------

# What a model reads about each argument (the tools' input schema).
Command = Annotated[str | list[str], Field(description=(
    "the command: a shell string, run with /bin/sh -c (pipes, &&, redirections work), or an "
    "argv list such as [\"pytest\", \"-q\"]"))]
Cwd = Annotated[str | None, Field(description=(
    "directory to run in, relative to the workspace (default: the workspace root); it may "
    "not leave the workspace"))]
ProcessId = Annotated[str, Field(description="the process_id start_process returned")]
Publish = Annotated[list[str] | None, Field(description=(
    "ports to open to the person while the command runs, each \"PORT\" or "
    "\"HOST_PORT:SANDBOX_PORT\": the host's 127.0.0.1:HOST_PORT leads to the sandbox's own "
    "127.0.0.1:SANDBOX_PORT (a dev server's), and closes when the command ends"))]


async def run_command(command: Command, ctx: Context[Any, Any], cwd: Cwd = None,
                      stdin: Annotated[str | None, Field(description=(
                          "text fed to the command's standard input (default: none, stdin "
                          "is empty)"))] = None,
                      timeout: Annotated[float | None, Field(description=(
                          "seconds before the command and everything it started are killed "
                          "(default from the config: 60)"))] = None,
                      publish: Publish = None) -> CommandResult:
    """Run a command inside the sandbox and return its exit code and output.

    `command` is a shell string (run with /bin/sh -c: no login shell, no rc files) or an argv
    list. `cwd` is relative to the workspace. `timeout` is in seconds (default from config,
    60 s); past it the whole process tree is killed. While it runs, a client that asked for
    progress gets a notification about once a second (elapsed time, bytes of output so far);
    cancelling the call ends the command's whole process tree. When the sandbox blocked something,
    `sandbox_denied` is true and `hint` says what and why. For servers and watchers that must
    outlive this call use start_process; for more than the mode allows use request_capability.
    """
    s, cmd = await _prepare(ctx, command, cwd, stdin, timeout, publish)

    async def progress(elapsed: float, output_bytes: int) -> None:
        # Elapsed seconds as the progress value: it only grows, as the spec
        # asks, and a command has no known total to count towards.
        await ctx.report_progress(round(elapsed, 1), None,
                                  f"running for {elapsed:.0f} s, {output_bytes} bytes of output")

    try:
        out = await s.sandbox.execute(cmd, progress=progress)
    except CommandTimeout as exc:
        if exc.output is None:
            raise _fail(exc) from exc
        return _command_result(exc.output, timed_out=True, note=" ".join(str(exc).split()))
    except SandboxError as exc:
        raise _fail(exc) from exc
    return _command_result(out)


async def start_process(command: Command, ctx: Context[Any, Any],
                        cwd: Cwd = None, publish: Publish = None) -> ProcessStarted:
    """Start a long-running command (a dev server, a watcher) that outlives this call.

    Returns a process_id for process_output and stop_process. It runs in the same sandbox as
    run_command, has no timeout, and is stopped when this MCP connection closes. `publish`
    (["8000"]) lets the person open a server it starts at http://127.0.0.1:8000 on the host,
    until it stops; a port already taken on the host is refused.
    """
    s = _session(ctx)
    running = sum(1 for p in s.processes.values() if p.running())
    if running >= MAX_PROCESSES:
        raise ToolError(f"CapabilityDenied: {running} processes are already running in this "
                        f"session (limit {MAX_PROCESSES}); stop one with stop_process first")
    s, cmd = await _prepare(ctx, command, cwd, None, None, publish)
    try:
        proc = await s.sandbox.start(cmd)
    except SandboxError as exc:
        raise _fail(exc) from exc
    pid = s.new_process_id()
    s.processes[pid] = proc
    return ProcessStarted(process_id=pid, pid=int(proc.pid), running=bool(proc.running()))


def _read(proc: Any, stream: str, offset: int, max_bytes: int) -> tuple[str, int, int]:
    """(text, next offset, bytes skipped because the window moved past `offset`)."""
    data, end = proc.output(stream, offset)
    start = end - len(data)
    skipped = max(start - offset, 0)
    data = data[:max_bytes]
    if proc.running() or len(data) < end - start:
        data = data[:_utf8_cut(data)]
    return _decode(data), start + len(data), skipped


def _returncode(proc: Any) -> tuple[int | None, int | None]:
    code = proc.returncode
    if code is None:
        return None, None
    return (code, None) if code >= 0 else (None, -code)


async def process_output(
        process_id: ProcessId, ctx: Context[Any, Any],
        stdout_offset: Annotated[int, Field(description=(
            "read stdout from this byte offset on: pass the stdout_offset the last call "
            "returned to get only what is new (default 0: from the start)"))] = 0,
        stderr_offset: Annotated[int, Field(description=(
            "the same for stderr: the stderr_offset the last call returned"))] = 0,
        wait_seconds: Annotated[float, Field(description=(
            "wait up to this many seconds (at most 30) for new output or the exit "
            "(default 0: return at once)"))] = 0.0,
        max_bytes: Annotated[int, Field(description=(
            "at most this many bytes of each stream (at most 1 MiB; default 64 KiB)"))
        ] = MAX_CHUNK) -> ProcessOutput:
    """Output of a started process from the given byte offsets on, and whether it still runs.

    Pass back the returned stdout_offset/stderr_offset to get only what is new. wait_seconds
    (at most 30) waits for new output or for the process to exit. Older output than the last
    1 MiB is dropped; skipped_bytes says how much of what you asked for is gone.
    """
    s = _session(ctx)
    proc = s.processes.get(process_id)
    if proc is None:
        raise ToolError(f"InvalidCommand: no process {process_id!r} in this session "
                        f"(known: {', '.join(s.processes) or 'none'})")
    max_bytes = max(1, min(int(max_bytes), 1 << 20))
    deadline = asyncio.get_running_loop().time() + max(0.0, min(float(wait_seconds), 30.0))
    while True:
        _, out_end = proc.output("stdout", stdout_offset)
        _, err_end = proc.output("stderr", stderr_offset)
        if (out_end > stdout_offset or err_end > stderr_offset or not proc.running()
                or asyncio.get_running_loop().time() >= deadline):
            break
        await asyncio.sleep(0.05)
    out, out_next, out_skip = _read(proc, "stdout", stdout_offset, max_bytes)
    err, err_next, err_skip = _read(proc, "stderr", stderr_offset, max_bytes)
    code, sig = _returncode(proc)
    return ProcessOutput(process_id=process_id, stdout=out, stderr=err, stdout_offset=out_next,
                         stderr_offset=err_next, running=bool(proc.running()), exit_code=code,
                         signal=sig, skipped_bytes=out_skip + err_skip)


async def stop_process(process_id: ProcessId, ctx: Context[Any, Any]) -> ProcessOutput:
    """Stop a started process and everything it started. Its output stays readable."""
    s = _session(ctx)
    proc = s.processes.get(process_id)
    if proc is None:
        raise ToolError(f"InvalidCommand: no process {process_id!r} in this session")
    await asyncio.to_thread(proc.stop)
    code, sig = _returncode(proc)
    _, out_end = proc.output("stdout", 0)
    _, err_end = proc.output("stderr", 0)
    return ProcessOutput(process_id=process_id, stdout="", stderr="", stdout_offset=out_end,
                         stderr_offset=err_end, running=bool(proc.running()), exit_code=code,
                         signal=sig, skipped_bytes=0)


def _valid_host(value: str) -> str:
    host = value.strip().lower().rstrip(".")
    allowed = set("abcdefghijklmnopqrstuvwxyz0123456789-.*:[]")
    if not host or len(host) > 253 or not set(host) <= allowed or "*" in host.lstrip("*."):
        raise ToolError(f"InvalidCommand: {value!r} is not a host name (give a name such as "
                        "pypi.org or *.example.com, without scheme, path or port)")
    return host


def _grant_hint(kind: str, value: str) -> str:
    """How a person grants this without being asked: the flag or the config key."""
    if kind == "network_host":
        return (f"start the server with --allow-host {value} (in the MCP client's server "
                "configuration, add it to the args of `stockade mcp`)")
    if kind == "writable_path":
        return (f'add writable = ["{value}"] under [sandbox] in ~/.config/stockade/config.toml '
                "(used in workspace-write mode)")
    return (f'start the server with --mode {value}, or set mode = "{value}" under [sandbox] in '
            "~/.config/stockade/config.toml (the workspace's stockade.toml can only narrow "
            "that until a person runs `stockade trust` on it)")


KINDS = ("network_host", "writable_path", "mode")


async def request_capability(
        # A plain string with the choices in the schema, checked here: a Literal made a
        # wrong kind a pydantic error, with its URL, sent to the model.
        kind: Annotated[str, Field(
            description="what to ask for: network_host, writable_path or mode",
            json_schema_extra={"enum": list(KINDS)})],
        value: Annotated[str, Field(description=(
            "for network_host a host name such as pypi.org or *.example.com (no scheme, path "
            "or port); for writable_path an absolute path; for mode read-only, "
            "workspace-write or full-access"))],
        reason: Annotated[str, Field(description=(
            "one sentence the person reads: why the task needs it"))],
        ctx: Context[Any, Any]) -> CapabilityResult | InputRequiredResult:
    """Ask the person at the client for more than the current mode allows.

    kind: "network_host" (value: a host such as pypi.org), "writable_path" (value: an absolute
    directory outside the workspace; needs workspace-write), or "mode" (value: read-only,
    workspace-write or full-access). reason: one sentence for the person, saying why.
    The person answers allow-once (the next command only), allow-session, or deny. Nothing is
    granted without them; if the client cannot ask, the result says how they can grant it.
    """
    s = _session(ctx)
    proposal = _proposal(s, kind, value)
    if not isinstance(proposal, tuple):
        return proposal
    proposed, what, value, pin = proposal
    gate = s.sandbox.approval

    mode_after = proposed.mode or s.mode
    merged = s.session_grants.merged(proposed)
    grants = Grants(merged.hosts, merged.writable)
    caps = s.capabilities(mode_after, grants)
    baseline = capabilities_for_mode(s.mode, s.workspace)
    if mode_after == s.mode and s.capabilities(s.mode, proposed).is_within(baseline):
        return CapabilityResult(granted=True, outcome="not-needed",
                                message=f"{what} is already within mode {s.mode}")
    if mode_after == s.mode and gate.granted(s.session_id, caps):
        return CapabilityResult(granted=True, outcome="already-granted",
                                message=f"{what} is already granted for this session")
    request = ap.ApprovalRequest(s.session_id, ["request_capability", kind, value], s.workspace,
                                 s.mode, caps, baseline, what)
    try:
        outcome = await _ask_person(ctx, request, reason)
    except _NeedsInput as need:
        return cast(InputRequiredResult, need.result)
    except _NoElicitation:
        return CapabilityResult(
            granted=False, outcome=ap.DENIED,
            message=f"{what} denied: this MCP client cannot ask a person (no elicitation "
                    f"support), and stockade never lets the model approve itself. To grant it, "
                    f"{_grant_hint(kind, value)}")
    if outcome not in ap.APPROVED:
        word = "not answered in time" if outcome == ap.TIMEOUT else "denied by the person"
        return CapabilityResult(granted=False, outcome=outcome, message=f"{what} was {word}")
    if pin is not None:  # a writable path
        s.pinned[value] = pin
    if outcome == ap.APPROVED_SESSION:
        gate.remember(s.session_id, outcome, caps)
        s.session_grants = grants
        if proposed.mode:
            s.mode = proposed.mode
        return CapabilityResult(granted=True, outcome=outcome,
                                message=f"{what} granted for the rest of this session")
    s.once = s.once.merged(proposed)
    return CapabilityResult(granted=True, outcome=outcome,
                            message=f"{what} granted for the next command only")


def _proposal(s: Session, kind: str, value: str
              ) -> tuple[Grants, str, str, tuple[int, int] | None] | CapabilityResult:
    """What `kind` and `value` ask for, checked, as (grants, the words the person reads,
    the value made canonical, a writable path's device and inode); or the answer itself
    where nobody need be asked, so that no request reaches a person unvalidated."""
    proposed = Grants()
    pin: tuple[int, int] | None = None
    if kind == "network_host":
        host = _valid_host(value)
        value = host
        proposed = Grants(hosts=(host,))
        what = f"network access to {host}"
    elif kind == "writable_path":
        path = os.path.realpath(os.path.expanduser(value))
        if not os.path.isabs(os.path.expanduser(value)):
            raise ToolError(f"InvalidCommand: writable_path must be absolute, got {value!r} "
                            "(the workspace itself is writable in workspace-write)")
        if s.mode == READ_ONLY:
            return CapabilityResult(
                granted=False, outcome="not-applicable",
                message="extra writable paths apply in workspace-write mode, and this session "
                        "is read-only: request kind=mode value=workspace-write first")
        if not os.path.isdir(path):
            # bwrap binds only what exists; approving a missing path would
            # grant nothing while telling the person it did.
            raise ToolError(f"InvalidCommand: writable_path {value!r} is not an existing "
                            "directory")
        value = path
        st = os.stat(path)
        pin = (st.st_dev, st.st_ino)
        proposed = Grants(writable=(path,))
        what = f"write access to {path}"
    elif kind == "mode":
        try:
            mode = parse_mode(value)
        except InvalidCommand as exc:
            raise _fail(exc) from exc
        if capabilities_for_mode(mode, s.workspace).is_within(
                capabilities_for_mode(s.mode, s.workspace)):
            # Narrowing needs nobody's approval.
            s.mode = mode
            return CapabilityResult(granted=True, outcome="not-needed",
                                    message=f"session mode is now {mode}")
        proposed = Grants(mode=mode)
        what = f"mode {mode} (currently {s.mode})"
    else:
        raise ToolError(f"InvalidCommand: unknown kind {kind!r}: choose network_host, "
                        "writable_path or mode")
    return proposed, what, value, pin


def _question(request: ap.ApprovalRequest, reason: str, session: Session) -> str:
    return (
        f"stockade: the agent asks for {printable(request.reason)}.\n"
        f"Session {printable(session.session_id)}, workspace {printable(session.workspace)}, "
        f"mode {session.mode}.\n"
        f"The agent's reason: {printable(reason, 500) or '(none given)'}\n"
        f"Request: {describe_command(request.argv)}\n"
        "Allow once (the next command only), for this session, or deny?"
    )


def _digest(message: str) -> str:
    from .paths import sha256_hex

    return sha256_hex(message.encode())[:32]


def _elicitation_supported(ctx: Context[Any, Any]) -> bool:
    caps = ctx.client_capabilities
    el = caps.elicitation if caps is not None else None
    # A bare `elicitation: {}` predates modes and means form support.
    return el is not None and (el.form is not None or el.url is None)


def _outcome(result: Any) -> str:
    if not isinstance(result, ElicitResult) or result.action != "accept":
        return ap.DENIED
    decision = (result.content or {}).get("decision")
    return DECISIONS.get(decision, ap.DENIED) if isinstance(decision, str) else ap.DENIED


async def _ask_person(ctx: Context[Any, Any], request: ap.ApprovalRequest, reason: str) -> str:
    """The person's answer through MCP elicitation, in whichever shape the client speaks."""
    if not _elicitation_supported(ctx):
        raise _NoElicitation
    s = _session(ctx)
    message = _question(request, reason, s)
    digest = _digest(message)
    version = ctx.protocol_version
    if version is not None and is_version_at_least(version, _MODERN):
        answers = ctx.input_responses or {}
        answer = answers.get(APPROVAL_KEY)
        if answer is not None and ctx.request_state == digest:
            return _outcome(answer)
        raise _NeedsInput(InputRequiredResult(
            input_requests={APPROVAL_KEY: ElicitRequest(params=ElicitRequestFormParams(
                message=message, requested_schema=DECISION_SCHEMA))},
            request_state=digest,
        ))
    timeout = float(s.sandbox.approval.timeout_secs)
    try:
        async with asyncio.timeout(timeout):
            result = await ctx.session.elicit_form(message=message,
                                                   requested_schema=DECISION_SCHEMA,
                                                   related_request_id=ctx.request_id)
    except TimeoutError:
        return ap.TIMEOUT
    return _outcome(result)


# -- the server ------------------------------------------------------------------

def build_server(options: argparse.Namespace) -> Any:
    """An MCPServer whose lifespan is one stockade session (one stdio connection)."""
    from .config import load_config
    from .workspace import WorkspaceSandbox

    env = dict(os.environ)
    workspace = os.path.abspath(options.workspace or os.getcwd())
    config = load_config(env, workspace, paths=[options.config] if options.config else None,
                         mode=options.mode, backend=options.backend,
                         default_timeout_seconds=options.timeout)
    mode = parse_mode(config.mode)
    if mode == "workspace-write":
        # Said at start, not at the first tool call: the client shows it to the person.
        from .core import refuse_home_workspace

        refuse_home_workspace(workspace, env, config.allow_home_workspace)
    hosts = tuple(sorted({_host_arg(h) for h in options.allow_host or ()}))
    session_id = options.session or f"mcp-{os.getpid()}-{os.urandom(4).hex()}"
    notes: dict[str, str] = {}

    @asynccontextmanager
    async def lifespan(_server: Any) -> AsyncIterator[Session]:
        sandbox = WorkspaceSandbox(config, env=env, mode_source=lambda: _MODE.get() or mode,
                                   approval=ap.ApprovalGate(StandingApprover(),
                                                            config.approval_timeout_seconds))
        session = Session(sandbox, session_id, workspace, mode, hosts, notes)
        session.workspace = (await sandbox.open_session(session_id, workspace)).cwd
        _SESSIONS.append(session)
        log.info("session %s: workspace %s, mode %s", session_id, session.workspace, mode)
        try:
            yield session
        finally:
            session.close()
            log.info("session %s closed; its processes are stopped", session_id)

    instructions = (
        f"Commands run inside an OS sandbox (stockade) bound to the workspace {workspace}, "
        f"starting in mode {mode}: "
        + {"read-only": "the workspace and the host are read-only, /tmp is private, no network.",
           "workspace-write": "only the workspace (and toolchain caches) are writable, "
                              "no network.",
           "full-access": "no boundary."}[mode]
        + " When a command fails with sandbox_denied, read hint. To get more (a network host, "
          "a writable path, another mode) call request_capability: a person decides."
    )
    from . import __version__

    server: Any = MCPServer("stockade", instructions=instructions, lifespan=lifespan,
                            log_level=options.log_level, version=__version__)
    run_ann = ToolAnnotations(title="Run a command in the sandbox", open_world_hint=False)
    server.add_tool(run_command, annotations=run_ann)
    server.add_tool(start_process, annotations=ToolAnnotations(
        title="Start a background process in the sandbox", open_world_hint=False))
    server.add_tool(process_output, annotations=ToolAnnotations(
        title="Read a background process's output", read_only_hint=True))
    server.add_tool(stop_process, annotations=ToolAnnotations(
        title="Stop a background process", destructive_hint=True, idempotent_hint=True))
    server.add_tool(request_capability, annotations=ToolAnnotations(
        title="Ask the person for more access", open_world_hint=False))
    return server


# Sessions alive in this process, for the signal handler's synchronous cleanup.
_SESSIONS: list[Session] = []


def _host_arg(value: str) -> str:
    from .config import host_entry_problem

    host = value.strip().lower().rstrip(".")
    problem = host_entry_problem(host) if "@" not in host else "give a host name (e.g. pypi.org)"
    if problem:
        if problem.startswith("give a host name, not a URL"):
            problem = problem.replace("try ", "try --allow-host ")
        raise InvalidCommand(f"--allow-host {value!r}: {problem}")
    return host


async def _serve(server: Any) -> None:
    import signal

    import anyio

    async def on_signals(scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP, signal.SIGINT) as signals:
            async for signum in signals:
                # Clean up right here, synchronously: cancelling the stdio
                # reader can wait on a thread blocked in read(), and a client
                # that sent SIGTERM will not wait long.
                log.info("signal %d: stopping the session's processes", signum)
                for session in _SESSIONS:
                    session.close()
                os._exit(128 + int(signum))

    async with anyio.create_task_group() as tg:
        tg.start_soon(on_signals, tg.cancel_scope)
        await server.run_stdio_async()
        tg.cancel_scope.cancel()


def argument_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="stockade mcp",
        description="Serve the sandbox to one MCP client over stdio (one connection, one "
                    "session). Logs go to stderr.")
    p.add_argument("--workspace", metavar="DIR",
                   help="directory the session is bound to (default: current directory)")
    p.add_argument("--mode", choices=MODES, help="starting mode (default from config: "
                                                 "read-only)")
    p.add_argument("--allow-host", action="append", metavar="HOST",
                   help="pre-approve network access to HOST (repeatable; reached through "
                        "stockade's network proxy)")
    p.add_argument("--config", metavar="FILE",
                   help="read this TOML file instead of the usual ones")
    from .drivers import registry

    p.add_argument("--backend", choices=registry.choices(), help=registry.choices_help())
    p.add_argument("--session", metavar="ID",
                   help="session id for the audit ledger (default: generated)")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="default per-command timeout in seconds")
    p.add_argument("--log-level", default="WARNING",
                   choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                   help="how much the server logs to stderr (default: WARNING)")
    return p


def main(argv: list[str]) -> int:
    options = argument_parser().parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, options.log_level),
                        format="stockade mcp: %(levelname)s %(name)s: %(message)s")
    if _MCP_MISSING is not None:
        # An installation to complete (69), not a sandbox that failed (125).
        from .errors import MissingDependency

        raise MissingDependency("the MCP server needs the MCP Python SDK 2.x: pip install "
                                f"'stockade[mcp]' ({_MCP_MISSING})", extra="mcp"
                                ) from _MCP_MISSING
    if options.timeout is not None and not 0 < options.timeout < float("inf"):
        print(f"stockade: --timeout must be a positive number, got {options.timeout!r}",
              file=sys.stderr)
        return 2
    workspace = options.workspace or os.getcwd()
    if not os.path.isdir(workspace):
        # Here, not in the server's lifespan: there it surfaces as an
        # ExceptionGroup traceback from the task group, after the client connected.
        print(f"stockade: InvalidCommand: workspace {workspace!r} is not a directory",
              file=sys.stderr)
        return 64
    from .errors import SandboxError

    try:
        server = build_server(options)
    except SandboxError as exc:
        print(f"stockade: {type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr)
        return exc.exit_status
    import anyio

    try:
        anyio.run(_serve, server)
    finally:
        for session in _SESSIONS:
            session.close()
    return 0
