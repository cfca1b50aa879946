"""The Landlock backend's rule planning: what a profile becomes as Landlock rules.

Pure functions of the profile and the paths they are handed, apart from
listing directories (other users' homes, what a grant must leave out), so
most of their tests run nothing. Without a mount namespace these rules are
the whole filesystem boundary: what they do not list, the command cannot
open; what they list, it can, whatever bubblewrap would have masked.
"""


from __future__ import annotations

import os

from ....capabilities import NetworkPolicy, is_under
from ....errors import SandboxUnavailable
from ....profile import DIR, LINK, MISSING, STRICT, path_kind
from ..init.landlock import LandlockRules

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from ....profile import Profile

#: Landlock ABI of TCP port rules (network hosts needs them) and of signal
#: and abstract-socket scoping (the reaper needs them).
TCP_ABI, SCOPE_ABI = 4, 6

#: The host's /dev holds disks (/dev/sda, /dev/mem for root), terminals of
#: other sessions (/dev/pts/N of the same uid, whose input could be read)
#: and shared memory of other programs (/dev/shm): only these come in.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
#: The parts of /sys tools read (CPU count, cgroup limits, hugepages for
#: JVMs); the rest lists the host's network interfaces and hardware.
SYS_READ_PATHS = ("/sys/devices/system/cpu", "/sys/devices/system/node", "/sys/fs/cgroup",
                  "/sys/kernel/mm/transparent_hugepage")
#: Never part of the host read scope: /dev and /sys (see above), /proc
#: (granted read-only on its own), /tmp (the host's, shared with every other
#: program; the command gets a TMPDIR of its own instead).
SPECIAL_ROOTS = ("/dev", "/proc", "/sys", "/tmp")

def split_grant(root: str, excluded: Iterable[str], *,
                listdir: Callable[[str], list[str]] | None = None,
                kind: Callable[[str], str] = path_kind) -> tuple[list[str], list[str]]:
    """(grants, listed): paths that together cover `root` minus every `excluded`
    subtree, and the directories that had to be split to get there.

    A directory is listed only when an excluded path lies strictly beneath
    it, so the work is the depth of the exclusions, not the size of the
    tree. Symbolic links get no rule: a rule follows the link, and a link
    in $HOME pointing at ~/.aws would grant ~/.aws; the target is granted,
    or not, where it really lives. An entry that cannot be listed grants
    nothing beneath it: what cannot be examined is not handed out.

    The split directories themselves get no read grant (it would reach the
    excluded paths beneath); the caller may let them be listed.
    """
    fast = listdir is None and kind is path_kind
    listdir = listdir or _listdir
    out = {os.path.normpath(e) for e in excluded}
    # Set lookups, not every visited path against every exclusion: the hidden
    # set has a hundred entries and a split of /etc visits two hundred.
    above = _dirs_above(out)
    grants: list[str] = []
    listed: list[str] = []
    stack = [os.path.normpath(root)]
    while stack:
        path = stack.pop()
        if _at_or_below(path, out):
            continue
        if path not in above:
            grants.append(path)
            continue
        if kind(path) != DIR:
            continue
        listed.append(path)
        if fast:
            # The directory entries' own types: no lstat per child of /etc.
            stack.extend(e.path for e in _scan(path) if not e.is_symlink())
            continue
        for name in listdir(path):
            child = os.path.join(path, name)
            if kind(child) not in (LINK, MISSING):
                stack.append(child)
    return sorted(grants), sorted(listed)


