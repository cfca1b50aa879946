"""Deciding the boundary of one command: `build_profile` and its sub-decisions.

`build_profile` is the one place that turns capabilities, mode and host
facts into concrete paths, composed of pure decisions: what is writable,
what is readable, what is hidden (masking.py), what is protected (git's
part in gitpolicy.py), the environment (envscrub.py) and the network. They
look at the filesystem through the `kind` and `listdir` functions they are
given (lstat and os.listdir by default), so tests can describe a machine
without building one, and a driver never decides anything; the one
exception is git's own small files (config, hooks, index), which
`gitpolicy` reads to learn what git would run.
"""

from __future__ import annotations

import os
import sys

from . import envscrub, gitpolicy, hostpaths
from .capabilities import FULL_ACCESS, READ_ONLY, NetworkPolicy, is_under
from .drivers.registry import declared, platform_for
from .envscrub import DEFAULT_SECRET_ENV
from .errors import SandboxUnavailable
from .masking import Masks, masks, outermost
from .paths import sha256_hex
from .profile import (
    DIR,
    FILE,
    HOLD,
    HOST,
    KEEP_LINK,
    LINK,
    MISSING,
    PIN,
    SOCKET,
    STRICT,
    SYSTEM_READ_PATHS,
    WATCH,
    Profile,
    Protected,
    path_kind,
)

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from .capabilities import SandboxCapabilities
    from .drivers.session import Session
    from .profile import ProxyEndpoint

#: Variables naming the extra CA certificates a user's tools must trust.
CA_BUNDLE_VARS = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                  "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "PIP_CERT")


class Writable:
    """The writable decision: the roots beyond the workspace, and the caches' layers."""

    __slots__ = ("caches", "named", "relocated", "roots")

    def __init__(self, roots: list[str], caches: list[tuple[str, str, str]],
                 relocated: dict[str, str], named: dict[str, str] | None = None) -> None:
        #: Canonical, sorted, without the workspace and what lies in it.
        self.roots = roots
        #: (a toolchain cache, this session's private layer over it, its variable).
        self.caches = caches
        #: The variables pointed at a layer's `upper` where no overlay can be laid.
        self.relocated = relocated
        #: Each cache's real path: the name it was found by.
        self.named = named or {}

    def without(self, refused: set[str]) -> Writable:
        """These caches (real paths) dropped, with their layers' roots and variables."""
        caches = [c for c in self.caches if c[0] not in refused]
        uppers = {os.path.join(layer, "upper") for real, layer, _v in self.caches
                  if real in refused}
        return Writable([r for r in self.roots if r not in uppers], caches,
                        {v: u for v, u in self.relocated.items() if u not in uppers},
                        {r: n for r, n in self.named.items() if r not in refused})


