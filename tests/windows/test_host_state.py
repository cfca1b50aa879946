"""What a Windows run leaves on the host, and what it is built from.

Each test here failed before its fix:
- a profile built by the core from a Windows logon's environment hid nothing
  (it read HOME, which Windows does not set) and put stockade's state in a
  shared `\\tmp`;
- what a Low process created kept its Low label;
- a stockade that died left ACEs, labels, stubs and profiles for good, and
  for as long as another process had its id (Windows reuses them);
- two stockade processes undid each other's stubs and labels;
- an inheritable grant reached through hard links and junctions;
- an elevated stockade ran commands whose token kept Administrators;
- what a profile shows back out of hidden AppData (per-user Python, npm's
  globals) got no grant, so a tool installed per user could not run;
- a full-access run planned a Low label and a grant on the drive root.
"""

from __future__ import annotations

import os
import tempfile

import pytest
from win_fakes import CMD, HOME, STATE, WS, FakeWin32, win_profile
from win_host import SECRETS, TOOLING, WinHost

from stockade import paths
from stockade.capabilities import NetworkPolicy
from stockade.drivers.windows import acl, plan
from stockade.drivers.windows.driver import WindowsDriver, _Shared
from stockade.errors import SandboxUnavailable
from stockade.paths import data_dir, state_dir

ALL = NetworkPolicy.allow_all()


def _driver(fake: FakeWin32, state: str, **kw: object) -> WindowsDriver:
    # Tokens unique across drivers, as random ones are: two "processes" here share a fake.
    tokens = iter(os.urandom(4).hex() for _ in range(1000))
    return WindowsDriver(win32=fake, platform="win32", scratch_base=f"{STATE}\\tmp",
                         new_token=lambda: next(tokens), shared=_Shared(), state_dir=state,
                         **kw)  # type: ignore[arg-type]


def _untouched(fake: FakeWin32, d: WindowsDriver) -> None:
    assert fake.dacl == {} and fake.inherited == {}
    assert not [p for p, sddl in fake.labels.items() if ";;;LW)" in sddl]
    assert fake.dirs == set() and fake.profiles == set() and fake.handles == set()
    assert os.listdir(d.store.holds_dir) == [] and os.listdir(d.store.journal_dir) == []


@pytest.fixture
def state(tmp_path: object) -> str:
    return tempfile.mkdtemp(prefix="state-", dir=str(tmp_path))


# -- W1: the profile from a Windows logon's environment ------------------------------------


@pytest.fixture
def win(tmp_path: object) -> WinHost:
    return WinHost(os.path.join(str(tmp_path), "host"))


def test_state_and_ledger_live_in_local_app_data(win: WinHost) -> None:
    assert state_dir(win.env, platform="win32") == os.path.join(win.local, "stockade", "state")
    assert data_dir(win.env, "win32") == os.path.join(win.local, "stockade", "data")
    with win.core() as core:
        assert core.state_dir == os.path.join(win.local, "stockade", "state")
        assert str(core.ledger.path).startswith(os.path.join(win.local, "stockade", "data"))


def test_no_profile_directory_is_an_error_not_a_shared_directory() -> None:
    with pytest.raises(SandboxUnavailable, match="USERPROFILE"):
        state_dir({"PATH": "C:\\Windows"}, platform="win32")


def test_without_a_logon_s_variables_the_home_is_the_profile_api_s(
        win: WinHost, monkeypatch: pytest.MonkeyPatch) -> None:
    # A service or scheduled task may start stockade with no USERPROFILE: it
    # refused to run, where Windows itself resolves the home from the profile.
    bare = {k: v for k, v in win.env.items() if k not in (
        "USERPROFILE", "APPDATA", "LOCALAPPDATA", "HOMEDRIVE", "HOMEPATH")}
    assert paths.with_windows_profile(bare, lambda: win.home)["USERPROFILE"] == win.home
    assert paths.with_windows_profile(win.env, lambda: "elsewhere") == win.env
    assert "USERPROFILE" not in paths.with_windows_profile(bare, lambda: "")
    assert paths.windows_profile_directory() == ""  # off Windows
    monkeypatch.setattr(os, "environ", {**bare, "HOME": "/somewhere/else"})
    monkeypatch.setattr("stockade.core.windows_profile_directory", lambda: win.home)
    with win.core_from_environ() as core:
        assert core.state_dir == os.path.join(win.local, "stockade", "state")
        assert win.profile(core).home == win.home


