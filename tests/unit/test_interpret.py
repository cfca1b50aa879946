"""Reading a finished run (interpret.py): every branch, with no sandbox and no process."""

from __future__ import annotations

import pytest

from stockade.command import Neutralised
from stockade.drivers import MEMORY, PIDS, LaunchReport, StartFailure
from stockade.errors import CapabilityDenied, CommandTimeout, InvalidCommand, SandboxUnavailable
from stockade.interpret import (
    STARTED,
    RunContext,
    interpret,
    neutralised_hint,
    refusal,
    start,
)
from stockade.ledger import DENIED, ERROR, RAN, TIMED_OUT
from stockade.process import Outcome

READ_ONLY_FS = b"sh: 1: cannot create /etc/x: Read-only file system\n"


def _out(returncode: int = 0, stderr: bytes = b"", *, stdout: bytes = b"out",
         truncated: bool = False, timed_out: bool = False) -> Outcome:
    return Outcome(returncode, stdout, stderr, truncated, timed_out, 12.5)


def _context(**overrides: object) -> RunContext:
    values: dict[str, object] = dict(
        program="sh", mode="workspace-write", backend="bubblewrap", sandboxed=True,
        workspace="/w", cwd="/w/sub", profile=None, timeout=30.0)
    values.update(overrides)
    return RunContext(**values)  # type: ignore[arg-type]


def test_a_clean_run_is_returned_and_recorded_as_ran() -> None:
    report = LaunchReport()
    report.audit["landlock_abi"] = 5
    reading = interpret(_out(0, b"warn\n"), report, _context())
    out = reading.output
    assert reading.error is None and out is not None
    assert (out.exit_code, out.signal, out.stdout, out.stderr) == (0, None, b"out", b"warn\n")
    assert (out.backend, out.duration_ms, out.likely_sandbox_denied, out.denial_hint) == (
        "bubblewrap", 12.5, False, None)
    record = reading.record
    assert (record.outcome, record.exit_code, record.signal, record.denied, record.cwd) == (
        RAN, 0, None, False, "/w/sub")
    assert record.detail == {"landlock_abi": 5}


def test_nothing_to_say_records_no_detail() -> None:
    assert interpret(_out(), LaunchReport(), _context()).record.detail is None


def test_a_failed_start_raises_unavailable_not_the_commands_status() -> None:
    report = LaunchReport()
    report.start_failure = StartFailure("bubblewrap could not create a user namespace")
    reading = interpret(_out(1, b"bwrap: nope\n"), report, _context())
    assert reading.output is None
    assert isinstance(reading.error, SandboxUnavailable)
    assert str(reading.error) == "bubblewrap could not create a user namespace"
    record = reading.record
    assert (record.outcome, record.denied, record.exit_code, record.cwd) == (
        ERROR, False, None, None)
    assert record.detail == {"error": "bubblewrap could not create a user namespace"}


def test_limits_that_did_not_start_name_the_mechanisms_last_line() -> None:
    report = LaunchReport()
    report.start_failure = StartFailure("the scope did not start", stderr_says_why=True)
    stderr = b"Job for x.scope failed.\nFailed to start transient scope unit: Access denied\n"
    reading = interpret(_out(1, stderr), report, _context())
    assert str(reading.error) == (
        "the scope did not start (Failed to start transient scope unit: Access denied)")
    assert reading.record.detail == {"error": str(reading.error)}
    silent = interpret(_out(1, b"  \n"), report, _context())
    assert str(silent.error) == "the scope did not start"


def test_the_start_failure_wins_over_everything_the_run_printed() -> None:
    report = LaunchReport()
    report.start_failure = StartFailure("no boundary")
    report.limit_exceeded = MEMORY
    reading = interpret(_out(1, READ_ONLY_FS, timed_out=True), report, _context())
    assert isinstance(reading.error, SandboxUnavailable) and reading.output is None


def test_a_denial_gets_its_kind_and_a_hint_from_the_rule() -> None:
    reading = interpret(_out(2, READ_ONLY_FS), LaunchReport(), _context())
    out = reading.output
    assert out is not None and out.likely_sandbox_denied
    assert out.denial_hint and "/etc/x is outside the workspace" in out.denial_hint
    assert reading.record.denied and reading.record.outcome == RAN
    assert reading.record.detail == {"hint": out.denial_hint}


def test_the_drivers_own_words_come_first_and_are_asked_only_for_a_denial() -> None:
    asked: list[bytes] = []

    def explain(stderr: bytes) -> str:
        asked.append(stderr)
        return "landlock refused /etc/x"

    out = interpret(_out(2, READ_ONLY_FS), LaunchReport(), _context(explain=explain)).output
    assert out is not None and out.denial_hint == "landlock refused /etc/x"
    assert asked == [READ_ONLY_FS]
    asked.clear()
    interpret(_out(0, b"fine\n"), LaunchReport(), _context(explain=explain))
    assert asked == []


def test_an_unconfined_command_is_never_called_denied() -> None:
    reading = interpret(_out(2, READ_ONLY_FS), LaunchReport(),
                        _context(sandboxed=False, mode="full-access"))
    assert reading.output is not None and not reading.output.likely_sandbox_denied
    assert not reading.record.denied and reading.record.detail is None


