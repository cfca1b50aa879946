"""What a command cannot see: the masks, and what comes back inside them.

Credential stores (`hostpaths.unreadable`), the workspace's files an
`unreadable` pattern names, and stockade's own records are hidden; what a
grant, a CA bundle, a toolchain cache or the default's allowlist needs
inside a hidden directory is shown back after its mask. Pure functions of
the paths they are given and the `kind` and `listdir` that describe the
machine.
"""

from __future__ import annotations

import os

from . import hostpaths
from .capabilities import is_under
from .profile import DIR, FILE, LINK, MISSING

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence


#: Directories already resolved: (the real path, whether every link on the way
#: resolved). `real_dir`'s cache, shared by the paths of one profile; a key
#: with a leading NUL is `_in_real_parent`'s answer for that path.
Resolved = dict[str, tuple[str, bool]]


class Masks:
    """The hidden decision: what is masked, what comes back, what is not there yet."""

    __slots__ = ("absent", "around", "hidden", "refused", "requested_shown", "shown")

    def __init__(self, hidden: list[tuple[str, str]], shown: tuple[tuple[str, str], ...],
                 requested_shown: list[str], absent: list[str], around: list[str],
                 refused: set[str]) -> None:
        #: (path, DIR or FILE) masked, before `outermost`.
        self.hidden = hidden
        #: (path, kind) shown back inside a hidden directory.
        self.shown = shown
        #: The paths the unreadable list itself shows back, before resolving.
        self.requested_shown = requested_shown
        #: Credential stores that do not exist yet.
        self.absent = absent
        #: stockade's own directories that hold the workspace.
        self.around = around
        #: The toolchain caches (real paths) that get no layer (`_Areas`).
        self.refused = refused


def masks(*, workspace: str, write_roots: Sequence[str], must_show: Sequence[str],
          fs_write: Sequence[str], grants: Sequence[str], wanted: Sequence[str],
          caches: Mapping[str, str], private: Sequence[str],
          unreadable: str | list[str] | None,
          matched: Sequence[str], granted: list[str], host_env: Mapping[str, str],
          platform: str, namespaces: bool, kind: Callable[[str], str],
          listdir: Callable[[str], list[str]]) -> Masks:
    """What one command cannot see; what is explicitly granted never among it.

    Asking for fs_read of ~/.aws (and being approved) is how a session gets
    it back. `wanted` (CA bundles), `caches` (each toolchain cache's real path:
    the name it was found by) and the grants come back inside a hidden
    directory; `must_show` (the workspace and the writable roots a mask would
    cover) opens one up around them.
    """
    from .paths import home_dir

    hidden, around = stockade_records(private, workspace, kind)
    hidden += matched_files(matched, kind)
    writable_here = (workspace, *fs_write, *write_roots)
    hidden_paths, shown_paths = hostpaths.unreadable(unreadable, host_env, granted, listdir,
                                                     platform)
    # The workspace's own write grant is not a request to see what is
    # hidden inside it: a workspace of ~ must not unmask ~/.aws.
    unmasking = [g for g in grants if g != "/" and not is_under(workspace, g)]
    # One resolution of each directory for the stores and what comes back inside them.
    resolved: Resolved = {}
    reals: dict[str, str] = {}
    home = home_dir(host_env, platform)
    stores, unborn = credential_stores(hidden_paths, unmasking, writable_here, kind, resolved,
                                       reals, _real(home, resolved)[0] if home else "")
    hidden += stores
    # What comes back must lie in its own area (`_Areas`), judged before
    # the targets of links inside the areas join: a cache moved to another disk
    # by a link is still the area's.
    own = _Areas(hidden_paths, reals, shown_paths, {h for h, _k in hidden}, resolved)
    for target, k in _linked_out([h for h, hk in hidden if hk == DIR], shown_paths, listdir,
                                 kind):
        # Not a target that holds a writable root (a link to ~ would mask the
        # home), nor, where only bubblewrap can mask inside one, one beneath it.
        if not any(is_under(w, target) for w in writable_here) and (
                namespaces or not any(is_under(target, w) for w in writable_here)):
            hidden.append((target, k))
    # Granted paths, CA bundles and caches inside a hidden directory come back
    # after its mask, as the default's allowlist does.
    kept = [real for real, name in caches.items() if own.holds(name, real, True, cache=True)]
    back = [*(p for p in shown_paths if own.shows(p)),
            *(g for g in grants if g != "/"), *wanted, *kept]
    hidden, shown = _show_back(hidden, back, must_show, kind, listdir, resolved)
    # Inside stockade's directory around the workspace only the workspace
    # shows: a mask there would make a mount point, a name, of what it hides.
    hidden = [(p, k) for p, k in hidden if not any(is_under(p, a) for a in around)]
    return Masks(hidden, shown, shown_paths, unborn, around, set(caches) - set(kept))


