"""The node actor: one per Ray node, holding that node's local sandbox.

A command runs in a thread of its own on the node, so that it can stop
half-way through the pipeline to ask the caller for an approval: `begin`
returns the first thing the caller must know (an approval to ask, or the
result), `answer` carries the caller's decision back and returns the next.
The approval is never decided here; this side only waits for it, bounded, so
a caller that vanished turns into a timeout and not a thread held forever.
`cancel` is the caller giving up (a cancelled `aexecute`): the command's
tree is killed here, wherever the command has got to.
"""

from __future__ import annotations

import copy
import os
import queue
import shutil
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any

from . import _local

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..approval import ApprovalRequest
    from ..config import SandboxConfig

#: Event kinds a `begin`/`answer` call returns.
APPROVE = "approve"
DONE = "done"
ERROR = "error"

#: Beyond the caller's own timeout: the caller answers TIMEOUT itself when its
#: person is silent; this bound only covers a caller that is gone.
_ANSWER_SLACK = 30.0

#: How long `cancel` waits for the command's thread to have killed its tree.
_CANCEL_WAIT = 20.0

#: A cancel for a ticket this node has not seen is kept this long: its `begin`
#: may still be on the way (a threaded actor runs calls in no fixed order), or
#: it finished before the cancel came and the entry is never used.
_EARLY_CANCEL_TTL = 600.0

#: Put in a ticket's inbox by `cancel`: no approval is coming.
_CANCELLED = "\0cancelled"


class _Ticket:
    __slots__ = ("finished", "inbox", "outbox", "stop")

    def __init__(self) -> None:
        self.outbox: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.inbox: queue.Queue[str] = queue.Queue()
        self.stop = threading.Event()
        self.finished = threading.Event()


