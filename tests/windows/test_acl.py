"""The ACL plan as data: which SID gets which rights on which path, and the undo list."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from win_fakes import HOME, WS, win_profile

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
    p = acl.appcontainer_plan(win_profile(), SID, scratch=TEMP)
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
    p = acl.appcontainer_plan(win_profile(), SID, scratch=TEMP)
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
    p = acl.low_integrity_plan(win_profile(), scratch=TEMP)
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