def stockade_records(private: Sequence[str], workspace: str, kind: Callable[[str], str]
                     ) -> tuple[list[tuple[str, str]], list[str]]:
    """(hidden, around): stockade's own records hidden, but never the workspace.

    The ledger holds every earlier command's argv, the state directory every
    other session's /tmp. A private directory that holds this workspace is
    hidden around it: left visible for the workspace's sake, it showed every
    other session's workspace beside it.
    """
    hidden: list[tuple[str, str]] = []
    around: list[str] = []
    for p in private:
        real = os.path.realpath(p)
        k = kind(real)
        if k == MISSING:
            continue
        if is_under(workspace, real):
            if k == DIR and real != workspace:
                around.append(real)
        else:
            hidden.append((real, DIR if k == DIR else FILE))
    return hidden, around


def matched_files(matched: Sequence[str], kind: Callable[[str], str]
                  ) -> list[tuple[str, str]]:
    """The workspace's files an `unreadable` pattern names, a link hidden where it
    leads (`svc/.env -> ~/secrets/app.env`)."""
    out: list[tuple[str, str]] = []
    for p in matched:
        k = kind(p)
        if k == LINK:
            p = os.path.realpath(p)
            k = kind(p)
        if k in (DIR, FILE):
            out.append((p, k))
    return out


def credential_stores(candidates: Sequence[str], unmasking: Sequence[str],
                      writable_here: Sequence[str], kind: Callable[[str], str],
                      resolved: Resolved, reals: dict[str, str], home: str = ""
                      ) -> tuple[list[tuple[str, str]], list[str]]:
    """(hidden, not there yet) of the stores `hostpaths.unreadable` names, where
    they really are, but for those a grant unmasks; `reals` gets where each name
    leads.

    A link a command planted at a store's name (`ln -s ~ ~/.azure`, `ln -s
    ~/proj ~/.azure`) made every later command mask the whole home, or the
    workspace, it pointed to: such a link, leading to a writable root itself
    or to the real `home` or above it, hides nothing. One leading above a
    writable root elsewhere is the store, wherever it lives: a person's
    `~/.config -> ~/dotfiles/config` with the workspace in `~/.config/nvim`
    is hidden as a real `~/.config` is, and opened up around the workspace
    (`_show_back`).
    """
    hidden: list[tuple[str, str]] = []
    unborn: list[str] = []
    for p in candidates:
        real, _whole = _in_real_parent(p, resolved)
        k = kind(real)
        if k == LINK:
            real = os.path.realpath(real)
            k = kind(real)
        reals[_normal(p)] = real
        if any(is_under(real, g) for g in unmasking):
            continue
        if real != os.path.abspath(p) and any(
                is_under(w, real) and (w == real or not home or is_under(home, real))
                for w in writable_here):
            continue
        if k != MISSING:
            hidden.append((real, DIR if k == DIR else FILE))
        else:
            unborn.append(real)
    return hidden, unborn