@pytest.mark.parametrize("rel", SECRETS)
def test_the_core_hides_the_home_s_stores_on_windows(win: WinHost, rel: str) -> None:
    with win.core() as core:
        profile = win.profile(core)
        assert profile.home == win.home
        path = os.path.join(win.home, rel)
        assert any(path == h or path.startswith(h + os.sep) for h, _ in profile.hidden), (
            path, profile.hidden)


@pytest.mark.parametrize("rel", TOOLING)
def test_toolchains_under_app_data_are_shown_back(win: WinHost, rel: str) -> None:
    with win.core() as core:
        profile = win.profile(core)
        path = os.path.join(win.home, rel)
        assert any(path == s or path.startswith(s + os.sep) for s, _ in profile.shown), path


def test_the_acl_plan_of_a_core_profile_denies_the_stores(win: WinHost, state: str) -> None:
    fake = FakeWin32()
    with win.core() as core:
        profile = win.profile(core)
        d = _driver(fake, state)
        launch = d.prepare(["cmd", "/c", "ver"], profile)
        launch.start().communicate(timeout=5)
        denied = {str(a.path) for c in fake.calls if c[0] == "add_aces"
                  for a in c[2] if a.access == acl.DENY}  # type: ignore[attr-defined]
        launch.cleanup()
    assert os.path.join(win.home, ".aws") in denied
    assert win.appdata in denied and win.local in denied
    assert os.path.join(win.ws, ".git", "hooks") in denied
    _untouched(fake, d)


# -- W3: what a Low process created ---------------------------------------------------------


@pytest.mark.parametrize("tier", [plan.APPCONTAINER, plan.RESTRICTED])
def test_what_the_command_created_loses_its_low_label(tier: str, state: str) -> None:
    fake = FakeWin32()
    session = f"{STATE}\\tmp\\s1"
    # Tier 2 writes only its TEMP (the session's); the AppContainer the workspace too.
    made = [f"{session}\\cache.bin"] + ([f"{WS}\\build\\out.o"]
                                         if tier == plan.APPCONTAINER else [])

    def command(fs: FakeWin32, low: bool) -> None:
        for path in made:
            fs.create_object(path, low=low)

    fake.on_process = command
    mode = "workspace-write" if tier == plan.APPCONTAINER else "read-only"
    d = _driver(fake, state, tier=tier)
    launch = d.prepare(["cmd", "/c", "ver"], win_profile(mode, network=ALL, session_tmp=session))
    launch.start().communicate(timeout=5)
    assert any(";;;LW)" in fake.labels.get(p.lower(), "") for p in made)  # the model works
    launch.cleanup()
    for path in made:
        assert ";;;LW)" not in fake.labels.get(path.lower(), ""), path
    names = fake.names()
    # The command's processes are gone (job closed) before the labels are reset.
    assert max(i for i, n in enumerate(names) if n == "close_handle") > 0
    assert names.index("reset_low_labels") > names.index("wait_process")


def test_the_job_only_tier_resets_nothing(state: str) -> None:
    fake = FakeWin32()
    d = _driver(fake, state, tier=plan.JOB_ONLY, allow_job_only=True)
    launch = d.prepare(["cmd"], win_profile(network=ALL))
    launch.start().communicate(timeout=5)
    launch.cleanup()
    assert "reset_low_labels" not in fake.names()


# -- W4: a stockade that died mid-run -------------------------------------------------------


@pytest.mark.parametrize("tier", [plan.APPCONTAINER, plan.RESTRICTED])
def test_the_next_driver_undoes_what_a_dead_one_left(tier: str, state: str) -> None:
    fake = FakeWin32()
    if tier == plan.APPCONTAINER:  # tier 2 runs read-only: it creates only in its TEMP
        fake.on_process = lambda fs, low: fs.create_object(f"{WS}\\new.txt", low=low)
    dead_pid = 4_000_000
    mode = "workspace-write" if tier == plan.APPCONTAINER else "read-only"
    _crash(fake, state, dead_pid, tier=tier, mode=mode)
    assert fake.dacl or fake.labels
    assert fake.dirs or tier == plan.RESTRICTED
    fresh = _driver(fake, state, tier=tier)
    launch = fresh.prepare(["cmd"], win_profile(mode, network=ALL))
    launch.start().communicate(timeout=5)
    launch.cleanup()
    assert fresh.recovery_errors == []
    _untouched(fake, fresh)


