"""The ACL plan: which SID gets which rights on which path, and how each is undone.

Pure. `appcontainer_plan` grants the run's AppContainer SID exactly what the
profile allows and denies it the protected metadata; `low_integrity_plan`
does the same with mandatory labels for the restricted-token tier. Both are
plain lists the driver applies in order and undoes in reverse, so the tests
read the whole boundary as data.

Paths are Windows paths and compared as NTFS compares them: case-folded.
"""

from __future__ import annotations

import ntpath

from ...errors import SandboxUnavailable
from ...profile import DIR, FILE, HOLD, KEEP_LINK, PIN, WATCH
from .plan import JOB_ONLY, LOW_INTEGRITY, MEDIUM_INTEGRITY

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ...profile import Profile

# -- rights and flags (winnt.h) ------------------------------------------------------

FILE_READ_DATA = 0x0001  # FILE_LIST_DIRECTORY on a directory
FILE_WRITE_DATA = 0x0002  # FILE_ADD_FILE
FILE_APPEND_DATA = 0x0004  # FILE_ADD_SUBDIRECTORY
FILE_READ_EA = 0x0008
FILE_WRITE_EA = 0x0010
FILE_EXECUTE = 0x0020  # FILE_TRAVERSE
FILE_DELETE_CHILD = 0x0040
FILE_READ_ATTRIBUTES = 0x0080
FILE_WRITE_ATTRIBUTES = 0x0100
DELETE = 0x00010000
READ_CONTROL = 0x00020000
WRITE_DAC = 0x00040000
WRITE_OWNER = 0x00080000
SYNCHRONIZE = 0x00100000
FILE_ALL_ACCESS = 0x001F01FF

READ_EXECUTE = (FILE_READ_DATA | FILE_READ_EA | FILE_EXECUTE | FILE_READ_ATTRIBUTES
                | READ_CONTROL | SYNCHRONIZE)
#: Write rights without DELETE. Never FILE_DELETE_CHILD anywhere: it lets a
#: directory's children be deleted (and renamed) whatever their own DACL
#: says, so a single grant of it would undo every deny below it.
WRITE = FILE_WRITE_DATA | FILE_APPEND_DATA | FILE_WRITE_EA | FILE_WRITE_ATTRIBUTES
MODIFY = READ_EXECUTE | WRITE | DELETE
#: What a protected path denies: every way to change it, its name, or its ACL.
DENY_CHANGE = WRITE | DELETE | FILE_DELETE_CHILD | WRITE_DAC | WRITE_OWNER

OBJECT_INHERIT_ACE = 0x1
CONTAINER_INHERIT_ACE = 0x2
INHERIT_ONLY_ACE = 0x8
SUBTREE = OBJECT_INHERIT_ACE | CONTAINER_INHERIT_ACE

SYSTEM_MANDATORY_LABEL_NO_WRITE_UP = 0x1
SYSTEM_MANDATORY_LABEL_NO_READ_UP = 0x2
SYSTEM_MANDATORY_LABEL_NO_EXECUTE_UP = 0x4

ALLOW = "allow"
DENY = "deny"


def norm(path: str) -> str:
    """The comparison form of a Windows path: normalised, case-folded, no trailing slash."""
    out = ntpath.normcase(ntpath.normpath(path))
    return out.rstrip("\\") if len(out) > 3 else out


def win_under(path: str, root: str) -> bool:
    """True when `path` is `root` or inside it; `C:\\a\\bc` is not under `C:\\a\\b`."""
    p, r = norm(path), norm(root)
    return p == r or p.startswith(r.rstrip("\\") + "\\")


# -- the plan ---------------------------------------------------------------------


class Ace:
    """One explicit ACE the run adds to a path's DACL."""

    __slots__ = ("access", "inherit", "mask", "path", "sid")

    def __init__(self, path: str, sid: str, access: str, mask: int, inherit: int) -> None:
        self.path = path
        self.sid = sid
        self.access = access
        self.mask = mask
        self.inherit = inherit

    def key(self) -> tuple[str, str, str, int, int]:
        return (self.path, self.sid, self.access, self.mask, self.inherit)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ace) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        return (f"Ace({self.path!r}, {self.sid!r}, {self.access}, {self.mask:#x}, "
                f"{self.inherit:#x})")