def outermost(hidden: list[tuple[str, str]], shown: tuple[tuple[str, str], ...] = ()
               ) -> tuple[tuple[str, str], ...]:
    """The hidden paths without those a hidden directory's mask covers already:
    bwrap cannot place a mount inside it once it is read-only (the ledger
    under stockade's hidden data directory). What lies in a path shown back
    (git's credentials in a shown `~/.config/git`) keeps its own mask."""
    dirs = {p for p, k in hidden if k == DIR}
    back = {p for p, _k in shown}
    return tuple(sorted({(p, k) for p, k in hidden
                         if not _below_any(p, dirs) or _below_any(p, back)}))


def _show_back(hidden: list[tuple[str, str]], wanted: Sequence[str], must: Sequence[str],
               kind: Callable[[str], str], listdir: Callable[[str], list[str]],
               resolved: Resolved
               ) -> tuple[list[tuple[str, str]], tuple[tuple[str, str], ...]]:
    """(hidden, shown): `wanted` paths inside a hidden directory shown back, and
    every hidden directory that holds or is one of `must` opened up around it.

    A mask is mounted after the workspace and the writable roots, so one
    above them would cover them: such a directory is replaced by its entries,
    minus the one on the way, down to the grant (a workspace in
    `~/.config/nvim` sees its own tree, and `~/.config/gh` stays hidden).
    A link is never shown back by a bind: the sandbox gets the link itself,
    and its target is shown, or not, where it lives.
    """
    out: list[tuple[str, str]] = []
    todo = list(hidden)
    # The entries are compared where they are: an area kept elsewhere by a link
    # (`~/.config -> ~/dotfiles/config`) lists its children by their real paths.
    placed = {real for real, whole in (_in_real_parent(p, resolved) for p in wanted) if whole}
    while todo:
        path, k = todo.pop()
        inner = [m for m in must if is_under(m, path)]
        if k != DIR or not inner:
            out.append((path, k))
            continue
        try:
            names = sorted(listdir(path))
        except OSError:
            continue  # cannot be opened up: left visible rather than covering the grant
        for name in names:
            child = os.path.join(path, name)
            ck = kind(child)
            if child in inner or child in placed or ck in (LINK, MISSING):
                continue
            todo.append((child, DIR if ck == DIR else FILE))
    dirs = {p for p, k in out if k == DIR}
    shown: dict[str, str] = {}
    for p in wanted:
        # The name as the area holds it; a link above it inside leads elsewhere.
        real, whole = _in_real_parent(p, resolved)
        if not whole or not _below_any(real, dirs):
            # Beneath a link in a loop or leading nowhere, `realpath` keeps the
            # rest of the name unresolved: a link further down it (`~/.cache ->
            # ~/.cache/..`, then `~/huggingface -> ~/.aws`) led into a store.
            continue
        k = kind(real)
        if k != MISSING:
            shown[real] = k if k in (DIR, LINK) else FILE
    return out, tuple(sorted(shown.items()))


def _linked_out(hidden: Sequence[str], shown: Sequence[str],
                listdir: Callable[[str], list[str]], kind: Callable[[str], str]
                ) -> list[tuple[str, str]]:
    """The targets of the links directly inside each hidden directory, but for
    those shown back: a store kept elsewhere and linked in (`~/.config/gh ->
    ~/dotfiles/gh`, a key in ~/.ssh) stays a store, wherever it lives."""
    out: list[tuple[str, str]] = []
    back = set(shown)
    for area in hidden:
        if listdir is os.listdir:
            # The entries' own types: no lstat for each of ~/.config's hundreds.
            try:
                with os.scandir(area) as it:
                    links = [e.path for e in it if e.is_symlink()]
            except OSError:
                continue
        else:
            try:
                links = [os.path.join(area, n) for n in listdir(area)]
            except OSError:
                continue
            links = [p for p in links if kind(p) == LINK]
        for link in links:
            if link in back:
                continue
            target = os.path.realpath(link)
            k = kind(target)
            if k in (DIR, FILE) and target != "/":
                out.append((target, k))
    return out