def build_profile(
    *,
    mode: str,
    workspace: str,
    cwd: str,
    capabilities: SandboxCapabilities,
    read_scope: str,
    host_env: Mapping[str, str],
    command_env: Mapping[str, str] | None = None,
    unreadable: str | list[str] | None = None,
    writable: list[str] | tuple[str, ...] = (),
    granted_sockets: list[str] | tuple[str, ...] = (),
    use_scratch: bool = True,
    secret_env: tuple[str, ...] | list[str] = DEFAULT_SECRET_ENV,
    session_tmp: str | None = None,
    backend: str = "bubblewrap",
    kind: Callable[[str], str] = path_kind,
    extra_read: tuple[str, ...] = (),
    proxy: ProxyEndpoint | None = None,
    private: tuple[str, ...] | list[str] = (),
    tmp_size_mb: int | None = None,
    max_file_size_mb: int | None = None,
    listdir: Callable[[str], list[str]] = os.listdir,
    cache_dir: str | None = None,
    repositories: tuple[str, ...] = (),
    matched: tuple[str, ...] = (),
    platform: str = "",
    session: Session | None = None,
    publish: tuple[tuple[str, int, int], ...] = (),
) -> Profile:
    """Decide the boundary for one command. All paths in are canonical.

    `cache_dir`: the session's directory for its private layers over the
    toolchain caches (`hostpaths.caches`); without one they stay read-only.
    `repositories`: the person's repositories deeper in the workspace, as
    the driver found them (`Driver.repositories`). `matched`: the workspace's
    files `unreadable`'s patterns name (`Driver.matching`), hidden too.
    `platform`: whose home and per-user areas apply (default: the backend's OS).
    `proxy`: this command's endpoint of the managed proxy (network "hosts").
    """
    from .paths import home_dir

    platform = platform or platform_for(backend)
    namespaces = declared(backend).namespaces
    writable_ws = mode != READ_ONLY and any(is_under(workspace, w) for w in capabilities.fs_write)
    home = home_dir(host_env, platform)
    granted = [os.path.realpath(p) for p in hostpaths.paths(list(granted_sockets), host_env)]
    w = writable_roots(mode, workspace, capabilities, writable, host_env, home, kind,
                       cache_dir if use_scratch else None, platform, namespaces)
    cas = ca_bundles(host_env, kind)
    m = masks(workspace=workspace, write_roots=w.roots, fs_write=capabilities.fs_write,
              must_show=(workspace, *capabilities.fs_write,
                         *(r for r in w.roots if r not in w.relocated.values())),
              grants=capabilities.fs_read + capabilities.fs_write,
              wanted=cas, caches=w.named, private=private,
              unreadable=unreadable, matched=matched, granted=granted, host_env=host_env,
              platform=platform, namespaces=namespaces, kind=kind, listdir=listdir)
    if m.refused:
        w = w.without(m.refused)
    sockets = local_sockets(host_env, granted, kind)
    read_roots, links = readable(read_scope, workspace, capabilities, extra_read, cas, kind)
    protected = (protection(workspace, writable_ws, capabilities, w.roots, m, sockets, home,
                            host_env, repositories, platform, kind)
                 if writable_ws or w.roots else [])
    return Profile(
        mode=mode, workspace=workspace, workspace_writable=writable_ws, cwd=cwd,
        read_scope=read_scope, read_roots=read_roots, system_links=links,
        read_extra=tuple(p for p in capabilities.fs_read + tuple(extra_read) + cas
                         if p != "/"),
        write_roots=tuple(w.roots), caches=tuple(w.caches),
        hidden=outermost(m.hidden, m.shown), shown=m.shown,
        absent=tuple(sorted(set(m.absent))),
        private_around=tuple(sorted(set(m.around), key=lambda q: (q.count("/"), q))),
        sockets=tuple(sorted(set(sockets))),
        granted_sockets=tuple(g for g in granted if kind(g) == SOCKET),
        protected=tuple(dict.fromkeys(protected)), mask_other_homes=read_scope == HOST,
        runtime_dir=runtime_dir(host_env, kind), home=home,
        network=network(mode, capabilities), proxy=proxy, session_tmp=session_tmp,
        tmp_size_mb=tmp_size_mb, max_file_size_mb=max_file_size_mb,
        max_memory_mb=capabilities.max_memory_mb,
        spawn_subprocess=capabilities.spawn_subprocess or mode == FULL_ACCESS,
        env=envscrub.command_env(host_env, command_env or {}, secret_env, backend=backend,
                                 mode=mode, caches=w.caches, relocated=w.relocated),
        session=session, publish=publish,
    )


def writable_roots(mode: str, workspace: str, capabilities: SandboxCapabilities,
                   writable: Sequence[str], host_env: Mapping[str, str], home: str,
                   kind: Callable[[str], str], cache_dir: str | None, platform: str,
                   namespaces: bool) -> Writable:
    """What a command may write beyond the workspace: nothing in read-only mode, and
    never the home itself by a configured `writable` or a cache's name.

    With `cache_dir`, each toolchain cache gets a private layer: an overlay at
    the cache's path where the backend has a mount namespace; elsewhere the
    cache stays read-only and its variable points at the layer's `upper`.
    """
    roots: list[str] = []
    caches: list[tuple[str, str, str]] = []
    relocated: dict[str, str] = {}
    named: dict[str, str] = {}
    if mode == READ_ONLY:
        return Writable(roots, caches, relocated)
    home_real = os.path.realpath(home) if home else ""
    roots.extend(w for w in capabilities.fs_write if not is_under(w, workspace))
    for p in hostpaths.paths(list(writable), host_env):
        real = os.path.realpath(p)
        if kind(real) == DIR and (not home or real != home_real):
            roots.append(real)
    if cache_dir:
        network = capabilities.network.kind != NetworkPolicy.NONE
        for p, var in hostpaths.caches(host_env, platform, network=network):
            real = os.path.realpath(p)
            if kind(real) != DIR or (home and real == home_real):
                continue
            layer = os.path.join(cache_dir, sha256_hex(os.fsencode(real))[:16])
            named.setdefault(real, p)
            if namespaces:
                caches.append((real, layer, var))
            elif var:
                caches.append((real, layer, var))
                roots.append(os.path.join(layer, "upper"))
                relocated[var] = os.path.join(layer, "upper")
    return Writable(sorted(set(roots)), caches, relocated, named)


def ca_bundles(host_env: Mapping[str, str], kind: Callable[[str], str]) -> tuple[str, ...]:
    """The CA certificates the variables tools read name, always readable: a
    company's TLS-intercepting CA, without which every HTTPS request through
    that network fails to verify."""
    named = {os.path.realpath(host_env[var]) for var in CA_BUNDLE_VARS
             if host_env.get(var, "").startswith("/")}
    return tuple(sorted(p for p in named if kind(p) in (FILE, DIR)))


