"""Everything `stockade.cluster` needs from the rest of stockade, in one place.

The pool and the node actor speak only through these functions, so a change
in how the local sandbox is built (its options, its ledger, its effect loop)
is a change here and nowhere else in the package. What is used is the public
surface: `SyncWorkspaceSandbox`, `ApprovalGate` and its requester seam,
`Ledger.record`, the typed errors; and, for a command the caller may cancel,
the pipeline's own drive loop with a performer that can stop it
(`execute_stoppable`).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from ..approval import DENIED, TIMEOUT, ApprovalGate
from ..command import REQUIRE, SandboxCommand
from ..drivers.registry import declared
from ..errors import CapabilityDenied, SandboxError, SandboxUnavailable
from ..ledger import Ledger
from ..sync import SyncWorkspaceSandbox
from .routing import Cancelled

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ..approval import ApprovalRequest
    from ..command import SandboxOutput
    from ..config import SandboxConfig
    from ..core import Run
    from ..process import Outcome

__all__ = [
    "DENIED",
    "TIMEOUT",
    "ApprovalGate",
    "Cancelled",
    "CapabilityDenied",
    "CollectingLedger",
    "SandboxCommand",
    "SandboxError",
    "SandboxUnavailable",
    "SyncWorkspaceSandbox",
    "build_node_sandbox",
    "caller_ledger",
    "execute_stoppable",
    "probe_boundary",
    "write_records",
]

#: Seconds between two looks at a cancellation while a person is asked.
_STOP_POLL = 0.1

#: (kind, record): kind is "execute" or "network", record the keywords of
#: `Ledger.record` / `Ledger.record_network`.
Record = tuple[str, dict[str, object]]


class CollectingLedger(Ledger):
    """A ledger that keeps records for the caller instead of writing a file on the node.

    A node's own SQLite file would be an audit trail nobody reads: the person
    runs `stockade audit` where the agent runs, so the records travel there.
    """

    def __init__(self) -> None:
        super().__init__(None)
        self._pending: list[Record] = []
        self._pending_lock = threading.Lock()

    def record(self, **rec: object) -> None:
        import time

        from ..ledger import redacted

        # Redacted here too: the record crosses the network to the caller.
        rec = redacted(rec)
        rec.setdefault("ts", time.time())
        with self._pending_lock:
            self._pending.append(("execute", rec))

    def record_network(self, **rec: object) -> None:
        import time

        rec.setdefault("ts", time.time())
        with self._pending_lock:
            self._pending.append(("network", rec))

    def drain(self) -> list[Record]:
        with self._pending_lock:
            out, self._pending = self._pending, []
        return out


def build_node_sandbox(config: SandboxConfig, env: Mapping[str, str],
                       requester: object | None, approval_timeout: float,
                       ledger: CollectingLedger) -> SyncWorkspaceSandbox:
    """The node's local sandbox: the caller's config, this node's backend, the caller's
    approver behind `requester`, records kept for the caller."""
    gate = ApprovalGate(requester, timeout_secs=approval_timeout)  # type: ignore[arg-type]
    return SyncWorkspaceSandbox(config, approval=gate, env=dict(env), ledger=ledger)


def execute_stoppable(sandbox: SyncWorkspaceSandbox, command: SandboxCommand,
                      stop: threading.Event) -> SandboxOutput:
    """`sandbox.execute(command)`, which `stop` ends: the command's whole tree is killed
    and `Cancelled` raised, as a cancelled local `WorkspaceSandbox.execute` kills its
    tree and raises `CancelledError`.

    Without it a caller that gave up on a node's command left it running
    there to the end of its timeout: the node's thread blocks in the
    process's supervision loop and nothing else holds the process. Nothing
    is recorded for it, as locally: the pipeline is abandoned mid-effect.
    """
    def perform(run: Run) -> Outcome:
        cut: list[bool] = []

        def cancelled() -> bool:
            if stop.is_set():
                cut.append(True)
            return bool(cut)

        launch = run.launch
        try:
            if stop.is_set():  # cancelled while the pipeline decided: never start it
                raise Cancelled("cancelled before it started")
            proc = launch.start()
            outcome = proc.communicate(run.stdin, timeout=run.timeout,
                                       max_output=run.max_output, cancelled=cancelled)
        finally:
            launch.cleanup()
        if cut:  # a command that ended by itself first keeps its result and its record
            raise Cancelled("cancelled; its process tree was killed")
        return outcome

    return sandbox.execute_with(command, perform)


def probe_boundary(sandbox: SyncWorkspaceSandbox, session_id: str) -> str:
    """The backend that confined a trivial command here; SandboxUnavailable if none can.

    A real command rather than a look at the doctor's table: the table says
    a backend should work, the probe that it does on this node, as this user.
    """
    try:
        out = sandbox.execute(SandboxCommand("/bin/true", session_id=session_id,
                                             preference=REQUIRE))
    finally:
        sandbox.close_session(session_id)
    if out.exit_code != 0 or not out.backend or not declared(out.backend).confines:
        raise SandboxUnavailable(
            f"the boundary probe did not run confined (backend {out.backend!r}, exit "
            f"{out.exit_code}, stderr {out.stderr[-200:]!r})")
    return out.backend


def doctor_summary() -> str:
    """One line: each backend and why it cannot run here, as `stockade doctor` says."""
    try:
        from ..doctor import backend_status

        parts = []
        for name, entry in backend_status().items():
            if not declared(name).confines:
                continue
            parts.append(f"{name}: " + ("ok" if entry.get("available")
                                        else str(entry.get("why") or "unavailable")))
        return "; ".join(parts)
    except Exception as exc:  # the probe's own error is the report; this is colour
        return f"doctor failed: {exc}"


def caller_ledger(config: SandboxConfig, ledger: Ledger | str | None) -> Ledger:
    """The ledger `stockade audit` reads on the caller's machine, unless one is given."""
    if isinstance(ledger, Ledger):
        return ledger
    if isinstance(ledger, str):
        return Ledger(ledger)
    return Ledger(config.ledger_path(os.environ))


