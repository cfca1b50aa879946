"""`SandboxPool`: sessions spread over a Ray cluster, each confined on its own node.

What runs where: the node actor holds the workspace and runs the command
under that node's own backend; the caller keeps every decision a person
makes (the approval requester) and the audit trail (its ledger). A command
is sent to exactly one node, once: when that node goes away mid-command the
caller gets `NodeLost` (a `SandboxUnavailable`), never a quiet second run
elsewhere, because a command that wrote half its files, sent half its
requests or charged half a card is not safe to repeat.
"""

from __future__ import annotations

import itertools
import os
import threading
from typing import TYPE_CHECKING, Any

from . import _local
from .audit import AuditStream
from .node import APPROVE, ERROR, NodeActor
from .routing import Cancelled, NodeLost, NodeSlot, least_loaded

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ..approval import ApprovalGate
    from ..command import SandboxCommand, SandboxOutput
    from ..config import SandboxConfig
    from ..ledger import Ledger

#: Actor calls beyond the command limit: approvals answered, output read,
#: processes stopped while commands run. Without them a node running its
#: limit could not be asked to stop the process a command waits on.
_CONTROL_CALLS = 32

#: How long a cancelled `aexecute` waits for its node to have killed the
#: command's tree before it lets the cancellation through anyway.
_CANCEL_WAIT = 30.0


class SessionInfo:
    """Where a session lives: its node and its workspace path on that node."""

    __slots__ = ("cwd", "node_id", "session_id")

    def __init__(self, session_id: str, node_id: str, cwd: str) -> None:
        self.session_id = session_id
        self.node_id = node_id
        self.cwd = cwd

    def __repr__(self) -> str:
        return f"SessionInfo({self.session_id!r}, node={self.node_id[:12]}, cwd={self.cwd!r})"


class _Cancellation:
    """How far a cancellable pool command has got, for whoever cancels it.

    Filled in by the thread that carries the command and read by the event
    loop that cancels it, under `lock`: a command is either not sent yet
    (and never will be) or its node is told, never neither.
    """

    __slots__ = ("event", "lock", "node", "pending", "slot", "ticket")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.lock = threading.Lock()
        self.slot: NodeSlot | None = None
        self.node: _Node | None = None
        self.ticket: str | None = None
        #: The caller's loop running an async requester's answer, to cancel with it.
        self.pending: Any = None


class _Node:
    __slots__ = ("actor", "report", "slot")

    def __init__(self, slot: NodeSlot, actor: Any, report: dict[str, object]) -> None:
        self.slot = slot
        self.actor = actor
        self.report = report


