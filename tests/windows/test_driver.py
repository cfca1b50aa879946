"""The driver against a recording fake of the Win32 seam: every call, in order, and its undo.

What is checked here is the sequence a run makes and what it leaves
behind; that Windows then enforces what the ACEs and labels say is for the
tests marked `windows` (test_on_windows.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator

import pytest
from win_fakes import CMD, ENV, HOME, STATE, WS, FakeWin32, win_profile

from stockade.capabilities import NetworkPolicy
from stockade.drivers.base import MEMORY, PIDS, Driver, Launch, ProcessHandle
from stockade.drivers.windows import acl, plan
from stockade.drivers.windows.driver import (
    KILLED,
    PROCESS_SHARED,
    JobProcess,
    WindowsDriver,
    WindowsLaunch,
    _Shared,
)
from stockade.drivers.windows.win32 import CtypesWin32, Win32, Win32Error
from stockade.errors import SandboxUnavailable

ALL = NetworkPolicy.allow_all()
PRIV = Win32Error("CreateProcessAsUserW", plan.ERROR_PRIVILEGE_NOT_HELD)


#: The state directories the tests' drivers journal in, removed after each test.
_STATE_DIRS: list[str] = []


@pytest.fixture(autouse=True)
def _remove_state_dirs() -> Iterator[None]:
    yield
    while _STATE_DIRS:
        shutil.rmtree(_STATE_DIRS.pop(), ignore_errors=True)


def _state_dir() -> str:
    made = tempfile.mkdtemp(prefix="stockade-win-state-")
    _STATE_DIRS.append(made)
    return made


def _driver(fake: FakeWin32, **kw: object) -> WindowsDriver:
    tokens = iter(f"{i:04x}" for i in range(1000))
    kw.setdefault("state_dir", _state_dir())
    d = WindowsDriver(win32=fake, platform="win32", scratch_base=f"{STATE}\\tmp",
                      new_token=lambda: next(tokens), shared=_Shared(),
                      **kw)  # type: ignore[arg-type]
    return d


def _run(d: WindowsDriver, profile: object, argv: list[str] | None = None) -> Launch:
    launch = d.prepare(argv or ["cmd", "/c", "echo hi"], profile)  # type: ignore[arg-type]
    proc = launch.start()
    proc.communicate(timeout=5)
    launch.cleanup()
    return launch


def _untouched(fake: FakeWin32) -> None:
    """Every ACE revoked, label restored, stub removed, profile deleted, handle closed."""
    assert fake.dacl == {}
    assert fake.labels == {}
    assert fake.dirs == set()
    assert fake.profiles == set()
    assert fake.handles == set()


# -- the contract ---------------------------------------------------------------------


def test_the_driver_is_a_driver_and_imports_everywhere() -> None:
    out = subprocess.run([sys.executable, "-c", "import stockade.drivers.windows.driver"],
                         capture_output=True, check=False)
    assert out.returncode == 0, out.stderr
    assert issubclass(WindowsDriver, Driver) and WindowsDriver.name == "windows"
    assert issubclass(WindowsLaunch, Launch) and issubclass(JobProcess, ProcessHandle)
    opts = {o.key: o for o in WindowsDriver.options}
    assert opts["windows_allow_job_only"].kind == "bool"
    assert opts["windows_allow_job_only"].default is False
    assert opts["windows_allow_open_network"].default is False
    assert opts["windows_tier"].default == "auto"
    assert isinstance(FakeWin32(), Win32)


def test_from_config_reads_the_windows_keys() -> None:
    class Config:
        windows_allow_job_only = True
        windows_tier = "restricted-token"
        max_pids = 64

    d = WindowsDriver.from_config(Config(), env={}, workspace=WS, state_dir=STATE,
                                  win32=FakeWin32())
    assert isinstance(d, WindowsDriver)
    assert d.allow_job_only and not d.allow_open_network
    assert d.pinned == plan.RESTRICTED and d.max_pids == 64
    assert d.scratch_base == f"{STATE}\\tmp"


def test_off_windows_available_and_the_real_seam_refuse() -> None:
    d = WindowsDriver(platform="linux")
    with pytest.raises(SandboxUnavailable, match="needs Windows, and this is linux"):
        d.available()
    if sys.platform != "win32":
        with pytest.raises(SandboxUnavailable, match="needs Windows"):
            CtypesWin32()
    assert d.doctor() == [("windows", False,
                           "this is linux; the windows backend needs Windows")]


# -- tier 1 ---------------------------------------------------------------------------


def test_appcontainer_run_call_sequence_and_exact_undo() -> None:
    fake = FakeWin32()
    d = _driver(fake)
    launch = _run(d, win_profile(network=ALL))
    names = fake.names()
    order = ["create_appcontainer_profile", "make_directory", "add_aces", "create_job",
             "create_process", "assign_to_job", "resume_thread", "wait_process",
             "job_messages", "revoke_sid", "remove_directory", "remove_tree",
             "delete_appcontainer_profile"]
    positions = [names.index(n) for n in order]
    assert positions == sorted(positions), names
    job = next(c[1] for c in fake.calls if c[0] == "assign_to_job")
    # The job is closed (ending whatever is left in it) before any ACE goes.
    assert fake.calls.index(("close_handle", job)) < names.index("revoke_sid")
    # Nothing is revoked before the wait, and the profile goes last of all.
    assert names.index("revoke_sid") > names.index("wait_process")
    assert names[-1] == "delete_appcontainer_profile"
    create = next(c for c in fake.calls if c[0] == "create_appcontainer_profile")
    assert create[2] == (plan.INTERNET_CLIENT, plan.PRIVATE_NETWORK_CLIENT_SERVER)
    proc = next(c for c in fake.calls if c[0] == "create_process")
    assert proc[1] == CMD and proc[2] == f'{CMD} /d /s /c "echo hi"'
    assert proc[6] == plan.appcontainer_sid(str(create[1])) and proc[5] is None
    assert "TEMP=" in str(proc[3]) and "TMPDIR" not in str(proc[3])
    assert launch.report.audit["windows_tier"] == plan.APPCONTAINER
    _untouched(fake)


def test_aces_added_are_exactly_the_plan_and_each_path_is_revoked_once() -> None:
    fake = FakeWin32()
    d = _driver(fake)
    prof = win_profile(network=ALL)
    _run(d, prof)
    name = next(c[1] for c in fake.calls if c[0] == "create_appcontainer_profile")
    sid = plan.appcontainer_sid(str(name))
    added = [a for c in fake.calls if c[0] == "add_aces" for a in c[2]]  # type: ignore[attr-defined]
    temp = next(str(c[1]) for c in fake.calls
                if c[0] == "make_directory" and str(c[1]).startswith(f"{STATE}\\tmp\\run-"))
    expected = acl.appcontainer_plan(prof, sid, scratch=temp).aces
    assert not [a for a in added if a.path.lower().startswith("c:\\windows")]
    assert set(added) == set(expected)
    revoked = [(c[1], c[2]) for c in fake.calls if c[0] == "revoke_sid"]
    assert sorted(revoked) == sorted({(a.path, sid) for a in expected})


def test_network_none_gets_no_capability() -> None:
    fake = FakeWin32()
    _run(_driver(fake), win_profile("read-only"))
    create = next(c for c in fake.calls if c[0] == "create_appcontainer_profile")
    assert create[2] == ()


@pytest.mark.parametrize("failing", ["add_aces", "create_job", "create_process",
                                     "assign_to_job", "resume_thread"])
def test_a_failed_start_removes_everything_it_added(failing: str) -> None:
    fake = FakeWin32()
    fake.fail[failing] = Win32Error(failing, 5)
    d = _driver(fake)
    # read-only with network none: only the AppContainer may run it.
    launch = d.prepare(["cmd", "/c", "dir"], win_profile("workspace-write"))
    with pytest.raises(SandboxUnavailable, match=f"{failing} failed"):
        launch.start()
    _untouched(fake)
    assert launch.report.start_failure is not None
    if failing in ("assign_to_job", "resume_thread"):
        # The suspended process never ran a line outside the job: it was ended.
        assert "terminate_job" in fake.names()


def test_appcontainer_failure_degrades_to_the_restricted_token() -> None:
    fake = FakeWin32()
    fake.fail["create_appcontainer_profile"] = Win32Error("CreateAppContainerProfile", 5)
    d = _driver(fake)
    launch = _run(d, win_profile("read-only", network=ALL))
    names = fake.names()
    assert "create_restricted_token" in names and "add_aces" not in names
    assert "set_label" in names
    proc = next(c for c in fake.calls if c[0] == "create_process")
    assert proc[5] is not None and proc[6] is None  # a token, no AppContainer
    assert launch.report.audit["windows_tier"] == plan.RESTRICTED
    assert "CreateAppContainerProfile" in str(launch.report.audit["windows_tiers_failed"])
    _untouched(fake)


def test_appcontainer_failure_after_aces_undoes_them_before_tier_two() -> None:
    fake = FakeWin32()
    fake.fail["create_job"] = Win32Error("CreateJobObjectW", 1450)
    d = _driver(fake, allow_job_only=True)
    with pytest.raises(SandboxUnavailable):
        d.prepare(["cmd"], win_profile("read-only", network=ALL)).start()
    names = fake.names()
    # Tier 1's ACEs were revoked and its profile deleted before tier 2 began.
    assert names.index("delete_appcontainer_profile") < names.index("create_restricted_token")
    _untouched(fake)


def test_privilege_not_held_degrades_to_job_only_only_when_allowed() -> None:
    fake = FakeWin32()
    fake.fail["create_appcontainer_profile"] = Win32Error("CreateAppContainerProfile", 5)
    fake.fail["create_restricted_token"] = PRIV
    with pytest.raises(SandboxUnavailable) as err:
        _driver(fake).prepare(["cmd"], win_profile("read-only", network=ALL)).start()
    text = str(err.value)
    assert "appcontainer: CreateAppContainerProfile failed" in text
    assert "restricted-token: CreateProcessAsUserW failed: error 1314" in text
    assert "windows_allow_job_only" in text
    assert "create_process" not in fake.names()
    _untouched(fake)

    fake2 = FakeWin32()
    fake2.fail["create_appcontainer_profile"] = Win32Error("CreateAppContainerProfile", 5)
    fake2.fail["create_restricted_token"] = PRIV
    launch = _run(_driver(fake2, allow_job_only=True), win_profile("read-only", network=ALL))
    assert launch.report.audit["windows_tier"] == plan.JOB_ONLY
    proc = next(c for c in fake2.calls if c[0] == "create_process")
    assert proc[5] is None and proc[6] is None
    _untouched(fake2)


def test_another_restricted_token_failure_does_not_degrade() -> None:
    fake = FakeWin32()
    fake.fail["create_appcontainer_profile"] = Win32Error("CreateAppContainerProfile", 5)
    fake.fail["create_restricted_token"] = Win32Error("CreateRestrictedToken", 87)
    with pytest.raises(SandboxUnavailable, match="error 87"):
        _driver(fake, allow_job_only=True).prepare(
            ["cmd"], win_profile("read-only", network=ALL)).start()
    assert "create_process" not in fake.names()


@pytest.mark.parametrize("mode", ["read-only", "workspace-write"])
def test_job_only_never_runs_a_filesystem_mode_by_default(mode: str) -> None:
    fake = FakeWin32()
    with pytest.raises(SandboxUnavailable, match="windows_allow_job_only"):
        _driver(fake, tier=plan.JOB_ONLY).prepare(["cmd"], win_profile(mode, network=ALL))
    assert fake.calls == []
    launch = _run(_driver(fake, tier=plan.JOB_ONLY, allow_job_only=True),
                  win_profile(mode, network=ALL))
    assert launch.report.audit["windows_tier"] == plan.JOB_ONLY


def test_network_none_never_degrades_past_the_appcontainer() -> None:
    fake = FakeWin32()
    fake.fail["create_appcontainer_profile"] = Win32Error("CreateAppContainerProfile", 5)
    with pytest.raises(SandboxUnavailable, match="cannot close the network"):
        _driver(fake, allow_job_only=True).prepare(["cmd"], win_profile()).start()
    assert "create_restricted_token" not in fake.names()


def test_a_sid_windows_disagrees_on_stops_the_run() -> None:
    class Odd(FakeWin32):
        def create_appcontainer_profile(self, name: str, capabilities: tuple[str, ...]) -> str:
            super().create_appcontainer_profile(name, capabilities)
            return "S-1-15-2-1-2-3-4-5-6-7"

    fake = Odd()
    with pytest.raises(SandboxUnavailable, match="documented derivation"):
        _driver(fake).prepare(["cmd"], win_profile(network=ALL)).start()
    assert "add_aces" not in fake.names()
    _untouched(fake)


# -- refusals before anything happens -----------------------------------------------------


def test_host_allowlist_hard_fails_with_the_addresses() -> None:
    fake = FakeWin32()
    d = _driver(fake, resolve=lambda host: ["203.0.113.7"])
    with pytest.raises(SandboxUnavailable, match=r"example\.com -> 203\.0\.113\.7"):
        d.prepare(["cmd"], win_profile(network=NetworkPolicy.allow_hosts(["example.com"])))
    assert fake.calls == []


def test_a_junction_on_a_protected_path_refuses_the_run() -> None:
    fake = FakeWin32(links=(f"{WS}\\.git",))
    with pytest.raises(SandboxUnavailable, match="junction on the way"):
        _driver(fake).prepare(["cmd"], win_profile(network=ALL))
    assert fake.calls == []


# -- tier 2 ---------------------------------------------------------------------------


def test_restricted_tier_restores_every_label_it_set() -> None:
    fake = FakeWin32()
    aws = f"{HOME}\\.aws"
    fake.labels[aws.lower()] = "S:(ML;OICI;NW;;;ME)"  # a label that was there before
    d = _driver(fake, tier=plan.RESTRICTED)
    _run(d, win_profile("read-only", network=ALL))
    assert fake.labels == {aws.lower(): "S:(ML;OICI;NW;;;ME)"}
    restored = [c for c in fake.calls if c[0] == "restore_label" and c[1] == aws]
    assert restored == [("restore_label", aws, "S:(ML;OICI;NW;;;ME)")]


def test_the_restricted_tier_never_runs_a_writing_mode() -> None:
    # Low-labelled, the workspace's own Full Control DACL lets `move .git old`
    # through FILE_DELETE_CHILD on the parent: only the AppContainer writes.
    fake = FakeWin32()
    with pytest.raises(SandboxUnavailable, match="runs only read-only commands"):
        _driver(fake, tier=plan.RESTRICTED).prepare(["cmd"], win_profile(network=ALL))
    assert fake.calls == []
    fake.fail["create_appcontainer_profile"] = Win32Error("CreateAppContainerProfile", 5)
    with pytest.raises(SandboxUnavailable, match="workspace-write needs the AppContainer"):
        _driver(fake).prepare(["cmd"], win_profile(network=ALL)).start()
    assert "create_restricted_token" not in fake.names()


def test_parallel_low_integrity_runs_with_different_writable_sets_are_refused() -> None:
    fake = FakeWin32()
    d = _driver(fake, tier=plan.RESTRICTED)
    s1, s2 = f"{STATE}\\tmp\\s1", f"{STATE}\\tmp\\s2"
    first = d.prepare(["cmd"], win_profile("read-only", network=ALL, session_tmp=s1))
    first.start()
    # Another session's TEMP beside it would be labelled Low for the first as well.
    with pytest.raises(SandboxUnavailable, match="labels are per path"):
        d.prepare(["cmd"], win_profile("read-only", network=ALL, session_tmp=s2)).start()
    second = d.prepare(["cmd"], win_profile("read-only", network=ALL, session_tmp=s1))
    second.start()
    first.cleanup()
    assert fake.labels  # the second run still holds them
    second.cleanup()
    assert fake.labels == {}


# -- shared state under parallel runs --------------------------------------------------------


def test_a_stub_stays_until_the_last_run_that_planned_it_ends() -> None:
    fake = FakeWin32()
    d = _driver(fake)
    a = d.prepare(["cmd"], win_profile(network=ALL))
    b = d.prepare(["cmd"], win_profile(network=ALL))
    a.start()
    b.start()
    stub = f"{WS}\\.stockade".lower()
    assert stub in fake.dirs
    assert [c for c in fake.calls if c == ("make_directory", f"{WS}\\.stockade")] == [
        ("make_directory", f"{WS}\\.stockade")]
    a.cleanup()
    assert stub in fake.dirs
    b.cleanup()
    _untouched(fake)


def test_dacl_changes_are_serialised() -> None:
    fake = FakeWin32()
    d = _driver(fake)
    inside: list[int] = []
    overlap: list[bool] = []
    real = fake.add_aces

    def add(path: str, aces: list) -> None:  # type: ignore[type-arg]
        inside.append(1)
        overlap.append(len(inside) > 1)
        threading.Event().wait(0.001)
        real(path, aces)
        inside.pop()

    fake.add_aces = add  # type: ignore[method-assign]
    launches = [d.prepare(["cmd"], win_profile(network=ALL)) for _ in range(4)]
    threads = [threading.Thread(target=launch.start) for launch in launches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlap and not any(overlap)
    for launch in launches:
        launch.cleanup()
    _untouched(fake)


# -- the job ends what the run started ----------------------------------------------------------


def _real(script: str) -> FakeWin32:
    return FakeWin32(run=[sys.executable, "-c", script])


def test_output_reaches_the_caller_and_the_exit_code_too() -> None:
    fake = _real("import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)")
    launch = _driver(fake).prepare(["cmd"], win_profile(network=ALL))
    out = launch.start().communicate(timeout=10)
    launch.cleanup()
    assert (out.returncode, out.stdout.strip(), out.stderr.strip()) == (3, b"out", b"err")
    assert not out.timed_out and not out.truncated
    _untouched(fake)


def test_timeout_ends_the_job() -> None:
    fake = _real("import time; time.sleep(30)")
    launch = _driver(fake).prepare(["cmd"], win_profile(network=ALL))
    out = launch.start().communicate(timeout=0.5)
    launch.cleanup()
    assert out.timed_out
    assert ("terminate_job", next(c[1] for c in fake.calls if c[0] == "assign_to_job"),
            KILLED) in fake.calls
    assert out.duration_ms < 10_000
    _untouched(fake)


def test_output_overflow_ends_the_job() -> None:
    fake = _real("import sys\nwhile True: sys.stdout.write('x' * 65536)")
    launch = _driver(fake).prepare(["cmd"], win_profile(network=ALL))
    out = launch.start().communicate(timeout=20, max_output=1 << 16)
    launch.cleanup()
    assert out.truncated and not out.timed_out
    assert b"output truncated" in out.stdout
    assert "terminate_job" in fake.names()


def test_stdin_is_fed() -> None:
    fake = _real("import sys; sys.stdout.write(sys.stdin.read().upper())")
    launch = _driver(fake).prepare(["cmd"], win_profile(network=ALL))
    out = launch.start().communicate(b"hello", timeout=10)
    launch.cleanup()
    assert out.stdout == b"HELLO"


def test_kill_ends_the_job_and_close_session_needs_nothing_left() -> None:
    fake = _real("import time; time.sleep(30)")
    d = _driver(fake)
    launch = d.prepare(["cmd"], win_profile(network=ALL))
    proc = launch.start()
    proc.kill()
    assert proc.wait() != 0
    proc.close()
    launch.cleanup()
    assert "terminate_job" in fake.names()
    _untouched(fake)


def test_limits_reach_the_job_and_a_hit_is_reported() -> None:
    fake = FakeWin32()
    d = _driver(fake, max_pids=32)
    launch = d.prepare(["cmd"], win_profile(network=ALL, max_memory_mb=256))
    proc = launch.start()
    job = next(c for c in fake.calls if c[0] == "create_job")
    assert job[1:] == (0x2508, 32, 256 << 20, 0xFF)
    handle = next(int(str(c[1])) for c in fake.calls if c[0] == "assign_to_job")
    fake.messages[handle] = [6, plan.JOB_OBJECT_MSG_PROCESS_MEMORY_LIMIT]
    proc.communicate(timeout=5)
    launch.cleanup()
    assert launch.report.limit_exceeded == MEMORY

    launch = d.prepare(["cmd"], win_profile(network=ALL))
    proc = launch.start()
    handle = [int(str(c[1])) for c in fake.calls if c[0] == "assign_to_job"][-1]
    fake.messages[handle] = [plan.JOB_OBJECT_MSG_ACTIVE_PROCESS_LIMIT]
    proc.communicate(timeout=5)
    launch.cleanup()
    assert launch.report.limit_exceeded == PIDS


# -- explaining --------------------------------------------------------------------------------


def test_denials_are_attributed_from_windows_error_text() -> None:
    d = _driver(FakeWin32())
    prof = win_profile(network=ALL)
    d.prepare(["cmd"], prof)
    assert d.explain_denial(b"Access is denied.\r\n") == (
        "blocked by the sandbox (the AppContainer): access is denied")
    hooks = f"{WS}\\.git\\hooks\\pre-commit"
    assert "protected metadata" in str(d.explain_denial(
        f"Set-Content : Access to the path '{hooks}' is denied.".encode()))
    assert "hidden credential store" in str(d.explain_denial(
        b"PermissionError: [WinError 5] Access is denied: 'C:\\\\Users\\\\dev\\\\.aws'"
        .replace(b"\\\\", b"\\")))
    assert "outside what this command may reach" in str(d.explain_denial(
        b"Error: ERROR_ACCESS_DENIED opening 'D:\\elsewhere\\x.txt'"))
    assert "network access is off" in str(d.explain_denial(
        b"OSError: [WinError 10013] An attempt was made to access a socket in a way forbidden "
        b"by its access permissions"))
    utf16 = "Access is denied.".encode("utf-16-le")
    assert d.explain_denial(utf16) is not None
    assert d.explain_denial(b"fatal: not a git repository") is None


def test_start_failures_are_told_from_the_exit_code() -> None:
    d = _driver(FakeWin32())
    assert "STATUS_DLL_INIT_FAILED" in str(d.explain_failure(0xC0000142, b""))
    assert "STATUS_DLL_INIT_FAILED" in str(d.explain_failure(-1073741502, b""))
    assert d.explain_failure(1, b"error: failed") is None


def test_doctor_names_which_tiers_work_and_why_not() -> None:
    fake = FakeWin32()
    fake.fail["create_restricted_token"] = PRIV
    rows = {name: (ok, why) for name, ok, why in _driver(fake).doctor()}
    assert rows["windows tier appcontainer"][0] is True
    assert rows["windows tier restricted-token"] == (
        False, "CreateProcessAsUserW failed: error 1314")
    ok, why = rows["windows tier job-object"]
    assert ok and "NO filesystem" in why and "windows_allow_job_only = false" in why
    assert rows["windows network allowlist"][0] is False
    # The probes leave nothing behind.
    _untouched(fake)


def test_env_reaching_the_process_is_scrubbed() -> None:
    fake = FakeWin32()
    env = dict(ENV, PythonStartup="C:\\evil.py", COR_PROFILER_PATH="C:\\evil.dll")
    _run(_driver(fake), win_profile(network=ALL, env=env))
    block = str(next(c for c in fake.calls if c[0] == "create_process")[3])
    assert "PythonStartup" not in block and "COR_PROFILER" not in block
    assert "SystemRoot=C:\\Windows\x00" in block
    assert "TEMP=C:\\Users\\dev\\AppData\\Local\\stockade\\tmp\\run-" in block


def test_what_the_pipeline_adds_runs_after_the_driver_undo() -> None:
    fake = FakeWin32()
    launch = _driver(fake).prepare(["cmd"], win_profile(network=ALL))
    seen: list[str] = []
    launch.also(lambda: seen.append(fake.names()[-1]))
    launch.start().communicate(timeout=5)
    launch.cleanup()
    launch.cleanup()  # once only
    assert seen == ["delete_appcontainer_profile"]
    _untouched(fake)


def test_a_cleanup_step_that_fails_does_not_skip_the_rest() -> None:
    fake = FakeWin32()
    launch = _driver(fake).prepare(["cmd"], win_profile(network=ALL))
    launch.start().communicate(timeout=5)
    fake.fail["revoke_sid"] = Win32Error("SetNamedSecurityInfoW", 5)
    launch.cleanup()
    assert fake.profiles == set() and fake.dirs == set()
    errors = launch.report.audit["windows_cleanup_errors"]
    assert isinstance(errors, list) and errors and "SetNamedSecurityInfoW" in errors[0]


def test_close_ends_every_job_still_running() -> None:
    fake = _real("import time; time.sleep(30)")
    d = _driver(fake)
    launch = d.prepare(["cmd"], win_profile(network=ALL))
    proc = launch.start()
    assert d.live == {proc}
    d.close()
    assert proc.wait() != 0
    launch.cleanup()
    assert d.live == set()
    _untouched(fake)


def test_kill_after_cleanup_cannot_reach_a_reused_job_handle() -> None:
    fake = FakeWin32()
    launch = _driver(fake).prepare(["cmd"], win_profile(network=ALL))
    proc = launch.start()
    proc.communicate(timeout=5)
    launch.cleanup()
    before = fake.names().count("terminate_job")
    proc.kill()
    assert fake.names().count("terminate_job") == before


def test_without_a_scratch_directory_the_host_temp_is_kept() -> None:
    fake = FakeWin32()
    d = WindowsDriver(win32=fake, platform="win32", new_token=lambda: "00aa", shared=_Shared(),
                      state_dir=_state_dir())
    env = dict(ENV, TEMP="C:\\Users\\dev\\AppData\\Local\\Temp")
    _run(d, win_profile(network=ALL, env=env))
    block = str(next(c for c in fake.calls if c[0] == "create_process")[3])
    assert "TEMP=C:\\Users\\dev\\AppData\\Local\\Temp\x00" in block


def test_drivers_in_one_process_share_the_acl_lock_and_registries() -> None:
    assert WindowsDriver(win32=FakeWin32()).shared is WindowsDriver().shared is PROCESS_SHARED


def test_doctor_rows_for_a_pinned_tier_and_the_network_waiver() -> None:
    from stockade.drivers.windows.diagnose import doctor_rows

    rows = doctor_rows("win32", {t: None for t in plan.TIERS}, allow_job_only=True,
                       allow_open_network=False, pinned=plan.APPCONTAINER)
    named = {name: (ok, why) for name, ok, why in rows}
    assert named["windows tier appcontainer"][0] is True
    assert named["windows tier restricted-token"] == (
        False, "not used: windows_tier = 'appcontainer'")
    rows = doctor_rows("win32", {t: None for t in plan.TIERS}, allow_job_only=False,
                       allow_open_network=False, pinned="auto")
    named = {name: (ok, why) for name, ok, why in rows}
    assert "network NOT closed" in named["windows tier restricted-token"][1]
    assert "windows_allow_open_network = false" in named["windows tier restricted-token"][1]


@pytest.mark.parametrize("failing", ["set_label", "create_job", "create_process",
                                     "assign_to_job"])
def test_a_failed_restricted_start_restores_every_label(failing: str) -> None:
    fake = FakeWin32()
    fake.fail[failing] = Win32Error(failing, 5)
    aws = f"{HOME}\\.aws"
    fake.labels[aws.lower()] = "S:(ML;OICI;NW;;;ME)"
    d = _driver(fake, tier=plan.RESTRICTED)
    with pytest.raises(SandboxUnavailable, match=f"{failing} failed"):
        d.prepare(["cmd"], win_profile("read-only", network=ALL)).start()
    assert fake.labels == {aws.lower(): "S:(ML;OICI;NW;;;ME)"}
    assert fake.dirs == set() and fake.handles == set()
    # And a later run starts clean: nothing was left counted in the registries.
    del fake.fail[failing]
    _run(d, win_profile("read-only", network=ALL))
    assert fake.labels == {aws.lower(): "S:(ML;OICI;NW;;;ME)"}
    assert os.listdir(d.store.holds_dir) == [] and os.listdir(d.store.journal_dir) == []


def test_stockade_doctor_shows_the_tiers_and_calls_it_available_only_when_one_confines(
        ) -> None:
    from stockade import doctor

    fake = FakeWin32()
    entry = doctor.windows_status(driver=_driver(fake))
    assert entry["available"] is True
    checks = [row["check"] for row in entry["tiers"]]  # type: ignore[attr-defined]
    assert "windows tier appcontainer" in checks and "windows tier job-object" in checks
    # Only the job object starts: that is no filesystem boundary, so not available.
    fake = FakeWin32()
    fake.fail["create_appcontainer_profile"] = Win32Error("CreateAppContainerProfile", 5)
    fake.fail["create_restricted_token"] = PRIV
    entry = doctor.windows_status(driver=_driver(fake))
    assert entry["available"] is False and "confines the filesystem" in str(entry["why"])
    assert doctor.windows_status()["available"] is False  # this is Linux


@pytest.mark.parametrize("tier", plan.TIERS)
def test_the_audit_record_says_what_outlives_a_run_on_the_tier_that_ran(tier: str) -> None:
    launch = _run(_driver(FakeWin32(), tier=tier, allow_job_only=True),
                  win_profile("read-only", network=ALL))
    assert launch.report.audit["windows_tier"] == tier
    assert launch.report.audit["windows_lifetime"] == plan.LIFETIME[tier]
