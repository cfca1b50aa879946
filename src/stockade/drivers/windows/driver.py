"""The Windows driver: the tier chain, the ACL plan applied and undone, the job.

`prepare` decides (and refuses) without touching the machine; the Windows
`Launch.start()` does everything with side effects, through the `Win32`
seam, and keeps an undo stack so that whatever it set up is taken down
exactly once: on a failed start before it raises, otherwise in `cleanup()`
after the wait. The order is fixed and tested: profile, stubs, labels and
ACEs, job, process (suspended), assign, resume -- and after the wait, job
closed, ACEs revoked, labels restored, stubs removed, profile deleted.
"""

from __future__ import annotations

import ntpath
import os
import sys
import threading
import time

from ...errors import InvalidCommand, SandboxUnavailable
from ...process import DEFAULT_MAX_OUTPUT, Outcome, OutputMeter, mark_truncated
from ...profile import DIR
from ..base import Driver, Launch, ProcessHandle, StartFailure
from . import acl, cmdline, diagnose, plan
from .journal import HoldConflict, Journal, Store
from .options import WINDOWS_OPTIONS
from .win32 import Win32Error

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from typing import Any

    from ...profile import Profile
    from .win32 import Started, Win32

__all__ = ["JobProcess", "WindowsDriver", "WindowsLaunch"]

_CHUNK = 1 << 16
#: Exit code a job's processes get when stockade ends them (timeout, overflow, close).
KILLED = 0xC000013A  # STATUS_CONTROL_C_EXIT: what Windows itself uses for "ended from outside"