class Label:
    """A mandatory label the run puts on a path (replacing the one there, restored after)."""

    __slots__ = ("inherit", "level", "path", "policy")

    def __init__(self, path: str, level: str, policy: int, inherit: int) -> None:
        self.path = path
        self.level = level
        self.policy = policy
        self.inherit = inherit

    def key(self) -> tuple[str, str, int, int]:
        return (self.path, self.level, self.policy, self.inherit)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Label) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        return f"Label({self.path!r}, {self.level!r}, {self.policy:#x}, {self.inherit:#x})"


class AclPlan:
    """Stub directories to create, then labels and ACEs to apply, in this order.

    `undo()` is the exact reverse. ACEs are removed by revoking the run's
    SID on each path it touched: the SID is unique to this run, so that
    removes precisely what was added and nothing another run added.
    """

    __slots__ = ("aces", "labels", "stubs")

    def __init__(self, stubs: list[str] | None = None, labels: list[Label] | None = None,
                 aces: list[Ace] | None = None) -> None:
        self.stubs = stubs or []
        self.labels = labels or []
        self.aces = aces or []

    def steps(self) -> list[tuple[str, object]]:
        """("stub", path), ("label", Label), ("ace", Ace): what to apply, in order.

        Denies before grants: at no moment does a path hold a grant whose
        matching deny is still missing.
        """
        out: list[tuple[str, object]] = [("stub", s) for s in self.stubs]
        out += [("label", label) for label in self.labels]
        out += [("ace", a) for a in self.aces if a.access == DENY]
        out += [("ace", a) for a in self.aces if a.access == ALLOW]
        return out

    def undo(self) -> list[tuple[str, str, str]]:
        """("revoke", path, sid), ("unlabel", path, ""), ("unstub", path, ""), reversed."""
        out: list[tuple[str, str, str]] = []
        for kind, item in self.steps():
            if kind == "stub":
                out.append(("unstub", str(item), ""))
            elif isinstance(item, Label):
                out.append(("unlabel", item.path, ""))
            elif isinstance(item, Ace) and ("revoke", item.path, item.sid) not in out:
                out.append(("revoke", item.path, item.sid))
        return list(reversed(out))


def _protected_items(profile: Profile) -> list[tuple[str, str]]:
    return [(p.path, p.kind) for p in profile.protected]


def volume_root(path: str) -> bool:
    """True for a drive or share root (`C:\\`, `/`, `\\\\server\\share`), which no plan may
    label or grant: the change would reach every file on the volume, and so would its undo."""
    rest = ntpath.splitdrive(norm(path))[1]
    return rest in ("", "\\")


def _writable(profile: Profile, scratch: str) -> list[str]:
    out = [profile.workspace] if profile.workspace_writable else []
    out += list(profile.write_roots)
    if scratch:
        out.append(scratch)
    for path in out:
        if volume_root(path):
            raise SandboxUnavailable(
                f"the write root {path} is a whole volume; stockade will not label or grant "
                "it (every file on it would inherit the change). Grant the directories "
                "the command writes, or run in full-access mode, which uses the "
                f"{JOB_ONLY} tier")
    return list(dict.fromkeys(out))


def writable_paths(profile: Profile, scratch: str = "") -> list[str]:
    """Where the run may write: the workspace (when writable), write roots, its TEMP."""
    return _writable(profile, scratch)


def _readable(profile: Profile, read_paths: Iterable[str]) -> list[str]:
    out = [profile.workspace, *profile.read_extra, *read_paths]
    return [p for p in dict.fromkeys(out) if p and p not in ("/", "\\")]


def _depth(path: str) -> int:
    return norm(path).count("\\")


