"""Test seams for code that uses stockade: a fake driver, a fake approver, `MockSandbox`.

They exist so a harness can test its own tools against the `Sandbox` seam
without real subprocesses. Nothing here is used by stockade's product code.
"""

from __future__ import annotations

from .command import SandboxOutput
from .drivers import Driver, Launch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .approval import ApprovalRequest
    from .command import SandboxCommand
    from .profile import Profile


class FakeDriver(Driver):
    """Records every prepare and runs `argv` as given -- with NO boundary.

    Use it only to test decisions (approval, hooks, audit); never to test
    isolation. `available_error` makes `available()` fail like a missing bwrap.
    """

    name = "fake"

    def __init__(self, available_error: Exception | None = None) -> None:
        self.available_error = available_error
        self.prepared: list[tuple[list[str], Profile]] = []

    def available(self) -> None:
        if self.available_error is not None:
            raise self.available_error

    def prepare(self, argv: list[str], profile: Profile) -> Launch:
        from .process import chdir_argv

        self.prepared.append((list(argv), profile))
        return Launch(chdir_argv(profile.cwd, list(argv)), dict(profile.env),
                              profile.cwd)

    @property
    def runs(self) -> int:
        return len(self.prepared)


class FakeApprovalRequester:
    """Answers every request with `outcome` and remembers what it was asked."""

    def __init__(self, outcome: str = "approved-once") -> None:
        self.outcome = outcome
        self.requests: list[ApprovalRequest] = []

    def request(self, request: ApprovalRequest) -> str:
        self.requests.append(request)
        return self.outcome


class MockSandbox:
    """Records every `SandboxCommand` and returns a canned `SandboxOutput`."""

    def __init__(self, output: SandboxOutput | None = None) -> None:
        self.output = output or SandboxOutput(0, None, b"", b"", backend="mock")
        self.commands: list[SandboxCommand] = []

    async def execute(self, command: SandboxCommand) -> SandboxOutput:
        self.commands.append(command)
        return self.output