def _in_real_parent(path: str, resolved: Resolved) -> tuple[str, bool]:
    """`path`'s name in its directory's real path (the name itself not followed),
    each directory resolved once in `resolved`; and whether every link on the way
    resolved."""
    got = resolved.get("\0" + path)  # no path holds a NUL: its own entry, not a directory's
    if got is None:
        head, name = os.path.split(path)
        if name in ("", ".", ".."):
            got = _real(path, resolved)
        else:
            real, whole = _real(head, resolved)
            got = (os.path.join(real, name), whole)
        resolved["\0" + path] = got
    return got


def real_dir(path: str, resolved: Resolved) -> str:
    """`os.path.realpath(path)`, each directory on the way resolved once in `resolved`.

    One lstat for each directory not seen yet, where `realpath` takes one for
    every component of every path: the stores and the allowlist name some 350
    paths in a few dozen directories, and resolving them was most of the masks'
    cost on every command.
    """
    return _real(path, resolved)[0]


def _real(path: str, resolved: Resolved) -> tuple[str, bool]:
    got = resolved.get(path)
    if got is not None:
        return got
    # Up to the nearest directory already resolved, then down again, a component
    # at a time: a name of thousands of components must not exhaust the stack.
    down: list[tuple[str, str]] = []
    while got is None:
        head, name = os.path.split(path)
        if not path.strip("/"):
            got = ("/", True)  # `/`, `//`: realpath's root
        elif head == path or not head.startswith("/"):
            got = (os.path.realpath(path), False)
        else:
            down.append((path, name))
            path = head
            got = resolved.get(path)
            continue
        resolved[path] = got
    real, whole = got
    for path, name in reversed(down):
        if name in ("", "."):
            pass  # a trailing slash, `/./`: the same directory
        elif not whole:
            # Beneath a link in a loop or leading nowhere `realpath` stops
            # resolving; it is asked itself, so the answer stays its own.
            real = os.path.realpath(path)
        elif name == "..":
            real = os.path.dirname(real)  # as realpath: the resolved parent's
        else:
            real = os.path.join(real, name)
            if os.path.islink(real):
                try:
                    real = os.path.realpath(real, strict=True)
                except OSError:
                    real, whole = os.path.realpath(real), False
        resolved[path] = (real, whole)
    return real, whole


