"""Deep Agents: a local sandbox backend whose every operation runs inside stockade.

    from deepagents import create_deep_agent
    from stockade.adapters.deepagents import StockadeSandbox

    backend = StockadeSandbox("/path/to/project", mode="workspace-write")
    agent = create_deep_agent(model=model, backend=backend)

Deep Agents' sandbox backends are hosted (Daytona, Modal, Runloop, E2B);
this one is the machine itself, behind stockade's boundary. It implements
the sandbox backend protocol through `BaseSandbox`: `execute` runs the
command with `bash -c` in one stockade session bound to the project, and
the file operations (`ls`, `read`, `write`, `edit`, `grep`, `glob`, and the
uploads and downloads they are built on) are sandboxed commands too, each
with its ledger record. A path outside the project is read-only, the
person's credential stores are hidden, and a write there fails with
`permission_denied`; relative paths are the project's.
"""

from __future__ import annotations

import os
from typing import Any

try:
    from deepagents.backends.protocol import (
        ExecuteResponse,
        FileDownloadResponse,
        FileUploadResponse,
    )
    from deepagents.backends.sandbox import BaseSandbox
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "stockade.adapters.deepagents needs deepagents: pip install 'stockade[deepagents]'"
    ) from exc

from ..command import SandboxCommand
from ..errors import CommandTimeout, SandboxError

__all__ = ["StockadeSandbox"]

_NOT_FOUND, _IS_DIR, _NOT_REGULAR, _TOO_BIG = 2, 21, 22, 27
#: Both run inside the sandbox, and both refuse what is not a regular file
#: before opening it: a FIFO opened there waits for a writer or reader that
#: never comes, and a device such as /dev/zero never ends.
_READ = ('[ -d "$1" ] && exit 21; [ -e "$1" ] || exit 2; [ -f "$1" ] || exit 22; '
         '[ -r "$1" ] && [ "$(wc -c < "$1")" -gt "$2" ] && exit 27; exec cat -- "$1"')
_WRITE = ('[ -d "$1" ] && exit 21; [ -e "$1" ] && ! [ -f "$1" ] && exit 22; '
          'mkdir -p -- "$(dirname -- "$1")" 2>/dev/null; cat > "$1" || exit 13')
_NOT_REGULAR_ERROR = ("stockade: not a regular file (a FIFO, socket or device); only regular "
                      "files are read or written")
#: A timeout of 0 asks for none; stockade always has one, so a day.
_NO_TIMEOUT = 24 * 3600.0


class StockadeSandbox(BaseSandbox):
    """One stockade session bound to `workspace`, as a Deep Agents sandbox backend."""

    def __init__(self, workspace: str, *, mode: str | None = "workspace-write",
                 config: Any = None, session: str | None = None, **options: Any) -> None:
        """`config` is a `SandboxConfig` to use instead of the usual files; other
        keyword arguments go to `SyncWorkspaceSandbox` (an approval gate, hooks)."""
        from ..config import load_config
        from ..sync import SyncWorkspaceSandbox

        self.workspace = os.path.realpath(workspace)
        if config is None:
            config = load_config(cwd=self.workspace, mode=mode)
        elif mode is not None:
            config.mode = mode
        self._sandbox = SyncWorkspaceSandbox(config, **options)
        # The most a download returns: stockade captures half of max_output_bytes of
        # each stream, and a file past that would come back cut.
        self._max_file_bytes = max(int(config.max_output_bytes) // 2, 1)
        self._session = session or f"deepagents-{os.getpid()}-{id(self):x}"
        self._sandbox.session(self._session, self.workspace)

    @property
    def id(self) -> str:
        return self._session

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        seconds = None if timeout is None else float(timeout) or _NO_TIMEOUT
        try:
            out = self._run(["/bin/bash", "-c", command], timeout=seconds)
        except CommandTimeout as exc:
            partial = exc.output
            text = _text(partial) if partial is not None else ""
            return ExecuteResponse(output=f"{text}stockade: CommandTimeout: {exc}\n",
                                   exit_code=124, truncated=False)
        except SandboxError as exc:
            message = " ".join(str(exc).split())
            return ExecuteResponse(output=f"stockade: {type(exc).__name__}: {message}\n",
                                   exit_code=exc.exit_status)
        return ExecuteResponse(output=_text(out), exit_code=out.returncode,
                               truncated=bool(out.truncated))

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        results = []
        for path, data in files:
            try:
                out = self._run(["/bin/sh", "-c", _WRITE, "sh", self._path(path)], stdin=data)
            except SandboxError as exc:
                results.append(FileUploadResponse(path=path, error=f"stockade: {exc}"))
                continue
            error = None
            if out.returncode == _IS_DIR:
                error = "is_directory"
            elif out.returncode == _NOT_REGULAR:
                error = _NOT_REGULAR_ERROR
            elif out.returncode != 0:
                error = "permission_denied"
            results.append(FileUploadResponse(path=path, error=error))
        return results

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        results = []
        for path in paths:
            try:
                out = self._run(["/bin/sh", "-c", _READ, "sh", self._path(path),
                                 str(self._max_file_bytes)])
            except SandboxError as exc:
                results.append(FileDownloadResponse(path=path, error=f"stockade: {exc}"))
                continue
            # Deep Agents has no error kind for size: the message names the limit, so
            # the model does not take a large file for one it may not read.
            if out.returncode == _TOO_BIG or out.truncated:
                results.append(FileDownloadResponse(path=path, error=(
                    f"stockade: the file is larger than {self._max_file_bytes} bytes, the most "
                    "this sandbox reads of one file (half its max_output_bytes); read part of "
                    "it with a command (head, sed -n, grep)")))
            elif out.returncode == 0:
                results.append(FileDownloadResponse(path=path, content=bytes(out.stdout)))
            else:
                error = {_NOT_FOUND: "file_not_found", _IS_DIR: "is_directory",
                         _NOT_REGULAR: _NOT_REGULAR_ERROR}.get(out.returncode,
                                                               "permission_denied")
                results.append(FileDownloadResponse(path=path, error=error))
        return results

    def close(self) -> None:
        """End the session: what it started, its /tmp, the ledger."""
        self._sandbox.close()

    def __enter__(self) -> StockadeSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _path(self, path: str) -> str:
        return path if os.path.isabs(path) else os.path.join(self.workspace, path)

    def _run(self, argv: list[str], *, stdin: bytes | None = None,
             timeout: float | None = None) -> Any:
        return self._sandbox.execute(SandboxCommand(
            argv[0], argv[1:], session_id=self._session, stdin=stdin, timeout=timeout))


def _text(out: Any) -> str:
    text: str = (out.stdout + out.stderr).decode("utf-8", "replace")
    if out.denial_hint:
        text += f"stockade: {out.denial_hint}\n"
    return text
