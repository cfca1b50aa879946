"""Inspect: a sandbox environment provider `stockade`, for evals without Docker.

    inspect eval task.py --model mockllm/model --sandbox stockade

Registered through Inspect's extension mechanism (the `inspect_ai` entry
point in stockade's package metadata), so `--sandbox stockade` and
`sandbox="stockade"` find it once `stockade[inspect]` is installed. Each
sample gets a directory of its own under stockade's workspace root and a
stockade session bound to it (workspace-write, no network), removed when
Inspect cleans the sample up. `exec`, `write_file` and `read_file` are each
a sandboxed command with its ledger record; a path outside the sample's
directory is read-only, as for every stockade command, and a write there
fails with `PermissionError`. `user=` is refused: every command runs as
the person running the eval.

The sandbox config (`sandbox=("stockade", "path/to/stockade.toml")`) names
a stockade config file to use instead of the usual ones.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Literal, overload

try:
    from inspect_ai.util import (
        ExecResult,
        OutputLimitExceededError,
        SandboxEnvironment,
        SandboxEnvironmentConfigType,
        SandboxEnvironmentLimits,
        SandboxUnavailableError,
        SandboxUserUnsupportedError,
        sandboxenv,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "stockade.adapters.inspect_sandbox needs inspect-ai: pip install 'stockade[inspect]'"
    ) from exc

from ..command import SandboxCommand
from ..errors import CapabilityDenied, CommandTimeout, InvalidCommand, SandboxError

__all__ = ["StockadeSandboxEnvironment"]

#: What the file helpers exit with, for the exceptions Inspect expects.
_NOT_FOUND, _IS_DIR, _TOO_BIG, _NO_PERMISSION, _NOT_REGULAR = 2, 21, 27, 13, 22
#: Both run inside the sandbox, and both refuse what is not a regular file
#: before opening it: a FIFO opened there waits for a writer or reader that
#: never comes, and a device such as /dev/zero never ends.
_READ = ('[ -d "$1" ] && exit 21; [ -e "$1" ] || exit 2; [ -f "$1" ] || exit 22; '
         '[ -r "$1" ] || exit 13; [ "$(wc -c < "$1")" -gt "$2" ] && exit 27; exec cat -- "$1"')
_WRITE = ('[ -d "$1" ] && exit 21; [ -e "$1" ] && ! [ -f "$1" ] && exit 22; '
          'mkdir -p -- "$(dirname -- "$1")" || exit 13; cat > "$1" || exit 13')


@sandboxenv(name="stockade")
class StockadeSandboxEnvironment(SandboxEnvironment):
    """One sample's stockade session and directory."""

    def __init__(self, sandbox: Any, session: str, directory: str) -> None:
        super().__init__()
        self._sandbox = sandbox
        self._session = session
        self.directory = directory

    @classmethod
    async def sample_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                          metadata: dict[str, str]) -> dict[str, SandboxEnvironment]:
        from ..config import load_config
        from ..workspace import WorkspaceSandbox

        paths = [config] if isinstance(config, str) and config else None
        stock = load_config(paths=paths, mode="workspace-write",
                            max_output_bytes=2 * max(SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE,
                                                     SandboxEnvironmentLimits.MAX_READ_FILE_SIZE))
        root = stock.resolved_workspace_root(os.environ)
        os.makedirs(root, mode=0o700, exist_ok=True)
        directory = os.path.realpath(tempfile.mkdtemp(prefix="inspect-", dir=root))
        session = f"inspect-{os.path.basename(directory)}"
        sandbox = WorkspaceSandbox(stock)
        try:
            await sandbox.open_session(session, directory)
        except BaseException:
            await sandbox.aclose()
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return {"default": cls(sandbox, session, directory)}

    @classmethod
    async def sample_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                             environments: dict[str, SandboxEnvironment],
                             interrupted: bool) -> None:
        for env in environments.values():
            if isinstance(env, StockadeSandboxEnvironment):
                await env._close()

    async def _close(self) -> None:
        try:
            await self._sandbox.aclose()
        finally:
            # rmtree never follows a link the sample left: it removes the link.
            shutil.rmtree(self.directory, ignore_errors=True)

    async def exec(self, cmd: list[str], input: str | bytes | None = None,
                   cwd: str | None = None, env: dict[str, str] | None = None,
                   user: str | None = None, timeout: int | None = None,
                   timeout_retry: bool = True, concurrency: bool = True) -> ExecResult[str]:
        if user is not None:
            raise SandboxUserUnsupportedError(
                f"the stockade sandbox cannot run a command as {user!r}: every command runs "
                "as the person running the eval, and sudo cannot work inside it")
        if not cmd:
            raise ValueError("exec needs a command")
        stdin = input.encode() if isinstance(input, str) else input
        out = await self._run(cmd, stdin=stdin, cwd=cwd, env=env, timeout=timeout)
        if out.truncated:
            raise OutputLimitExceededError(
                f"{SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE} bytes",
                out.stdout.decode("utf-8", "replace"))
        stderr = out.stderr.decode("utf-8", "replace")
        if out.denial_hint:
            stderr += f"stockade: {out.denial_hint}\n"
        return ExecResult(success=out.returncode == 0, returncode=out.returncode,
                          stdout=out.stdout.decode("utf-8", "replace"), stderr=stderr)

    async def write_file(self, file: str, contents: str | bytes) -> None:
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        out = await self._run(["/bin/sh", "-c", _WRITE, "sh", self._path(file)], stdin=data)
        if out.returncode == _IS_DIR:
            raise IsADirectoryError(f"{file} is a directory")
        if out.returncode == _NOT_REGULAR:
            raise PermissionError(_not_regular(file, "write"))
        if out.returncode != 0:
            raise PermissionError(self._why(file, out, "write"))

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        limit = SandboxEnvironmentLimits.MAX_READ_FILE_SIZE
        out = await self._run(["/bin/sh", "-c", _READ, "sh", self._path(file), str(limit)])
        code = out.returncode
        if code == _NOT_FOUND:
            raise FileNotFoundError(f"{file} does not exist in the sandbox")
        if code == _IS_DIR:
            raise IsADirectoryError(f"{file} is a directory")
        if code == _NOT_REGULAR:
            raise PermissionError(_not_regular(file, "read"))
        if code == _TOO_BIG:
            raise OutputLimitExceededError(f"{limit} bytes", None)
        if code != 0:
            raise PermissionError(self._why(file, out, "read"))
        return out.stdout.decode("utf-8") if text else bytes(out.stdout)

    def default_polling_interval(self) -> float:
        return 0.2

    def _path(self, file: str) -> str:
        return file if os.path.isabs(file) else os.path.join(self.directory, file)

    @staticmethod
    def _why(file: str, out: Any, what: str) -> str:
        err = out.stderr.decode("utf-8", "replace").strip()
        hint = f"; stockade: {out.denial_hint}" if out.denial_hint else ""
        return f"cannot {what} {file} in the stockade sandbox: {err}{hint}"

    async def _run(self, argv: list[str], *, stdin: bytes | None = None,
                   cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout: float | None = None) -> Any:
        command = SandboxCommand(argv[0], argv[1:], session_id=self._session, stdin=stdin,
                                 cwd=cwd, env=env, timeout=timeout)
        try:
            return await self._sandbox.execute(command)
        except CommandTimeout as exc:
            raise TimeoutError(str(exc)) from exc
        except (CapabilityDenied, InvalidCommand) as exc:
            raise PermissionError(str(exc)) from exc
        except SandboxError as exc:
            # Never run without the boundary: the sample fails instead.
            raise SandboxUnavailableError(str(exc)) from exc


def _not_regular(file: str, what: str) -> str:
    return (f"cannot {what} {file} in the stockade sandbox: it is not a regular file "
            "(a FIFO, socket or device), and only regular files are read or written")
