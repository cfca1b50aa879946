"""OpenAI Agents SDK sandboxes: a `SandboxAgent` whose workspace is behind stockade's boundary.

    from agents import Runner
    from agents.run import RunConfig
    from agents.sandbox import Manifest, SandboxAgent, SandboxRunConfig
    from stockade.adapters.openai_sandbox import (
        StockadeSandboxClient, StockadeSandboxClientOptions)

    agent = SandboxAgent(name="coder", default_manifest=Manifest(root="/path/to/project"))
    result = await Runner.run(agent, "run the tests", run_config=RunConfig(
        sandbox=SandboxRunConfig(client=StockadeSandboxClient(),
                                 options=StockadeSandboxClientOptions(mode="workspace-write"))))

The SDK's own local client (`UnixLocalSandboxClient`) runs the model's
commands as the calling user with no confinement on Linux, and performs its
file operations (reads, writes, listings, patches, archive extraction,
snapshot restore) directly in the host process. Here every one of them is a
command in the session's stockade sandbox instead: the shell tool's
commands, and also `cat` for a read, a write through stdin, `mkdir`, `rm`,
`mv`, `ls` and `tar`. So what the kernel refuses a command -- a path outside
the workspace, a credential store, `.git/hooks` -- it refuses the file API
too, and the command policy, the approval gate, the metadata guard and the
audit ledger see every operation.

Each SDK session is one stockade session bound to the manifest's root (a
fresh directory under stockade's workspace root when the manifest keeps the
SDK's default). The mode is the options' (`workspace-write` unless given);
`allow_read`, `allow_write`, `network` and `allow_hosts` ask for more, which
goes to the approval gate (`StockadeSandboxClient(approval=...)`) exactly as
`stockade run --allow-host` does; without an approver it is refused. The
network is none by default.

A command still running when the shell tool stops waiting goes on as a
stockade background command the session owns (its ledger record says
`started`); the model polls it with `write_stdin` and empty input, and
closing the session ends its whole tree. Background commands run on pipes:
there is no terminal (`tty=true` is refused) and no stdin to write to. At
most `max_output_bytes` of a command's output waits to be polled; older
bytes are dropped, and the next read says how many.

A stored session state comes back through the model's own run, so
`resume()` lets it narrow the boundary and nothing more: a wider mode or
grant than the client's is refused, and the root, its ownership, the
snapshot and any manifest entry read from the host's disk are the ones
the client created the session with (a state from elsewhere needs
`StockadeSandboxClient(root=...)`). A root the manifest named is never
cleared for a snapshot restore: it is the live project, so no snapshot of
it is taken either (nothing would ever read it). A root the client made is
archived inside the sandbox and read back in pieces within the output
budget, so its snapshot is whole at any size.

A default root is the private workspace of the session it was made for.
The client owns it because it recorded making it in this process, never
because of the path's shape or the state's word: a state it did not create
is not resumed into a default root a client here still holds, and
`delete()` removes only the directory it recorded, through a descriptor of
its base. The record is kept in memory, not in stockade's state: a restart
ends every session the process ran, and a record on disk, keyed by what a
stored state carries, would be believed from that state again. A default
root left by a process that is gone is kept, and resumed only with
`root=`, as a named root.

Not supported, and refused with the reason rather than run outside the
boundary: `run_as` users, manifest users and groups, and
`extra_path_grants` (grant paths with `allow_read`/`allow_write`).
A read larger than `max_output_bytes` (1 MiB by default) fails instead of
coming back cut short.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import dataclasses
import errno
import io
import logging
import os
import stat
import tarfile
import tempfile
import threading
import uuid
import weakref
from pathlib import Path
from typing import Any, Literal

try:
    from agents.sandbox.errors import (
        ExecNonZeroError,
        ExecTimeoutError,
        InvalidManifestPathError,
        WorkspaceArchiveReadError,
        WorkspaceArchiveWriteError,
        WorkspaceReadNotFoundError,
        WorkspaceStartError,
    )
    from agents.sandbox.files import FileEntry
    from agents.sandbox.manifest import Manifest
    from agents.sandbox.session import SandboxSession, SandboxSessionState
    from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
    from agents.sandbox.session.dependencies import Dependencies
    from agents.sandbox.session.manager import Instrumentation
    from agents.sandbox.session.pty_output import collect_pty_output
    from agents.sandbox.session.pty_types import (
        PTY_PROCESSES_MAX,
        PtyExecUpdate,
        allocate_pty_process_id,
        clamp_pty_yield_time_ms,
        resolve_pty_write_yield_time_ms,
    )
    from agents.sandbox.session.sandbox_client import BaseSandboxClient, BaseSandboxClientOptions
    from agents.sandbox.session.workspace_payloads import coerce_write_payload
    from agents.sandbox.snapshot import (
        NoopSnapshot,
        SnapshotBase,
        SnapshotSpec,
        resolve_snapshot,
    )
    from agents.sandbox.types import ExecResult, User
    from agents.sandbox.util.parse_utils import parse_ls_la
    from agents.sandbox.util.tar_utils import UnsafeTarMemberError, validate_tarfile
    from pydantic import field_validator
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "stockade.adapters.openai_sandbox needs the OpenAI Agents SDK with agents.sandbox "
        "(0.24 or later): pip install 'stockade[openai-agents]'"
    ) from exc

from .. import fsroot
from ..capabilities import within
from ..command import SandboxCommand
from ..errors import CapabilityDenied, CommandTimeout, SandboxError

__all__ = ["StockadeSandboxClient", "StockadeSandboxClientOptions",
           "StockadeSandboxSession", "StockadeSandboxSessionState"]

_DEFAULT_MANIFEST_ROOT = str(Manifest.model_fields["root"].default)

#: Exit statuses of the file-operation scripts, chosen clear of what cat,
#: mkdir, rm, mv and tar return themselves.
_OUTSIDE = 111
_MISSING = 112
_EXISTS = 113
_NOT_REGULAR = 114

# Every file operation resolves its path inside the sandbox, where symlinks
# mean what they will mean to the command that uses them, and refuses one
# that lands outside the workspace. The kernel would refuse most of those
# anyway (outside is read-only); this turns the rest -- a read through a
# link to a file the sandbox may read, such as /etc/passwd -- into the same
# refusal the SDK's own path policy gives, so the file API is never wider
# than the workspace.
_PRELUDE = r"""
root=$1; shift
inside() {
  r=$(realpath -m -- "$1") || exit 112
  case $r in "$root"|"$root"/*) ;; *)
    printf '%s resolves to %s, outside the workspace %s\n' "$1" "$r" "$root" >&2
    exit 111;;
  esac
}
parent_inside() { inside "$(dirname -- "$1")"; }
"""

# Only a regular file: a FIFO or a device would hold the read until the
# command's timeout instead of failing.
_READ = _PRELUDE + r"""
inside "$1"
[ -e "$1" ] || exit 112
[ -f "$1" ] || { echo "$1 is not a regular file" >&2; exit 114; }
if [ -n "$2" ]; then exec head -c "$2" -- "$1"; fi
exec cat -- "$1"
"""

# Opening a FIFO to write waits for a reader: a write onto one a command
# planted held the file API until the command's timeout.
_WRITE = _PRELUDE + r"""
inside "$1"
mkdir -p -- "$(dirname -- "$1")" && inside "$1" || exit
if [ -e "$1" ] && [ ! -f "$1" ]; then echo "$1 is not a regular file" >&2; exit 114; fi
exec cat > "$1"
"""

# noclobber opens with O_EXCL, which also refuses a symlink planted at the name.
_WRITE_NEW = _PRELUDE + r"""
parent_inside "$1"
mkdir -p -- "$(dirname -- "$1")" && parent_inside "$1" || exit 1
if [ -e "$1" ] || [ -L "$1" ]; then exit 113; fi
set -C
exec cat > "$1"
"""

_MKDIR = _PRELUDE + r"""
inside "$1"
if [ "$2" = 1 ]; then exec mkdir -p -- "$1"; fi
exec mkdir -- "$1"
"""

_RM = _PRELUDE + r"""
parent_inside "$1"
[ "$1" = "$root" ] && { echo "refusing to remove the workspace root" >&2; exit 1; }
if [ "$2" = 1 ]; then exec rm -rf -- "$1"; fi
[ -e "$1" ] || [ -L "$1" ] || exit 112
exec rm -- "$1"
"""

_MV = _PRELUDE + r"""
parent_inside "$1"; parent_inside "$2"
if [ ! -L "$1" ] && [ ! -f "$1" ]; then
  echo "Move source must be a regular file or symlink" >&2; exit 114
fi
exec mv -fT -- "$1" "$2"
"""

_SAME = _PRELUDE + r"""
inside "$1"; inside "$2"
if [ "$3" = 0 ] && { [ -L "$1" ] || [ -L "$2" ]; }; then exit 1; fi
[ "$1" -ef "$2" ]
"""

_LS = _PRELUDE + r"""
inside "$1"
exec ls -la -- "$1"
"""

# What an operation left behind, read when its output carries a hint: under
# Landlock the guard restores protected metadata when ANY command of the
# workspace ends, so a hint on a write may be another command's restore
# while this write landed, or this write's own undoing.
_HOLDS_FILE = _PRELUDE + r"""
[ -f "$1" ] && [ ! -L "$1" ] && exec cmp -s -- "$1" -
exit 1
"""

_HOLDS_DIR = _PRELUDE + r"""
[ -d "$1" ]
"""

_GONE = _PRELUDE + r"""
[ ! -e "$1" ] && [ ! -L "$1" ]
"""

_MOVED = _PRELUDE + r"""
{ [ -e "$2" ] || [ -L "$2" ]; } && [ ! -e "$1" ] && [ ! -L "$1" ]
"""

# The archive is packed into the session's private /tmp and read back in
# pieces, each within the output budget: sent whole on stdout, a workspace
# over max_output_bytes failed every snapshot, and a default root, removed
# after the run, lost the run's work with it.
_PACK = _PRELUDE + r"""
cd -- "$root" || exit 1
out=$(mktemp "${TMPDIR:-/tmp}/stockade-snapshot.XXXXXX") || exit 1
tar -cf "$out" "$@" . || { rm -f -- "$out"; exit 1; }
printf '%s\n%s\n' "$(wc -c < "$out")" "$out"
"""

_PIECE = _PRELUDE + r"""
[ -f "$1" ] || exit 112
tail -c "+$(($2 + 1))" -- "$1" | head -c "$3"
"""

_UNPACKED = _PRELUDE + r"""
exec rm -f -- "$1"
"""

_HYDRATE = _PRELUDE + r"""
cd -- "$root" || exit 1
exec tar -xf - --no-same-owner --no-same-permissions
"""


class StockadeSandboxClientOptions(BaseSandboxClientOptions):
    """The boundary of the sessions a `StockadeSandboxClient` creates.

    `mode` is stockade's (`read-only`, `workspace-write`, `full-access`).
    `allow_read`/`allow_write` are host paths beyond the workspace,
    `network` is `none`, `proxy` (only `allow_hosts`, through stockade's
    proxy) or `all`; each asks the approval gate, as `stockade run`'s flags
    of the same names do.
    """

    type: Literal["stockade"] = "stockade"
    mode: str = "workspace-write"
    allow_read: tuple[str, ...] = ()
    allow_write: tuple[str, ...] = ()
    network: Literal["none", "proxy", "all"] | None = None
    allow_hosts: tuple[str, ...] = ()
    max_memory_mb: int | None = None

    @field_validator("mode")
    @classmethod
    def _known_mode(cls, value: str) -> str:
        from ..capabilities import MODES

        # Found here, at construction, not at the model's first command.
        if value not in MODES:
            raise ValueError(f"unknown mode {value!r}: choose one of {', '.join(MODES)}")
        return value


class StockadeSandboxSessionState(SandboxSessionState):
    type: Literal["stockade"] = "stockade"
    workspace_root_owned: bool = False
    options: StockadeSandboxClientOptions = StockadeSandboxClientOptions()


class StockadeSandboxSession(BaseSandboxSession):
    """A session whose commands and file operations all run in one stockade session.

    Built on the SDK's exec-only session (the shape remote backends take),
    never on the local one: nothing here touches the workspace from the
    host process, apart from making a default root (and, in the client,
    removing it), through a descriptor of its base.
    """

    state: StockadeSandboxSessionState

    def __init__(self, *, state: StockadeSandboxSessionState, config: Any = None,
                 sandbox_options: dict[str, Any] | None = None,
                 owned: _Owned | None = None) -> None:
        self.state = state
        # The client's record of the root it made, or None: never the state's flag.
        self._owned = owned
        self._config = config
        self._sandbox_options = dict(sandbox_options or {})
        self._sandbox: Any = None
        self._running = False
        self._root = ""
        self._background: dict[int, _Background] = {}
        self._opening = asyncio.Lock()

    # -- the stockade session ------------------------------------------------------

    @property
    def stockade_session_id(self) -> str:
        return f"openai-sandbox-{self.state.session_id}"

    async def _stockade(self) -> Any:
        if self._sandbox is not None:
            return self._sandbox
        # The SDK runs a turn's tool calls concurrently: two first calls must
        # not each build a sandbox, and leave one of them open.
        async with self._opening:
            return await self._open_stockade()

    async def _open_stockade(self) -> Any:
        if self._sandbox is None:
            from ..config import load_config
            from ..workspace import WorkspaceSandbox

            root = self.state.manifest.root
            options = self.state.options
            if self._config is None:
                config = load_config(cwd=root, mode=options.mode)
            else:
                config = copy.copy(self._config)
                config.mode = options.mode
            sandbox = WorkspaceSandbox(config, **self._sandbox_options)
            try:
                ws = await sandbox.open_session(self.stockade_session_id, root)
            except BaseException:
                await sandbox.aclose()
                raise
            self._root = ws.cwd
            self._sandbox = sandbox
        return self._sandbox

    def _capabilities(self, sandbox: Any) -> Any:
        """The mode's baseline plus what the options ask for, or None for the baseline."""
        from ..capabilities import NetworkPolicy

        o = self.state.options
        if not (o.allow_read or o.allow_write or o.network or o.allow_hosts
                or o.max_memory_mb):
            return None
        ws = sandbox.find_session(self.stockade_session_id)
        assert ws is not None  # opened by `_stockade`, closed only with the sandbox
        base = sandbox.baseline(ws)
        net = base.network
        if o.network == "all":
            net = NetworkPolicy.allow_all()
        elif o.network == "none":
            net = NetworkPolicy.none()
        elif o.allow_hosts or o.network == "proxy":
            net = NetworkPolicy.allow_hosts([*sandbox.config.allow_hosts, *o.allow_hosts])
        return base.replace(
            fs_read=base.fs_read + tuple(os.path.abspath(p) for p in o.allow_read),
            fs_write=base.fs_write + tuple(os.path.abspath(p) for p in o.allow_write),
            network=net, max_memory_mb=o.max_memory_mb or base.max_memory_mb)

    async def _run(self, argv: list[str], *, stdin: bytes | None = None,
                   timeout: float | None = None, baseline: bool = False) -> Any:
        """Run argv in the stockade session; the `SandboxOutput`, or the `SandboxError`."""
        sandbox = await self._stockade()
        env = await self.state.manifest.environment.resolve()
        cmd = SandboxCommand(argv[0], argv[1:], session_id=self.stockade_session_id,
                             env=env, stdin=stdin, timeout=timeout,
                             capabilities=None if baseline else self._capabilities(sandbox))
        return await sandbox.execute(cmd)

    async def _file_op(self, script: str, *args: str, stdin: bytes | None = None) -> Any:
        # The mode's baseline: a file operation never leaves the workspace, so
        # it needs none of what the options ask for the model's commands.
        await self._stockade()
        return await self._run(["/bin/sh", "-c", script, "sh", self._root, *args], stdin=stdin,
                               baseline=True)

    # -- lifecycle -------------------------------------------------------------------

    async def _prepare_backend_workspace(self) -> None:
        root = Path(self.state.manifest.root)
        try:
            if self._owned is not None:
                self._owned.make()
            else:
                root.mkdir(parents=True, exist_ok=True)
            await self._stockade()
        except (OSError, SandboxError) as e:
            raise WorkspaceStartError(path=root, cause=e) from e

    async def _after_start(self) -> None:
        self._running = True

    async def _after_start_failed(self) -> None:
        self._running = False
        await self._close_stockade()

    async def _after_shutdown(self) -> None:
        self._running = False
        await self._close_stockade()

    async def _close_stockade(self) -> None:
        await self.pty_terminate_all()
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            await sandbox.aclose()

    async def running(self) -> bool:
        return self._running

    async def _apply_manifest(self, *, only_ephemeral: bool = False,
                              provision_accounts: bool = True) -> Any:
        _check_manifest(self.state.manifest)
        return await super()._apply_manifest(only_ephemeral=only_ephemeral,
                                             provision_accounts=provision_accounts)

    async def provision_manifest_accounts(self) -> None:
        _check_manifest(self.state.manifest)

    def supports_pty(self) -> bool:
        return True

    async def pty_exec_start(self, *command: str | Path, timeout: float | None = None,
                             shell: bool | list[str] = True, user: str | User | None = None,
                             tty: bool = False, yield_time_s: float | None = None,
                             max_output_tokens: int | None = None) -> PtyExecUpdate:
        """Start a command that may outlive this call, as a stockade background command.

        The session owns it (closing the session ends its whole tree); the
        model polls it with `write_stdin` and empty input. Background
        commands run on pipes, so there is no terminal (`tty=True` is
        refused) and no stdin to write to.
        """
        argv = self._prepare_exec_command(*command, shell=shell, user=user)
        if tty:
            raise ValueError("stockade runs commands without a terminal: run it with "
                             "tty=false (its output is read as it comes)")
        sandbox = await self._stockade()
        env = await self.state.manifest.environment.resolve()
        cmd = SandboxCommand(argv[0], argv[1:], session_id=self.stockade_session_id, env=env,
                             capabilities=self._capabilities(sandbox))
        try:
            proc = await sandbox.start(cmd)
        except SandboxError as e:
            return PtyExecUpdate(process_id=None, output=_line(e).encode() + b"\n",
                                 exit_code=e.exit_status, original_token_count=None)
        entry = _Background(proc, int(sandbox.config.max_output_bytes))
        entry.pump = asyncio.create_task(entry.run())
        process_id = allocate_pty_process_id(set(self._background))
        self._background[process_id] = entry
        if len(self._background) > PTY_PROCESSES_MAX:
            # Each one is a sandbox of its own with its own process limit: a
            # model that starts them in a loop must not get an unbounded
            # number. The oldest goes, as the SDK's local backend prunes.
            oldest = next(iter(self._background))
            await self._background.pop(oldest).stop()
        wait_ms = 10_000 if yield_time_s is None else int(yield_time_s * 1000)
        return await self._collect(process_id, entry, clamp_pty_yield_time_ms(wait_ms),
                                   max_output_tokens)

    async def pty_write_stdin(self, *, session_id: int, chars: str,
                              yield_time_s: float | None = None,
                              max_output_tokens: int | None = None) -> PtyExecUpdate:
        entry = self._resolve_pty_session_entry(pty_processes=self._background,
                                                session_id=session_id)
        if chars:
            raise RuntimeError("stdin is not available for this process: stockade runs "
                               "commands without a terminal; poll it with empty input")
        wait_ms = 250 if yield_time_s is None else int(yield_time_s * 1000)
        return await self._collect(
            session_id, entry,
            resolve_pty_write_yield_time_ms(yield_time_ms=wait_ms, input_empty=True),
            max_output_tokens)

    async def _collect(self, process_id: int, entry: _Background, wait_ms: int,
                       max_output_tokens: int | None) -> PtyExecUpdate:
        output, tokens, closed = await collect_pty_output(
            output_chunks=entry.chunks, output_lock=entry.lock, output_notify=entry.notify,
            is_done=entry.done.is_set, yield_time_ms=wait_ms,
            max_output_tokens=max_output_tokens)
        exit_code = entry.proc.returncode if closed else None
        if exit_code is not None:
            self._background.pop(process_id, None)
            hint = self._hint_at_exit(entry.proc, exit_code)
            if hint:
                sep = b"" if not output or output.endswith(b"\n") else b"\n"
                output = output + sep + f"stockade: {hint}\n".encode()
            if exit_code < 0:
                exit_code = 128 - exit_code
        return PtyExecUpdate(process_id=None if exit_code is not None else process_id,
                             output=output, exit_code=exit_code, original_token_count=tokens)

    def _hint_at_exit(self, proc: Any, code: int) -> str | None:
        """The hint `execute` gives a command the boundary stopped, for one that ran on."""
        from ..denial import denial_hint, likely_sandbox_denied
        from ..drivers import should_sandbox

        sandbox = self._sandbox
        ws = sandbox.find_session(self.stockade_session_id) if sandbox else None
        if ws is None:
            return None
        mode = sandbox.mode_for(ws)
        stderr, _ = proc.output("stderr", 0)
        kind = likely_sandbox_denied(code if code >= 0 else None, -code if code < 0 else None,
                                     stderr, sandboxed=should_sandbox(mode, "auto"))
        if not kind:
            return None
        return str(denial_hint(kind, stderr, mode, workspace=ws.cwd, cwd=ws.cwd))

    async def pty_terminate_all(self) -> None:
        entries, self._background = list(self._background.values()), {}
        for entry in entries:
            await entry.stop()

    # -- exec --------------------------------------------------------------------------

    def _prepare_exec_command(self, *command: str | Path, shell: bool | list[str],
                              user: str | User | None) -> list[str]:
        _no_user(user)
        return super()._prepare_exec_command(*command, shell=shell, user=None)

    async def _exec_internal(self, *command: str | Path,
                             timeout: float | None = None) -> ExecResult:
        argv = [str(part) for part in command]
        try:
            out = await self._run(argv, timeout=timeout)
        except CommandTimeout as e:
            raise ExecTimeoutError(command=argv, timeout_s=timeout, cause=e) from e
        except SandboxError as e:
            # The model reads what a person at `stockade run` would read, and
            # the status says which kind of refusal it was.
            return ExecResult(stdout=b"", stderr=_line(e).encode() + b"\n",
                              exit_code=e.exit_status)
        stderr = out.stderr
        if out.denial_hint:
            sep = b"" if not stderr or stderr.endswith(b"\n") else b"\n"
            stderr = stderr + sep + f"stockade: {out.denial_hint}\n".encode()
        return ExecResult(stdout=out.stdout, stderr=stderr, exit_code=out.returncode)

    # -- file operations, each a command in the sandbox ----------------------------------

    async def read(self, path: Path, *, user: str | User | None = None) -> io.IOBase:
        _no_user(user)
        return io.BytesIO(await self._read(path, None))

    async def _read_bounded(self, path: Path, *, max_bytes: int) -> bytes:
        return await self._read(path, max_bytes)

    async def _read(self, path: Path | str, limit: int | None) -> bytes:
        target = self.normalize_path(path)
        out = await self._checked(self._file_op(_READ, str(target), str(limit or "")),
                                  path, write=False)
        if out.returncode == _MISSING:
            raise WorkspaceReadNotFoundError(path=Path(path))
        if out.returncode != 0:
            raise _read_error(path, out)
        if out.truncated:
            raise WorkspaceArchiveReadError(path=Path(path), context={
                "reason": "larger than stockade's max_output_bytes; raise it in the config"})
        return bytes(out.stdout)

    async def write(self, path: Path, data: io.IOBase, *,
                    user: str | User | None = None) -> None:
        _no_user(user)
        target = self.normalize_path(path, for_write=True)
        payload = _payload(path, data)
        out = await self._checked(self._file_op(_WRITE, str(target), stdin=payload),
                                  path, write=True)
        if not await self._landed(out, _HOLDS_FILE, str(target), stdin=payload):
            raise _write_error(path, out)

    async def _write_new_file(self, path: Path, data: io.IOBase, *,
                              user: str | User | None = None) -> None:
        _no_user(user)
        requested = Path(path)
        target = self.normalize_path(requested.parent, for_write=True) / requested.name
        payload = _payload(path, data)
        out = await self._checked(self._file_op(_WRITE_NEW, str(target), stdin=payload),
                                  path, write=True)
        if out.returncode == _EXISTS:
            raise FileExistsError(str(path))
        if not await self._landed(out, _HOLDS_FILE, str(target), stdin=payload):
            raise _write_error(path, out)

    async def mkdir(self, path: Path | str, *, parents: bool = False,
                    user: str | User | None = None) -> None:
        _no_user(user)
        target = self.normalize_path(path, for_write=True)
        out = await self._checked(self._file_op(_MKDIR, str(target), "1" if parents else "0"),
                                  path, write=True)
        if not await self._landed(out, _HOLDS_DIR, str(target)):
            raise _write_error(path, out)

    async def rm(self, path: Path | str, *, recursive: bool = False,
                 user: str | User | None = None) -> None:
        _no_user(user)
        target = self.normalize_path(path, for_write=True)
        out = await self._checked(self._file_op(_RM, str(target), "1" if recursive else "0"),
                                  path, write=True)
        if not await self._landed(out, _GONE, str(target)):
            raise ExecNonZeroError(_exec_result(out), command=("rm", str(target)))

    async def mv(self, source: Path | str, destination: Path | str, *,
                 user: str | User | None = None) -> None:
        _no_user(user)
        src = self.normalize_path(source, for_write=True)
        dst = self.normalize_path(destination, for_write=True)
        out = await self._checked(self._file_op(_MV, str(src), str(dst)), source, write=True)
        if not await self._landed(out, _MOVED, str(src), str(dst)):
            raise ExecNonZeroError(_exec_result(out), command=("mv", str(src), str(dst)))

    async def same_file(self, left: Path | str, right: Path | str, *,
                        follow_symlinks: bool = True,
                        user: str | User | None = None) -> bool:
        _no_user(user)
        a, b = self.normalize_path(left), self.normalize_path(right)
        out = await self._checked(
            self._file_op(_SAME, str(a), str(b), "1" if follow_symlinks else "0"),
            left, write=False)
        if out.returncode in (0, 1):
            return bool(out.returncode == 0)
        raise ExecNonZeroError(_exec_result(out), command=("test", str(a), "-ef", str(b)))

    async def ls(self, path: Path | str, *, user: str | User | None = None) -> list[FileEntry]:
        _no_user(user)
        target = self.normalize_path(path)
        out = await self._checked(self._file_op(_LS, str(target)), path, write=False)
        if out.returncode != 0 or out.truncated:
            raise ExecNonZeroError(_exec_result(out), command=("ls", "-la", "--", str(target)))
        return parse_ls_la(out.stdout.decode("utf-8", "replace"), base=str(target))

    async def persist_workspace(self) -> io.IOBase:
        """The workspace as a tar archive, packed inside the sandbox.

        tar writes it to the session's private /tmp, and it comes back in
        pieces of one stream's share of the output budget, each its own
        sandboxed command, into an unnamed file on the host: a workspace
        larger than `max_output_bytes` is archived whole rather than failing.
        """
        root = Path(self.state.manifest.root)
        excludes = [f"--exclude=./{rel.as_posix()}"
                    for rel in sorted(self._persist_workspace_skip_relpaths())]
        sandbox = await self._stockade()
        out = await self._checked(self._file_op(_PACK, *excludes), root, write=False)
        size_line, _, name = out.stdout.decode("utf-8", "replace").partition("\n")
        name = name.removesuffix("\n")
        if out.returncode != 0 or out.truncated or not size_line.strip().isdigit() or not name:
            raise _archive_error(root, "tar failed in the sandbox", out)
        size = int(size_line)
        piece = max(int(sandbox.config.max_output_bytes) // 2, 1)
        # Returned open: the SDK reads it into the snapshot and closes it.
        archive = tempfile.TemporaryFile()  # noqa: SIM115
        try:
            while archive.tell() < size:
                got = await self._checked(
                    self._file_op(_PIECE, name, str(archive.tell()), str(piece)),
                    root, write=False)
                if got.returncode != 0 or got.truncated or not got.stdout:
                    raise _archive_error(root, "reading the archive back failed", got)
                archive.write(got.stdout)
        except BaseException:
            archive.close()
            raise
        finally:
            # The session's /tmp goes when it closes; a session that goes on
            # need not hold a second copy of its workspace until then.
            with contextlib.suppress(SandboxError):
                await self._file_op(_UNPACKED, name)
        archive.seek(0)
        return archive

    async def _persist_snapshot(self) -> None:
        # A root the manifest named is never cleared or unpacked into on
        # resume (it is the live project), so an archive of it would never
        # be read: packing it was work thrown away, and time, disk and, over
        # the output budget, a failed cleanup that lost the run's resume
        # state. Only a root the client made, removed after each run, is
        # archived: the snapshot is then the only copy of its work.
        if self._owned is None:
            return
        await super()._persist_snapshot()

    def _workspace_state_preserved_on_start(self) -> bool:
        # What a named root held at the end of the last run is still there
        # (no snapshot of it was taken): a resumed session applies only the
        # manifest's ephemeral entries again, as after a snapshot restore,
        # never the full manifest over the person's later work. A first
        # start (the root never made ready) applies the whole manifest.
        if self._owned is None and self._start_workspace_root_ready:
            return True
        return super()._workspace_state_preserved_on_start()

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        root = Path(self.state.manifest.root)
        raw = data.read()
        payload = raw.encode() if isinstance(raw, str) else bytes(raw)
        # The SDK's own checks first, for its errors (an absolute name, a link
        # out); the extraction itself happens inside the sandbox, where the
        # kernel stops whatever the checks miss.
        try:
            with tarfile.open(fileobj=io.BytesIO(payload), mode="r:*") as tar:
                validate_tarfile(tar, allow_external_symlink_targets=False)
                for member in tar.getmembers():
                    _check_member(member.name)
        except UnsafeTarMemberError as e:
            raise WorkspaceArchiveWriteError(
                path=root, context={"reason": e.reason, "member": e.member}, cause=e) from e
        except tarfile.TarError as e:
            raise WorkspaceArchiveWriteError(path=root, cause=e) from e
        out = await self._checked(self._file_op(_HYDRATE, stdin=payload), root, write=True)
        if out.returncode != 0 or out.likely_sandbox_denied:
            raise _write_error(root, out)

    async def _landed(self, out: Any, check: str, *args: str, stdin: bytes | None = None) -> bool:
        """Whether a file operation did what it was asked, judged by its own effect.

        A hint on its output alone is not its failure: a successful write
        was reported failed when another command's guard restore happened
        during it. So the effect is read back, and a hint that was not about
        this operation is logged, not raised.
        """
        if out.returncode != 0:
            return False
        if not out.likely_sandbox_denied:
            return True
        check_out = await self._file_op(check, *args, stdin=stdin)
        if check_out.returncode != 0:
            return False
        logging.getLogger("stockade.openai_sandbox").warning(
            "stockade: %s", out.denial_hint or "the sandbox reported a denial")
        return True

    async def _restore_snapshot_into_workspace_on_resume(self) -> None:
        # A root the manifest named is the person's project, live on this
        # machine: clearing it for the snapshot deleted its .git history and
        # whatever was written there after the run. It is already the
        # newest copy, so it is kept as it is and never cleared.
        if self._owned is None:
            return
        await super()._restore_snapshot_into_workspace_on_resume()

    async def _clear_workspace_root_on_resume(self) -> None:
        if self._owned is None:
            raise WorkspaceStartError(path=Path(self.state.manifest.root), context={
                "reason": "stockade never clears a workspace root the manifest named"})
        await super()._clear_workspace_root_on_resume()

    async def _checked(self, op: Any, path: Path | str, *, write: bool) -> Any:
        """Await a file operation; a stockade refusal or an escape becomes the SDK's error."""
        try:
            out = await op
        except SandboxError as e:
            context = {"reason": "refused by stockade", "stockade": _line(e)}
            if write:
                raise WorkspaceArchiveWriteError(path=Path(path), context=context,
                                                 message=_line(e), cause=e) from e
            raise WorkspaceArchiveReadError(path=Path(path), context=context, cause=e) from e
        if out.returncode == _OUTSIDE:
            raise InvalidManifestPathError(rel=str(path), reason="escape_root", context={
                "resolved_path": out.stderr.decode("utf-8", "replace").strip()})
        return out


class _Background:
    """A started command's output, moved into the queue the SDK's PTY reader drains.

    At most `limit` bytes wait there: `yes` left unpolled grew the host
    process by 1.4 GB a minute when every byte was kept. The oldest go, and
    a line at the front of what is left says how many.
    """

    def __init__(self, proc: Any, limit: int) -> None:
        self.proc = proc
        self.limit = max(limit, 1)
        self.chunks: collections.deque[bytes] = collections.deque()
        self.lock = asyncio.Lock()
        self.notify = asyncio.Event()
        self.done = asyncio.Event()
        self.pump: asyncio.Task[None] | None = None
        self._offsets = {"stdout": 0, "stderr": 0}
        self._notice: bytes | None = None
        self._dropped = 0

    def _take(self) -> bool:
        got = False
        lost = 0
        for stream in ("stdout", "stderr"):
            asked = self._offsets[stream]
            data, self._offsets[stream] = self.proc.output(stream, asked)
            # stockade's own window moved past what was asked for.
            lost += max(self._offsets[stream] - len(data) - asked, 0)
            if data:
                self.chunks.append(data)
                got = True
        if got or lost:
            self._bound(lost)
        return got

    def _bound(self, lost: int) -> None:
        if self._notice is not None and self.chunks and self.chunks[0] is self._notice:
            self.chunks.popleft()
        else:
            self._dropped = 0  # the reader has taken the last notice
        self._dropped += lost
        if len(self.chunks) > 64:
            joined = b"".join(self.chunks)
            self.chunks.clear()
            self.chunks.append(joined)
        excess = sum(len(c) for c in self.chunks) - self.limit
        while excess > 0 and self.chunks:
            first = self.chunks.popleft()
            cut = min(len(first), excess)
            if cut < len(first):
                self.chunks.appendleft(first[cut:])
            self._dropped += cut
            excess -= cut
        self._notice = None
        if self._dropped:
            self._notice = (f"[stockade: {self._dropped} earlier bytes of output were dropped "
                            f"unread; at most max_output_bytes ({self.limit}) are kept "
                            "between polls]\n").encode()
            self.chunks.appendleft(self._notice)

    async def run(self) -> None:
        while True:
            # Read the state before the output: what arrives before the end
            # is read after it, never lost between the two.
            ended = not self.proc.running()
            async with self.lock:
                got = self._take()
            if got:
                self.notify.set()
            if ended:
                self.done.set()
                self.notify.set()
                return
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        await asyncio.to_thread(self.proc.stop)
        if self.pump is not None:
            # The tree is dead or unkillable; either way the reader must not
            # keep the session's close waiting.
            self.pump.cancel()
            await asyncio.gather(self.pump, return_exceptions=True)


class StockadeSandboxClient(BaseSandboxClient[StockadeSandboxClientOptions | None]):
    """Create SDK sandbox sessions confined by stockade on this machine.

    `config` is a `SandboxConfig` to use instead of the usual config files
    (its mode is replaced by the options'); other keyword options go to each
    session's `WorkspaceSandbox` (`approval=` an `ApprovalGate`, `hooks=`,
    `ledger=`, ...). `options` are the defaults for `create()` without any,
    and the most a resumed state may ask for. `root` is the project a state
    this client did not create may be resumed into (a state names its own
    root, but it is not the state's to choose).
    """

    backend_id = "stockade"
    supports_default_options = True

    def __init__(self, *, config: Any = None,
                 options: StockadeSandboxClientOptions | None = None,
                 root: str | os.PathLike[str] | None = None,
                 instrumentation: Instrumentation | None = None,
                 dependencies: Dependencies | None = None, **sandbox_options: Any) -> None:
        self._config = config
        self._default_options = options
        self._root = os.path.realpath(root) if root is not None else None
        self._instrumentation = instrumentation or Instrumentation()
        self._dependencies = dependencies
        self._sandbox_options = sandbox_options
        # What each session was created with, kept in the host process:
        # the stored state round-trips through the model's runtime, so on
        # resume it is checked against this, never believed.
        self._made: dict[uuid.UUID, _Made] = {}

    async def create(self, *, snapshot: SnapshotSpec | SnapshotBase | None = None,
                     manifest: Manifest | None = None,
                     options: StockadeSandboxClientOptions | None = None) -> SandboxSession:
        resolved = options or self._default_options or StockadeSandboxClientOptions()
        if not isinstance(resolved, StockadeSandboxClientOptions):
            raise TypeError("StockadeSandboxClient takes StockadeSandboxClientOptions, got "
                            f"{type(resolved).__name__}")
        manifest = manifest if manifest is not None else Manifest()
        _check_manifest(manifest)
        self._validate_manifest_for_create(manifest)
        owned = None
        if manifest.root == _DEFAULT_MANIFEST_ROOT:
            # Not under /tmp: the sandbox has a /tmp of its own there.
            base = self._workspace_base()
            os.makedirs(base, mode=0o700, exist_ok=True)
            owned = _Owned.new(os.path.realpath(base))
            manifest = manifest.model_copy(update={"root": owned.path}, deep=True)
        session_id = uuid.uuid4()
        state = StockadeSandboxSessionState(
            session_id=session_id, manifest=manifest,
            snapshot=resolve_snapshot(snapshot, str(session_id)),
            workspace_root_owned=owned is not None, options=resolved)
        self._made[session_id] = _Made(
            root=owned.path if owned is not None else os.path.realpath(manifest.root),
            owned=owned, options=resolved, host_entries=_host_entries(manifest),
            snapshot=state.snapshot.model_copy(deep=True))
        return self._wrap(state, owned)

    def _workspace_base(self) -> str:
        from ..config import SandboxConfig

        config = self._config if self._config is not None else SandboxConfig()
        return str(config.resolved_workspace_root(os.environ))

    def _wrap(self, state: StockadeSandboxSessionState,
              owned: _Owned | None) -> SandboxSession:
        inner = StockadeSandboxSession(state=state, config=self._config,
                                       sandbox_options=self._sandbox_options, owned=owned)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    async def delete(self, session: SandboxSession) -> SandboxSession:
        """Remove the workspace if this client recorded making it (never a named one)."""
        # The SDK's wrapper has no public name for the session it wraps; its
        # own clients' delete() reads `_inner` the same way.
        inner = session._inner
        if not isinstance(inner, StockadeSandboxSession):
            raise TypeError("StockadeSandboxClient.delete expects a StockadeSandboxSession")
        await inner._close_stockade()
        made = self._made.get(inner.state.session_id)
        # Only this client's own record, carried by a session it wrapped: a
        # root believed from the state (its flag, or a default-looking path)
        # made this an rmtree of another live session's workspace.
        owned = inner._owned
        if owned is not None and made is not None and made.owned is owned:
            await asyncio.to_thread(owned.remove)
        return session

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        """A session from a stored state, held to what this client would create.

        The state may narrow the options (a read-only session stays read-only)
        but not widen them past the client's; its root, its snapshot and any
        manifest entry the host process would read from its own filesystem
        must be the ones this client created the session with (or, for a
        state from elsewhere, `root=`, no snapshot and no such entries, and
        never a root this client does not own: the root is not owned, and one
        that is, holds or lies beneath another session's default root is
        refused). Anything else is refused.
        """
        if not isinstance(state, StockadeSandboxSessionState):
            raise TypeError("StockadeSandboxClient.resume expects a StockadeSandboxSessionState")
        _check_manifest(state.manifest)
        made = self._made.get(state.session_id)
        claimed = os.path.realpath(state.manifest.root)
        if made is not None:
            root, owned, pinned = made.root, made.owned, made.options
            host_entries, snapshot = made.host_entries, made.snapshot
        else:
            pinned = self._default_options or StockadeSandboxClientOptions()
            host_entries, snapshot = {}, NoopSnapshot(id=str(state.session_id))
            owned, root = None, self._root or ""
            for asked in {claimed, root} - {""}:
                live = _live_root_touching(asked)
                if live is not None:
                    raise CapabilityDenied(
                        f"the stored session state would resume into {asked}, the private "
                        f"workspace of another session (the default root {live}, made by a "
                        "StockadeSandboxClient in this process and not deleted): only the "
                        "client that made it resumes that session's own state there")
        if claimed != root:
            raise CapabilityDenied(
                f"the stored session state names the workspace {state.manifest.root}, not "
                + (f"{root}, the one this session was created with" if root else
                   "one this client may resume into: build StockadeSandboxClient(root=...) "
                   "with the project to resume it there"))
        wider = _widening(state.options, pinned)
        if wider:
            raise CapabilityDenied(
                f"the stored session state asks for {'; '.join(wider)}, more than this client "
                "gives: build StockadeSandboxClient(options=...) with it to resume it")
        extra = sorted(k for k, v in _host_entries(state.manifest).items()
                       if host_entries.get(k) != v)
        if extra:
            raise CapabilityDenied(
                "the stored session state adds manifest entries the host would copy in from its "
                f"own filesystem ({', '.join(extra)}); this client did not create it with them")
        # A snapshot's location is a host path: restore read ~/.aws/backup.tar
        # into the workspace, and stop() wrote <any directory>/<id>.tar.
        if (not isinstance(state.snapshot, NoopSnapshot)
                and state.snapshot.model_dump(mode="json") != snapshot.model_dump(mode="json")):
            raise CapabilityDenied(
                "the stored session state names a snapshot this client did not create it with: "
                "a snapshot is restored and written by the host process, so it is resumed only "
                "by the client that created the session")
        state = state.model_copy(update={
            "manifest": state.manifest.model_copy(update={"root": root}),
            "snapshot": snapshot.model_copy(deep=True),
            "workspace_root_owned": owned is not None})
        return self._wrap(state, owned)

    def deserialize_session_state(self, payload: dict[str, object]) -> SandboxSessionState:
        return self._deserialize_session_state_payload(payload, StockadeSandboxSessionState)


@dataclasses.dataclass(frozen=True)
class _Made:
    root: str
    owned: _Owned | None
    options: StockadeSandboxClientOptions
    host_entries: dict[str, Any]
    snapshot: SnapshotBase


_OWNED_PREFIX = "openai-sandbox-"


class _Owned:
    """A default root a client in this process made: its base, its name, and the
    directory made there, by device and inode.

    Removed and made again only as that: a directory or a link put at its
    name since is neither deleted nor taken for it.
    """

    __slots__ = ("__weakref__", "base", "ident", "name")

    def __init__(self, base: str, name: str, ident: tuple[int, int] | None) -> None:
        self.base = base
        self.name = name
        #: None while the directory is removed (the SDK deletes a session
        #: after each run and resumes its state into the root on the next).
        self.ident = ident

    @property
    def path(self) -> str:
        return os.path.join(self.base, self.name)

    @classmethod
    def new(cls, base: str) -> _Owned:
        made = tempfile.mkdtemp(prefix=_OWNED_PREFIX, dir=base)
        owned = cls(base, os.path.basename(made), None)
        owned.ident = owned._identity()
        with _LIVE_LOCK:
            _LIVE[owned.path] = owned
        return owned

    def _identity(self) -> tuple[int, int]:
        with fsroot.Root(self.base) as base:
            st = base.lstat(self.name)
        if st is None or not stat.S_ISDIR(st.st_mode):
            raise fsroot.Refused(errno.ENOENT, f"no workspace root at {self.path}")
        return st.st_dev, st.st_ino

    def make(self) -> None:
        """The recorded directory, or a new one at its name when it was removed."""
        with fsroot.Root(self.base) as base:
            st = base.lstat(self.name)
            if st is None:
                os.mkdir(self.name, 0o700, dir_fd=base.fd)
                self.ident = self._identity()
            elif (st.st_dev, st.st_ino) != self.ident:
                raise fsroot.Refused(errno.EEXIST, f"{self.path} is no longer the workspace "
                                     "root this client made: something else is at its name")

    def remove(self) -> None:
        """Remove the recorded directory, if it is still the one at its name."""
        try:
            base = fsroot.Root(self.base)
        except OSError:
            self.ident = None
            return
        with base:
            st = base.lstat(self.name)
            if (st is not None and stat.S_ISDIR(st.st_mode)
                    and (st.st_dev, st.st_ino) == self.ident):
                base.remove(self.name)
        self.ident = None


#: Each default root a client in this process made, while a client or a
#: session still holds its record; a state another client resumes never
#: reaches one of them.
_LIVE: weakref.WeakValueDictionary[str, _Owned] = weakref.WeakValueDictionary()
_LIVE_LOCK = threading.Lock()


def _live_root_touching(path: str) -> str | None:
    """The live default root `path` is, lies beneath or holds; None when it touches none."""
    with _LIVE_LOCK:
        roots = list(_LIVE.keys())
    for root in roots:
        if within(path, root) is not None or within(root, path) is not None:
            return root
    return None


#: Entries whose content is in the manifest itself. Every other kind has the
#: host process read its own filesystem (a `local_file` of ~/.ssh/id_ed25519)
#: or reach out with its credentials (a mount, a repository).
_DATA_ENTRIES = ("file", "dir")


def _entries(manifest: Manifest) -> list[tuple[str, Any]]:
    """Every manifest entry, children included, as (its path in the workspace, entry)."""
    found: list[tuple[str, Any]] = []

    def walk(prefix: str, entries: dict[Any, Any]) -> None:
        for name, entry in entries.items():
            path = f"{prefix}{Path(str(name)).as_posix()}"
            found.append((path, entry))
            walk(path + "/", getattr(entry, "children", {}) or {})

    walk("", manifest.entries)
    return found


def _host_entries(manifest: Manifest) -> dict[str, Any]:
    """Each entry not made of the manifest's own data, by path, as its JSON."""
    found: dict[str, Any] = {}
    for path, entry in _entries(manifest):
        dumped = entry.model_dump(mode="json")
        if dumped.get("type") not in _DATA_ENTRIES:
            found[path] = dumped
    return found


#: How far each network setting reaches; None is the mode's own (the config's
#: `allow_hosts`, or nothing), which "proxy" extends.
_NETWORK_RANK = {"none": 0, None: 1, "proxy": 2, "all": 3}


def _widening(asked: StockadeSandboxClientOptions,
              pinned: StockadeSandboxClientOptions) -> list[str]:
    """What `asked` reaches that `pinned` does not; empty when it only narrows."""
    from ..capabilities import MODES

    def under_any(path: str, roots: tuple[str, ...]) -> bool:
        p = os.path.abspath(path)
        return any(within(p, os.path.abspath(r)) is not None for r in roots)

    wider: list[str] = []
    if MODES.index(asked.mode) > MODES.index(pinned.mode):
        wider.append(f"mode {asked.mode} (this client: {pinned.mode})")
    wider += [f"allow_read {p}" for p in asked.allow_read
              if not under_any(p, pinned.allow_read + pinned.allow_write)]
    wider += [f"allow_write {p}" for p in asked.allow_write
              if not under_any(p, pinned.allow_write)]

    def network(o: StockadeSandboxClientOptions) -> str | None:
        return o.network or ("proxy" if o.allow_hosts else None)

    if _NETWORK_RANK[network(asked)] > _NETWORK_RANK[network(pinned)]:
        wider.append(f"network {network(asked)} (this client: {network(pinned)})")
    elif network(pinned) != "all":
        wider += [f"allow_hosts {h}" for h in asked.allow_hosts if h not in pinned.allow_hosts]
    if pinned.max_memory_mb is not None and (asked.max_memory_mb is None
                                             or asked.max_memory_mb > pinned.max_memory_mb):
        wider.append(f"max_memory_mb {asked.max_memory_mb} (this client: "
                     f"{pinned.max_memory_mb})")
    return wider


def _check_manifest(manifest: Manifest) -> None:
    if manifest.extra_path_grants:
        raise ValueError(
            "StockadeSandboxClient does not take manifest extra_path_grants: the SDK would "
            "only check them in Python. Grant the paths with StockadeSandboxClientOptions("
            "allow_read=..., allow_write=...), which the approval gate decides")
    if manifest.users or manifest.groups:
        raise ValueError("StockadeSandboxClient does not support manifest users or groups: "
                         "every command runs as the calling user, inside the sandbox")
    # A stored state's entry names are data: refused here, before any is joined
    # to the root, not left to each place that joins one.
    for path, _entry in _entries(manifest):
        try:
            fsroot.check_name(path)
        except fsroot.UnsafeName as exc:
            raise InvalidManifestPathError(
                rel=path, reason="absolute" if path.startswith("/") else "escape_root",
                context={"stockade": str(exc)}) from exc


def _check_member(name: str) -> None:
    """Refuse an archive member that would not stay beneath the workspace.

    `./` and a directory's trailing `/` are how tar spells names (the
    workspace's own archive is `tar -cf - .`), so they are taken off first.
    """
    while name.startswith("./"):
        name = name[2:]
    name = name.rstrip("/")
    if name in ("", "."):
        return
    try:
        fsroot.check_name(name)
    except fsroot.UnsafeName as exc:
        raise UnsafeTarMemberError(member=name, reason=str(exc)) from exc


def _no_user(user: str | User | None) -> None:
    if user is not None:
        raise ValueError("StockadeSandboxClient runs every command as the calling user; "
                         "run_as / user= is not supported (sudo cannot work in the sandbox)")


def _payload(path: Path | str, data: io.IOBase) -> bytes:
    raw = coerce_write_payload(path=Path(path), data=data).stream.read()
    return raw.encode() if isinstance(raw, str) else bytes(raw)


def _line(exc: SandboxError) -> str:
    """The CLI's one line for a refusal, so a model and a person read the same words."""
    return f"stockade: {type(exc).__name__}: {' '.join(str(exc).split())}"


def _why(out: Any) -> str:
    text: str = out.stderr.decode("utf-8", "replace").strip()
    if out.denial_hint:
        text = f"{text}\nstockade: {out.denial_hint}" if text else f"stockade: {out.denial_hint}"
    return text[-4096:]


def _write_error(path: Path | str, out: Any) -> WorkspaceArchiveWriteError:
    why = _why(out)
    return WorkspaceArchiveWriteError(
        path=Path(path), message=f"failed to write {path}: {why}" if why else None,
        context={"exit_code": out.returncode, "stderr": why})


def _archive_error(root: Path, reason: str, out: Any) -> WorkspaceArchiveReadError:
    return WorkspaceArchiveReadError(path=root, context={
        "reason": reason, "stderr": out.stderr.decode("utf-8", "replace")[-4096:]})


def _read_error(path: Path | str, out: Any) -> WorkspaceArchiveReadError:
    return WorkspaceArchiveReadError(path=Path(path),
                                     context={"exit_code": out.returncode, "stderr": _why(out)})


def _exec_result(out: Any) -> ExecResult:
    return ExecResult(stdout=out.stdout, stderr=_why(out).encode(), exit_code=out.returncode or 1)