class _CallerRequester:
    """Approval requester of the node's gate: forwards to the caller, waits for the answer."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.current = threading.local()

    def request(self, request: ApprovalRequest) -> str:
        ticket: _Ticket | None = getattr(self.current, "ticket", None)
        if ticket is None:  # a command not started by `begin`: nobody to ask
            return _local.DENIED
        if ticket.stop.is_set():
            raise _local.Cancelled("cancelled before its approval was asked")
        ticket.outbox.put((APPROVE, request))
        try:
            answer = ticket.inbox.get(timeout=self.timeout + _ANSWER_SLACK)
        except queue.Empty:
            return _local.TIMEOUT
        if answer == _CANCELLED:
            # Not a denial: nobody said no, and a "was denied" record would say so.
            raise _local.Cancelled("cancelled while its approval was asked")
        return answer


class NodeActor:
    """Ray actor body; `stockade.cluster.pool` wraps it with `ray.remote`."""

    def __init__(self, config: SandboxConfig, env: Mapping[str, str] | None,
                 approvals: bool, approval_timeout: float, node_id: str) -> None:
        self.node_id = node_id
        # Workspaces and stockade's state on this node live under one root the
        # actor made, so shutdown can prove it left nothing: a crash leaves it
        # for the operator to see, named by its prefix and the node's id.
        self.root = tempfile.mkdtemp(prefix=f"stockade-node-{node_id[:12]}-")
        host_env = dict(os.environ)
        host_env.update(env or {})
        host_env.setdefault("XDG_DATA_HOME", os.path.join(self.root, "data"))
        host_env.setdefault("XDG_STATE_HOME", os.path.join(self.root, "state"))
        if not config.workspace_root:
            # Named here, not left to XDG_DATA_HOME: a node whose environment
            # sets it kept every workspace in its own data directory, outside
            # the root shutdown removes, for the next pool to find.
            config = copy.copy(config)
            config.workspace_root = os.path.join(self.root, "workspaces")
        self.ledger = _local.CollectingLedger()
        self.requester = _CallerRequester(approval_timeout) if approvals else None
        self.sandbox = _local.build_node_sandbox(config, host_env, self.requester,
                                                 approval_timeout, self.ledger)
        self.tickets: dict[str, _Ticket] = {}
        self.early_cancels: dict[str, float] = {}
        self.procs: dict[str, Any] = {}
        self.sessions: dict[str, str] = {}
        self.lock = threading.Lock()
        self.closed = False

    # -- health ------------------------------------------------------------------

    def ready(self) -> dict[str, object]:
        """Whether this node can confine a command, with which backend, or why not."""
        report: dict[str, object] = {"node_id": self.node_id, "pid": os.getpid(),
                                     "root": self.root}
        try:
            # A name no caller's session can have: the probe closes what it opens.
            probe = f"stockade-node-probe-{os.urandom(8).hex()}"
            report["backend"] = _local.probe_boundary(self.sandbox, probe)
            report["ok"] = True
        except _local.SandboxError as exc:
            report["ok"] = False
            report["why"] = f"{exc} ({_local.doctor_summary()})"
        self.ledger.drain()  # the probe is the pool's business, not the audit trail's
        return report

    # -- sessions ----------------------------------------------------------------

    def open(self, session_id: str, files: Mapping[str, bytes] | None,
             tarball: bytes | None) -> dict[str, object]:
        try:
            ws = self.sandbox.open_session(session_id)
            if files:
                from .workspace_io import write_files

                write_files(ws.cwd, files)
            if tarball:
                from .workspace_io import extract_tarball

                extract_tarball(ws.cwd, tarball)
        except _local.SandboxError as exc:
            return {"error": exc}
        self.sessions[session_id] = ws.cwd
        return {"cwd": ws.cwd}

    def read_files(self, session_id: str, paths: list[str]) -> dict[str, object]:
        from .workspace_io import read_files

        try:
            return {"files": read_files(self._cwd(session_id), paths)}
        except _local.SandboxError as exc:
            return {"error": exc}

    def export(self, session_id: str) -> dict[str, object]:
        from .workspace_io import make_tarball

        try:
            return {"tarball": make_tarball(self._cwd(session_id))}
        except _local.SandboxError as exc:
            return {"error": exc}

    def _cwd(self, session_id: str) -> str:
        cwd = self.sessions.get(session_id)
        if cwd is None:
            raise _local.SandboxUnavailable(f"session {session_id!r} is not open on this node")
        return cwd

    def close_session(self, session_id: str) -> list[_local.Record]:
        """Stop the session's processes and remove its workspace with it.

        The workspace is the session's and goes with it: kept, a later
        session given the same id got the closed one's files back (the
        workspace is named after the id), whatever a command had left there.
        """
        with self.lock:
            for key in [k for k, p in self.procs.items() if p[0] == session_id]:
                self.procs.pop(key)
        ws = self.sandbox.find_session(session_id)
        self.sandbox.close_session(session_id)
        self.sessions.pop(session_id, None)
        if ws is not None and ws.provisioned:
            from ..drivers.owned import remove_owned

            remove_owned(ws.cwd)
        return self.ledger.drain()

    # -- commands ----------------------------------------------------------------

    def begin(self, ticket_id: str, command: _local.SandboxCommand,
              background: bool) -> tuple[Any, ...]:
        ticket = _Ticket()
        with self.lock:
            self.tickets[ticket_id] = ticket
            if self.early_cancels.pop(ticket_id, None) is not None:
                ticket.stop.set()

        def run() -> None:
            if self.requester is not None:
                self.requester.current.ticket = ticket
            try:
                if background:
                    proc = self.sandbox.start(command)
                    key = ticket_id
                    with self.lock:
                        self.procs[key] = (command.session_id, proc)
                        cancelled = ticket.stop.is_set()
                    if cancelled:  # `cancel` came while it started and found no process
                        proc.stop()
                    ticket.outbox.put((DONE, {"key": key, "pid": proc.pid}))
                    # This thread lives as long as the process: bubblewrap's
                    # die-with-parent follows the thread that spawned it, so a
                    # thread that returned here would kill the outer bwrap and
                    # leave the sandbox inside running where stop() cannot reach.
                    proc.wait()
                    return
                result: object = _local.execute_stoppable(self.sandbox, command, ticket.stop)
                ticket.outbox.put((DONE, result))
            except _local.SandboxError as exc:
                ticket.outbox.put((ERROR, exc))
            except _local.Cancelled as exc:
                ticket.outbox.put((ERROR, _local.SandboxUnavailable(
                    f"{command.program!r} on node {self.node_id}: {exc}")))
            except BaseException as exc:  # a bug here must reach the caller, not die here
                ticket.outbox.put((ERROR, _local.SandboxUnavailable(
                    f"node {self.node_id}: internal error {type(exc).__name__}: {exc}")))
            finally:
                ticket.finished.set()
                if ticket.stop.is_set():
                    # A caller that cancelled during an approval never calls
                    # `answer`, so no `_next` would ever take the ticket away.
                    with self.lock:
                        self.tickets.pop(ticket_id, None)

        threading.Thread(target=run, name=f"stockade-cmd-{ticket_id}", daemon=True).start()
        return self._next(ticket_id, ticket)

    def answer(self, ticket_id: str, outcome: str) -> tuple[Any, ...]:
        with self.lock:
            ticket = self.tickets.get(ticket_id)
        if ticket is None:  # cancelled meanwhile: the command is over
            return (ERROR, _local.SandboxUnavailable(
                f"node {self.node_id}: that command was cancelled"), self.ledger.drain())
        ticket.inbox.put(outcome)
        return self._next(ticket_id, ticket)

    def cancel(self, ticket_id: str) -> bool:
        """Stop the command of `ticket_id` and kill its tree; True once nothing of it runs.

        Waits (bounded) for the command's thread, so the caller's cancelled
        `aexecute` returns after the tree is gone, as a local one does.
        """
        now = time.monotonic()
        with self.lock:
            ticket = self.tickets.get(ticket_id)
            entry = self.procs.get(ticket_id)
            if ticket is None and entry is None:
                for key, when in list(self.early_cancels.items()):
                    if now - when > _EARLY_CANCEL_TTL:
                        del self.early_cancels[key]
                self.early_cancels[ticket_id] = now
                return True
        if ticket is not None:
            ticket.stop.set()
            ticket.inbox.put(_CANCELLED)
            with self.lock:
                entry = self.procs.get(ticket_id)
        if entry is not None:  # a background process it had already started
            entry[1].stop()
            return True
        assert ticket is not None
        return ticket.finished.wait(_CANCEL_WAIT)

    def _next(self, ticket_id: str, ticket: _Ticket) -> tuple[Any, ...]:
        event = ticket.outbox.get()
        if event[0] != APPROVE:
            with self.lock:
                self.tickets.pop(ticket_id, None)
        return (*event, self.ledger.drain())

    # -- background processes ----------------------------------------------------

    def _proc(self, key: str) -> Any:
        with self.lock:
            entry = self.procs.get(key)
        if entry is None:
            raise _local.SandboxUnavailable(
                "that background process is gone: its session was closed")
        return entry[1]

    def proc_output(self, key: str, stream: str, offset: int) -> tuple[bytes, int]:
        return self._proc(key).output(stream, offset)  # type: ignore[no-any-return]

    def proc_wait(self, key: str, timeout: float | None) -> int | None:
        return self._proc(key).wait(timeout)  # type: ignore[no-any-return]

    def proc_stop(self, key: str, timeout: float) -> int | None:
        return self._proc(key).stop(timeout)  # type: ignore[no-any-return]

    def proc_state(self, key: str) -> tuple[bool, int | None]:
        proc = self._proc(key)
        return proc.running(), proc.returncode

    # -- audit and shutdown ------------------------------------------------------

    def drain(self) -> list[_local.Record]:
        return self.ledger.drain()

    def census(self) -> dict[str, object]:
        """What this node still holds: for tests and for `SandboxPool.census`."""
        with self.lock:
            running = [k for k, (_s, p) in self.procs.items() if p.running()]
        return {"sessions": sorted(self.sessions), "processes": running,
                "root_exists": os.path.exists(self.root), "root": self.root}

    def shutdown(self) -> list[_local.Record]:
        """Stop every process, close every session, remove this node's root."""
        records: list[_local.Record] = []
        if not self.closed:
            self.closed = True
            for session_id in self.sandbox.session_ids():
                # Each workspace too, where `workspace_root` put them outside the root.
                records.extend(self.close_session(session_id))
            self.sandbox.close()
            self.sessions.clear()
            with self.lock:
                self.procs.clear()
            shutil.rmtree(self.root, ignore_errors=True)
        return records + self.ledger.drain()
