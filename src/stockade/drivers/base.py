"""The seam between the pipeline, which decides, and a driver, which confines.

Dependency-free on purpose: a driver for another platform (or another
machine) subclasses these without pulling in the Linux layers, and
`from stockade.drivers import Driver` works at run time, not only under a
type checker. What crosses the seam is typed: a `Profile` goes in, a
`Launch` comes out, the launch starts a `ProcessHandle`, and after the run
its `LaunchReport` says what the driver saw. The pipeline never parses a
driver's strings to learn what happened.
"""

from __future__ import annotations

from .handle import ProcessHandle as ProcessHandle

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, ClassVar

    from ..profile import Profile
    from .session import Session

#: `LaunchReport.limit_exceeded` values.
MEMORY = "memory"
PIDS = "pids"


class DriverOption:
    """A config key a backend reads: the registry's source for validation, CLI and help.

    Declared on the driver class, so a backend's settings are written next
    to the code that uses them and no list elsewhere can fall out of step.
    """

    __slots__ = ("default", "help", "key", "kind", "maximum")

    def __init__(self, key: str, kind: str, default: object, help: str, *,
                 maximum: float | None = None) -> None:
        self.key = key
        self.kind = kind  # "str", "int", "bool", "int?" (int or unset)
        self.default = default
        self.help = help
        #: The largest value a number may take (None: no bound).
        self.maximum = maximum


class StartFailure:
    """Why a command never ran: its boundary or its limits did not come up.

    Frozen: a report merged from an inner launch shares it. `stderr_says_why`
    means the run's stderr is the refusing mechanism's own (systemd-run's),
    whose last line is the reason's detail, never the command's output.
    """

    __slots__ = ("reason", "stderr_says_why")

    reason: str
    stderr_says_why: bool

    def __init__(self, reason: str, *, stderr_says_why: bool = False) -> None:
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "stderr_says_why", stderr_says_why)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"StartFailure is frozen: cannot set {name}")

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, StartFailure) and other.reason == self.reason
                and other.stderr_says_why == self.stderr_says_why)

    def __hash__(self) -> int:
        return hash((self.reason, self.stderr_says_why))

    def __repr__(self) -> str:
        return f"StartFailure({self.reason!r}, stderr_says_why={self.stderr_says_why})"

    def message(self, stderr: bytes) -> str:
        """The reason, with the mechanism's last line of stderr where it wrote one."""
        if not self.stderr_says_why:
            return self.reason
        lines = stderr.decode(errors="replace").strip().splitlines()
        return self.reason + (f" ({lines[-1]})" if lines else "")


class LaunchReport:
    """What the driver observed about one run, filled in by `Launch.cleanup()`.

    `limit_exceeded`: the resource limit that ended or starved the command
    (`MEMORY`, `PIDS`), or None. `start_failure`: the one place a driver
    says the command never ran because its boundary or limits did not come
    up (`Driver.finish` completes it from what the run printed); the
    pipeline reads no other channel for it. `removed`: paths the driver took
    away after the run (something planted where it must not stay);
    `neutralised`: what the metadata guard made inert or put back (objects
    with `to_json()` and `describe()`). `audit`: fields for the execution's
    audit record (the Landlock ABI in force, the limit mechanism, the tier
    that ran).
    """

    __slots__ = ("audit", "limit_exceeded", "neutralised", "removed", "sandbox_started",
                 "start_failure")

    def __init__(self) -> None:
        #: True once the driver knows the boundary came up (its init said so),
        #: False when it knows it did not, None when it cannot tell: only a
        #: start not known to have happened is explained from its stderr.
        self.sandbox_started: bool | None = None
        self.start_failure: StartFailure | None = None
        self.limit_exceeded: str | None = None
        self.removed: list[str] = []
        self.neutralised: list[Any] = []
        self.audit: dict[str, object] = {}

    def merge(self, other: LaunchReport) -> None:
        """Take in what a launch this one ran through saw (a parked sandbox's, a cold one's).

        Its `audit` is not merged: the outer launch took those fields when
        the inner one was chosen, and says which start it was.
        """
        self.limit_exceeded = self.limit_exceeded or other.limit_exceeded
        self.start_failure = self.start_failure or other.start_failure
        self.removed += other.removed
        self.neutralised += other.neutralised
        if self.sandbox_started is None:
            self.sandbox_started = other.sandbox_started


class Launch:
    """A prepared run: what to start, how, and what to undo after.

    The driver owns spawning: `start()` is POSIX `posix_spawn` of `argv`
    with `env` and `extra_fds` here, and a driver whose confinement cannot
    travel in an argv (a token, a job object) overrides it. `extra_fds`
    maps a child fd number to a parent fd to place there (the Linux drivers
    keep each at its own number). `cleanup()` runs once the process is
    gone, fills `report` and runs what the pipeline added with `also()`.
    """

    __slots__ = ("_cleanup", "argv", "cwd", "env", "extra_fds", "private", "report")

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str, *,
                 extra_fds: dict[int, int] | None = None,
                 cleanup: Callable[[Launch], None] | None = None) -> None:
        self.argv = argv
        self.env = env
        self.extra_fds = extra_fds or {}
        self.begin(cwd, cleanup)

    def begin(self, cwd: str, cleanup: Callable[[Launch], None] | None) -> None:
        """What every launch holds, whatever gives it its process: a subclass whose
        `argv`, `env` and `extra_fds` come from elsewhere calls this alone."""
        self.cwd = cwd
        self.report = LaunchReport()
        self._cleanup = cleanup
        #: Files the command writes as private copies, merged back once it ends
        #: (drivers/linux/host/gitconfig.py), or None.
        self.private: Any = None

    def start(self, *, stdin: int | None = None, capture: bool = True,
              new_session: bool = True, stdio: Mapping[int, int] | None = None
              ) -> ProcessHandle:
        """Spawn the confined process. `stdin`: an fd to inherit, or None for a pipe.

        `stdio` places parent fds on the child's 1 and 2 when they are not
        captured (a terminal, a pty, a pipe the caller copies on).
        """
        from ..process import Process

        fds = {**self.extra_fds, **stdio} if stdio else self.extra_fds
        return Process(self.argv, self.env, extra_fds=fds, stdin=stdin,
                       capture=capture, new_session=new_session)

    def also(self, undo: Callable[[], None]) -> None:
        """Run `undo` after the driver's own cleanup (the pipeline's resources)."""
        first = self._cleanup

        def both(launch: Launch) -> None:
            try:
                if first is not None:
                    first(launch)
            finally:
                undo()

        self._cleanup = both

    def cleanup(self) -> None:
        """Undo what was prepared, once; safe to call again."""
        cleanup, self._cleanup = self._cleanup, None
        if cleanup is not None:
            cleanup(self)