class JobProcess(ProcessHandle):
    """A process in a job: pipes read by threads, the tree ended by ending the job.

    Windows has no poll() on pipes, so each stream has a reader thread that
    stops taking bytes at its share of the budget. `kill` is
    TerminateJobObject: the job holds every process the command started, a
    detached one included, so the kill reaches as far as the start did.
    """

    def __init__(self, seam: Win32, started: Started, job: int) -> None:
        self._seam = seam
        self._started = started
        self._job = job
        self.pid = started.pid
        self.stdin_w = started.stdin_w
        self.stdout_r = started.stdout_r
        self.stderr_r = started.stderr_r
        self.returncode: int | None = None
        self.killed = False

    def forget_job(self) -> None:
        self._job = 0

    def kill(self) -> None:
        if self._job == 0 or (self.returncode is not None and self.killed):
            return
        self.killed = True
        try:
            self._seam.terminate_job(self._job, KILLED)
        except Win32Error:
            pass  # the job is already gone: nothing left to end

    def kill_group_only(self) -> None:
        self.kill()

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._seam.wait_process(self._started.process, 0)
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            self.returncode = self._seam.wait_process(self._started.process, None)
        return self.returncode

    def close(self) -> None:
        for name in ("stdin_w", "stdout_r", "stderr_r"):
            fd = getattr(self, name)
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
                setattr(self, name, -1)
        for handle in (self._started.thread, self._started.process):
            if handle:
                self._seam.close_handle(handle)
        self._started.thread = self._started.process = 0

    def communicate(self, stdin: bytes | None = None, *, timeout: float | None = None,
                    max_output: int = DEFAULT_MAX_OUTPUT, cancelled: object = None,
                    meter: OutputMeter | None = None) -> Outcome:
        """Feed stdin, collect output within budget, end the job at the deadline or overflow."""
        start = time.monotonic()
        deadline = start + timeout if timeout else None
        cap = max(max_output // 2, 1)
        over = threading.Event()
        bufs: dict[str, bytearray] = {}
        threads: list[threading.Thread] = []

        def reader(fd: int, buf: bytearray) -> None:
            while True:
                try:
                    data = os.read(fd, _CHUNK)
                except OSError:
                    return
                if not data:
                    return
                if meter is not None:
                    meter.bytes += len(data)
                room = cap - len(buf)
                if len(data) > room:
                    buf += data[:max(room, 0)]
                    over.set()
                    return
                buf += data

        for name in ("stdout_r", "stderr_r"):
            fd = getattr(self, name)
            if fd >= 0:
                bufs[name] = bytearray()
                threads.append(threading.Thread(target=reader, args=(fd, bufs[name]),
                                                daemon=True))
        if self.stdin_w >= 0:
            fd, payload = self.stdin_w, stdin or b""
            self.stdin_w = -1

            def writer() -> None:
                try:
                    view = memoryview(payload)
                    while view:
                        view = view[os.write(fd, view[:_CHUNK]):]
                except OSError:
                    pass
                finally:
                    os.close(fd)

            threads.append(threading.Thread(target=writer, daemon=True))
        for t in threads:
            t.start()
        timed_out = False
        while self.poll() is None:
            if over.is_set():
                break
            if deadline is not None and time.monotonic() >= deadline:
                timed_out = True
                break
            if cancelled is not None and cancelled():  # type: ignore[operator]
                break
            step = 0.05 if deadline is None else min(0.05, max(deadline - time.monotonic(), 0))
            self._seam.wait_process(self._started.process, step)
        if self.returncode is None:
            self.kill()
            self.wait()
        # The command is gone; a process it left in the job may still hold the
        # pipes. Half a second to drain, then the job ends and the pipes close.
        for t in threads:
            t.join(0.5)
        if any(t.is_alive() for t in threads):
            self.kill()
            for t in threads:
                t.join(2.0)
        truncated = over.is_set()
        self.close()
        out, err = mark_truncated(bytes(bufs.get("stdout_r", b"")),
                                  bytes(bufs.get("stderr_r", b"")), cap, truncated)
        code = self.returncode if self.returncode is not None else 0
        return Outcome(code, out, err, truncated, timed_out,
                       (time.monotonic() - start) * 1000.0)


class _Shared:
    """What parallel runs in this process share: the writable sets of Low runs.

    A label belongs to the runs of one writable set, and a run whose set
    differs waits for nothing -- it is refused (labels are per object, so a
    read-only run beside a writing one would inherit its Low label). Stubs,
    labels and the DACL lock are shared by every stockade process on the
    machine (`journal.Store`).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.low_sets: dict[frozenset[str], int] = {}


PROCESS_SHARED = _Shared()


class _Undo:
    """A stack of named undo steps; each runs once, a failure never skips the rest.

    With a journal, each step that undoes a change to the host is written to
    disk before the change is made (`record`), and the journal goes when every
    step has run cleanly: a stockade that dies in between leaves it for the
    next one to replay.
    """

    def __init__(self, journal: Journal | None = None, run: str = "") -> None:
        self.steps: list[tuple[str, Callable[[], None]]] = []
        self.errors: list[str] = []
        self.journal = journal
        self.run_id = run

    def record(self, **step: str) -> None:
        if self.journal is not None:
            self.journal.write(**step)

    def push(self, name: str, step: Callable[[], None]) -> None:
        self.steps.append((name, step))

    def run(self) -> None:
        while self.steps:
            name, step = self.steps.pop()
            try:
                step()
            except Exception as exc:  # every later step must still run
                self.errors.append(f"{name}: {exc}")
        if self.journal is not None and not self.errors:
            self.journal.done()


class WindowsLaunch(Launch):
    """A prepared Windows run; `start()` walks the tier chain."""

    __slots__ = ("_driver", "_profile", "_shown", "_skipped", "_tiers", "application",
                 "command_line", "limits", "tier")

    def __init__(self, driver: WindowsDriver, profile: Profile, *, application: str,
                 command_line: str, env: dict[str, str], tiers: tuple[str, ...],
                 skipped: dict[str, str], limits: plan.JobLimits, argv: list[str]) -> None:
        super().__init__(argv, env, profile.cwd)
        self._driver = driver
        self._profile = profile
        self._tiers = tiers
        self._skipped = skipped
        self.application = application
        self.command_line = command_line
        self.limits = limits
        self.tier = ""
        self._shown: list[tuple[str, str]] = []

    def start(self, *, stdin: int | None = None, capture: bool = True,
              new_session: bool = True, stdio: Mapping[int, int] | None = None
              ) -> ProcessHandle:
        del new_session  # the job is the group
        d = self._driver
        failures: dict[str, str] = {}
        if set(self._tiers) & {plan.APPCONTAINER, plan.RESTRICTED}:
            self._shown, withheld = d.shown(self._profile)
            if withheld:
                self.report.audit["windows_shown_withheld"] = withheld
        for tier in self._tiers:
            run = d.new_token()
            undo = _Undo(d.store.journal(run), run)
            try:
                handle, job = self._start_tier(tier, undo, stdin=stdin, capture=capture,
                                               stdio=stdio)
            except Win32Error as exc:
                undo.run()
                failures[tier] = str(exc)
                if tier == plan.APPCONTAINER:
                    continue  # any AppContainer setup failure: the next tier
                if tier == plan.RESTRICTED and exc.winerror == plan.ERROR_PRIVILEGE_NOT_HELD:
                    continue
                break
            except BaseException:
                undo.run()
                raise
            self.tier = tier
            d.last_tier = tier
            audit = self.report.audit
            audit["windows_tier"] = tier
            audit["windows_tiers_failed"] = dict(failures)
            # What "the run is over" means on this tier: the job ends what it
            # holds, and a reader of the record must not assume more.
            audit["windows_lifetime"] = plan.LIFETIME[tier]
            audit["windows_job"] = repr(self.limits)

            # What the pipeline registered with also() runs after the driver's own undo.
            after = self._cleanup

            def finish(launch: Launch, undo: _Undo = undo, job: int = job,
                       after: Callable[[Launch], None] | None = after) -> None:
                try:
                    try:
                        launch.report.limit_exceeded = plan.limit_hit(d.seam.job_messages(job))
                    except Win32Error:
                        pass
                    undo.run()
                    if undo.errors:
                        launch.report.audit["windows_cleanup_errors"] = list(undo.errors)
                finally:
                    if after is not None:
                        after(launch)

            self._cleanup = finish
            return handle
        error = plan.refusal(self._profile.mode, self._profile.network, failures, self._skipped)
        self.report.start_failure = StartFailure(str(error))
        raise error

    def _start_tier(self, tier: str, undo: _Undo, *, stdin: int | None,
                    capture: bool, stdio: Mapping[int, int] | None = None
                    ) -> tuple[ProcessHandle, int]:
        d = self._driver
        seam = d.seam
        profile = self._profile
        token: int | None = None
        sid: str | None = None
        capabilities: tuple[str, ...] = ()
        if tier == plan.APPCONTAINER:
            name = plan.profile_name(d.new_token())
            capabilities = plan.capability_sids(profile.network)
            undo.record(op="profile", name=name)
            sid = seam.create_appcontainer_profile(name, capabilities)
            undo.push("DeleteAppContainerProfile", lambda: seam.delete_appcontainer_profile(name))
            derived = seam.derive_appcontainer_sid(name)
            if not sid.upper() == derived.upper() == plan.appcontainer_sid(name).upper():
                raise SandboxUnavailable(
                    f"Windows gave the AppContainer {name} the SID {sid} (derived: {derived}), "
                    f"not the documented derivation {plan.appcontainer_sid(name)}; stockade "
                    "will not set ACEs for "
                    "a SID it cannot account for. Please report this with your Windows version")
            temp = d.scratch(undo, profile)
            # No grant for the program's own directory: system directories
            # already admit every AppContainer, and an ACE set on one (with
            # its propagation through the tree) is not stockade's to make.
            # Tools installed elsewhere, outside what the profile shows back,
            # are named in windows_read_paths.
            acl_plan = acl.appcontainer_plan(profile, sid, scratch=temp,
                                             read_paths=d.read_paths, shown=self._shown)
        elif tier == plan.RESTRICTED:
            token = seam.create_restricted_token(deny_only=(plan.ADMINISTRATORS,))
            undo.push("CloseHandle(token)", lambda: seam.close_handle(token or 0))
            temp = d.scratch(undo, profile)
            acl_plan = acl.low_integrity_plan(profile, scratch=temp, shown=self._shown)
        else:
            temp = d.scratch(undo, profile)
            acl_plan = acl.AclPlan()
        private = temp if not profile.session_tmp else ""
        d.apply(acl_plan, undo, low_tier=tier == plan.RESTRICTED, private=private)
        if tier in (plan.APPCONTAINER, plan.RESTRICTED):
            d.reset_created(acl.writable_paths(profile, temp), undo, skip=private)
        job = seam.create_job(self.limits)
        holder: list[JobProcess] = []

        def close_job() -> None:
            # Windows reuses handle values: once closed, this run's handle may
            # name another run's job, so the process forgets it first.
            for h in holder:
                h.forget_job()
            seam.close_handle(job)

        undo.push("CloseHandle(job)", close_job)
        env = cmdline.command_env(self.env, temp=temp)
        started = seam.create_process(
            self.application, self.command_line, cmdline.environment_block(env), profile.cwd,
            token=token, appcontainer_sid=sid, capabilities=capabilities, stdin=stdin,
            capture=capture, stdio=dict(stdio or {}))
        handle = JobProcess(seam, started, job)
        holder.append(handle)
        undo.push("close process handles", handle.close)
        d.live.add(handle)
        undo.push("forget live process", lambda: d.live.discard(handle))
        try:
            # Suspended until it is in the job: a process that ran first could
            # start a child outside it before the job had it.
            seam.assign_to_job(job, started.process)
            seam.resume_thread(started.thread)
        except BaseException:
            try:
                seam.terminate_job(job, KILLED)
            except Win32Error:
                pass
            raise
        return handle, job


class WindowsDriver(Driver):
    """Commands confined by AppContainer, else a Low-integrity token, inside a job."""

    name = "windows"
    options = WINDOWS_OPTIONS

    def __init__(self, *, win32: Win32 | None = None, allow_job_only: bool = False,
                 allow_open_network: bool = False, tier: str = plan.AUTO,
                 max_pids: int | None = 200, read_paths: Iterable[str] = (),
                 scratch_base: str = "", platform: str | None = None,
                 resolve: Callable[[str], Iterable[str]] = plan.resolve_addresses,
                 new_token: Callable[[], str] | None = None,
                 shared: _Shared | None = None, state_dir: str = "",
                 pid: int | None = None) -> None:
        plan.candidate_tiers("read-only", _none_network(), pinned=tier)  # validates the name
        self._win32 = win32
        self.allow_job_only = allow_job_only
        self.allow_open_network = allow_open_network
        self.pinned = tier
        self.max_pids = max_pids
        self.read_paths = tuple(read_paths)
        self.scratch_base = scratch_base
        self.platform = platform or sys.platform
        self._resolve = resolve
        self._new_token = new_token or (lambda: os.urandom(8).hex())
        # One per process, not per driver: two sandboxes in one program change
        # the same DACLs, and the lock only helps if they share it.
        self.shared = shared if shared is not None else PROCESS_SHARED
        #: Processes started and not yet cleaned up: what `close()` ends.
        self.live: set[JobProcess] = set()
        self.last_tier = ""
        self._last_profile: Profile | None = None
        #: Where the undo journals and the cross-process holds live.
        self.state_dir = state_dir
        self._pid = os.getpid() if pid is None else pid
        self._store: Store | None = None
        #: What replaying a dead stockade's journals could not undo.
        self.recovery_errors: list[str] = []

    @classmethod
    def from_config(cls, config: Any, *, env: Mapping[str, str], workspace: str,
                    state_dir: str, **overrides: Any) -> Driver:
        # The backend's own keys have no field on SandboxConfig: they travel
        # in its backend_options, read through `option()` with their defaults.
        def option(key: str, default: object) -> object:
            read = getattr(config, "option", None)
            return read(key) if read is not None else getattr(config, key, default)

        values: dict[str, Any] = {
            "allow_job_only": bool(option("windows_allow_job_only", False)),
            "allow_open_network": bool(option("windows_allow_open_network", False)),
            "tier": str(option("windows_tier", plan.AUTO) or plan.AUTO),
            "max_pids": getattr(config, "max_pids", 200),
            "read_paths": [p for p in str(option("windows_read_paths", "") or "")
                           .split(";") if p.strip()],
            "scratch_base": ntpath.join(state_dir, "tmp") if state_dir else "",
            "state_dir": state_dir,
        }
        # Seams meant for another backend (the CLI's probe=False is bubblewrap's)
        # are not this one's business.
        from ..base import accepted

        values.update(accepted(cls, overrides))
        return cls(**values)

    @property
    def seam(self) -> Win32:
        if self._win32 is None:
            from .win32 import CtypesWin32

            self._win32 = CtypesWin32()
        return self._win32

    def new_token(self) -> str:
        return self._new_token()

    @property
    def store(self) -> Store:
        """The journals and holds, made on first use; the journals of stockade
        processes that died are replayed then, before this one changes anything."""
        if self._store is None:
            if not self.state_dir:
                raise SandboxUnavailable(
                    "the windows driver keeps a journal of the ACLs and labels it changes, and "
                    "was given no state directory to keep it in; build it through stockade "
                    "(WindowsDriver.from_config) or pass state_dir=")
            started = self.seam.process_started(self._pid)
            if started is None or started < 0:
                raise SandboxUnavailable(
                    f"Windows gave no creation time for this process ({self._pid}), and the "
                    "undo journal names its owner by id and creation time, since Windows "
                    "reuses ids; please report this with your Windows version")
            self._store = Store(self.state_dir, pid=self._pid, started=started,
                                started_of=self.seam.process_started)
            self.recover()
        return self._store

    def recover(self) -> None:
        """Undo what the runs of dead stockade processes left: ACEs, labels, stubs,
        TEMP directories, AppContainer profiles, the labels of what they created."""
        store = self.store
        seam = self.seam
        for name, pid, run, steps in list(store.orphans()):
            for step in reversed(steps):
                op = step.get("op", "")
                try:
                    if op == "profile":
                        seam.delete_appcontainer_profile(step["name"])
                    elif op == "revoke":
                        with store.locked():
                            seam.revoke_sid(step["path"], step["sid"])
                    elif op == "temp":
                        seam.remove_tree(step["path"])
                    elif op == "relabel":
                        with store.locked():
                            seam.reset_low_labels(step["path"])
                    elif op == "hold":
                        with store.locked():
                            last, path, saved = store.release(step["kind"], step["key"], run,
                                                              pid)
                            if last and step["kind"] == "stub":
                                seam.remove_directory(path)
                            elif last:
                                seam.restore_label(path, saved)
                except (Win32Error, OSError, KeyError) as exc:
                    self.recovery_errors.append(f"{op} {step}: {exc}")
            store.forget(name)

    # -- the contract --------------------------------------------------------------

    def available(self) -> None:
        if self.platform != "win32":
            raise SandboxUnavailable(
                f"the windows backend needs Windows, and this is {self.platform}. "
                'On Linux use backend = "bubblewrap", on macOS backend = "seatbelt"')
        _ = self.seam

    def prepare(self, argv: list[str], profile: Profile) -> Launch:
        if not argv:
            raise InvalidCommand("empty argv")
        if self.seam.is_elevated():
            raise plan.elevated_refusal()
        if profile.network.kind == profile.network.HOSTS:
            raise plan.host_allowlist_refusal(profile.network.hosts, self._resolve)
        tiers, skipped = plan.candidate_tiers(
            profile.mode, profile.network, pinned=self.pinned,
            allow_job_only=self.allow_job_only, allow_open_network=self.allow_open_network)
        if not tiers:
            raise plan.refusal(profile.mode, profile.network, {}, skipped)
        application = cmdline.resolve_program(argv[0], profile.env, self.seam.is_file)
        line = cmdline.command_line([application, *argv[1:]])
        writable = ([profile.workspace] if profile.workspace_writable else [])
        writable += list(profile.write_roots)
        acl.check_links(profile, writable, self.seam.is_link)
        limits = plan.job_limits(self.max_pids, profile.max_memory_mb)
        env = cmdline.command_env(profile.env, temp="")
        self._last_profile = profile
        return WindowsLaunch(self, profile, application=application, command_line=line, env=env,
                             tiers=tiers, skipped=skipped, limits=limits,
                             argv=[application, *argv[1:]])

    def explain_failure(self, returncode: int, stderr: bytes) -> str | None:
        return diagnose.explain_failure(returncode, stderr)

    def explain_denial(self, stderr: bytes) -> str | None:
        return diagnose.explain_denial(stderr, tier=self.last_tier or plan.APPCONTAINER,
                                       profile=self._last_profile)

    def doctor(self) -> list[tuple[str, bool, str]]:
        probes: dict[str, str | None] = {}
        if self.platform == "win32":
            for tier in plan.TIERS:
                probes[tier] = self.probe(tier)
        return diagnose.doctor_rows(self.platform, probes, allow_job_only=self.allow_job_only,
                                    allow_open_network=self.allow_open_network,
                                    pinned=self.pinned)

    def probe(self, tier: str) -> str | None:
        """Start `tier`'s mechanism and take it down again: None if it works, else why not."""
        try:
            seam = self.seam
            if tier == plan.APPCONTAINER:
                name = plan.profile_name("probe" + self.new_token())
                seam.create_appcontainer_profile(name, ())
                seam.delete_appcontainer_profile(name)
            elif tier == plan.RESTRICTED:
                seam.close_handle(seam.create_restricted_token())
            else:
                seam.close_handle(seam.create_job(plan.job_limits(self.max_pids, None)))
        except (Win32Error, SandboxUnavailable) as exc:
            return str(exc)
        return None

    def close(self) -> None:
        """End every job still running, and with it every process inside one.

        A process a command started through a route outside the job (WMI, the
        Task Scheduler, a COM local server, explorer, the terminal handoff) is
        not in it and is not ended here: `plan.LIFETIME` says, per tier, which
        routes those are open to, and the audit record names it
        (`windows_lifetime`).
        """
        for handle in list(self.live):
            handle.kill()

    # -- what launches share -------------------------------------------------------------

    def shown(self, profile: Profile) -> tuple[list[tuple[str, str]], dict[str, str]]:
        """(what the profile shows back that this run may open, {withheld path: the link}).

        A shown directory is opened by an inheritable grant or label, which
        reaches wherever the tree's links lead (`apply` refuses a run for a
        link under any such tree). A toolchain's directory is the user's, not
        the run's, and an app-execution alias or a pnpm store under it would
        then refuse every command; so that directory is withheld instead, and
        the audit names it with the link.
        """
        keep: list[tuple[str, str]] = []
        withheld: dict[str, str] = {}
        for path, kind in profile.shown:
            link = self.seam.first_link_under(path) if kind == DIR else ""
            if link:
                withheld[path] = link
            else:
                keep.append((path, kind))
        return keep, withheld

    def scratch(self, undo: _Undo, profile: Profile) -> str:
        """The run's TEMP: the session's directory when it has one, else a new one."""
        if profile.session_tmp:
            return profile.session_tmp
        if not self.scratch_base:
            return ""
        path = ntpath.join(self.scratch_base, "run-" + self.new_token())
        undo.record(op="temp", path=path)
        self.seam.make_directory(path)
        undo.push("remove TEMP", lambda: self.seam.remove_tree(path))
        return path

    def apply(self, acl_plan: acl.AclPlan, undo: _Undo, *, low_tier: bool,
              private: str = "") -> None:
        """Apply `acl_plan` under the machine-wide lock, pushing each step's undo as it lands.

        A DACL change is read-modify-write: two runs (of any stockade process)
        setting ACEs on one path at once would each write back the DACL without
        the other's ACE, and the one lost could be a deny on .git\\hooks under a
        grant that stays. `private` is the run's own TEMP, which no other run
        shares and so does not count toward the writable set parallel
        Low-integrity runs must agree on, and which is new and empty.
        """
        shared = self.shared
        for root in acl.inheriting_roots(acl_plan):
            if private and acl.norm(root) == acl.norm(private):
                continue
            link = self.seam.first_link_under(root)
            if link:
                raise acl.link_refusal(root, link)
        if low_tier:
            key = frozenset(acl.norm(lb.path) for lb in acl_plan.labels
                            if lb.level == plan.LOW_INTEGRITY
                            and (not private or acl.norm(lb.path) != acl.norm(private)))
            with shared.lock:
                others = [s for s, n in shared.low_sets.items() if n and s != key]
                if others:
                    raise Win32Error("label", plan.ERROR_ACCESS_DENIED,
                                     "another command in this process runs at Low integrity "
                                     "with other writable paths, and labels are per path")
                shared.low_sets[key] = shared.low_sets.get(key, 0) + 1

            def release(key: frozenset[str] = key) -> None:
                with shared.lock:
                    shared.low_sets[key] -= 1

            undo.push("release label set", release)
        store = self.store
        for kind, item in acl_plan.steps():
            with store.locked():
                if kind == "stub":
                    self._hold("stub", str(item), "stub", undo)
                elif isinstance(item, acl.Label):
                    self._hold("label", item.path, repr(item), undo, item)
                elif isinstance(item, acl.Ace):
                    self._ace(item, undo)

    def _hold(self, kind: str, path: str, value: str, undo: _Undo,
              label: acl.Label | None = None) -> None:
        """A stub or label shared with every run that planned it, in any stockade
        process: made by the first, taken down by the last (call under the lock)."""
        store = self.store
        seam = self.seam
        key = acl.norm(path)
        undo.record(op="hold", kind=kind, key=key)
        try:
            apply = store.take(kind, key, path, undo.run_id, value,
                               save=(lambda: seam.get_label(path)) if label else (lambda: ""))
        except HoldConflict as exc:
            raise Win32Error("label", plan.ERROR_ACCESS_DENIED, str(exc)) from exc

        def release() -> None:
            with store.locked():
                last, _path, saved = store.release(kind, key, undo.run_id)
                if not last:
                    return
                if label is None:
                    if not seam.remove_directory(path):
                        raise SandboxUnavailable(f"stub {path} is not empty; left in place")
                else:
                    seam.restore_label(path, saved)

        undo.push(f"release {kind} {path}", release)
        if apply:
            if label is None:
                seam.make_directory(path)
            else:
                seam.set_label(path, label)

    def _ace(self, ace: acl.Ace, undo: _Undo) -> None:
        # The undo goes on the stack (and in the journal) before the call:
        # SetNamedSecurityInfo can fail after changing part of a tree, and
        # revoking a SID that holds no ACE there is harmless.
        def revoke() -> None:
            with self.store.locked():
                self.seam.revoke_sid(ace.path, ace.sid)

        if not any(name == f"revoke {ace.path} {ace.sid}" for name, _ in undo.steps):
            undo.record(op="revoke", path=ace.path, sid=ace.sid)
            undo.push(f"revoke {ace.path} {ace.sid}", revoke)
        self.seam.add_aces(ace.path, [ace])

    def reset_created(self, roots: list[str], undo: _Undo, *, skip: str = "") -> None:
        """After the run, what the command created in `roots` loses its Low label.

        A Low-integrity or AppContainer process labels what it creates Low, and
        the label stays: any later Low process on the machine (a browser's
        sandbox, the next command) could then write those files.
        """
        for root in roots:
            if skip and acl.norm(root) == acl.norm(skip):
                continue  # the run's own TEMP goes whole

            def reset(root: str = root) -> None:
                with self.store.locked():
                    self.seam.reset_low_labels(root)

            undo.record(op="relabel", path=root)
            undo.push(f"reset labels under {root}", reset)


def _none_network() -> Any:
    from ...capabilities import NetworkPolicy

    return NetworkPolicy.none()