def _scan(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return list(it)
    except OSError:
        return []


def _dirs_above(paths: Iterable[str]) -> set[str]:
    """Every directory strictly above one of `paths`, each chain walked once."""
    above: set[str] = set()
    for p in paths:
        d = os.path.dirname(p)
        while d not in above:
            above.add(d)
            d, up = os.path.dirname(d), d
            if d == up:
                break
    return above


def _at_or_below(path: str, paths: set[str]) -> bool:
    while path not in paths:
        path, up = os.path.dirname(path), path
        if path == up:
            return False
    return True


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def shown_back(profile: Profile, roots: Sequence[str],
               listdir: Callable[[str], list[str]] | None = None,
               kind: Callable[[str], str] = path_kind) -> tuple[list[str], list[str]]:
    """(reads, listed): the paths shown back inside hidden directories under
    `roots`, split around what is hidden inside them again (git's
    credentials in a shown ~/.config/git), and the hidden directories
    above them, which may be listed but not read.

    A link gets no rule: the rule would follow it out of the hidden
    directory, and its target is granted, or not, where it lives.
    """
    # The profile's paths are canonical, so "beneath" is a prefix and "above"
    # a walk up a few components: with the default's ~20 shown paths and
    # ~25 hidden ones, comparing every pair cost more than the split itself.
    hidden = [p for p, _k in profile.hidden] + list(profile.absent)
    reads: list[str] = []
    listed: list[str] = []
    for path, k in profile.shown:
        if k != LINK and any(is_under(path, r) for r in roots):
            prefix = path.rstrip("/") + "/"
            inside = [h for h in hidden if h.startswith(prefix)]
            grants, dirs = split_grant(path, inside, listdir=listdir, kind=kind)
            reads += grants
            listed += dirs
    above = _dirs_above(reads) | set(reads)
    listed += [d for d, k in profile.hidden if k == DIR and d in above]
    return reads, listed


def inner_reads(profile: Profile, *, extra: Sequence[str] = (),
                listdir: Callable[[str], list[str]] | None = None,
                kind: Callable[[str], str] = path_kind) -> tuple[list[str], list[str]]:
    """(reads, listed) for the Landlock layer behind bubblewrap's mounts: the
    read roots split around the hidden set, as the Landlock backend grants them.

    bwrap's masks are bind mounts on the entries they hid: a credential the
    host replaces by rename during a long run (`git credential-store`, a
    shell writing its history, a new key in ~/.ssh) is a new entry that no
    mask covers. Landlock rules hold inodes: the new entry has none, so this
    second layer still refuses it.
    """
    hidden = [p for p, _kind in profile.hidden] + list(profile.absent)
    reads: list[str] = []
    listed: list[str] = []
    roots = [*profile.read_roots, *profile.read_extra]
    for root in roots:
        grants, dirs = split_grant(root, hidden, listdir=listdir, kind=kind)
        reads += grants
        listed += dirs
    shown, masks = shown_back(profile, roots, listdir=listdir, kind=kind)
    reads += [*shown, *extra]
    granted = set(reads)
    return reads, [d for d in [*listed, *masks] if d not in granted]


def interpreter_paths(python: str) -> list[str]:
    """What the init's interpreter reads after Landlock: itself and its standard
    library, never the directory above `bin/`.

    That directory is the home for a `--prefix=$HOME` build or a copy in
    ~/bin, and a rule on it read every hidden store beneath.
    """
    import sys
    import sysconfig

    # The base installation's, not a venv's: the interpreter is the base one,
    # and a shared build loads libpython from LIBDIR (a system one of another
    # patch level loaded instead, and its extension modules failed).
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    paths = {python, sysconfig.get_config_var("LIBDIR") or "",
             os.path.join(sys.base_prefix, "lib", version),
             os.path.join(sys.base_exec_prefix, "lib", version)}
    return sorted(os.path.realpath(p) for p in paths if p)


def other_homes(home: str, *, listdir: Callable[[str], list[str]] | None = None,
                kind: Callable[[str], str] = path_kind,
                realpath: Callable[[str], str] = os.path.realpath) -> list[str]:
    """/home/* except the one holding $HOME, and /root unless $HOME is there.

    Resolved: where /home is a link (/home -> /data/home), the homes are
    wherever it leads, and that is where the rules are.
    """
    listdir = listdir or _listdir
    home = realpath(home) if home else ""
    out = []
    homes = realpath("/home")
    if kind(homes) == DIR:
        for name in listdir(homes):
            path = os.path.join(homes, name)
            if not (home and is_under(home, path)):
                out.append(path)
    root = realpath("/root")
    if kind(root) == DIR and not (home and is_under(home, root)):
        out.append(root)
    return out


class BackendRules:
    """The Landlock backend's rules: `LandlockRules` plus the directories that may
    only be listed (READ_DIR alone), which the init adds (see initcore)."""

    __slots__ = ("listed", "rules")

    def __init__(self, rules: LandlockRules, listed: Sequence[str]) -> None:
        self.rules = rules
        self.listed = tuple(sorted(set(listed)))


def landlock_backend_rules(profile: Profile, *, tmpdir: str, private: Sequence[str] = (),
                           python_prefix: str = "",
                           listdir: Callable[[str], list[str]] | None = None,
                           kind: Callable[[str], str] = path_kind) -> BackendRules:
    """The whole boundary as Landlock rules (pure given `listdir` and `kind`).

    Host scope: `/` split around the hidden credentials, runtime sockets,
    other users' homes, $XDG_RUNTIME_DIR, stockade's private paths and
    SPECIAL_ROOTS. Strict scope: only the read roots. Then, in both, the few
    devices, /proc, the useful parts of /sys, the interpreter, the
    workspace, the writable roots and the TMPDIR.

    The directories split on the way ($HOME, /etc, ~/.config, ...) may be
    listed but not read: without that `ls ~` fails. READ_DIR reaches
    everything beneath a directory, so the names inside a hidden directory
    (never their contents) show -- but a directory above the host's /tmp,
    /dev, /sys, $XDG_RUNTIME_DIR or another user's home (`/`, `/home`,
    `/run`) stays unlistable: those names are other people's business.
    """
    hidden = [p for p, _kind in profile.hidden] + list(profile.absent)
    reads: list[str] = []
    listed: list[str] = []
    unlistable: list[str] = []

    def split(root: str, excluded: Sequence[str]) -> None:
        grants, dirs = split_grant(root, excluded, listdir=listdir, kind=kind)
        reads.extend(grants)
        listed.extend(dirs)

    if profile.read_scope == STRICT:
        roots: list[str] = list(profile.read_roots)
        for root in roots:
            split(root, hidden)
    else:
        # /run/user holds every user's runtime dir (session bus, keyring,
        # podman): hidden whole, as bubblewrap masks it.
        unlistable = [*SPECIAL_ROOTS, "/run/user"]
        if profile.runtime_dir:
            unlistable.append(os.path.realpath(profile.runtime_dir))
        if profile.mask_other_homes:
            unlistable += other_homes(profile.home, listdir=listdir, kind=kind)
        split("/", [*unlistable, *hidden, *profile.sockets, *private])
        roots = ["/", *profile.read_extra]
        for extra in profile.read_extra:
            split(extra, hidden)
    shown, masks = shown_back(profile, roots, listdir=listdir, kind=kind)
    reads += shown
    listed += masks
    reads += [p for p in SYS_READ_PATHS if kind(p) == DIR]
    reads.append("/proc")
    if python_prefix:
        # The init's interpreter may sit under an excluded home
        # (/root/.pyenv), and the init imports `resource` after Landlock.
        reads += interpreter_paths(python_prefix)

    writes = [d for d in DEVICES if kind(d) not in (MISSING, LINK)]
    writes.append(tmpdir)
    writable = ([profile.workspace] if profile.workspace_writable else []) + list(
        profile.write_roots)
    for root in writable:
        if any(is_under(h, root) for h, _k in profile.hidden):
            # The profile never hides anything under a writable grant (an
            # explicit grant wins); if it did, Landlock could not honour it.
            raise SandboxUnavailable(
                f"{root} is writable but holds a hidden path; the landlock backend cannot "
                "hide a path inside a writable directory. Use backend = \"bubblewrap\"")
        writes.append(root)
    if not profile.workspace_writable:
        split(profile.workspace, hidden)

    rules = LandlockRules(reads, writes, restrict_tcp=profile.network.kind != NetworkPolicy.ALL,
                          tcp_connect=_tcp_ports(profile))
    granted = set(rules.read) | set(rules.write)
    return BackendRules(rules, [d for d in listed if d not in granted
                                and not any(is_under(u, d) for u in unlistable)])


def _tcp_ports(profile: Profile) -> tuple[int, ...]:
    """The one port a `hosts` network may connect to, the proxy's: without it such a
    command would get no network at all, so its absence is an error, not a silence."""
    if profile.network.kind != NetworkPolicy.HOSTS:
        return ()
    if profile.proxy is None or not profile.proxy.port:
        raise SandboxUnavailable(
            "network hosts needs the managed proxy's TCP port, which was not started")
    return (profile.proxy.port,)
