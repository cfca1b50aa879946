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
there is no terminal (`tty=true` is refused) and no stdin to write to.

Not supported, and refused with the reason rather than run outside the
boundary: `run_as` users, manifest users and groups, and
`extra_path_grants` (grant paths with `allow_read`/`allow_write`).
A read, or a snapshot of the workspace, larger than `max_output_bytes`
(1 MiB by default) fails instead of coming back cut short.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import io
import os
import tarfile
import tempfile
import uuid
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
    from agents.sandbox.snapshot import SnapshotBase, SnapshotSpec, resolve_snapshot
    from agents.sandbox.types import ExecResult, User
    from agents.sandbox.util.parse_utils import parse_ls_la
    from agents.sandbox.util.tar_utils import UnsafeTarMemberError, validate_tarfile
    from pydantic import field_validator
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "stockade.adapters.openai_sandbox needs the OpenAI Agents SDK with agents.sandbox "
        "(0.24 or later): pip install 'stockade[openai-agents]'"
    ) from exc

from ..command import SandboxCommand
from ..errors import CommandTimeout, SandboxError

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

_WRITE = _PRELUDE + r"""
inside "$1"
mkdir -p -- "$(dirname -- "$1")" && inside "$1" && exec cat > "$1"
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

_PERSIST = _PRELUDE + r"""
cd -- "$root" || exit 1
exec tar -cf - "$@" .
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
    host process, apart from creating its root.
    """

    state: StockadeSandboxSessionState

    def __init__(self, *, state: StockadeSandboxSessionState, config: Any = None,
                 sandbox_options: dict[str, Any] | None = None) -> None:
        self.state = state
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
        ws = sandbox.core.sessions[self.stockade_session_id]
        base = sandbox.core.baseline(sandbox.core.mode_for(ws), ws)
        net = base.network
        if o.network == "all":
            net = NetworkPolicy.allow_all()
        elif o.network == "none":
            net = NetworkPolicy.none()
        elif o.allow_hosts or o.network == "proxy":
            net = NetworkPolicy.allow_hosts([*sandbox.core.config.allow_hosts, *o.allow_hosts])
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
        entry = _Background(proc)
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
        ws = sandbox.core.sessions.get(self.stockade_session_id) if sandbox else None
        if ws is None:
            return None
        mode = sandbox.core.mode_for(ws)
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
        if out.returncode != 0 or out.likely_sandbox_denied:
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
        if out.returncode != 0 or out.likely_sandbox_denied:
            raise _write_error(path, out)

    async def mkdir(self, path: Path | str, *, parents: bool = False,
                    user: str | User | None = None) -> None:
        _no_user(user)
        target = self.normalize_path(path, for_write=True)
        out = await self._checked(self._file_op(_MKDIR, str(target), "1" if parents else "0"),
                                  path, write=True)
        if out.returncode != 0 or out.likely_sandbox_denied:
            raise _write_error(path, out)

    async def rm(self, path: Path | str, *, recursive: bool = False,
                 user: str | User | None = None) -> None:
        _no_user(user)
        target = self.normalize_path(path, for_write=True)
        out = await self._checked(self._file_op(_RM, str(target), "1" if recursive else "0"),
                                  path, write=True)
        if out.returncode != 0 or out.likely_sandbox_denied:
            raise ExecNonZeroError(_exec_result(out), command=("rm", str(target)))

    async def mv(self, source: Path | str, destination: Path | str, *,
                 user: str | User | None = None) -> None:
        _no_user(user)
        src = self.normalize_path(source, for_write=True)
        dst = self.normalize_path(destination, for_write=True)
        out = await self._checked(self._file_op(_MV, str(src), str(dst)), source, write=True)
        if out.returncode != 0 or out.likely_sandbox_denied:
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
        root = Path(self.state.manifest.root)
        excludes = [f"--exclude=./{rel.as_posix()}"
                    for rel in sorted(self._persist_workspace_skip_relpaths())]
        out = await self._checked(self._file_op(_PERSIST, *excludes), root, write=False)
        if out.returncode != 0 or out.truncated:
            raise WorkspaceArchiveReadError(path=root, context={
                "reason": "the workspace archive is larger than stockade's max_output_bytes"
                if out.truncated else "tar failed in the sandbox",
                "stderr": out.stderr.decode("utf-8", "replace")[-4096:]})
        return io.BytesIO(out.stdout)

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
        except UnsafeTarMemberError as e:
            raise WorkspaceArchiveWriteError(
                path=root, context={"reason": e.reason, "member": e.member}, cause=e) from e
        except tarfile.TarError as e:
            raise WorkspaceArchiveWriteError(path=root, cause=e) from e
        out = await self._checked(self._file_op(_HYDRATE, stdin=payload), root, write=True)
        if out.returncode != 0 or out.likely_sandbox_denied:
            raise _write_error(root, out)

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
    """A started command's output, moved into the queue the SDK's PTY reader drains."""

    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self.chunks: collections.deque[bytes] = collections.deque()
        self.lock = asyncio.Lock()
        self.notify = asyncio.Event()
        self.done = asyncio.Event()
        self.pump: asyncio.Task[None] | None = None
        self._offsets = {"stdout": 0, "stderr": 0}

    def _take(self) -> bool:
        got = False
        for stream in ("stdout", "stderr"):
            data, self._offsets[stream] = self.proc.output(stream, self._offsets[stream])
            if data:
                self.chunks.append(data)
                got = True
        return got

    async def run(self) -> None:
        while True:
            # Read the state before the output: what arrives before the end
            # is read after it, never lost between the two.
            ended = not self.proc.running()
            if self._take():
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
    and on `resume()` they replace the options the stored state carries.
    """

    backend_id = "stockade"
    supports_default_options = True

    def __init__(self, *, config: Any = None,
                 options: StockadeSandboxClientOptions | None = None,
                 instrumentation: Instrumentation | None = None,
                 dependencies: Dependencies | None = None, **sandbox_options: Any) -> None:
        self._config = config
        self._default_options = options
        self._instrumentation = instrumentation or Instrumentation()
        self._dependencies = dependencies
        self._sandbox_options = sandbox_options

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
        owned = False
        if manifest.root == _DEFAULT_MANIFEST_ROOT:
            # Not under /tmp: the sandbox has a /tmp of its own there.
            base = self._workspace_base()
            os.makedirs(base, mode=0o700, exist_ok=True)
            root = tempfile.mkdtemp(prefix="openai-sandbox-", dir=base)
            manifest = manifest.model_copy(update={"root": root}, deep=True)
            owned = True
        session_id = uuid.uuid4()
        state = StockadeSandboxSessionState(
            session_id=session_id, manifest=manifest,
            snapshot=resolve_snapshot(snapshot, str(session_id)),
            workspace_root_owned=owned, options=resolved)
        return self._wrap(state)

    def _workspace_base(self) -> str:
        from ..config import SandboxConfig

        config = self._config if self._config is not None else SandboxConfig()
        return str(config.resolved_workspace_root(os.environ))

    def _wrap(self, state: StockadeSandboxSessionState) -> SandboxSession:
        inner = StockadeSandboxSession(state=state, config=self._config,
                                       sandbox_options=self._sandbox_options)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    async def delete(self, session: SandboxSession) -> SandboxSession:
        """Remove the workspace if this client made it (never one the manifest named)."""
        inner = session._inner
        if not isinstance(inner, StockadeSandboxSession):
            raise TypeError("StockadeSandboxClient.delete expects a StockadeSandboxSession")
        await inner._close_stockade()
        if inner.state.workspace_root_owned:
            import shutil

            shutil.rmtree(inner.state.manifest.root, ignore_errors=True)
        return session

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        if not isinstance(state, StockadeSandboxSessionState):
            raise TypeError("StockadeSandboxClient.resume expects a StockadeSandboxSessionState")
        _check_manifest(state.manifest)
        if self._default_options is not None:
            # Stored state is data, possibly kept where others can write it;
            # a boundary the client was built with is not for it to widen.
            state = state.model_copy(update={"options": self._default_options})
        return self._wrap(state)

    def deserialize_session_state(self, payload: dict[str, object]) -> SandboxSessionState:
        return self._deserialize_session_state_payload(payload, StockadeSandboxSessionState)


def _check_manifest(manifest: Manifest) -> None:
    if manifest.extra_path_grants:
        raise ValueError(
            "StockadeSandboxClient does not take manifest extra_path_grants: the SDK would "
            "only check them in Python. Grant the paths with StockadeSandboxClientOptions("
            "allow_read=..., allow_write=...), which the approval gate decides")
    if manifest.users or manifest.groups:
        raise ValueError("StockadeSandboxClient does not support manifest users or groups: "
                         "every command runs as the calling user, inside the sandbox")


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


def _read_error(path: Path | str, out: Any) -> WorkspaceArchiveReadError:
    return WorkspaceArchiveReadError(path=Path(path),
                                     context={"exit_code": out.returncode, "stderr": _why(out)})


def _exec_result(out: Any) -> ExecResult:
    return ExecResult(stdout=out.stdout, stderr=_why(out).encode(), exit_code=out.returncode or 1)

