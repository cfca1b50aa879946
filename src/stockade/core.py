"""The six-step pipeline, written once and driven by a sync and an async shell.

`SandboxCore.pipeline` is a generator: it decides, and yields an *effect*
whenever it needs the outside world -- ask a person (`Approve`), run the
process (`Run`). The shells perform the effect their own way (blocking, or
awaiting) and send the result back. So the decisions exist once, are tested
without any I/O, and the CLI's path never imports asyncio.

Steps: 1 session resolve (done by the shell, which owns the lock),
2 cwd validate, 3 capability check (+ before-hooks), 4 profile, 5 run,
6 audit.
"""

from __future__ import annotations

import _thread
import os
import time

from . import approval as ap
from .boundary import build_profile
from .capabilities import (
    FULL_ACCESS,
    READ_ONLY,
    NetworkPolicy,
    SandboxCapabilities,
    canonical_path,
    capabilities_for_mode,
    is_under,
    parse_mode,
)
from .command import FORBID, SandboxOutput
from .drivers import should_sandbox
from .drivers.owned import remove_owned
from .drivers.registry import declared, platform_for
from .drivers.session import Session, private_dir
from .errors import (
    CapabilityDenied,
    ConfigError,
    InvalidCommand,
    SandboxError,
    SandboxUnavailable,
)
from .hooks import run_before_hooks
from .interpret import Record, RunContext, cut_short, interpret, refusal, start
from .ledger import Ledger
from .paths import (
    WINDOWS,
    changeable_by_others,
    data_dir,
    make_own_dir,
    private_paths,
    session_key,
    state_dir,
    windows_profile_directory,
    with_windows_profile,
)
from .patterns import workspace_patterns
from .process import Outcome
from .profile import HOST, STRICT, ProxyEndpoint

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Mapping
    from typing import Any

    from .command import SandboxCommand
    from .config import SandboxConfig
    from .drivers import Driver, Launch
    from .hooks import BeforeHook
    from .process import BackgroundProcess
    from .profile import Profile
    from .proxy import ProxyDecision, ProxyThread, SessionEndpoint


class SessionWorkspace:
    """A session's directory, its private /tmp, and the processes it owns."""

    def __init__(self, session: Session, *, provisioned: bool, read_scope: str) -> None:
        #: What the drivers see of the session: the one owner of its /tmp.
        self.session = session
        self.provisioned = provisioned
        self.read_scope = read_scope
        self.processes: set[BackgroundProcess] = set()
        #: Set under the process lock when the session starts closing, so that a
        #: process still starting then is stopped, not left running unowned.
        self.closing = False
        self.mode: str | None = None  # set by a mode change approved for this session
        #: The private layers over the toolchain caches, made by this session at
        #: its first writing command and removed with it: never found by name.
        self.cache_dir: str | None = None

    @property
    def session_id(self) -> str:
        return self.session.id

    @property
    def cwd(self) -> str:
        """The session's workspace."""
        return self.session.workspace

    @property
    def tmp_dir(self) -> str | None:
        return self.session.tmp


class Approve:
    """Effect: ask a person. The shell sends back an approval outcome string."""

    __slots__ = ("request",)

    def __init__(self, request: ap.ApprovalRequest) -> None:
        self.request = request


class Run:
    """Effect: run the prepared launch. The shell sends back a process `Outcome`
    (or, for a background start, the started handle)."""

    __slots__ = ("launch", "max_output", "profile", "stdin", "timeout")

    def __init__(self, launch: Launch, profile: Profile, stdin: bytes | None,
                 timeout: float, max_output: int) -> None:
        self.launch = launch
        self.profile = profile
        self.stdin = stdin
        self.timeout = timeout
        self.max_output = max_output


class Performers:
    """How a shell performs the pipeline's effects: ask a person, run a launch.

    The loop that sends results back into the pipeline exists once
    (`SandboxCore.drive`); a shell differs only in these two callables (a
    pipe, the terminal, a pty; blocking or awaited). `run` returns an
    `Outcome`, or for a background start the started handle.
    """

    __slots__ = ("approve", "run")

    def __init__(self, approve: Callable[[Approve], object],
                 run: Callable[[Run], object]) -> None:
        self.approve = approve
        self.run = run