def shown_back(profile: Profile, writable: Iterable[str],
               shown: Iterable[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    """The paths shown back out of a hidden area that a run must open up, read-only.

    `shown` defaults to `profile.shown` (the driver passes it without those
    it may not open, see `WindowsDriver.shown`). A link is left out: an ACE
    or a label set on it lands on its target, which is shown, or not, where
    it lives. So is a path that is itself hidden, one that no hidden
    directory covers (nothing hides it), and one inside a writable root that
    lies within its area (that grant opens it already, and a read-only
    label over it would take the write away).
    """
    roots = list(writable)
    hidden_dirs = [h for h, k in profile.hidden if k == DIR]
    hidden_all = {norm(h) for h, _k in profile.hidden}
    out: list[tuple[str, str]] = []
    for path, kind in profile.shown if shown is None else shown:
        if kind not in (DIR, FILE) or norm(path) in hidden_all:
            continue
        areas = [h for h in hidden_dirs if win_under(path, h)]
        if not areas:
            continue
        area = max(areas, key=_depth)
        if any(win_under(path, w) and win_under(w, area) for w in roots):
            continue
        out.append((path, kind))
    return list(dict.fromkeys(out))


def appcontainer_plan(profile: Profile, sid: str, *, scratch: str = "",
                      read_paths: Iterable[str] = (),
                      shown: Iterable[tuple[str, str]] | None = None) -> AclPlan:
    """The ACEs for one AppContainer run (pure).

    An AppContainer passes an access check only where its own SID (or ALL
    APPLICATION PACKAGES, which system directories grant) is allowed, on top
    of the user's own rights. So reads are the workspace, the granted read
    paths and the tool paths (`read_paths`); writes are the workspace in
    workspace-write, granted write roots and the run's TEMP.

    A writable root grants write on itself without DELETE (the workspace
    cannot be renamed away under the host) and MODIFY, DELETE included, to
    what it contains. Protected metadata gets explicit denies, which Windows
    orders before every inherited grant.

    What the profile shows back out of a hidden area (`shown_back`: per-user
    Python, npm's globals) gets read and execute. Its area's deny reaches it
    only as an inherited ACE, which Windows orders after the explicit grant,
    so the grant opens it and the deny still refuses every write; a hidden
    store inside it keeps its own explicit deny, which comes first.
    """
    plan = AclPlan()
    writable = _writable(profile, scratch)
    for path in _readable(profile, read_paths):
        if not any(win_under(path, w) for w in writable):
            plan.aces.append(Ace(path, sid, ALLOW, READ_EXECUTE, SUBTREE))
    for path, kind in shown_back(profile, writable, shown):
        plan.aces.append(Ace(path, sid, ALLOW, READ_EXECUTE, SUBTREE if kind == DIR else 0))
    for path in writable:
        plan.aces.append(Ace(path, sid, ALLOW, READ_EXECUTE | WRITE, 0))
        plan.aces.append(Ace(path, sid, ALLOW, MODIFY, SUBTREE | INHERIT_ONLY_ACE))
    _protect(plan, profile, sid, writable)
    for path, kind in profile.hidden:
        # Denied even where nothing grants it: a hidden store under a granted
        # read path (a ~/.aws inside a workspace of ~) must stay unreadable.
        plan.aces.append(Ace(path, sid, DENY, FILE_ALL_ACCESS, SUBTREE if kind == DIR else 0))
    return plan


def _protect(plan: AclPlan, profile: Profile, sid: str, writable: list[str]) -> None:
    for path, kind in _protected_items(profile):
        if not any(win_under(path, w) for w in writable):
            continue
        if kind == DIR:
            plan.aces.append(Ace(path, sid, DENY, DENY_CHANGE, SUBTREE))
        elif kind == FILE:
            plan.aces.append(Ace(path, sid, DENY, DENY_CHANGE, 0))
        elif kind == WATCH:
            # NTFS cannot deny "create a child named .git" by name: a stub
            # directory holds the name, and its deny keeps it empty and in place.
            plan.stubs.append(path)
            plan.aces.append(Ace(path, sid, DENY, DENY_CHANGE, SUBTREE))
        elif kind in (PIN, HOLD):
            # Writable inside, but its own name fixed: without DELETE on it and
            # with FILE_DELETE_CHILD granted nowhere, it cannot be renamed
            # aside and rebuilt (`move .git .old && mkdir .git`).
            plan.aces.append(Ace(path, sid, DENY, DELETE | WRITE_DAC | WRITE_OWNER, 0))
        elif kind == KEEP_LINK:
            raise SandboxUnavailable(
                f"{path} is a symbolic link or junction; stockade cannot keep it read-only in "
                "a writable workspace on Windows. Replace the link, or run in read-only mode")


def low_integrity_plan(profile: Profile, *, scratch: str = "",
                       shown: Iterable[tuple[str, str]] | None = None) -> AclPlan:
    """The mandatory labels for one restricted-token run (pure).

    A Low-integrity process cannot write what is labelled above Low, and an
    unlabelled object counts as Medium: so the writable roots get a Low label
    and everything else stays as it is. Protected metadata inside them gets an
    explicit Medium label. Pinned and held directories are labelled Medium
    whole: a label is one per object and inherits as a whole, so "writable
    inside, not renameable" cannot be said with labels, and the stricter
    reading holds (git cannot commit on this tier; the AppContainer tier
    keeps .git writable). Hidden credential stores get Medium with no-read-up,
    since a Low process can otherwise read everything the user can. What is
    shown back inside a hidden area gets its own Medium label without
    no-read-up: readable and runnable, never writable by a Low process.

    Labels go on outermost first. Whether Windows' propagation replaces an
    explicit label below is to be confirmed on a host (docs/windows-verify.md,
    W8); in this order the innermost decision (a store hidden inside a shown
    directory, a directory shown inside a hidden area) is set last either way.
    """
    plan = AclPlan()
    writable = _writable(profile, scratch)
    for path in writable:
        plan.labels.append(Label(path, LOW_INTEGRITY, SYSTEM_MANDATORY_LABEL_NO_WRITE_UP,
                                 SUBTREE))
    for path, kind in _protected_items(profile):
        if not any(win_under(path, w) for w in writable):
            continue
        if kind == KEEP_LINK:
            raise SandboxUnavailable(
                f"{path} is a symbolic link or junction; stockade cannot keep it read-only in "
                "a writable workspace on Windows. Replace the link, or run in read-only mode")
        if kind == WATCH:
            plan.stubs.append(path)
        inherit = 0 if kind == FILE else SUBTREE
        plan.labels.append(Label(path, MEDIUM_INTEGRITY, SYSTEM_MANDATORY_LABEL_NO_WRITE_UP,
                                 inherit))
    for path, kind in profile.hidden:
        plan.labels.append(Label(path, MEDIUM_INTEGRITY, SYSTEM_MANDATORY_LABEL_NO_WRITE_UP
                                 | SYSTEM_MANDATORY_LABEL_NO_READ_UP
                                 | SYSTEM_MANDATORY_LABEL_NO_EXECUTE_UP,
                                 SUBTREE if kind == DIR else 0))
    labelled = {norm(lb.path) for lb in plan.labels}
    for path, kind in shown_back(profile, writable, shown):
        if norm(path) not in labelled:
            plan.labels.append(Label(path, MEDIUM_INTEGRITY, SYSTEM_MANDATORY_LABEL_NO_WRITE_UP,
                                     SUBTREE if kind == DIR else 0))
    plan.labels.sort(key=lambda lb: _depth(lb.path))
    return plan


# -- links on the way ----------------------------------------------------------------


def first_writable_symlink_component(path: str, writable: Iterable[str],
                                     is_link: Callable[[str], bool]) -> str | None:
    """The first symlink or junction between a writable root and `path`, or None.

    An ACE set through a link lands on the link's target. A command that may
    write the workspace can turn `.git` (or a directory above it) into a
    junction to somewhere else, so that the deny meant for `.git\\hooks`
    protects a decoy while the real hooks sit behind an inherited grant.
    Only components inside a writable root matter: the command cannot
    replace the others. `is_link` is lstat's answer (any reparse point).
    """
    roots = [r for r in writable if win_under(path, r)]
    if not roots:
        return None
    root = max(roots, key=lambda r: len(norm(r)))
    rel = ntpath.relpath(path, root) if norm(path) != norm(root) else ""
    current = root
    for part in [p for p in rel.split("\\") if p and p != "."]:
        current = ntpath.join(current, part)
        if is_link(current):
            return current
    return None


def check_links(profile: Profile, writable: Iterable[str],
                is_link: Callable[[str], bool]) -> None:
    """Refuse the run if any protected or hidden path has a link on its way."""
    roots = list(writable)
    targets = [p.path for p in profile.protected] + [h for h, _ in profile.hidden]
    for target in targets:
        link = first_writable_symlink_component(target, roots, is_link)
        if link is not None:
            raise SandboxUnavailable(
                f"{link} is a symbolic link or junction on the way to {target}, inside a "
                "writable root; an ACE set through it would protect the link's target "
                "instead. Replace the link with a real directory, or run in read-only mode")


FILE_ATTRIBUTE_REPARSE_POINT = 0x400


def lstat_is_link(path: str) -> bool:
    """Whether `path` is a symlink, a junction or any other reparse point (never follows)."""
    import os
    import stat

    try:
        st = os.lstat(path)
    except OSError:
        return False
    attributes = getattr(st, "st_file_attributes", 0)
    return bool(attributes & FILE_ATTRIBUTE_REPARSE_POINT) or stat.S_ISLNK(st.st_mode)


# -- what an inheritable grant would reach ------------------------------------------------


def walk_no_links(root: str) -> list[str]:
    """Every path under `root` (not `root`), never descending into a link or junction."""
    import os
    import stat

    out: list[str] = []
    stack = [root]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            out.append(entry.path)
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            reparse = getattr(st, "st_file_attributes", 0) & FILE_ATTRIBUTE_REPARSE_POINT
            if stat.S_ISDIR(st.st_mode) and not reparse:
                stack.append(entry.path)
    return out


def first_link_under(root: str) -> str:
    """The first symlink, junction (any reparse point) or hard-linked file under `root`.

    An inheritable ACE or label set on `root` is written into every object
    below it. A hard link shares one security descriptor with its other names
    (pnpm's store links every package file), so the run's grant lands on a
    file outside the workspace; whether the propagation follows a junction is
    Windows' choice, and one that did would grant the tree it points to.
    """
    import os
    import stat

    for path in walk_no_links(root):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode) or getattr(st, "st_file_attributes", 0) \
                & FILE_ATTRIBUTE_REPARSE_POINT:
            return path
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            return path
    return ""


def inheriting_roots(plan: AclPlan) -> list[str]:
    """The paths on which `plan` sets something that propagates into their tree."""
    out = [a.path for a in plan.aces if a.access == ALLOW and a.inherit & SUBTREE]
    out += [lb.path for lb in plan.labels if lb.level == LOW_INTEGRITY and lb.inherit & SUBTREE]
    return list(dict.fromkeys(out))


def link_refusal(root: str, link: str) -> SandboxUnavailable:
    return SandboxUnavailable(
        f"{link} is a link (a junction, symlink or hard link) inside {root}, and stockade "
        "gives this run its rights on that tree by an inheritable ACE, which Windows writes "
        "into the security descriptor a hard link shares with its other names (and, through "
        "a junction, possibly into the tree it points to). Remove the link (pnpm: "
        "package-import-method = copy, node-linker = hoisted), or run in read-only mode")


def explicit_low_label(sddl: str) -> bool:
    """Whether a label's SDDL holds an explicit (not inherited) Low mandatory label."""
    for ace in sddl.split("(")[1:]:
        fields = ace.rstrip(")").split(";")
        if len(fields) >= 6 and fields[0] == "ML" and fields[5] == "LW" \
                and "ID" not in fields[1]:
            return True
    return False