def _crash(fake: FakeWin32, state: str, pid: int, *, tier: str = plan.APPCONTAINER,
           mode: str = "workspace-write") -> None:
    """A stockade process `pid` starts a run and dies: no cleanup, its handles gone."""
    fake.alive.add(pid)
    crashed = _driver(fake, state, tier=tier, pid=pid)
    crashed.prepare(["cmd"], win_profile(mode, network=ALL)).start()
    fake.handles.clear()
    fake.alive.discard(pid)


def _left_behind(fake: FakeWin32, state: str) -> bool:
    stub = f"{WS}\\.stockade".lower() in fake.dirs
    journals = os.listdir(os.path.join(state, "windows", "journal"))
    assert stub == bool(fake.dacl) == bool(journals)
    return stub


def _as_before_creation_times(state: str) -> None:
    """Rewrite the journals and holds as a stockade that kept only pids wrote them."""
    import json

    journal = os.path.join(state, "windows", "journal")
    for name in os.listdir(journal):
        owner, _, run = name.partition("-")
        os.rename(os.path.join(journal, name),
                  os.path.join(journal, f"{owner.partition('.')[0]}-{run}"))
    holds = os.path.join(state, "windows", "holds")
    for name in os.listdir(holds):
        with open(os.path.join(holds, name)) as fh:
            record = json.load(fh)
        record["holders"] = [h[:2] for h in record["holders"]]
        with open(os.path.join(holds, name), "w") as fh:
            json.dump(record, fh)


def test_a_journal_whose_pid_another_process_now_has_is_replayed(state: str) -> None:
    # Windows reuses process ids: the id alone kept the dead run's ACEs, stub
    # and profile for as long as some other process held the number.
    fake = FakeWin32()
    dead_pid = 4_000_010
    _crash(fake, state, dead_pid)
    fake.alive.add(dead_pid)
    fake.created[dead_pid] = 133_999_000_000_000_000  # another process, created later
    _ = _driver(fake, state).store
    assert not _left_behind(fake, state)
    assert fake.profiles == set()


def test_a_journal_of_this_process_s_own_id_from_an_earlier_process_is_replayed(
        state: str) -> None:
    # The id this process has now was the dead stockade's: the old check took
    # the journal for this process's own and never replayed it.
    fake = FakeWin32()
    _crash(fake, state, os.getpid())
    fake.alive.add(os.getpid())
    fake.created[os.getpid()] = 133_999_000_000_000_001
    fresh = _driver(fake, state)
    _ = fresh.store
    assert not _left_behind(fake, state) and fresh.recovery_errors == []


def test_a_journal_of_the_same_pid_and_creation_time_is_left_alone(state: str) -> None:
    fake = FakeWin32()
    other_pid = 4_000_011
    _crash(fake, state, other_pid)
    fake.alive.add(other_pid)  # the same process, still running
    _ = _driver(fake, state).store
    assert _left_behind(fake, state)


def test_a_journal_from_before_creation_times_is_replayed_only_once_its_pid_is_free(
        state: str) -> None:
    # Without a time a running pid may be the stockade that wrote it, and
    # replaying it would revoke the denies under its running command: it
    # waits until the id is free.
    fake = FakeWin32()
    other_pid = 4_000_012
    _crash(fake, state, other_pid)
    _as_before_creation_times(state)
    fake.alive.add(other_pid)
    fake.created[other_pid] = 133_999_000_000_000_002  # running: owner or not, unknowable
    _ = _driver(fake, state).store
    assert _left_behind(fake, state)
    fake.alive.discard(other_pid)
    fresh = _driver(fake, state)
    _ = fresh.store
    assert not _left_behind(fake, state) and fresh.recovery_errors == []
    assert os.listdir(fresh.store.holds_dir) == []