def test_a_proxy_refusal_marks_a_command_that_looked_fine_denied() -> None:
    refused = ("other.example", 443, "not on the allow list")
    reading = interpret(_out(22, b"curl: (56) CONNECT tunnel failed, response 403\n"),
                        LaunchReport(), _context(proxy_refusal=refused))
    out = reading.output
    assert out is not None and out.likely_sandbox_denied
    assert out.denial_hint and "other.example" in out.denial_hint
    assert reading.record.denied


def test_the_boundarys_denial_wins_over_the_proxys() -> None:
    refused = ("other.example", 443, "not on the allow list")
    out = interpret(_out(2, READ_ONLY_FS), LaunchReport(),
                    _context(proxy_refusal=refused)).output
    assert out is not None and out.denial_hint and "other.example" not in out.denial_hint


def test_memory_limit_names_the_bound_in_force() -> None:
    report = LaunchReport()
    report.limit_exceeded = MEMORY
    report.audit["memory_mb"] = 512
    reading = interpret(_out(-9), report, _context(memory_mb=1024))
    out = reading.output
    assert out is not None and out.limit_exceeded == MEMORY and out.likely_sandbox_denied
    assert out.denial_hint == ("killed by the sandbox: out of memory (limit 512 MiB; "
                               "ask for a larger max_memory_mb)")
    assert out.signal == 9 and out.exit_code is None
    assert reading.record.detail is not None
    assert reading.record.detail["limit_exceeded"] == MEMORY
    assert not reading.record.denied  # a limit, not a rule, ended it
    del report.audit["memory_mb"]
    out = interpret(_out(-9), report, _context(memory_mb=1024)).output
    assert out is not None and out.denial_hint and "limit 1024 MiB" in out.denial_hint


def test_pids_limit_replaces_the_denials_hint() -> None:
    report = LaunchReport()
    report.limit_exceeded = PIDS
    reading = interpret(_out(1, b"sh: fork: Resource temporarily unavailable\n"), report,
                        _context())
    out = reading.output
    assert out is not None and out.limit_exceeded == PIDS and out.likely_sandbox_denied
    assert out.denial_hint == ("the sandbox refused more processes: the process limit "
                               "(max_pids) was reached")
    assert reading.record.detail is not None
    assert reading.record.detail["hint"] == out.denial_hint


def test_neutralised_metadata_is_told_to_the_model_and_recorded() -> None:
    report = LaunchReport()
    vscode = Neutralised("/w/.vscode", "moved to the quarantine", "/q/1")
    report.neutralised.append(vscode)
    reading = interpret(_out(2, READ_ONLY_FS), report, _context())
    out = reading.output
    assert out is not None and out.neutralised == (vscode,) and out.likely_sandbox_denied
    assert out.denial_hint is not None
    first, _, done = out.denial_hint.partition("; the sandbox neutralised")
    assert "/etc/x" in first and "/w/.vscode" in done
    assert reading.record.detail is not None
    assert reading.record.detail["neutralised"] == [vscode.to_json()]
    alone = interpret(_out(0), report, _context()).output
    assert alone is not None and alone.likely_sandbox_denied
    assert alone.denial_hint == neutralised_hint([vscode])


def test_a_timeout_is_recorded_then_raised_with_the_output() -> None:
    reading = interpret(_out(-9, timed_out=True), LaunchReport(), _context(timeout=2.5))
    assert reading.record.outcome == TIMED_OUT
    assert isinstance(reading.error, CommandTimeout)
    assert str(reading.error) == "sh ran past its 2.5 s timeout; its process tree was killed"
    assert reading.error.output is reading.output
    assert reading.output is not None and reading.output.timed_out


def test_truncation_and_warnings_go_in_the_record() -> None:
    reading = interpret(_out(0, truncated=True), LaunchReport(),
                        _context(warnings=("rate limit near",)))
    assert reading.output is not None and reading.output.truncated
    assert reading.record.detail == {"warnings": ["rate limit near"], "truncated": True}


def test_the_detail_keeps_its_order() -> None:
    report = LaunchReport()
    report.audit["seccomp"] = "on"
    report.limit_exceeded = PIDS
    report.neutralised.append(Neutralised("/w/.envrc", "removed"))
    reading = interpret(_out(1, truncated=True), report, _context(warnings=("w",)))
    assert reading.record.detail is not None
    assert list(reading.record.detail) == [
        "seccomp", "limit_exceeded", "neutralised", "warnings", "truncated", "hint"]


@pytest.mark.parametrize(("error", "outcome", "denied", "detail"), [
    (CapabilityDenied("network exceeds read-only"), DENIED, True,
     {"reason": "network exceeds read-only"}),
    (InvalidCommand("cwd is not a directory"), ERROR, False,
     {"error": "cwd is not a directory"}),
    (SandboxUnavailable("bwrap is missing"), ERROR, False, {"error": "bwrap is missing"}),
])
def test_a_command_that_did_not_run_is_recorded_as_refused(
        error: Exception, outcome: str, denied: bool, detail: dict[str, object]) -> None:
    record = refusal(error)  # type: ignore[arg-type]
    assert (record.outcome, record.denied, record.detail, record.cwd) == (
        outcome, denied, detail, None)


def test_a_background_start_records_what_the_driver_reported() -> None:
    report = LaunchReport()
    report.audit.update(start="warm", seccomp="on")
    assert start(report, ("w",)).detail == {"start": "warm", "seccomp": "on", "warnings": ["w"]}
    assert start(report, ()).outcome == STARTED
    assert start(LaunchReport(), ()).detail is None