def readable(read_scope: str, workspace: str, capabilities: SandboxCapabilities,
             extra_read: Sequence[str], cas: Sequence[str], kind: Callable[[str], str]
             ) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """(read roots, system links): the whole host in the host scope; in the strict
    one only what a program needs to start, the grants and the workspace."""
    if read_scope != STRICT:
        return ("/",), ()
    kinds = {p: kind(p) for p in SYSTEM_READ_PATHS}
    roots = [p for p in SYSTEM_READ_PATHS if kinds[p] == DIR]
    links = tuple((p, os.readlink(p)) for p in SYSTEM_READ_PATHS if kinds[p] == LINK)
    roots.extend(interpreter_prefixes())
    roots.extend(capabilities.fs_read)
    roots.extend(extra_read)
    roots.extend(cas)
    roots.append(workspace)
    return tuple(sorted(set(roots))), links


def local_sockets(host_env: Mapping[str, str], granted: Sequence[str],
                  kind: Callable[[str], str]) -> list[str]:
    """The host's sockets a command must not reach (`hostpaths.local_sockets`),
    but for those granted by name."""
    out = []
    for s in hostpaths.local_sockets(host_env):
        real = os.path.realpath(s)
        if real not in granted and kind(real) != MISSING:
            out.append(real)
    return out


def network(mode: str, capabilities: SandboxCapabilities) -> NetworkPolicy:
    """The capabilities' network; full access is every network, whatever they say."""
    return capabilities.network if mode != FULL_ACCESS else NetworkPolicy.allow_all()


def protection(workspace: str, writable_ws: bool, capabilities: SandboxCapabilities,
               write_roots: Sequence[str], m: Masks, sockets: Sequence[str], home: str,
               host_env: Mapping[str, str], repositories: Sequence[str], platform: str,
               kind: Callable[[str], str]) -> list[Protected]:
    """What must not change under a writable root: its protected names, git's
    code, the home's start-up files, and the directories above each of them."""
    roots = ([workspace] if writable_ws else []) + list(capabilities.fs_write)
    writable_all = tuple(roots) + tuple(write_roots)
    configs = gitpolicy.global_configs(host_env, home)
    out: list[Protected] = []
    for root in roots:
        if kind(root) == DIR and not any(is_under(root, d) for d, _ in m.hidden):
            out.extend(protected_under(root, kind, writable_all, home, configs))
    out.extend(home_protection(home, kind, writable_all, m.hidden, platform,
                               m.requested_shown))
    # A store that does not exist gets no mask, so a command in a workspace
    # of ~ wrote ~/.aws/config with a `credential_process`, ~/.kube/config
    # with an exec plugin, ~/.npmrc with `node-options`, and they stayed.
    out.extend(Protected(p, WATCH) for p in m.absent
               if any(is_under(p, r) and p != r for r in writable_all if r != "/"))
    # What is hidden is hidden by path: a command that renamed the
    # directory above a mask (`mv ~/.docker ~/.docker-moved`, `mv
    # ~/.local/state ...` with a workspace of ~) carried the mask away
    # with it, and the next command found nothing to hide at the old
    # name -- the credential, the container runtime's socket, or the
    # guard's own baseline, whose loss left a planted ~/bin/git live.
    masked = [Protected(p, FILE) for p, _ in m.hidden] + [Protected(s, FILE) for s in sockets]
    out.extend(hold_ancestors(out + masked, writable_all, kind))
    # The person's repositories deeper in the tree (a vendored clone, a bare
    # fixture), which a walk of fixed names never reaches: held as the top's
    # are, but not their ancestors. A directory above one renamed and rebuilt
    # holds a repository the command made, which the guard makes inert
    # (drivers/linux/host/treewatch.py).
    known = {p.path for p in out}
    for repo in repositories:
        if repo not in known and writable_ws and is_under(repo, workspace) \
                and repo != workspace:
            out.extend(gitpolicy.repository_protection(repo, kind, writable_all, home, configs))
    return out