def test_an_untimed_journal_of_this_process_s_own_id_is_replayed(state: str) -> None:
    # This process writes only timed records, so an untimed one under its id
    # is an earlier process's.
    fake = FakeWin32()
    _crash(fake, state, os.getpid())
    _as_before_creation_times(state)
    fake.alive.add(os.getpid())
    _ = _driver(fake, state).store
    assert not _left_behind(fake, state)


def test_a_hold_whose_pid_was_reused_does_not_count_as_held(state: str) -> None:
    # A holder counted live by its id alone kept a dead run's Low label in place
    # and refused every later run another label on that path.
    from stockade.drivers.windows.journal import Store

    times = {4_000_013: 1, os.getpid(): 2}
    dead = Store(state, pid=4_000_013, started=1, started_of=times.get)
    with dead.locked():
        assert dead.take("label", "c:\\ws", "C:\\ws", "r1", "Low", save=lambda: "")
    times[4_000_013] = 3  # the id now belongs to a process created later
    fresh = Store(state, pid=os.getpid(), started=2, started_of=times.get)
    assert not fresh.running(4_000_013, 1)
    with fresh.locked():
        assert fresh.take("label", "c:\\ws", "C:\\ws", "r2", "Medium", save=lambda: "")
        assert fresh.release("label", "c:\\ws", "r2") == (True, "C:\\ws", "")


def test_a_live_stockade_s_run_is_not_undone_by_another(state: str) -> None:
    fake = FakeWin32()
    other_pid = 4_000_001
    fake.alive.add(other_pid)
    running = _driver(fake, state, pid=other_pid)
    launch = running.prepare(["cmd"], win_profile(network=ALL))
    launch.start()
    before = dict(fake.dacl)
    fresh = _driver(fake, state)
    _ = fresh.store  # replays only the dead
    assert fake.dacl == before and f"{WS}\\.stockade".lower() in fake.dirs
    launch.cleanup()


# -- W5: two stockade processes on one workspace --------------------------------------------


def test_stubs_and_labels_are_counted_across_processes(state: str) -> None:
    fake = FakeWin32()
    first = _driver(fake, state, pid=os.getpid())
    other_pid = 4_000_002
    fake.alive.add(other_pid)
    second = _driver(fake, state, pid=other_pid)  # another process: its own registries
    a = first.prepare(["cmd"], win_profile(network=ALL))
    b = second.prepare(["cmd"], win_profile(network=ALL))
    a.start()
    b.start()
    stub = f"{WS}\\.stockade".lower()
    assert [c for c in fake.calls if c == ("make_directory", f"{WS}\\.stockade")] == [
        ("make_directory", f"{WS}\\.stockade")]
    a.cleanup()
    assert stub in fake.dirs  # the other process's command still runs
    b.cleanup()
    _untouched(fake, first)


def test_labels_are_counted_across_processes_on_the_low_tier(state: str) -> None:
    fake = FakeWin32()
    aws = f"{HOME}\\.aws".lower()
    other_pid = 4_000_003
    fake.alive.add(other_pid)
    first = _driver(fake, state, tier=plan.RESTRICTED)
    second = _driver(fake, state, tier=plan.RESTRICTED, pid=other_pid)
    a = first.prepare(["cmd"], win_profile("read-only", network=ALL))
    b = second.prepare(["cmd"], win_profile("read-only", network=ALL))
    a.start()
    b.start()
    a.cleanup()
    assert aws in fake.labels  # still hidden from the other process's command
    b.cleanup()
    assert aws not in fake.labels


# -- W6: links under a tree that gets an inheritable grant ----------------------------------


def _linked_workspace(fake: FakeWin32) -> None:
    fake.tree |= {WS.lower(), f"{WS}\\node_modules".lower(), f"{HOME}\\.ssh".lower(),
                  f"{HOME}\\.ssh\\id_ed25519".lower(), "c:\\store"}
    fake.junctions[f"{WS}\\node_modules\\keys".lower()] = f"{HOME}\\.ssh".lower()
    fake.hardlinks[f"{WS}\\node_modules\\y.js".lower()] = "file-7"
    fake.hardlinks["c:\\store\\y.js"] = "file-7"


