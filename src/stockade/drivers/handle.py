"""`ProcessHandle`: a started confined process, the one thing every driver's launch returns.

Apart from base.py so that process.py, its POSIX implementation, subclasses
it without importing the module whose `Launch.start` imports process.py.
"""

from __future__ import annotations

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..process import Outcome, OutputMeter


class ProcessHandle:
    """A started confined process: what the shells drive, on any platform.

    `stdin_w`, `stdout_r` and `stderr_r` are pipe descriptors (-1 when not
    piped). `communicate` feeds, collects within budget and ends the tree at
    the deadline; `kill` ends the whole tree, not only the first process.
    """

    pid: int
    stdin_w: int
    stdout_r: int
    stderr_r: int
    returncode: int | None

    def communicate(self, stdin: bytes | None = None, *, timeout: float | None = None,
                    max_output: int = 1 << 20, cancelled: Callable[[], bool] | None = None,
                    meter: OutputMeter | None = None) -> Outcome:
        """`meter.bytes` counts the output read so far, for progress reports."""
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def kill_group_only(self) -> None:
        """After the first process exited: end what it left holding the pipes."""
        self.kill()

    def poll(self) -> int | None:
        raise NotImplementedError

    def wait(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError
