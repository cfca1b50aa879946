"""`SandboxCommand` in, `SandboxOutput` out: the values that cross the `Sandbox` seam."""

from __future__ import annotations

from .errors import InvalidCommand

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from .capabilities import SandboxCapabilities

#: A command line longer than this is refused before anything runs: the kernel's
#: own ARG_MAX is 2 MiB, and a request near it is a bug or an attack.
MAX_ARGV_BYTES = 1 << 20

# SandboxablePreference (Codex): Auto lets the mode decide, Require always
# confines, Forbid asks to run with no boundary -- which is a request for
# full-access and goes through approval like any other elevation.
AUTO = "auto"
REQUIRE = "require"
FORBID = "forbid"
PREFERENCES = (AUTO, REQUIRE, FORBID)


def _check_text(value: str, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidCommand(f"{what} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise InvalidCommand(f"{what} contains a NUL byte: {value[:80]!r}")
    return value


class SandboxCommand:
    """One command to run: argv (never a shell string unless you pass `sh -c`)."""

    __slots__ = ("args", "capabilities", "cwd", "env", "preference", "program",
                 "publish", "session_id", "stdin", "timeout")

    def __init__(
        self,
        program: str,
        args: Sequence[str] = (),
        *,
        session_id: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        cwd: str | None = None,
        capabilities: SandboxCapabilities | None = None,
        timeout: float | None = None,
        preference: str = AUTO,
        publish: Sequence[str | tuple[str, int, int]] = (),
    ) -> None:
        self.program = _check_text(program, "program")
        if not program:
            raise InvalidCommand("program is empty")
        self.args = tuple(_check_text(a, "argument") for a in args)
        size = len(program) + sum(len(a) + 1 for a in self.args)
        if size > MAX_ARGV_BYTES:
            raise InvalidCommand(
                f"command line is {size} bytes, over the {MAX_ARGV_BYTES}-byte limit; "
                "pass large input on stdin instead"
            )
        self.session_id = session_id
        self.env = dict(env) if env else {}
        for key, value in self.env.items():
            _check_text(key, "environment name")
            _check_text(value, f"environment value of {key}")
            if not key or "=" in key:
                raise InvalidCommand(f"invalid environment variable name {key!r}")
        if stdin is not None and not isinstance(stdin, bytes | bytearray | memoryview):
            raise InvalidCommand("stdin must be bytes")
        self.stdin = bytes(stdin) if stdin is not None else None
        self.cwd = _check_text(cwd, "cwd") if cwd is not None else None
        self.capabilities = capabilities
        if timeout is not None and not timeout > 0:
            raise InvalidCommand(f"timeout must be positive, got {timeout}")
        self.timeout = timeout
        if preference not in PREFERENCES:
            raise InvalidCommand(
                f"unknown sandbox preference {preference!r}: choose {', '.join(PREFERENCES)}"
            )
        self.preference = preference
        #: `[HOST_ADDR:]PORT[:SANDBOX_PORT]` forwards, parsed (publish.py):
        #: (host address, host port, sandbox port), for this command's run.
        self.publish: tuple[tuple[str, int, int], ...] = ()
        if publish:
            from .publish import parse_all

            if isinstance(publish, str):
                publish = [publish]
            self.publish = parse_all(publish)

    @property
    def argv(self) -> list[str]:
        return [self.program, *self.args]

    def __repr__(self) -> str:
        return f"SandboxCommand({self.argv!r}, session_id={self.session_id!r}, cwd={self.cwd!r})"


class Neutralised:
    """Something the command did that the sandbox undid once it saw it: the path, what
    was done to it, and where the command's version went (the quarantine), if anywhere.

    No sandbox can refuse the creation of one name in a directory the command may
    write (a mount needs a placeholder in the person's tree; Landlock and seccomp
    cannot name a file that does not exist), so a `mkdir .vscode` succeeds and the
    guard takes it away a few milliseconds later: the command may well exit 0.
    """

    __slots__ = ("moved_to", "path", "what")

    def __init__(self, path: str, what: str, moved_to: str = "") -> None:
        self.path = path
        self.what = what
        self.moved_to = moved_to

    #: How a git config's merge back begins: the keys it left out follow, comma-separated.
    DROPPED = "restored, but for the command's changes git does not act on: dropped "

    @classmethod
    def dropped(cls, path: str, keys: list[str], moved_to: str = "") -> Neutralised:
        return cls(path, cls.DROPPED + ", ".join(keys), moved_to)

    def to_json(self) -> dict[str, str]:
        out = {"path": self.path, "what": self.what}
        if self.moved_to:
            out["moved_to"] = self.moved_to
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Neutralised) and (self.path, self.what, self.moved_to) == (
            other.path, other.what, other.moved_to)

    def __hash__(self) -> int:
        return hash((self.path, self.what, self.moved_to))

    def __repr__(self) -> str:
        return f"Neutralised({self.path!r}, {self.what!r}, {self.moved_to!r})"


class SandboxOutput:
    """What came back. `likely_sandbox_denied` says the boundary, not the command, failed it.

    `neutralised` is not empty when the sandbox undid part of what the command
    did (a protected name it created, moved to the quarantine; keys removed
    from a git config it wrote): its exit status says nothing about that.
    """

    __slots__ = ("backend", "denial_hint", "duration_ms", "exit_code", "likely_sandbox_denied",
                 "limit_exceeded", "neutralised", "signal", "stderr", "stdout", "timed_out",
                 "truncated")

    def __init__(
        self,
        exit_code: int | None,
        signal: int | None,
        stdout: bytes,
        stderr: bytes,
        *,
        truncated: bool = False,
        duration_ms: float = 0.0,
        likely_sandbox_denied: bool = False,
        denial_hint: str | None = None,
        backend: str = "",
        limit_exceeded: str | None = None,
        timed_out: bool = False,
        neutralised: tuple[Neutralised, ...] = (),
    ) -> None:
        self.exit_code = exit_code
        self.signal = signal
        self.stdout = stdout
        self.stderr = stderr
        self.truncated = truncated
        self.duration_ms = duration_ms
        self.likely_sandbox_denied = likely_sandbox_denied
        self.denial_hint = denial_hint
        self.backend = backend
        #: "memory" or "pids" when a resource limit, not the command, ended it.
        self.limit_exceeded = limit_exceeded
        #: True on the output a `CommandTimeout` carries: the deadline ended it.
        self.timed_out = timed_out
        #: What the sandbox undid of the command's work (see `Neutralised`).
        self.neutralised = tuple(neutralised)

    @property
    def returncode(self) -> int:
        """A shell's reading: the exit code, or 128 + the signal that killed it."""
        if self.exit_code is not None:
            return self.exit_code
        return 128 + (self.signal or 0)

    def to_json(self) -> dict[str, object]:
        return {
            "exit_code": self.exit_code,
            "signal": self.signal,
            "stdout": self.stdout.decode("utf-8", "replace"),
            "stderr": self.stderr.decode("utf-8", "replace"),
            "truncated": self.truncated,
            "duration_ms": round(self.duration_ms, 3),
            "likely_sandbox_denied": self.likely_sandbox_denied,
            "denial_hint": self.denial_hint,
            "backend": self.backend,
            "limit_exceeded": self.limit_exceeded,
            "timed_out": self.timed_out,
            "neutralised": [n.to_json() for n in self.neutralised],
        }

    def __repr__(self) -> str:
        return (
            f"SandboxOutput(exit_code={self.exit_code}, signal={self.signal}, "
            f"stdout={self.stdout[:60]!r}, stderr={self.stderr[:60]!r}, "
            f"truncated={self.truncated}, denied={self.likely_sandbox_denied})"
        )