class _Decided:
    """What the pipeline has decided for one command so far: however the command
    ends, its record says the mode, capabilities and backend that were in force."""

    __slots__ = ("backend", "caps", "mode")

    def __init__(self) -> None:
        self.mode = READ_ONLY
        self.caps: SandboxCapabilities | None = None
        self.backend = "unresolved"

    @property
    def capabilities(self) -> SandboxCapabilities:
        """The capabilities, once step 3 has decided them."""
        assert self.caps is not None
        return self.caps


#: What the pipeline records and raises when a command does not get to run.
_REFUSALS = (CapabilityDenied, InvalidCommand, ConfigError, SandboxUnavailable)


class SandboxCore:
    """State and decisions shared by `WorkspaceSandbox` and `SyncWorkspaceSandbox`."""

    def __init__(
        self,
        config: SandboxConfig,
        *,
        driver: Driver | None = None,
        approval: ap.ApprovalGate | None = None,
        hooks: list[BeforeHook] | None = None,
        mode_source: Callable[[], str] | None = None,
        env: Mapping[str, str] | None = None,
        ledger: Ledger | None = None,
        driver_options: Mapping[str, object] | None = None,
        network_source: Callable[[], NetworkPolicy] | None = None,
        proxy_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.config = config
        self.driver_options = dict(driver_options or {})
        self.env = dict(os.environ if env is None else env)
        if env is None and platform_for(config.backend) == WINDOWS:
            self.env = with_windows_profile(self.env, windows_profile_directory)
        self.gate = approval or ap.ApprovalGate(timeout_secs=config.approval_timeout_seconds)
        self.hooks: list[BeforeHook] = list(hooks) if hooks is not None else default_hooks(config)
        self.mode_source = mode_source
        self.network_source = network_source
        self.proxy_options = dict(proxy_options or {})
        self._proxy: ProxyThread | None = None
        self._proxy_seq = 0
        # First refusal per proxy key, for the hint of the command that owns it.
        self._proxy_refusals: dict[str, tuple[str, int | None, str]] = {}
        #: Whose file-system rules profiles and stockade's own places follow: the
        #: backend's OS (Windows keeps the home in USERPROFILE, not HOME).
        self.platform = platform_for(config.backend)
        self.ledger = ledger if ledger is not None else Ledger(
            config.ledger_path(self.env, self.platform))
        #: stockade's state directory, from the injected env, once.
        self.state_dir = state_dir(self.env, platform=self.platform)
        # What no command may read, decided once. Both directories are made
        # now: a profile masks only what exists, and one that appeared mid-run
        # (a workspace root provisioned by another session; the state
        # directory, made by the first command's own metadata guard just after
        # its profile) was neither hidden nor held in place -- a command with a
        # workspace of ~ moved the guard's baseline away and kept what it
        # planted.
        # The ledger reports its own failure to write, and may live elsewhere.
        make_own_dir(data_dir(self.env, self.platform), self.env, "XDG_DATA_HOME",
                     writable=False)
        make_own_dir(self.state_dir, self.env, "XDG_STATE_HOME")
        exposed = changeable_by_others(self.state_dir)
        if exposed:
            raise SandboxUnavailable(
                f"stockade's state directory {self.state_dir} is under {exposed}, which "
                "another user can change: set XDG_STATE_HOME to a directory of your own")
        self._private = private_paths(self.env, state=self.state_dir, ledger=self.ledger.path,
                                      workspace_root=config.resolved_workspace_root(
                                          self.env, self.platform), platform=self.platform)
        self.sessions: dict[str, SessionWorkspace] = {}
        self._driver = driver
        self._none_driver: Driver | None = None
        self.default_timeout = float(config.default_timeout_seconds)
        self.max_output = int(config.max_output_bytes)
        self._proc_lock = _thread.allocate_lock()
        self._driver_lock = _thread.allocate_lock()

    # -- the driver ------------------------------------------------------------

    def driver(self, sandboxed: bool, workspace: str) -> Driver:
        """The session's driver: `config.backend` built by the registry, once."""
        if not sandboxed:
            if self._none_driver is None:
                from .drivers.none import NoneDriver

                with self._driver_lock:
                    if self._none_driver is None:
                        self._none_driver = self._opened(NoneDriver())
            return self._none_driver
        if self._driver is None:
            from .drivers.registry import from_config

            # Once, whatever the number of first commands racing here: each
            # built its own driver, the last one kept, so eight parallel first
            # commands of a session got eight /tmps (eight times its bound)
            # and the others' parked sandboxes outlived close().
            with self._driver_lock:
                if self._driver is None:
                    self._driver = self._opened(from_config(
                        self.config, env=self.env, workspace=workspace,
                        state_dir=self.state_dir, **self.driver_options))
        return self._driver

    def _opened(self, driver: Driver) -> Driver:
        """A driver built after sessions began learns of them: its hooks see every
        session it may run for, whenever it was built (drivers are built lazily)."""
        for ws in list(self.sessions.values()):
            driver.open_session(ws.session)
        return driver

    def _drivers(self) -> list[Driver]:
        return [d for d in (self._driver, self._none_driver) if d is not None]

    # -- the effect loop ---------------------------------------------------------

    def drive(self, gen: Generator[Approve | Run, object, object],
              performers: Performers) -> object:
        """Run the pipeline to its end, performing each effect; its return value."""
        value: object = None
        while True:
            try:
                effect = gen.send(value)
            except StopIteration as stop:
                return stop.value
            try:
                value = (performers.approve(effect) if isinstance(effect, Approve)
                         else performers.run(effect))
            except BaseException as exc:
                _thrown(gen, effect, exc)
                raise

    async def adrive(self, gen: Generator[Approve | Run, object, object],
                     performers: Performers) -> object:
        """`drive` for an async shell: a performer may return an awaitable."""
        value: object = None
        while True:
            try:
                effect = gen.send(value)
            except StopIteration as stop:
                return stop.value
            try:
                value = (performers.approve(effect) if isinstance(effect, Approve)
                         else performers.run(effect))
                if hasattr(value, "__await__"):
                    value = await value
            except BaseException as exc:
                _thrown(gen, effect, exc)
                raise

    def ask(self, effect: Approve) -> str:
        """Perform an `Approve` effect by blocking on the gate's requester."""
        requester = self.gate.requester
        assert requester is not None  # the pipeline yields Approve only with one
        result = requester.request(effect.request)
        if not isinstance(result, str):
            raise SandboxUnavailable("an async approval requester needs WorkspaceSandbox (async)")
        return result or ap.DENIED

    async def aask(self, effect: Approve) -> str:
        """Perform an `Approve` effect by awaiting the requester, within the gate's timeout."""
        import asyncio

        requester = self.gate.requester
        assert requester is not None
        try:
            async with asyncio.timeout(self.gate.timeout_secs):
                result = requester.request(effect.request)
                if not isinstance(result, str):
                    result = await result
        except TimeoutError:
            return ap.TIMEOUT
        return result or ap.DENIED

    # -- step 1: session ---------------------------------------------------------

    def new_session(self, session_id: str, workspace: str | None = None,
                    *, ephemeral_tmp: bool = False) -> SessionWorkspace:
        """Create (not look up) a session: bound to `workspace`, or provisioned.

        Called by a shell under its lock, after a second look in `sessions`.
        """
        if not isinstance(session_id, str) or not session_id:
            raise InvalidCommand("session id must be a non-empty string")
        scope = self.config.read_scope
        if workspace is not None:
            cwd = canonical_path(os.path.abspath(workspace), what="workspace")
            if not os.path.isdir(cwd):
                raise InvalidCommand(f"workspace {workspace!r} is not a directory")
            provisioned = False
            scope = HOST if scope == "auto" else scope
        else:
            root = self.config.resolved_workspace_root(self.env, self.platform)
            cwd = os.path.join(root, session_key(session_id))
            os.makedirs(cwd, mode=0o700, exist_ok=True)
            cwd = os.path.realpath(cwd)
            provisioned = True
            scope = STRICT if scope == "auto" else scope
        session = Session.open(session_id, cwd, tmp_base=None if ephemeral_tmp
                               else os.path.join(self.state_dir, "tmp"))
        ws = SessionWorkspace(session, provisioned=provisioned, read_scope=scope)
        self.sessions[session_id] = ws
        for driver in self._drivers():
            driver.open_session(session)
        return ws

    def close_session(self, session_id: str) -> None:
        """Stop every process the session started, drop its grants, remove its /tmp."""
        ws = self.sessions.pop(session_id, None)
        self.gate.forget(session_id)
        if ws is None:
            return
        with self._proc_lock:
            ws.closing = True
            procs = list(ws.processes)
            ws.processes.clear()
        try:
            for proc in procs:
                proc.stop()
        finally:
            # After its processes: what a backend keeps per session may be
            # what they were still using.
            ws.session.closed = True
            for driver in self._drivers():
                driver.close_session(ws.session)
            ws.session.remove_tmp()
            if ws.cache_dir:
                remove_owned(ws.cache_dir)

    def close(self) -> None:
        """Close every session, then the proxy and the ledger."""
        _OPEN_CORES.discard(self)
        errors: list[Exception] = []
        for sid in list(self.sessions):
            # One session that cannot be closed cleanly must not leave the
            # others' processes running, nor the proxy and the ledger open.
            try:
                self.close_session(sid)
            except Exception as exc:
                errors.append(exc)
        try:
            for driver in self._drivers():
                driver.close()
        finally:
            if self._proxy is not None:
                self._proxy.close()
                self._proxy = None
            self.ledger.close()
        if errors:
            raise errors[0]

    def mode_for(self, ws: SessionWorkspace) -> str:
        """Asked once per command: a mode changed mid-session applies to the next one."""
        if ws.mode is not None:
            return ws.mode
        if self.mode_source is not None:
            return parse_mode(self.mode_source())
        return parse_mode(self.config.mode or READ_ONLY)

    # -- steps 2 to 6 ------------------------------------------------------------

    def validate_cwd(self, ws: SessionWorkspace, cwd: str | None) -> str:
        if cwd is None:
            return ws.cwd
        if "\x00" in cwd:
            raise InvalidCommand(f"cwd contains a NUL byte: {cwd!r}")
        real = os.path.realpath(os.path.join(ws.cwd, cwd))
        if not is_under(real, ws.cwd):
            raise CapabilityDenied(
                f"cwd outside workspace root: {cwd!r} resolves to {real}, "
                f"outside {ws.cwd}"
            )
        if not os.path.isdir(real):
            raise InvalidCommand(f"cwd {cwd!r} is not a directory in the workspace")
        return real

    def pipeline(self, cmd: SandboxCommand, ws: SessionWorkspace, *, background: bool = False
                 ) -> Generator[Approve | Run, object, SandboxOutput | object]:
        """One command through the six steps; step 1, the session, is the shell's.

        A command refused before it runs is recorded once, with what had been
        decided by then, and the refusal raised; a run is read by `interpret`
        alone, so nothing here parses what a driver or the command printed.
        """
        started = time.monotonic()
        decided = _Decided()
        try:
            # 2: the directory it runs in.
            cwd = self.validate_cwd(ws, cmd.cwd)
            # 3: its capabilities (or a person's approval of more), the before-hooks.
            decided.mode = self.mode_for(ws)
            yield from self._approve(cmd, ws, cwd, decided)
            denial, warnings = run_before_hooks(self.hooks, cmd, ws.session_id)
            if denial is not None:
                raise CapabilityDenied(denial.reason)
            sandboxed = should_sandbox(decided.mode, cmd.preference)
            self._bound(ws, decided, sandboxed)
            # 4: its profile, and the driver's launch of it.
            driver = self.driver(sandboxed, ws.cwd)
            decided.backend = driver.name
            driver.available()
            launch, profile, endpoint = self._launch(cmd, ws, cwd, decided, driver, sandboxed)
            caps = decided.capabilities
            # 5: the run.
            timeout = cmd.timeout or caps.timeout_secs or self.default_timeout
            self.ledger.record_start(session=ws.session_id, argv=cmd.argv, cwd=cwd,
                                     mode=decided.mode, backend=decided.backend)
            try:
                result = yield Run(launch, profile, cmd.stdin, timeout, self.max_output)
            except (GeneratorExit, *_REFUSALS):
                raise
            except BaseException as exc:  # thrown in by `drive`: the performer's
                self._record(cmd, ws, decided, cut_short(exc), started)
                raise
        except _REFUSALS as exc:
            self._record(cmd, ws, decided, refusal(exc), started)
            raise
        # 6: what happened, told to the caller and recorded.
        if background:
            self._record(cmd, ws, decided, start(launch.report, tuple(warnings)), started)
            return result
        assert isinstance(result, Outcome)
        report = driver.finish(launch, result.returncode, result.diagnostic)
        reading = interpret(result, report, RunContext(
            program=cmd.program, mode=decided.mode, backend=decided.backend,
            sandboxed=sandboxed, workspace=ws.cwd, cwd=cwd, profile=profile, timeout=timeout,
            memory_mb=caps.max_memory_mb, warnings=tuple(warnings),
            proxy_refusal=(self._proxy_refusals.pop(endpoint.session_id, None)
                           if endpoint else None),
            explain=lambda stderr: driver.explain_run(launch, stderr)))
        self._record(cmd, ws, decided, reading.record, started)
        if reading.error is not None:
            raise reading.error
        return reading.output

    def _approve(self, cmd: SandboxCommand, ws: SessionWorkspace, cwd: str,
                 decided: _Decided) -> Generator[Approve, object, None]:
        """Step 3: the capabilities the command gets, asking a person for more than
        its mode gives; `decided` is filled as it goes, so a refusal records them."""
        sid = ws.session_id
        mode = decided.mode
        baseline = self.baseline(mode, ws)
        caps = decided.caps = cmd.capabilities if cmd.capabilities is not None else baseline
        if caps.network.kind == NetworkPolicy.HOSTS:
            check_host_entries(caps.network.hosts)
        if cmd.preference == FORBID:
            caps = decided.caps = capabilities_for_mode(FULL_ACCESS, ws.cwd)
        elif mode == READ_ONLY and caps.fs_write:
            # read-only mounts everything read-only: an approved write
            # grant would be a promise the boundary does not keep.
            raise CapabilityDenied(
                f"fs_write needs workspace-write or full-access mode (asked for "
                f"{', '.join(caps.fs_write)} in read-only)")
        if not caps.is_within(baseline) and not self.gate.granted(sid, caps):
            reason = ap.exceeds(caps, baseline) or "a boundary change"
            request = ap.ApprovalRequest(sid, cmd.argv, cwd, mode, caps, baseline, reason)
            if self.gate.requester is None:
                raise CapabilityDenied(
                    f"{reason} exceeds {mode} and no approver is configured "
                    "(grant it in config, or run with an approval requester)"
                )
            outcome = yield Approve(request)
            if outcome not in ap.APPROVED:
                answer = "not answered in time" if outcome == ap.TIMEOUT else "denied"
                raise CapabilityDenied(f"{reason} was {answer}")
            self.gate.remember(sid, str(outcome), caps)
        if cmd.preference == FORBID:
            decided.mode = FULL_ACCESS

    def _bound(self, ws: SessionWorkspace, decided: _Decided, sandboxed: bool) -> None:
        """What no approval lifts for a command about to run, and its memory ceiling."""
        mode = decided.mode
        if sandboxed and ws.cwd == "/":
            raise CapabilityDenied(ROOT_WORKSPACE)
        if sandboxed and mode != READ_ONLY:
            refuse_home_workspace(ws.cwd, self.env, self.config.allow_home_workspace)
        ceiling = self.config.max_memory_mb
        caps = decided.capabilities
        asked = caps.max_memory_mb
        if sandboxed and ceiling and (asked is None or asked > ceiling):
            # A ceiling, not a privilege: a command may ask for less
            # memory, never for more or for none (see SandboxCapabilities).
            decided.caps = caps.replace(max_memory_mb=ceiling)
        if sandboxed and self._driver is None and not declared(self.config.backend).confines:
            raise ConfigError(no_boundary(mode))

    def _launch(self, cmd: SandboxCommand, ws: SessionWorkspace, cwd: str, decided: _Decided,
                driver: Driver, sandboxed: bool
                ) -> tuple[Launch, Profile, SessionEndpoint | None]:
        """Step 4: the command's profile, its proxy endpoint, and the driver's launch;
        the endpoint goes with the launch, or at once if there is none."""
        mode, caps = decided.mode, decided.capabilities
        endpoint = None
        if sandboxed and caps.network.kind == NetworkPolicy.HOSTS:
            endpoint = self.proxy_endpoint(ws.session_id, caps.network, decided.backend)
        try:
            profile = self.command_profile(cmd, ws, mode, caps, cwd, driver,
                                           sandboxed=sandboxed, endpoint=endpoint)
            launch = driver.prepare(cmd.argv, profile)
        except BaseException:
            if endpoint:
                self._drop_proxy_endpoint(endpoint.session_id)
            raise
        if endpoint:
            key = endpoint.session_id
            launch.also(lambda: self._drop_proxy_endpoint(key))
        return launch, profile, endpoint

    def command_profile(self, cmd: SandboxCommand, ws: SessionWorkspace, mode: str,
                        caps: SandboxCapabilities, cwd: str, driver: Driver, *,
                        sandboxed: bool = True, endpoint: SessionEndpoint | None = None
                        ) -> Profile:
        """The profile `cmd` runs with under `driver`: the pipeline's, and what
        `stockade explain` shows without running anything."""
        patterns = workspace_patterns(self.config.unreadable) if sandboxed else ()
        return self.make_profile(
            ws, cmd, mode, caps, cwd, driver.name, endpoint,
            repositories=driver.repositories(ws.cwd) if sandboxed and mode != READ_ONLY
            else (), matched=driver.matching(ws.cwd, patterns) if patterns else ())

    def _record(self, cmd: SandboxCommand, ws: SessionWorkspace, decided: _Decided,
                record: Record, started: float) -> None:
        """The pipeline's one way to the ledger: what it decided, and how the command ended."""
        self.audit(cmd, ws, decided.mode, decided.caps, decided.backend, record.outcome,
                   started, exit_code=record.exit_code, signal=record.signal,
                   denied=record.denied, detail=record.detail, cwd=record.cwd)

    def baseline(self, mode: str, ws: SessionWorkspace) -> SandboxCapabilities:
        """What the mode gives, with the network asked for once per command.

        A grant of network access can arrive mid-session (a person answers
        "this project"); read once at construction, it would have no effect
        until a restart, and the only reading left to them is that it did not
        work. None means the config's `allow_hosts`, or no network at all.
        """
        caps = capabilities_for_mode(mode, ws.cwd)
        if mode == FULL_ACCESS:
            return caps
        if self.network_source is not None:
            network = self.network_source()
        elif self.config.allow_hosts:
            network = NetworkPolicy.allow_hosts(self.config.allow_hosts)
        else:
            return caps
        return caps.replace(network=network)

    def proxy_endpoint(self, session_id: str, network: NetworkPolicy,
                       backend: str = "bubblewrap") -> SessionEndpoint:
        """A proxy endpoint for ONE command, named by the command's own proxy key.

        Per command, not per session: a host approved once for this command
        must not become reachable to the session's other commands already
        running (a background server started earlier), nor outlive this one.
        The sockets live in stockade's state directory, which no sandbox can
        see: under a shared TMPDIR any command could use any session's grant.

        bubblewrap reaches the proxy through the unix socket alone, so it gets
        no TCP listener. The other backends have no network namespace to
        bridge into and need one on loopback, where every local user can
        connect: that listener asks for a secret only this command is given.
        """
        import secrets

        from .proxy import HostPolicy, ProxyThread

        if self._proxy is None:
            options = dict(self.proxy_options)
            sockets = os.path.join(self.state_dir, "proxy")
            os.makedirs(sockets, mode=0o700, exist_ok=True)
            options.setdefault("socket_dir", sockets)
            proxy = ProxyThread(on_decision=self._proxy_decision, **options)
            proxy.start()
            self._proxy = proxy
        self._proxy_seq += 1
        key = f"{session_id}{_PROXY_KEY_SEP}{self._proxy_seq}"
        deny = dict(_deny_entry(e) for e in self.config.deny_hosts)
        policy = HostPolicy(allow=network.hosts, deny=deny)
        if declared(backend).namespaces:  # a socket bound into its network namespace
            return self._proxy.add_session(key, policy, tcp=False)
        return self._proxy.add_session(key, policy, unix=False,
                                       secret=secrets.token_urlsafe(24))

    def _drop_proxy_endpoint(self, key: str) -> None:
        if self._proxy is not None:
            try:
                self._proxy.remove_session(key)
            except Exception:  # the proxy may be closing; its listeners go with it
                pass

    def _proxy_decision(self, decision: ProxyDecision) -> None:
        if not decision.allowed:
            self._proxy_refusals.setdefault(decision.session_id, (
                decision.host, decision.port, decision.reason or decision.rule or "not allowed"))
        if decision.final:  # one record per connection, with its byte counts
            self.ledger.record_network(
                session=decision.session_id.rpartition(_PROXY_KEY_SEP)[0] or decision.session_id,
                host=decision.host, port=decision.port,
                address=str(decision.address) if decision.address else None,
                allowed=decision.allowed, rule=decision.rule or decision.reason,
                bytes_up=decision.bytes_up, bytes_down=decision.bytes_down)

    def make_profile(self, ws: SessionWorkspace, cmd: SandboxCommand, mode: str,
                     caps: SandboxCapabilities, cwd: str, backend: str,
                     endpoint: SessionEndpoint | None = None,
                     repositories: tuple[str, ...] = (),
                     matched: tuple[str, ...] = ()) -> Profile:
        c = self.config
        if ws.cache_dir is None and c.scratch and mode != READ_ONLY:
            with self._proc_lock:
                _refuse_closed(ws)
                ws.cache_dir = private_dir(os.path.join(self.state_dir, "caches"),
                                           ws.session_id)
        profile = build_profile(
            private=self._private, cache_dir=ws.cache_dir, tmp_size_mb=c.tmp_size_mb,
            max_file_size_mb=c.max_file_size_mb,
            proxy=ProxyEndpoint(unix_path=endpoint.unix_path, port=endpoint.port,
                                secret=endpoint.secret) if endpoint else None,
            mode=mode, workspace=ws.cwd, cwd=cwd, capabilities=caps,
            read_scope=ws.read_scope, host_env=self.env, command_env=cmd.env,
            unreadable=c.unreadable, writable=c.writable, granted_sockets=c.granted_sockets,
            use_scratch=c.scratch, secret_env=tuple(c.secret_env) if c.secret_env is not None
            else _default_secrets(), session_tmp=ws.tmp_dir, backend=backend,
            repositories=repositories, matched=matched, platform=self.platform,
            session=ws.session, publish=cmd.publish,
        )
        if profile.caches:
            with self._proc_lock:
                _refuse_closed(ws)
                for _cache, private, _var in profile.caches:
                    for part in ("upper", "work"):
                        os.makedirs(os.path.join(private, part), mode=0o700, exist_ok=True)
        return profile

    def audit(self, cmd: SandboxCommand, ws: SessionWorkspace, mode: str,
               caps: SandboxCapabilities | None, backend: str, outcome: str, started: float,
               *, exit_code: int | None = None, signal: int | None = None,
               denied: bool = False, detail: dict[str, object] | None = None,
               cwd: str | None = None) -> None:
        """One ledger record for a command: the pipeline's, and a persistent
        shell's for the commands it gates outside the pipeline."""
        self.ledger.record(
            session=ws.session_id, program=cmd.program, argv=cmd.argv, cwd=cwd or ws.cwd,
            mode=mode, capabilities=caps.to_json() if caps else None, backend=backend,
            exit_code=exit_code, signal=signal,
            duration_ms=round((time.monotonic() - started) * 1000.0, 3), denied=denied,
            outcome=outcome, detail=detail, env=cmd.env or None,
        )

    def track(self, ws: SessionWorkspace, proc: BackgroundProcess) -> None:
        """Hand `proc` to its session; one that closed while it started stops it."""
        with self._proc_lock:
            if not ws.closing:
                ws.processes.add(proc)
                _close_at_exit(self)
                return
        proc.stop()
        raise SandboxError(f"session {ws.session_id!r} was closed while this command "
                           "started; it was stopped")

    def untrack(self, ws: SessionWorkspace, proc: BackgroundProcess) -> None:
        with self._proc_lock:
            ws.processes.discard(proc)


#: Cores with background processes, closed when the interpreter exits: a
#: script that ends without `close()` would otherwise leave its processes'
#: writes in the workspace unswept until some later command came along.
_OPEN_CORES: set[SandboxCore] = set()


#: Why a sandboxed command may not have `/` as its workspace. The workspace is
#: bound over everything else: under bubblewrap it brought back the host's /tmp,
#: /dev, /run/user and other users' homes (and failed only because /home's mask
#: could no longer be made read-only); under Landlock the command could not even
#: list it. Writable, it is full access by another name.
ROOT_WORKSPACE = (
    "the workspace is / (the whole filesystem), which no sandbox can hold: bound as the "
    "workspace it would cover the sandbox's private /tmp and the masked homes, and "
    "writable it would confine nothing; run from a project directory or give --workspace "
    "DIR (read-only mode reads the host from any workspace), or choose full-access mode "
    "to run with no boundary")


def no_boundary(mode: str) -> str:
    """Why `backend = "none"` cannot run a command of `mode` (anything but full-access).

    The none backend runs a command as it is. Built for a read-only command
    it ran it unconfined while the audit said read-only; now the mode and
    the backend must agree, and the person chooses which one gives way.
    """
    from .drivers.registry import choices

    confining = ", ".join(c for c in choices() if c != "none")
    return (f"backend 'none' is no boundary, so it runs only full-access commands, and this "
            f"one is {mode}: choose mode full-access to run it unconfined, or a backend that "
            f"confines it ({confining})")


def refuse_home_workspace(workspace: str, env: Mapping[str, str], allowed: bool) -> None:
    """A writing mode in a workspace that holds the home is the person's explicit choice.

    An MCP client started in the home gives a workspace of `~`, and a command
    there wrote fifty kinds of file that the host's next `less`, login or
    build ran; protecting them by name never ends, so the whole home is
    refused instead, with the way to accept it.
    """
    from .hostpaths import home_workspace

    home = home_workspace(workspace, env) if not allowed else ""
    if home:
        raise CapabilityDenied(
            f"the workspace {workspace} holds your home directory ({home}), where a writing "
            "command could leave files that your shell, git, less, editors and builds run "
            "later; use a project directory as the workspace, or read-only mode, or set "
            "allow_home_workspace = true in ~/.config/stockade/config.toml to accept it")


def _thrown(gen: Generator[Approve | Run, object, object], effect: object,
            exc: BaseException) -> None:
    """A run's performer raised: the pipeline hears it and records how the run
    ended (its start was recorded, and with no end it read as still running)."""
    if isinstance(effect, Run):
        try:
            gen.throw(exc)
        except BaseException:
            pass  # what the pipeline raises back is `exc`, raised by the caller
        gen.close()


def _refuse_closed(ws: SessionWorkspace) -> None:
    """(The process lock held.) What a session keeps on disk, made once its close
    had looked, would outlive it."""
    if ws.closing:
        raise SandboxError(f"session {ws.session_id!r} was closed")


def _close_at_exit(core: SandboxCore) -> None:
    if not _OPEN_CORES:
        import atexit

        atexit.register(_close_all)
    _OPEN_CORES.add(core)


def _close_all() -> None:
    for core in list(_OPEN_CORES):
        try:
            core.close()
        except Exception:  # exiting: one core's failure must not keep the rest open
            pass


# Separates a session id from the command number in a proxy key.
_PROXY_KEY_SEP = "\x1f"


def output(value: object) -> SandboxOutput:
    """A foreground pipeline's result, typed (what `drive` returns for it)."""
    assert isinstance(value, SandboxOutput), value
    return value


def check_host_entries(hosts: tuple[str, ...]) -> None:
    """Refuse a malformed allowlist entry before anyone is asked to approve it."""
    from .config import host_entry_problem

    for entry in hosts:
        problem = host_entry_problem(entry)
        if problem:
            raise InvalidCommand(f"network host {entry!r}: {problem}")


def _deny_entry(entry: str) -> tuple[str, str]:
    """`host` or `host=reason`, as written in `deny_hosts`."""
    host, _, reason = entry.partition("=")
    return host.strip(), reason.strip() or "denied by configuration"


def _default_secrets() -> tuple[str, ...]:
    from .envscrub import DEFAULT_SECRET_ENV

    return DEFAULT_SECRET_ENV


def default_hooks(config: SandboxConfig) -> list[BeforeHook]:
    """Command policy first, then the rate limit, as the chain is specified."""
    from .command_policy import policy_hook_from_config

    hooks: list[BeforeHook] = []
    hook = policy_hook_from_config(config.command_policy)
    if hook is not None:
        hooks.append(hook)
    if config.commands_per_minute:
        from .hooks import RateLimitHook

        hooks.append(RateLimitHook(config.commands_per_minute))
    return hooks


def make_core(config: SandboxConfig | None = None, **options: Any) -> SandboxCore:
    """A core from a config (loaded from the usual files when None) and shell options."""
    if config is None:
        from .config import load_config

        env = options.get("env")
        config = load_config(env if isinstance(env, dict) else None)
    if not config.enabled:
        from .errors import SandboxDisabled

        raise SandboxDisabled(
            "sandbox disabled: [sandbox] enabled = false; stockade will not run commands "
            "without a boundary. Use NoopSandbox in tests, or set enabled = true"
        )
    return SandboxCore(config, **options)