def test_the_fake_models_what_propagation_reaches() -> None:
    fake = FakeWin32()
    _linked_workspace(fake)
    fake.add_aces(WS, [acl.Ace(WS, "S-1-15-2-9", acl.ALLOW, acl.MODIFY, acl.SUBTREE)])
    reached = fake.granted("S-1-15-2-9")
    assert "c:\\store\\y.js" in reached and f"{HOME}\\.ssh\\id_ed25519".lower() in reached
    fake.revoke_sid(WS, "S-1-15-2-9")
    assert fake.granted("S-1-15-2-9") == set()


@pytest.mark.parametrize("link", ["junction", "hardlink"])
def test_a_link_under_a_writable_root_refuses_the_run(link: str, state: str) -> None:
    fake = FakeWin32()
    _linked_workspace(fake)
    if link == "junction":
        fake.hardlinks.clear()
    else:
        fake.junctions.clear()
    d = _driver(fake, state)
    with pytest.raises(SandboxUnavailable, match="inheritable ACE"):
        d.prepare(["cmd"], win_profile(network=ALL)).start()
    assert "add_aces" not in fake.names() and "set_label" not in fake.names()
    for sid in {plan.appcontainer_sid(str(c[1])) for c in fake.calls
                if c[0] == "derive_appcontainer_sid"}:
        assert fake.granted(sid) == set()
    _untouched(fake, d)


def test_links_outside_the_writable_roots_do_not_matter(state: str) -> None:
    fake = FakeWin32()
    fake.junctions[f"{HOME}\\elsewhere".lower()] = "c:\\x"
    _driver(fake, state).prepare(["cmd"], win_profile(network=ALL)).start()
    assert "add_aces" in fake.names()


def test_the_real_scan_finds_symlinks_and_hard_links(tmp_path: object) -> None:
    root = os.path.join(str(tmp_path), "ws")
    os.makedirs(os.path.join(root, "a", "b"))
    with open(os.path.join(root, "a", "b", "f"), "w") as fh:
        fh.write("x")
    assert acl.first_link_under(root) == ""
    outside = os.path.join(str(tmp_path), "store.js")
    with open(outside, "w") as fh:
        fh.write("x")
    os.link(outside, os.path.join(root, "a", "linked.js"))
    assert acl.first_link_under(root) == os.path.join(root, "a", "linked.js")
    os.remove(os.path.join(root, "a", "linked.js"))
    os.symlink(str(tmp_path), os.path.join(root, "a", "b", "up"))
    assert acl.first_link_under(root) == os.path.join(root, "a", "b", "up")
    # The scan never descends through the link it found.
    assert all("up" + os.sep not in p for p in acl.walk_no_links(root))


# -- W10: elevated ----------------------------------------------------------------------------


def test_an_elevated_stockade_refuses_to_run(state: str) -> None:
    fake = FakeWin32()
    fake.elevated = True
    with pytest.raises(SandboxUnavailable, match="running elevated"):
        _driver(fake, state).prepare(["cmd"], win_profile(network=ALL))
    assert "create_process" not in fake.names()


def test_the_low_token_makes_administrators_deny_only(state: str) -> None:
    fake = FakeWin32()
    d = _driver(fake, state, tier=plan.RESTRICTED)
    launch = d.prepare(["cmd"], win_profile("read-only", network=ALL))
    launch.start().communicate(timeout=5)
    launch.cleanup()
    call = next(c for c in fake.calls if c[0] == "create_restricted_token")
    assert plan.ADMINISTRATORS in call[1]  # type: ignore[operator]
    assert CMD


