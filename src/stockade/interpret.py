"""Reading a finished run: what the agent is told, what is raised, what is recorded.

Pure: `interpret` takes the run's raw facts (`Outcome`), what the driver saw
(`LaunchReport`) and what the pipeline decided (`RunContext`) and returns a
`Reading`; nothing here touches a process, a driver or the ledger, so every
branch is tested without a sandbox (tests/unit/test_interpret.py). The
pipeline decides and runs; this module is the only place a run is read.
"""

from __future__ import annotations

from .command import Neutralised, SandboxOutput
from .denial import denial_hint, likely_sandbox_denied, proxy_hint
from .drivers import MEMORY, PIDS
from .errors import CapabilityDenied, CommandTimeout, SandboxUnavailable
from .ledger import DENIED, ERROR, RAN, TIMED_OUT

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable

    from .drivers import LaunchReport
    from .errors import SandboxError
    from .process import Outcome
    from .profile import Profile

#: The ledger outcome of a background command's start (it has no end yet).
STARTED = "started"


def _no_words(stderr: bytes) -> str | None:
    return None


class RunContext:
    """What the pipeline decided that reading the run needs.

    `explain`: the driver's own words for a refusal in this launch's stderr
    (`Driver.explain_run`), asked only when the run looks denied.
    `proxy_refusal`: the proxy's first refusal for this command's key
    (host, port, reason), or None.
    """

    __slots__ = ("backend", "cwd", "explain", "memory_mb", "mode", "profile", "program",
                 "proxy_refusal", "sandboxed", "timeout", "warnings", "workspace")

    def __init__(self, *, program: str, mode: str, backend: str, sandboxed: bool,
                 workspace: str, cwd: str, profile: Profile | None, timeout: float,
                 memory_mb: int | None = None, warnings: tuple[str, ...] = (),
                 proxy_refusal: tuple[str, int | None, str] | None = None,
                 explain: Callable[[bytes], str | None] = _no_words) -> None:
        self.program = program
        self.mode = mode
        self.backend = backend
        self.sandboxed = sandboxed
        self.workspace = workspace
        self.cwd = cwd
        self.profile = profile
        self.timeout = timeout
        self.memory_mb = memory_mb
        self.warnings = tuple(warnings)
        self.proxy_refusal = proxy_refusal
        self.explain = explain


class Record:
    """The fields of a command's audit record that its end decides.

    The rest (session, argv, mode, capabilities, backend, duration) are the
    pipeline's; `cwd` None means the session's directory, for a command
    refused before its own was known.
    """

    __slots__ = ("cwd", "denied", "detail", "exit_code", "outcome", "signal")

    def __init__(self, outcome: str, *, detail: dict[str, object] | None = None,
                 denied: bool = False, exit_code: int | None = None,
                 signal: int | None = None, cwd: str | None = None) -> None:
        self.outcome = outcome
        self.detail = detail
        self.denied = denied
        self.exit_code = exit_code
        self.signal = signal
        self.cwd = cwd


class Reading:
    """A run read: the output for the caller, the record, and the error to raise
    after recording it (None: return `output`)."""

    __slots__ = ("error", "output", "record")

    def __init__(self, output: SandboxOutput | None, record: Record,
                 error: SandboxError | None = None) -> None:
        self.output = output
        self.record = record
        self.error = error


def refusal(error: SandboxError) -> Record:
    """The record of a command that did not run: refused by a rule, or unable to."""
    if isinstance(error, CapabilityDenied):
        return Record(DENIED, denied=True, detail={"reason": error.reason})
    return Record(ERROR, detail={"error": str(error)})


def cut_short(error: BaseException) -> Record:
    """The record of a run that ended with stockade, not with the command (a
    SIGTERM to the CLI, Ctrl-C, a cancelled task, a fault of its own): it
    had a start record, and an end is what tells a reader it is over."""
    what = type(error).__name__ + (f": {error}" if str(error) else "")
    return Record(ERROR, detail={
        "error": f"the run ended with stockade, before the command ({what})"})


def start(report: LaunchReport, warnings: tuple[str, ...]) -> Record:
    """The record of a background start: what the driver reported as it began
    (warm or cold, Landlock ABI, seccomp, limits), as a finished run's says."""
    detail: dict[str, object] = dict(report.audit)
    if warnings:
        detail["warnings"] = list(warnings)
    return Record(STARTED, detail=detail or None)