class _Areas:
    """Whether a path the allowlist names (or a toolchain cache) still lies, resolved, in
    the hidden area it is named under, and beneath no other hidden path there.

    The allowlist and the caches name paths by where tools keep them, not where
    they are: a link on the way (`~/.cache/huggingface -> ~/.aws`, a person's
    own, or a loop) put a store's directory in view as the allowlist's, or
    under a cache's private layer; an area that is a link to another
    (`~/.cache -> ~/.config`) showed the other's tokens by its own list.
    """

    __slots__ = ("_area", "allowed", "leads", "listed", "masked", "names", "placed",
                 "resolved", "shared", "times")

    def __init__(self, hidden: Sequence[str], reals: dict[str, str], shown: Sequence[str],
                 masked: set[str], resolved: Resolved) -> None:
        self.resolved = resolved
        self.masked = masked
        #: The hidden names (normalised), and which of them lead to each real path.
        self.names = set(reals)
        #: How many areas have each name (`XDG_CACHE_HOME=~/.config` gives ~/.config
        #: two lists), and how many of them list each shown path.
        self.times: dict[str, int] = {}
        for name in hidden:
            self.times[_normal(name)] = self.times.get(_normal(name), 0) + 1
        self.listed: dict[str, int] = {}
        for p in shown:
            self.listed[_normal(p)] = self.listed.get(_normal(p), 0) + 1
        self.leads: dict[str, list[str]] = {}
        for name, real in reals.items():
            self.leads.setdefault(real, []).append(name)
        self._area: dict[str, tuple[str, bool, list[str]]] = {}
        #: Each shown path: where it is, whether it resolved whole, its area's name.
        self.placed = {p: (*_in_real_parent(p, resolved), _nearest_above(_normal(p), self.names))
                       for p in shown}
        #: Each area's shown paths, where they are.
        self.allowed: dict[str, set[str]] = {}
        for real, _whole, area in self.placed.values():
            self.allowed.setdefault(area, set()).add(real)
        #: The names two different lists share: one of them misses a path of the
        #: other (`XDG_CACHE_HOME=~/.cache` only repeats the one list).
        self.shared = {area for p, (_r, _w, area) in self.placed.items()
                       if self.listed[_normal(p)] < self.times.get(area, 1)}

    def shows(self, p: str) -> bool:
        """Whether the allowlist's `p` comes back (see `holds`): under a name two areas
        share, only what each of their lists names."""
        real, whole, area = self.placed[p]
        return (self.listed[_normal(p)] >= self.times.get(area, 1)
                and self.holds(p, real, whole, area=area))

    def holds(self, named: str, real: str, whole: bool, cache: bool = False,
              area: str | None = None) -> bool:
        """`named`, which is `real` once resolved (`whole`: every link on the way
        resolved): beneath no hidden path, or in its own area and nowhere else.
        A `cache` must also hold no hidden path: its layer would lie over it."""
        if not whole:
            return False
        if cache and any(m == real or m.startswith(real + "/") for m in self.masked):
            return False
        inside = _nearest_above(real + "/", self.masked)  # `real` itself included
        if not inside:
            return True
        if area is None:
            area = _nearest_above(_normal(named), self.names)
        if not area or not self.allowed.get(area) or (cache and area in self.shared):
            # Outside every area, inside a store (no list), or a cache in a place
            # two areas share (`XDG_CACHE_HOME=~/.config`): whose it is is unknown.
            return False
        area_real, fits, others = self.area(area)
        return fits and inside == area_real and all(
            real in self.allowed.get(other, ()) for other in others)

    def area(self, area: str) -> tuple[str, bool, list[str]]:
        """(its real path; whether it resolved whole and lies beneath no hidden path
        but another area, as `~/.cargo -> ~/.local/share/cargo` does; the other
        areas and stores that lead to the same place, each of which must show a
        path back too: another name of this one area, with the same list, need not)."""
        got = self._area.get(area)
        if got is None:
            real, whole = _real(area, self.resolved)
            allowed = self.allowed
            above = _nearest_above(real, self.masked)
            fits = whole and (not above or any(allowed.get(n) for n in self.leads.get(above, ())))
            others = [n for n in self.leads.get(real, ())
                      if n != area and allowed.get(n) != allowed.get(area)]
            got = (real, fits, others)
            self._area[area] = got
        return got


def _normal(path: str) -> str:
    """`path` without a trailing slash or `.` and `..` components, as compared by name."""
    if ("//" in path or "/./" in path or "/../" in path
            or path.endswith(("/", "/.", "/.."))):
        return os.path.normpath(path)
    return path


def _nearest_above(path: str, among: set[str]) -> str:
    """The deepest of `among` strictly above `path`, by name; "" for none."""
    parent = os.path.dirname(path)
    while parent != path:
        if parent in among:
            return parent
        path, parent = parent, os.path.dirname(parent)
    return ""


def _below_any(path: str, dirs: set[str]) -> bool:
    """True when a directory strictly above `path` (canonical) is one of `dirs`:
    a walk up its few components, not a comparison with each directory."""
    parent = os.path.dirname(path)
    while parent != path:
        if parent in dirs:
            return True
        path, parent = parent, os.path.dirname(parent)
    return False