def test_a_redirected_or_relative_app_data_still_hides_the_profiles_own() -> None:
    """Folder redirection or a wrapper's env moves %APPDATA%; the profile's Roaming and
    Local folders keep their logins. A relative value would resolve where the
    command runs, the workspace."""
    from stockade import hiddenset, paths

    env = {"USERPROFILE": "C:/Users/u", "APPDATA": "D:/r/Roaming", "LOCALAPPDATA": "D:/r/Local"}
    hidden, _ = hiddenset.default_hidden(env, [], listdir=lambda p: [], platform="win32")
    for place in ("C:/Users/u/AppData/Roaming", "C:/Users/u/AppData/Local", "D:/r/Roaming",
                  "D:/r/Local"):
        assert place in hidden, place
    relative = {"USERPROFILE": "C:/Users/u", "APPDATA": "AppData", "LOCALAPPDATA": "."}
    hidden, _ = hiddenset.default_hidden(relative, [], listdir=lambda p: [], platform="win32")
    assert "AppData" not in hidden and "." not in hidden
    state = paths.state_dir(relative, platform="win32")
    assert state.startswith("C:/Users/u/AppData/Local"), state


# -- what is shown back out of hidden AppData ------------------------------------------------


def test_a_core_profile_s_toolchains_are_granted_read_and_execute(win: WinHost,
                                                                 state: str) -> None:
    fake = FakeWin32()
    with win.core() as core:
        profile = win.profile(core, "read-only")
        d = _driver(fake, state)
        launch = d.prepare(["cmd", "/c", "ver"], profile)
        launch.start().communicate(timeout=5)
        aces = [a for c in fake.calls if c[0] == "add_aces"
                for a in c[2]]  # type: ignore[attr-defined]
        launch.cleanup()
    python = os.path.join(win.local, "Programs")
    npm = os.path.join(win.appdata, "npm")
    for path in (python, npm):
        assert acl.Ace(path, aces[0].sid, acl.ALLOW, acl.READ_EXECUTE, acl.SUBTREE) in aces, path
    shown = {path for path, _ in profile.shown}
    for ace in aces:
        if ace.path in shown:
            assert ace.access == acl.ALLOW and ace.mask == acl.READ_EXECUTE, ace
    # The areas and the stores stay denied.
    denied = {a.path for a in aces if a.access == acl.DENY}
    assert {win.local, win.appdata, os.path.join(win.home, ".aws")} <= denied
    _untouched(fake, d)


@pytest.mark.parametrize("tier", [plan.APPCONTAINER, plan.RESTRICTED])
def test_a_shown_directory_with_a_link_under_it_is_withheld_not_refused(
        tier: str, state: str) -> None:
    # An app-execution alias or a pnpm store under a toolchain's directory
    # would otherwise refuse every command: the directory is left hidden.
    local = f"{HOME}\\AppData\\Local"
    aliases = f"{local}\\Microsoft\\WindowsApps"
    python = f"{local}\\Programs\\Python"
    fake = FakeWin32(links=(f"{aliases}\\python.exe",))
    d = _driver(fake, state, tier=tier)
    prof = win_profile("read-only", network=ALL, hidden=((local, "dir"),),
                       shown=((aliases, "dir"), (python, "dir")))
    launch = d.prepare(["cmd"], prof)
    launch.start().communicate(timeout=5)
    link = f"{aliases}\\python.exe".lower()
    assert launch.report.audit["windows_shown_withheld"] == {aliases: link}
    opened = [c for c in fake.calls if c[0] in ("add_aces", "set_label")]
    assert any(c[1] == python for c in opened)
    assert not any(c[1] == aliases for c in opened)
    launch.cleanup()
    _untouched(fake, d)


# -- full-access ------------------------------------------------------------------------------


def test_a_full_access_run_changes_no_acl_or_label(win: WinHost, state: str) -> None:
    # Its write root is `/`: tiers 1 and 2 planned a Low label and a MODIFY
    # grant on the drive root, which every file on the volume would inherit.
    fake = FakeWin32()
    with win.core() as core:
        profile = win.profile(core, "full-access")
        assert "/" in profile.write_roots
        d = _driver(fake, state)
        launch = d.prepare(["cmd", "/c", "ver"], profile)
        launch.start().communicate(timeout=5)
        assert launch.report.audit["windows_tier"] == plan.JOB_ONLY
        launch.cleanup()
        assert not [c for c in fake.calls if c[0] in ("add_aces", "set_label")]
        for tier in (plan.APPCONTAINER, plan.RESTRICTED):
            with pytest.raises(SandboxUnavailable, match="drive root"):
                _driver(fake, state, tier=tier).prepare(["cmd"], profile)
    _untouched(fake, d)
