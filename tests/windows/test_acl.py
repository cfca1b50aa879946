"""The ACL plan as data: which SID gets which rights on which path, and the undo list."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from win_fakes import EXACT, HOME, WS, win_profile

from stockade.drivers.windows import acl, plan
from stockade.drivers.windows.acl import (
    ALLOW,
    DELETE,
    DENY,
    DENY_CHANGE,
    FILE_ALL_ACCESS,
    FILE_DELETE_CHILD,
    INHERIT_ONLY_ACE,
    MODIFY,
    READ_EXECUTE,
    SUBTREE,
    WRITE,
    Ace,
    Label,
)
from stockade.errors import SandboxUnavailable
from stockade.profile import Protected

SID = plan.appcontainer_sid("stockade.run.test")
TEMP = "C:\\Users\\dev\\AppData\\Local\\stockade\\tmp\\run-1"


def test_workspace_write_grants_exactly_the_workspace_and_denies_the_metadata() -> None:
    p = acl.appcontainer_plan(win_profile(**EXACT), SID, scratch=TEMP)
    assert set(p.aces) == {
        Ace(WS, SID, ALLOW, READ_EXECUTE | WRITE, 0),
        Ace(WS, SID, ALLOW, MODIFY, SUBTREE | INHERIT_ONLY_ACE),
        Ace(TEMP, SID, ALLOW, READ_EXECUTE | WRITE, 0),
        Ace(TEMP, SID, ALLOW, MODIFY, SUBTREE | INHERIT_ONLY_ACE),
        Ace(f"{WS}\\.git", SID, DENY, DELETE | acl.WRITE_DAC | acl.WRITE_OWNER, 0),
        Ace(f"{WS}\\.git\\hooks", SID, DENY, DENY_CHANGE, SUBTREE),
        Ace(f"{WS}\\.git\\config", SID, DENY, DENY_CHANGE, 0),
        Ace(f"{WS}\\.stockade", SID, DENY, DENY_CHANGE, SUBTREE),
        Ace(f"{WS}\\.vscode", SID, DENY, DENY_CHANGE, SUBTREE),
        Ace(f"{HOME}\\.aws", SID, DENY, FILE_ALL_ACCESS, SUBTREE),
    }
    assert p.stubs == [f"{WS}\\.stockade"]
    assert p.labels == []


def test_no_grant_carries_delete_child_and_the_root_itself_has_no_delete() -> None:
    # FILE_DELETE_CHILD on a directory deletes (and renames) its children
    # whatever their own DACL says: one grant of it would undo every deny.
    p = acl.appcontainer_plan(win_profile(), SID, scratch=TEMP)
    for ace in p.aces:
        if ace.access == ALLOW:
            assert not ace.mask & FILE_DELETE_CHILD, ace
            if not ace.inherit & INHERIT_ONLY_ACE:
                assert not ace.mask & DELETE, ace
    assert MODIFY & DELETE and not MODIFY & FILE_DELETE_CHILD


def test_read_only_grants_reads_only_and_protects_nothing_writable() -> None:
    p = acl.appcontainer_plan(win_profile("read-only", read_extra=("D:\\data",)), SID,
                              read_paths=("C:\\Tools\\Python",))
    assert {a for a in p.aces if a.access == ALLOW} == {
        Ace(WS, SID, ALLOW, READ_EXECUTE, SUBTREE),
        Ace("D:\\data", SID, ALLOW, READ_EXECUTE, SUBTREE),
        Ace("C:\\Tools\\Python", SID, ALLOW, READ_EXECUTE, SUBTREE),
    }
    assert all(not a.mask & (WRITE | DELETE) for a in p.aces if a.access == ALLOW)
    assert p.stubs == []


def test_hidden_store_inside_a_granted_read_path_is_denied() -> None:
    p = acl.appcontainer_plan(win_profile("read-only", read_extra=(HOME,),
                                          hidden=((f"{HOME}\\.aws", "dir"),
                                                  (f"{HOME}\\.netrc", "file"))), SID)
    assert Ace(f"{HOME}\\.aws", SID, DENY, FILE_ALL_ACCESS, SUBTREE) in p.aces
    assert Ace(f"{HOME}\\.netrc", SID, DENY, FILE_ALL_ACCESS, 0) in p.aces


def test_steps_put_denies_before_grants_and_undo_is_the_exact_reverse() -> None:
    p = acl.appcontainer_plan(win_profile(**EXACT), SID, scratch=TEMP)
    steps = p.steps()
    kinds = [k for k, _ in steps]
    assert kinds[0] == "stub"
    aces = [item for k, item in steps if k == "ace"]
    assert isinstance(aces[0], Ace)
    first_allow = next(i for i, a in enumerate(aces) if isinstance(a, Ace) and a.access == ALLOW)
    assert all(isinstance(a, Ace) and a.access == DENY for a in aces[:first_allow])
    assert all(isinstance(a, Ace) and a.access == ALLOW for a in aces[first_allow:])
    undo = p.undo()
    # One revoke per path (the run's SID is unique: REVOKE removes exactly its ACEs),
    # the stub last, because it was made first.
    paths = [path for kind, path, _ in undo if kind == "revoke"]
    assert len(paths) == len(set(paths)) == len({a.path for a in p.aces})
    assert undo[-1] == ("unstub", f"{WS}\\.stockade", "")
    assert all(sid == SID for kind, _, sid in undo if kind == "revoke")


def test_low_integrity_labels_the_writable_roots_low_and_protected_medium() -> None:
    p = acl.low_integrity_plan(win_profile(**EXACT), scratch=TEMP)
    nw = acl.SYSTEM_MANDATORY_LABEL_NO_WRITE_UP
    assert set(p.labels) == {
        Label(WS, plan.LOW_INTEGRITY, nw, SUBTREE),
        Label(TEMP, plan.LOW_INTEGRITY, nw, SUBTREE),
        Label(f"{WS}\\.git", plan.MEDIUM_INTEGRITY, nw, SUBTREE),
        Label(f"{WS}\\.git\\hooks", plan.MEDIUM_INTEGRITY, nw, SUBTREE),
        Label(f"{WS}\\.git\\config", plan.MEDIUM_INTEGRITY, nw, 0),
        Label(f"{WS}\\.stockade", plan.MEDIUM_INTEGRITY, nw, SUBTREE),
        Label(f"{WS}\\.vscode", plan.MEDIUM_INTEGRITY, nw, SUBTREE),
        Label(f"{HOME}\\.aws", plan.MEDIUM_INTEGRITY, nw | acl.SYSTEM_MANDATORY_LABEL_NO_READ_UP
              | acl.SYSTEM_MANDATORY_LABEL_NO_EXECUTE_UP, SUBTREE),
    }
    assert p.aces == [] and p.stubs == [f"{WS}\\.stockade"]


def test_low_integrity_read_only_labels_nothing_low() -> None:
    p = acl.low_integrity_plan(win_profile("read-only"))
    assert all(lb.level == plan.MEDIUM_INTEGRITY for lb in p.labels)


def test_paths_compare_as_ntfs_does() -> None:
    assert acl.win_under("c:\\users\\DEV\\work\\proj\\.GIT", WS)
    assert not acl.win_under("C:\\Users\\dev\\work\\project", WS)
    assert acl.win_under(WS + "\\", WS)


def test_protected_outside_every_writable_root_gets_no_ace() -> None:
    prof = win_profile(protected=(Protected("D:\\other\\.git", "dir"),))
    assert not [a for a in acl.appcontainer_plan(prof, SID).aces if a.path.startswith("D:")]


def test_a_protected_symlink_is_refused() -> None:
    prof = win_profile(protected=(Protected(f"{WS}\\.envrc", "link"),))
    with pytest.raises(SandboxUnavailable, match="symbolic link or junction"):
        acl.appcontainer_plan(prof, SID)
    with pytest.raises(SandboxUnavailable, match="symbolic link or junction"):
        acl.low_integrity_plan(prof)


# -- links on the way ----------------------------------------------------------------------


def test_first_writable_symlink_component_finds_the_junction_on_the_way() -> None:
    links = {f"{WS}\\sub".lower()}

    def is_link(path: str) -> bool:
        return path.lower() in links

    target = f"{WS}\\sub\\.git\\hooks"
    assert acl.first_writable_symlink_component(target, [WS], is_link) == f"{WS}\\sub"
    assert acl.first_writable_symlink_component(f"{WS}\\other\\.git", [WS], is_link) is None
    # Above the writable root the command cannot replace anything.
    assert acl.first_writable_symlink_component(target, [f"{WS}\\sub\\.git"], is_link) is None
    # Not under any writable root: nothing to check.
    assert acl.first_writable_symlink_component("D:\\x\\.git", [WS], is_link) is None


def test_the_protected_path_itself_being_a_link_counts() -> None:
    def is_link(path: str) -> bool:
        return path.lower() == f"{WS}\\.git".lower()

    assert acl.first_writable_symlink_component(f"{WS}\\.git", [WS], is_link) == f"{WS}\\.git"
    with pytest.raises(SandboxUnavailable, match=r"proj\\.git is a symbolic link or junction"):
        acl.check_links(win_profile(), [WS], is_link)


def test_lstat_is_link_sees_a_posix_symlink(tmp_path: object) -> None:
    import os

    base = str(tmp_path)
    os.symlink(base, os.path.join(base, "ln"))
    assert acl.lstat_is_link(os.path.join(base, "ln"))
    assert not acl.lstat_is_link(base)
    assert not acl.lstat_is_link(os.path.join(base, "missing"))


_NAMES = st.sampled_from([".git", ".git\\hooks", ".git\\config", ".stockade", ".vscode",
                          "sub\\.git", ".claude", ".codex", ".agents"])
_KINDS = st.sampled_from(["dir", "file", "watch", "pin", "hold"])


@given(st.lists(st.tuples(_NAMES, _KINDS), max_size=8, unique_by=lambda t: t[0]),
       st.sampled_from(["read-only", "workspace-write"]))
def test_every_plan_denies_every_protected_path_and_undoes_every_ace(
        items: list[tuple[str, str]], mode: str) -> None:
    protected = tuple(Protected(f"{WS}\\{name}", kind) for name, kind in items)
    prof = win_profile(mode, protected=protected)
    p = acl.appcontainer_plan(prof, SID, scratch=TEMP)
    for ace in p.aces:
        if ace.access == ALLOW:
            assert not ace.mask & FILE_DELETE_CHILD
    if mode == "workspace-write":
        denied = {a.path for a in p.aces if a.access == DENY}
        assert {item.path for item in protected} <= denied
        assert set(p.stubs) == {item.path for item in protected if item.kind == "watch"}
    revoked = {path for kind, path, _ in p.undo() if kind == "revoke"}
    assert revoked == {a.path for a in p.aces}
    assert {path for kind, path, _ in p.undo() if kind == "unstub"} == set(p.stubs)


# -- what is shown back out of a hidden area ---------------------------------------------------

LOCAL = f"{HOME}\\AppData\\Local"
ROAMING = f"{HOME}\\AppData\\Roaming"
PYTHON = f"{LOCAL}\\Programs\\Python"
NPM = f"{ROAMING}\\npm"
AREAS = ((LOCAL, "dir"), (ROAMING, "dir"), (f"{HOME}\\.aws", "dir"))
SHOWN = ((PYTHON, "dir"), (NPM, "dir"), (f"{ROAMING}\\pip\\pip.ini", "file"),
         (f"{LOCAL}\\Microsoft\\WindowsApps\\python.exe", "link"))
NR = acl.SYSTEM_MANDATORY_LABEL_NO_READ_UP
NW = acl.SYSTEM_MANDATORY_LABEL_NO_WRITE_UP
NX = acl.SYSTEM_MANDATORY_LABEL_NO_EXECUTE_UP


@pytest.mark.parametrize("mode", ["read-only", "workspace-write"])
def test_the_appcontainer_reads_and_runs_what_is_shown_back(mode: str) -> None:
    # Per-user Python and npm's globals live in hidden AppData: without a grant of
    # their own an AppContainer could not even start them.
    p = acl.appcontainer_plan(win_profile(mode, hidden=AREAS, shown=SHOWN), SID, scratch=TEMP)
    assert Ace(PYTHON, SID, ALLOW, READ_EXECUTE, SUBTREE) in p.aces
    assert Ace(NPM, SID, ALLOW, READ_EXECUTE, SUBTREE) in p.aces
    assert Ace(f"{ROAMING}\\pip\\pip.ini", SID, ALLOW, READ_EXECUTE, 0) in p.aces
    # A link is not granted: the ACE would land on its target.
    assert not [a for a in p.aces if "WindowsApps" in a.path]
    # The areas stay denied; the explicit grant comes before their inherited deny,
    # which still refuses every write.
    for area, _ in AREAS:
        assert Ace(area, SID, DENY, FILE_ALL_ACCESS, SUBTREE) in p.aces
        assert not [a for a in p.aces if a.access == ALLOW and acl.norm(a.path) == acl.norm(area)]


@pytest.mark.parametrize("workspace", [WS, HOME])
def test_nothing_shown_becomes_writable_and_the_home_s_hidden_areas_stay_hidden(
        workspace: str) -> None:
    protected = (Protected(PYTHON, "dir"), Protected(NPM, "dir")) if workspace == HOME else None
    prof = win_profile(hidden=AREAS, shown=SHOWN, workspace=workspace, protected=protected)
    shown = {acl.norm(path) for path, _ in SHOWN}
    p = acl.appcontainer_plan(prof, SID, scratch=TEMP)
    for ace in p.aces:
        if acl.norm(ace.path) in shown and ace.access == ALLOW:
            assert ace.mask == READ_EXECUTE, ace
    for area, _ in AREAS:
        assert Ace(area, SID, DENY, FILE_ALL_ACCESS, SUBTREE) in p.aces
    low = acl.low_integrity_plan(prof, scratch=TEMP)
    for label in low.labels:
        if acl.norm(label.path) in shown:
            assert label.level == plan.MEDIUM_INTEGRITY and label.policy & NW, label
    for area, _ in AREAS:
        assert Label(area, plan.MEDIUM_INTEGRITY, NW | NR | NX, SUBTREE) in low.labels


def test_a_store_hidden_inside_a_shown_directory_stays_denied() -> None:
    config = f"{HOME}\\.config"
    git = f"{config}\\git"
    creds = f"{git}\\credentials"
    prof = win_profile("read-only", hidden=((config, "dir"), (creds, "file"),
                                            (f"{config}\\gh", "dir")),
                       shown=((git, "dir"), (f"{config}\\gh", "dir")))
    p = acl.appcontainer_plan(prof, SID)
    assert Ace(git, SID, ALLOW, READ_EXECUTE, SUBTREE) in p.aces
    assert Ace(creds, SID, DENY, FILE_ALL_ACCESS, 0) in p.aces
    # A path both shown and hidden stays hidden.
    assert not [a for a in p.aces if a.access == ALLOW and a.path.endswith("gh")]
    low = acl.low_integrity_plan(prof)
    order = [lb.path for lb in low.labels]
    assert Label(git, plan.MEDIUM_INTEGRITY, NW, SUBTREE) in low.labels
    assert Label(creds, plan.MEDIUM_INTEGRITY, NW | NR | NX, 0) in low.labels
    assert Label(f"{config}\\gh", plan.MEDIUM_INTEGRITY, NW | NR | NX, SUBTREE) in low.labels
    assert [lb for lb in low.labels if lb.path.endswith("gh")] == [
        Label(f"{config}\\gh", plan.MEDIUM_INTEGRITY, NW | NR | NX, SUBTREE)]
    # Outermost first: whatever Windows' propagation does to an explicit label
    # below, the innermost decision is set last.
    assert order.index(config) < order.index(git) < order.index(creds)


def test_the_low_token_reads_what_is_shown_back_and_nothing_else_hidden() -> None:
    p = acl.low_integrity_plan(win_profile("read-only", hidden=AREAS, shown=SHOWN))
    assert Label(PYTHON, plan.MEDIUM_INTEGRITY, NW, SUBTREE) in p.labels
    assert Label(NPM, plan.MEDIUM_INTEGRITY, NW, SUBTREE) in p.labels
    assert Label(f"{ROAMING}\\pip\\pip.ini", plan.MEDIUM_INTEGRITY, NW, 0) in p.labels
    assert not [lb for lb in p.labels if "WindowsApps" in lb.path]
    order = [acl.norm(lb.path) for lb in p.labels]
    assert order.index(acl.norm(LOCAL)) < order.index(acl.norm(PYTHON))


def test_a_shown_path_a_write_root_already_opens_gets_nothing_of_its_own() -> None:
    # A read-only label over a write root the person granted would take the
    # write away, and two labels on one path are refused as a conflict.
    cache = f"{LOCAL}\\pip"
    prof = win_profile("full-access", hidden=AREAS, shown=((cache, "dir"), (PYTHON, "dir")),
                       write_roots=(cache,))
    low = acl.low_integrity_plan(prof)
    assert [lb.level for lb in low.labels if acl.norm(lb.path) == acl.norm(cache)] == [
        plan.LOW_INTEGRITY]
    assert Label(PYTHON, plan.MEDIUM_INTEGRITY, NW, SUBTREE) in low.labels
    ac = acl.appcontainer_plan(prof, SID)
    assert not [a for a in ac.aces if acl.norm(a.path) == acl.norm(cache)
                and a.mask == READ_EXECUTE]


@pytest.mark.parametrize("root", ["/", "\\", "C:\\", "c:/", "D:", "\\\\srv\\share\\"])
def test_no_plan_labels_or_grants_a_whole_volume(root: str) -> None:
    # A label or inheritable grant on a drive root reaches every file on it,
    # and so does its undo: full-access's write root `/` planned exactly that.
    prof = win_profile("workspace-write", write_roots=(root,))
    with pytest.raises(SandboxUnavailable, match="whole volume"):
        acl.low_integrity_plan(prof)
    with pytest.raises(SandboxUnavailable, match="whole volume"):
        acl.appcontainer_plan(prof, SID)
    assert not acl.volume_root("C:\\Users") and not acl.volume_root("\\\\srv\\share\\x")