def write_records(ledger: Ledger, node_id: str, records: list[Record]) -> None:
    """Append a node's records to the caller's ledger, each naming its node.

    Network records too: a fleet's proxy decisions without a node are a list
    of hosts some machine reached, and the person reading `stockade audit
    --network` could not tell which node's proxy let a connection through.
    """
    for kind, rec in records:
        detail = rec.get("detail")
        merged: dict[str, Any] = dict(detail) if isinstance(detail, dict) else {}
        merged["node"] = node_id
        if kind == "network":
            ledger.record_network(**{**rec, "detail": merged})
        else:
            ledger.record(**{**rec, "detail": merged})


def lost_record(ledger: Ledger, node_id: str, command: SandboxCommand, message: str) -> None:
    """The caller's own record of a command whose node went away under it."""
    import time

    ledger.record(session=command.session_id or "", program=command.program,
                  argv=command.argv, cwd=command.cwd, mode="unknown", capabilities=None,
                  backend="unknown", exit_code=None, signal=None, duration_ms=None,
                  denied=False, outcome="error", ts=time.time(),
                  detail={"node": node_id, "error": message})


def call_requester(requester: Any, request: ApprovalRequest, timeout: float,
                   submit: Callable[[Any], Any] | None,
                   stop: threading.Event | None = None) -> str:
    """The caller's requester, bounded by the gate's timeout: silence is a timeout.

    `submit` runs an awaitable the requester returned on the caller's event
    loop (an async requester is usually bound to it); without one it gets a
    loop of its own. `stop` set (the command was cancelled) ends the wait
    with `Cancelled`: a cancelled `aexecute` must not hold its thread and
    its node's place until a person who is no longer asked answers.
    """
    box: dict[str, object] = {}
    done = threading.Event()

    def ask() -> None:
        try:
            result = requester.request(request)
            if not isinstance(result, str) and result is not None:
                if submit is not None:
                    result = submit(result)
                else:
                    import asyncio

                    async def wait() -> object:
                        return await result

                    result = asyncio.run(wait())
            box["result"] = result
        except BaseException as exc:  # re-raised in the caller's thread below
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=ask, name="stockade-cluster-approval", daemon=True).start()
    import time

    deadline = time.monotonic() + timeout
    while not done.wait(max(0.0, min(_STOP_POLL, deadline - time.monotonic()))):
        if stop is not None and stop.is_set():
            raise Cancelled("cancelled while its approval was asked")
        if time.monotonic() >= deadline:
            return TIMEOUT
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return str(box.get("result") or DENIED)