def interpret(out: Outcome, report: LaunchReport, context: RunContext) -> Reading:
    """The run read once: a start that failed, a denial and its hint, a limit hit,
    what the guard neutralised, a timeout."""
    if report.start_failure is not None:
        # The boundary never came up, so the command never ran: its exit
        # status would tell the agent something about its own command.
        error = SandboxUnavailable(report.start_failure.message(out.stderr))
        return Reading(None, refusal(error), error)
    kind, hint = _denial(out, context)
    limit = report.limit_exceeded
    if limit == MEMORY:
        bound = report.audit.get("memory_mb") or context.memory_mb
        hint = (f"killed by the sandbox: out of memory (limit {bound} MiB; "
                "ask for a larger max_memory_mb)")
    elif limit == PIDS:
        hint = "the sandbox refused more processes: the process limit (max_pids) was reached"
    output = SandboxOutput(
        out.exit_code, out.signal, out.stdout, out.stderr,
        truncated=out.truncated, duration_ms=out.duration_ms,
        likely_sandbox_denied=kind is not None or limit is not None,
        denial_hint=hint, backend=context.backend, limit_exceeded=limit,
        timed_out=out.timed_out,
    )
    if report.neutralised:
        # Reported where the caller looks: the model learns why its file
        # is gone, the person where to find it.
        done = neutralised_hint(report.neutralised)
        output.denial_hint = f"{output.denial_hint}; {done}" if output.denial_hint else done
        output.likely_sandbox_denied = True
        output.neutralised = tuple(report.neutralised)
    record = Record(TIMED_OUT if out.timed_out else RAN, exit_code=out.exit_code,
                    signal=out.signal, denied=kind is not None, cwd=context.cwd,
                    detail=_detail(out, report, context, output) or None)
    if out.timed_out:
        return Reading(output, record, CommandTimeout(
            f"{context.program} ran past its {context.timeout:g} s timeout; its process "
            "tree was killed", output=output))
    return Reading(output, record)


def _denial(out: Outcome, context: RunContext) -> tuple[str | None, str | None]:
    """(the kind of denial, its hint): the boundary's, else the proxy's."""
    # The profile the command ran with names the rule: what it hides, whether
    # it may fork, what its network is (stderr alone only names the call).
    kind = likely_sandbox_denied(out.exit_code, out.signal, out.stderr,
                                 sandboxed=context.sandboxed, profile=context.profile)
    if kind:
        # The backend's own words first: it knows which of its rules refused.
        return kind, (context.explain(out.stderr)
                      or denial_hint(kind, out.stderr, context.mode,
                                     workspace=context.workspace, cwd=context.cwd,
                                     profile=context.profile))
    if context.proxy_refusal:
        # The proxy saw it first: the client's own error ("403", "tunnel
        # failed") rarely reads as a denial, and it names no rule.
        return "proxy", proxy_hint(*context.proxy_refusal)
    return None, None


def _detail(out: Outcome, report: LaunchReport, context: RunContext,
            output: SandboxOutput) -> dict[str, object]:
    detail: dict[str, object] = dict(report.audit)
    if output.limit_exceeded:
        detail["limit_exceeded"] = output.limit_exceeded
    if report.neutralised:
        detail["neutralised"] = [n.to_json() for n in report.neutralised]
    if context.warnings:
        detail["warnings"] = list(context.warnings)
    if out.truncated:
        detail["truncated"] = True
    if output.denial_hint:
        detail["hint"] = output.denial_hint
    return detail


def neutralised_hint(done: list[Neutralised]) -> str:
    """One line for the model: what the guard made inert after the run, and why.

    The keys one config lost over several merges during the run are named
    together, so that they are not cut off behind "and N more".
    """
    items: list[Neutralised] = []
    merges: dict[str, Neutralised] = {}
    for item in done:
        first = merges.get(item.path)
        if not item.what.startswith(Neutralised.DROPPED):
            items.append(item)
        elif first is None:
            merges[item.path] = Neutralised(item.path, item.what, item.moved_to)
            items.append(merges[item.path])
        else:
            keys = first.what[len(Neutralised.DROPPED):].split(", ")
            keys += [k for k in item.what[len(Neutralised.DROPPED):].split(", ")
                     if k not in keys]
            first.what = Neutralised.DROPPED + ", ".join(keys)
            first.moved_to = item.moved_to or first.moved_to
    parts = []
    for item in items[:4]:
        where = f" (moved to {item.moved_to})" if item.moved_to else ""
        parts.append(f"{item.path}: {item.what}{where}")
    more = f"; and {len(items) - 4} more (see stockade audit)" if len(items) > 4 else ""
    return ("the sandbox neutralised what the command left for the host to run -- "
            + "; ".join(parts) + more)