class SandboxPool:
    """One stockade actor per Ray node; `execute` routes to the session's node."""

    def __init__(self, config: SandboxConfig | None = None, ray_address: str | None = None,
                 *, approval: ApprovalGate | None = None, ledger: Ledger | str | None = None,
                 env: Mapping[str, str] | None = None,
                 max_concurrent_per_node: int | None = None, max_queue_per_node: int = 64,
                 start_timeout: float = 120.0) -> None:
        """`env` is laid over each node's own environment for its sandbox (HOME, PATH);
        `max_concurrent_per_node` defaults to each node's CPU count in Ray."""
        try:
            import ray
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        except ImportError as exc:
            from ..errors import MissingDependency

            raise MissingDependency(f"SandboxPool needs Ray: pip install 'stockade[ray]' ({exc})",
                                    extra="ray") from exc

        if config is None:
            from ..config import load_config

            config = load_config()
        self.config = config
        self.gate = approval
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=ray_address, log_to_driver=False)
        self.audit = AuditStream(_local.caller_ledger(config, ledger))
        self._sessions: dict[str, tuple[_Node, SessionInfo]] = {}
        self._lock = threading.Lock()
        self._tickets = itertools.count(1)
        self._prefix = f"{os.getpid()}-{id(self):x}"
        self._closed = False
        approvals = approval is not None and approval.requester is not None
        timeout = approval.timeout_secs if approval is not None else float(
            config.approval_timeout_seconds)
        remote: Any = ray.remote(NodeActor)
        pending: list[tuple[NodeSlot, Any, Any]] = []
        nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call,unused-ignore]
        for info in nodes:
            if not info.get("Alive"):
                continue
            node_id = str(info["NodeID"])
            cpus = int(info.get("Resources", {}).get("CPU", 1) or 1)
            limit = max_concurrent_per_node or cpus
            actor = remote.options(
                num_cpus=0, max_restarts=0, max_task_retries=0,
                max_concurrency=limit + _CONTROL_CALLS,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote(config, dict(env) if env else None, approvals, timeout, node_id)
            pending.append((NodeSlot(node_id, limit, max_queue_per_node), actor,
                            actor.ready.remote()))
        self.nodes: dict[str, _Node] = {}
        #: node id -> why it cannot build a boundary; such a node is never used.
        self.unusable: dict[str, str] = {}
        for slot, actor, ref in pending:
            try:
                report = ray.get(ref, timeout=start_timeout)
            except Exception as exc:  # an actor that cannot start is a node not to use
                report = {"ok": False, "why": f"the node actor did not start: {exc}"}
            if report.get("ok"):
                self.nodes[slot.node_id] = _Node(slot, actor, report)
            else:
                self.unusable[slot.node_id] = str(report.get("why"))
                # Its root and probe state go too: a refused node keeps nothing of ours.
                try:
                    ray.get(actor.shutdown.remote(), timeout=30)
                except Exception:  # an actor that never started made nothing
                    pass
                self._end_actor(actor)
        if not self.nodes:
            reasons = "; ".join(f"node {n}: {why}" for n, why in self.unusable.items())
            self.close()
            raise _local.SandboxUnavailable(
                f"no node in the Ray cluster can build a boundary ({reasons or 'no nodes'}); "
                "run `stockade doctor` on each node")

    # -- sessions ----------------------------------------------------------------

    def open_session(self, session_id: str, *, files: Mapping[str, bytes] | None = None,
                     tarball: bytes | None = None, node: str | None = None) -> SessionInfo:
        """Pin a session to the least-loaded healthy node (or `node`), provision its
        workspace there and seed it from `files` (path -> bytes) and/or `tarball`."""
        with self._lock:
            if session_id in self._sessions:
                return self._sessions[session_id][1]
            if node is not None:
                target = self.nodes.get(node)
                if target is None:
                    raise _local.SandboxUnavailable(
                        f"node {node} is not in the pool" + (
                            f": {self.unusable[node]}" if node in self.unusable else ""))
                if target.slot.lost is not None:
                    raise target.slot.lost_error()
            else:
                slot = least_loaded([n.slot for n in self.nodes.values()])
                target = self.nodes[slot.node_id]
            target.slot.sessions += 1
        try:
            reply = self._call(target, target.actor.open.remote(session_id, files, tarball),
                               session_id)
        except BaseException:
            with self._lock:
                target.slot.sessions -= 1
            raise
        if "error" in reply:
            with self._lock:
                target.slot.sessions -= 1
            raise reply["error"]
        info = SessionInfo(session_id, target.slot.node_id, str(reply["cwd"]))
        with self._lock:
            self._sessions[session_id] = (target, info)
        return info

    def session(self, session_id: str) -> SessionInfo:
        return self._session(session_id)[1]

    def _session(self, session_id: str | None) -> tuple[_Node, SessionInfo]:
        if not session_id:
            from ..context import current_session

            session_id = current_session()
        if not session_id:
            from ..errors import InvalidCommand

            raise InvalidCommand("no session id: pass one, or run inside session_scope()")
        entry = self._sessions.get(session_id)
        if entry is None:
            self.open_session(session_id)
            entry = self._sessions[session_id]
        return entry

    def close_session(self, session_id: str) -> None:
        """Stop the session's processes on its node and drop its workspace state there."""
        with self._lock:
            entry = self._sessions.pop(session_id, None)
            if entry is None:
                return
            entry[0].slot.sessions -= 1
        node = entry[0]
        if node.slot.lost is None:
            self.audit.write(node.slot.node_id, self._call(
                node, node.actor.close_session.remote(session_id), session_id))

    def read_files(self, session_id: str, paths: list[str]) -> dict[str, bytes]:
        """Files of the session's workspace, read on its node (symlinks never followed)."""
        node, _ = self._session(session_id)
        reply = self._call(node, node.actor.read_files.remote(session_id, list(paths)),
                           session_id)
        if "error" in reply:
            raise reply["error"]
        return reply["files"]  # type: ignore[no-any-return]

    def export(self, session_id: str) -> bytes:
        """The session's workspace as a gzip tarball (the read-back of `tarball=`)."""
        node, _ = self._session(session_id)
        reply = self._call(node, node.actor.export.remote(session_id), session_id)
        if "error" in reply:
            raise reply["error"]
        return reply["tarball"]  # type: ignore[no-any-return]

    # -- commands ----------------------------------------------------------------

    def execute(self, command: SandboxCommand,
                _submit: Callable[[Any], Any] | None = None) -> SandboxOutput:
        return self._exchange(command, False, _submit)  # type: ignore[return-value]

    def start(self, command: SandboxCommand,
              _submit: Callable[[Any], Any] | None = None) -> RemoteProcess:
        """A background process on the session's node; closing the session stops it."""
        return self._exchange(command, True, _submit)  # type: ignore[return-value]

    async def aexecute(self, command: SandboxCommand) -> SandboxOutput:
        """`execute` off the event loop; an async requester's awaitable runs on this loop.
        Cancelling the awaiting task kills the command's tree on its node before the
        cancellation goes on, as with a local `WorkspaceSandbox.execute`."""
        return await self._cancellable(command, False)  # type: ignore[return-value]

    async def astart(self, command: SandboxCommand) -> RemoteProcess:
        """`start` off the event loop; cancelled, the process is stopped on its node."""
        return await self._cancellable(command, True)  # type: ignore[return-value]

    async def _cancellable(self, command: SandboxCommand, background: bool) -> object:
        import asyncio

        cancel = _Cancellation()
        task = asyncio.ensure_future(asyncio.to_thread(
            self._exchange, command, background,
            _submitter(asyncio.get_running_loop(), cancel), cancel))
        task.add_done_callback(_consume)
        try:
            # Shielded: cancelling the thread's future would only stop waiting
            # for it, and leave the command running on its node.
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            confirm = self._cancel(cancel)
            waits: list[Any] = [task]
            if confirm is not None:
                waits.append(asyncio.ensure_future(_settle(confirm)))
            await asyncio.wait(waits, timeout=_CANCEL_WAIT)
            raise

    def _cancel(self, cancel: _Cancellation) -> Any:
        """Stop a command wherever it has got to; the node's confirmation, if it was sent."""
        with cancel.lock:
            cancel.event.set()
            slot, node, ticket, pending = cancel.slot, cancel.node, cancel.ticket, cancel.pending
        if slot is not None:
            slot.wake()
        if pending is not None:
            pending.cancel()
        if node is None or node.slot.lost is not None:
            return None
        return node.actor.cancel.remote(ticket)

    def _exchange(self, command: SandboxCommand, background: bool,
                  submit: Callable[[Any], Any] | None,
                  cancel: _Cancellation | None = None) -> object:
        node, info = self._session(command.session_id)
        if command.session_id is None:
            # The node has no contextvar of the caller's: name the session.
            from ..command import SandboxCommand as Cmd

            command = Cmd(command.program, command.args, session_id=info.session_id,
                          env=command.env, stdin=command.stdin, cwd=command.cwd,
                          capabilities=command.capabilities, timeout=command.timeout,
                          preference=command.preference)
        sid = info.session_id
        slot = node.slot
        if cancel is not None:
            cancel.slot = slot
        slot.acquire(sid, cancel.event.is_set if cancel is not None else None)
        try:
            ticket = f"{self._prefix}-{next(self._tickets)}"
            if cancel is None:
                ref = node.actor.begin.remote(ticket, command, background)
            else:
                with cancel.lock:
                    if cancel.event.is_set():
                        raise Cancelled(f"cancelled before it was sent to node {slot.node_id}")
                    cancel.node, cancel.ticket = node, ticket
                    ref = node.actor.begin.remote(ticket, command, background)
            event = self._call(node, ref, sid, command)
            while event[0] == APPROVE:
                self.audit.write(slot.node_id, event[2])
                outcome = self._decide(node, ticket, event[1], submit, cancel)
                event = self._call(node, node.actor.answer.remote(ticket, outcome), sid,
                                   command)
            kind, value, records = event
            self.audit.write(slot.node_id, records)
        finally:
            slot.release()
        if kind == ERROR:
            raise value
        if background:
            return RemoteProcess(self, node, sid, str(value["key"]), int(value["pid"]))
        return value

    def _decide(self, node: _Node, ticket: str, request: Any,
                submit: Callable[[Any], Any] | None,
                cancel: _Cancellation | None = None) -> str:
        """Ask the caller's requester, here, bounded by the caller's gate timeout."""
        gate = self.gate
        if gate is None or gate.requester is None:
            return _local.DENIED
        try:
            outcome = _local.call_requester(gate.requester, request, gate.timeout_secs, submit,
                                            cancel.event if cancel is not None else None)
        except Cancelled:
            raise  # the node was told by `_cancel`; an answer now would be a denial
        except BaseException:
            # The node waits for an answer; a requester that raised gives none.
            node.actor.answer.remote(ticket, _local.DENIED)
            raise
        gate.remember(request.session_id, outcome, request.capabilities)
        return outcome

    def _call(self, node: _Node, ref: Any, session_id: str | None = None,
              command: SandboxCommand | None = None) -> Any:
        """ray.get, with the death of the node's actor turned into `NodeLost`."""
        import ray

        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            # stockade's own error raised on the node: the caller gets it as raised
            # there, not wrapped in Ray's remote traceback.
            cause = getattr(exc, "cause", None)
            if isinstance(cause, _local.SandboxError):
                raise cause from None
            raise
        except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError,
                ray.exceptions.OwnerDiedError) as exc:
            slot = node.slot
            slot.mark_lost(_first_line(exc))
            error = slot.lost_error(session_id)
            if command is not None:
                error = NodeLost(
                    f"node {slot.node_id} lost while running {command.program!r} for session "
                    f"{session_id!r}: {slot.lost}; the command was not re-run (it may have "
                    "run in part) and the session is gone with its node")
                self.audit.lost(slot.node_id, command, str(error))
            raise error from exc

    # -- state -------------------------------------------------------------------

    def load(self) -> dict[str, tuple[int, int, int]]:
        """node id -> (sessions, commands running, commands waiting)."""
        return {n: node.slot.load() for n, node in self.nodes.items()}

    def healthy_nodes(self) -> list[str]:
        return [n for n, node in self.nodes.items() if node.slot.lost is None]

    def census(self) -> dict[str, dict[str, object]]:
        """What each healthy node still holds (sessions, running processes, its root)."""
        return {n: self._call(node, node.actor.census.remote())
                for n, node in self.nodes.items() if node.slot.lost is None}

    def flush_audit(self) -> None:
        """Fetch records made after the last reply (a proxy's connection closing late)."""
        for node in self.nodes.values():
            if node.slot.lost is None:
                self.audit.write(node.slot.node_id, self._call(node, node.actor.drain.remote()))

    def close(self) -> None:
        """Stop every process and remove every workspace on every node, then the actors."""
        if self._closed:
            return
        self._closed = True
        import ray

        nodes = list(getattr(self, "nodes", {}).values())
        refs = [(node, node.actor.shutdown.remote()) for node in nodes
                if node.slot.lost is None]
        for node, ref in refs:
            try:
                self.audit.write(node.slot.node_id, ray.get(ref, timeout=60))
            except Exception as exc:  # a node lost at shutdown has nothing left to stop
                node.slot.mark_lost(_first_line(exc))
        for node in nodes:
            self._end_actor(node.actor)
        self._sessions.clear()
        self.audit.close()
        if self._owns_ray:
            ray.shutdown()

    @staticmethod
    def _end_actor(actor: Any) -> None:
        import ray

        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # already dead with its node
            pass

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RemoteProcess:
    """A background process on a node: `output`, `wait`, `stop` as `BackgroundProcess`."""

    def __init__(self, pool: SandboxPool, node: _Node, session_id: str, key: str,
                 pid: int) -> None:
        self._pool = pool
        self._node = node
        self.session_id = session_id
        self.node_id = node.slot.node_id
        self.key = key
        #: The pid on its node, not on the caller's machine.
        self.pid = pid

    def _call(self, method: str, *args: object) -> Any:
        node = self._node
        if node.slot.lost is not None:
            raise node.slot.lost_error(self.session_id)
        reply = self._pool._call(node, getattr(node.actor, method).remote(self.key, *args),
                                 self.session_id)
        return reply

    def output(self, stream: str = "stdout", offset: int = 0) -> tuple[bytes, int]:
        return self._call("proc_output", stream, offset)  # type: ignore[no-any-return]

    def wait(self, timeout: float | None = None) -> int | None:
        return self._call("proc_wait", timeout)  # type: ignore[no-any-return]

    def stop(self, timeout: float = 5.0) -> int | None:
        return self._call("proc_stop", timeout)  # type: ignore[no-any-return]

    def running(self) -> bool:
        return bool(self._call("proc_state")[0])

    @property
    def returncode(self) -> int | None:
        return self._call("proc_state")[1]  # type: ignore[no-any-return]


def _submitter(loop: Any, cancel: _Cancellation | None = None) -> Callable[[Any], Any]:
    import asyncio

    def submit(awaitable: Any) -> Any:
        async def wait() -> Any:
            return await awaitable

        future = asyncio.run_coroutine_threadsafe(wait(), loop)
        if cancel is not None:
            # A cancelled command's question is withdrawn, as a local one's
            # awaited requester is cancelled with the task.
            with cancel.lock:
                cancel.pending = future
                if cancel.event.is_set():
                    future.cancel()
        return future.result()

    return submit


def _consume(task: Any) -> None:
    """Take a cancelled command's late outcome, so asyncio does not report it as lost."""
    if not task.cancelled():
        task.exception()


async def _settle(ref: Any) -> None:
    """Await a node's confirmation; a node already gone has nothing left to stop."""
    try:
        await ref
    except Exception:
        pass


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if "node has died" in line or "died" in line:
            return line
    return lines[0] if lines else type(exc).__name__