class Driver:
    """Turns a decided `Profile` into a confined process; never decides.

    Subclasses set `name` and `options`, build themselves from config with
    `from_config`, and implement `available` and `prepare`. The rest have
    safe defaults: a backend with no per-session state ignores the session
    hooks, and one whose failures need no translation explains nothing.
    """

    name: ClassVar[str] = ""
    #: The config keys this backend reads (see `DriverOption`).
    options: ClassVar[tuple[DriverOption, ...]] = ()

    @classmethod
    def from_config(cls, config: Any, *, env: Mapping[str, str], workspace: str,
                    state_dir: str, **overrides: Any) -> Driver:
        """This backend built from a `SandboxConfig`; `overrides` are test seams.

        Only the ones its class takes: the CLI's `probe=False` for a one-shot
        command reached `NoneDriver()`, which takes none, as a TypeError.
        """
        return cls(**accepted(cls, overrides))

    def auto_choice(self, min_abi: int) -> str:
        """The backend `auto` runs when this platform's native driver is this one.

        Itself, unless the driver knows a fallback for a machine it cannot
        use (bubblewrap: Landlock at `min_abi` or newer).
        """
        return self.name

    def available(self) -> None:
        """Raise `SandboxUnavailable` naming the missing piece and its fix."""
        raise NotImplementedError

    def prepare(self, argv: list[str], profile: Profile) -> Launch:
        """The confined launch for `argv` under `profile`; nothing has started yet."""
        raise NotImplementedError

    def repositories(self, workspace: str) -> tuple[str, ...]:
        """The person's git repositories beneath `workspace` that a look at fixed
        names does not find (a vendored clone): the pipeline holds them too.
        A backend that keeps no watch of the tree finds none."""
        return ()

    def matching(self, workspace: str, patterns: tuple[str, ...]) -> tuple[str, ...]:
        """The files beneath `workspace` that `unreadable`'s workspace `patterns`
        name (patterns.py), now. A backend without a watch of the tree walks it."""
        from ..patterns import Matcher, walk_matches

        return walk_matches(workspace, Matcher(patterns))

    def finish(self, launch: Launch, returncode: int, diagnostic: bytes) -> LaunchReport:
        """After the run and its cleanup: the launch's report, its `start_failure` set
        from `explain_failure` when the boundary is not known to have come up.

        The driver's own reading wins over a limit mechanism's refusal: the
        boundary is what failed first. `diagnostic` is what the run showed of
        its start (`Outcome.diagnostic`).
        """
        report = launch.report
        if report.sandbox_started is not True:
            why = self.explain_failure(returncode, diagnostic)
            if why:
                report.start_failure = StartFailure(why)
        return report

    def explain_failure(self, returncode: int, stderr: bytes) -> str | None:
        """After a run: the reason the *sandbox* failed to start, or None if the
        command ran. A message here becomes `SandboxUnavailable`, never a
        command's exit status an agent would read as its own."""
        return None

    def explain_denial(self, stderr: bytes) -> str | None:
        """This backend's own words for a refusal the generic hints would miss."""
        return None

    def explain_run(self, launch: Launch, stderr: bytes) -> str | None:
        """The hint for one run: `explain_denial`, unless the words depend on what
        this launch was given (a backend that names the rule reads it from its
        own `Launch` subclass)."""
        return self.explain_denial(stderr)

    def doctor(self) -> list[tuple[str, bool, str]]:
        """(check, passed, detail) rows for `stockade doctor`."""
        try:
            self.available()
        except Exception as exc:  # doctor reports, it does not raise
            return [(self.name, False, str(exc))]
        return [(self.name, True, "can build a sandbox here")]

    def open_session(self, session: Session) -> None:
        """A session begins: a backend may set up per-session state here, kept by
        `session` itself (the same object reaches it as `Profile.session`)."""

    def close_session(self, session: Session) -> None:
        """A session ends (`session.closed`): release whatever `open_session` or its runs kept."""

    def close(self) -> None:
        """The sandbox closes: release everything (after every `close_session`)."""


def accepted(cls: type, options: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of `options` that `cls.__init__` takes.

    Read from the code object rather than `inspect`, whose import costs
    more than the whole selection.
    """
    # The nearest __init__ written in Python (object's has no code object).
    code = next((c for k in cls.__mro__
                 if (c := getattr(vars(k).get("__init__"), "__code__", None)) is not None), None)
    if code is None:
        return {}
    takes = code.co_varnames[1:code.co_argcount + code.co_kwonlyargcount]
    return {k: v for k, v in options.items() if k in takes}