def protected_under(root: str, kind: Callable[[str], str] = path_kind,
                    writable: tuple[str, ...] = (), home: str = "",
                    global_configs: tuple[str, ...] = ()) -> list[Protected]:
    """Protected metadata in one writable root, resolving `.git` pointer files.

    git itself must keep working in workspace-write -- objects, index and refs
    are written by every `git add` and `git commit` -- so a `.git` directory is
    not frozen whole: what makes git run code is (see `gitpolicy.git_protection`).
    `writable` are all the roots the command may write; only what lies inside
    them needs (or gets) protection.

    A name that does not exist yet is WATCHed, not blocked: blocking it would
    need a placeholder on the host, which the person's git sees (`git add -A`
    fails on it), which another command starting meanwhile takes for the
    real thing, and whose removal detaches that command's mounts.
    """
    roots = writable or (root,)
    out: list[Protected] = []
    enclosing = gitpolicy.enclosing_repository(root, kind)
    if enclosing:
        # The workspace is a directory inside a repository (a package of a
        # monorepo): the host's git at the top obeys that repository's config
        # and enters its submodules, some of which may lie in here.
        top, gitdir = enclosing
        out.extend(gitpolicy.git_protection(gitdir, top, kind, roots, home, 0, global_configs))
    for name in hostpaths.PROTECTED_NAMES:
        path = os.path.join(root, name)
        k = kind(path)
        if k == LINK:
            # A mount follows the link, so the link itself -- an entry in a
            # writable directory -- could be replaced by a real directory that
            # the host then reads. Refusing is the only answer that holds.
            raise SandboxUnavailable(
                f"{path} is a symbolic link; stockade cannot keep a symlinked {name} read-only "
                "in a writable workspace. Replace the link with the real directory or file, "
                "or run in read-only mode."
            )
        if name == ".git" and k in (DIR, FILE):
            out.extend(gitpolicy.repository_protection(path, kind, roots, home, global_configs))
        elif k == MISSING:
            out.append(Protected(path, WATCH))
        else:
            out.append(Protected(path, k if k in (DIR, FILE) else FILE))
    return out


def hold_ancestors(protected: list[Protected], roots: tuple[str, ...],
                   kind: Callable[[str], str]) -> list[Protected]:
    """HOLD for every existing directory between a writable root and a path in `protected`
    (a protected name, or what a mask covers)."""
    held: dict[str, Protected] = {}
    for item in protected:
        if item.kind in (PIN, HOLD):
            continue
        root = max((r for r in roots if is_under(item.path, r) and item.path != r), key=len,
                   default="")
        if not root or root == "/":
            continue
        parent = os.path.dirname(item.path)
        while parent != root and is_under(parent, root):
            if parent not in held and kind(parent) == DIR:
                held[parent] = Protected(parent, HOLD)
            parent = os.path.dirname(parent)
    return list(held.values())


def home_protection(home: str, kind: Callable[[str], str], roots: tuple[str, ...],
                    hidden: list[tuple[str, str]], platform: str = "",
                    shown: Sequence[str] = ()) -> list[Protected]:
    """`hostpaths.HOME_PROTECTED`, where a writable root holds them.

    Without this a workspace of `~` (an MCP client started in the home)
    let a command append to ~/.bashrc and ~/.ssh/authorized_keys. A path
    hidden as a credential stays hidden: protecting it would mount the real
    one back over the mask, unless it is shown back out of a hidden area
    (`shown`): then it is readable, and the writable root would hand it over.
    A root of `/` is full access, asked for by name, and that grants the
    home's files too.
    """
    out: list[Protected] = []
    if not home:
        return out
    for rel in hostpaths.home_protected(platform):
        path = os.path.join(home, rel)
        # Under any writable root: `writable = ["~/.config"]` must not hand
        # over ~/.config/systemd and ~/.config/stockade with it.
        if not any(is_under(path, r) for r in roots if r != "/"):
            continue
        if any(is_under(path, h) for h, _ in hidden) and not any(
                is_under(path, back) for back in shown):
            continue
        k = kind(path)
        if k == LINK:
            target = os.path.realpath(path)
            tk = kind(target)
            if tk in (DIR, FILE) and any(is_under(target, r) for r in roots):
                out.append(Protected(target, tk))
            out.append(Protected(path, KEEP_LINK))
        elif k == MISSING:
            out.append(Protected(path, WATCH))
        else:
            out.append(Protected(path, k if k in (DIR, FILE) else FILE))
    return out


def runtime_dir(env: Mapping[str, str], kind: Callable[[str], str] = path_kind) -> str:
    """The user's runtime directory, also when XDG_RUNTIME_DIR is unset.

    It holds the session bus, the keyring and rootless docker's and podman's
    sockets; a caller that lost the variable (sudo, cron, a service) must not
    thereby hand them over.
    """
    value = env.get("XDG_RUNTIME_DIR", "")
    if value:
        return value
    if not hasattr(os, "getuid"):
        return ""  # Windows: no per-user runtime directory, and no getuid to name one
    default = f"/run/user/{os.getuid()}"
    return default if kind(default) == DIR else ""


def interpreter_prefixes() -> tuple[str, ...]:
    return tuple(sorted({os.path.realpath(p) for p in
                         (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}))
