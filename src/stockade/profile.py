"""The decided boundary: `Profile`, built from a request, consulted by drivers.

`build_profile` is the one place that turns capabilities, mode and host
facts into concrete paths. It looks at the filesystem through the `kind`
and `listdir` functions it is given (lstat and os.listdir by default), so
tests can describe a machine without building one, and a driver never
decides anything; the one exception is git's own small files (config,
hooks, index), which `gitmeta` reads to learn what git would run.
"""

from __future__ import annotations

import os
import sys

from . import gitmeta, hostpaths
from .capabilities import FULL_ACCESS, READ_ONLY, NetworkPolicy, is_under
from .drivers.registry import declared, platform_for
from .errors import SandboxUnavailable
from .paths import sha256_hex

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from .capabilities import SandboxCapabilities
    from .drivers.session import Session

HOST = "host"
STRICT = "strict"

# The strict read scope: what a dynamically linked program needs to start.
SYSTEM_READ_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")

# Path kinds reported by `kind()`.
DIR, FILE, SOCKET, LINK, MISSING = "dir", "file", "socket", "link", "missing"

# Variables that make a program load code it was not asked to run. The
# caller's environment is not the command's: a host shell's LD_PRELOAD or
# PYTHONSTARTUP would run inside every sandboxed command.
INJECTION_PREFIXES = ("LD_", "DYLD_", "BASH_FUNC_", "PYTHON")
INJECTION_NAMES = ("BASH_ENV", "ENV", "NODE_OPTIONS", "PERL5OPT", "RUBYOPT", "MallocNanoZone")
PYTHON_HARMLESS = ("PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING",
                    "PYTHONUTF8", "PYTHONHASHSEED")

#: Variables naming the extra CA certificates a user's tools must trust.
CA_BUNDLE_VARS = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                  "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "PIP_CERT")

#: Names that carry secrets by convention; glob with `*` at either end.
#: Each pattern is here because a real variable of that shape is a secret:
#: `*PWD*` MYSQL_PWD (mysql's password variable), `*JWT*` CI_JOB_JWT (GitLab's
#: job identity, exchanged for cloud credentials), `*_DSN` SENTRY_DSN (a
#: project key in a URL), `*_AUTH` npm_config__auth, `*AUTHORIZATION*` a
#: ready-made header, `*SESSION_KEY*`, `*COOKIE*`, `*PASSPHRASE*` (borg,
#: gpg), `*_PAT` a personal access token, `*SIGNING_KEY*`, `*WEBHOOK*` (the
#: URL is the credential), `*CONNECTION_STRING*` (Azure's embed the account
#: key), `*_KEY` STRIPE_KEY and its kind. Not `*AUTH*`: GIT_AUTHOR_NAME would go.
DEFAULT_SECRET_ENV = ("*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*PWD*", "*API_KEY*",
                      "*APIKEY*", "*PRIVATE_KEY*", "*CREDENTIAL*", "*ACCESS_KEY*",
                      "AWS_*", "GITHUB_TOKEN", "GH_TOKEN", "*DATABASE_URL*", "*JWT*",
                      "*_DSN", "*_AUTH", "*AUTHORIZATION*", "*SESSION_KEY*", "*COOKIE*",
                      "*PASSPHRASE*", "*_PAT", "*SIGNING_KEY*", "*WEBHOOK*",
                      "*CONNECTION_STRING*", "*_KEY")

# Never secrets, whatever a pattern says: PWD and OLDPWD are the shell's
# working directories (`*PWD*` matches both, and tools that trust $PWD would
# run in the wrong place); SSH_AUTH_SOCK is a path, and the socket behind it
# is granted or masked separately.
NOT_SECRET = ("PWD", "OLDPWD", "SSH_AUTH_SOCK")


def path_kind(path: str) -> str:
    try:
        st = os.lstat(path)
    except OSError:
        return MISSING
    mode = st.st_mode
    if mode & 0o170000 == 0o040000:
        return DIR
    if mode & 0o170000 == 0o120000:
        return LINK
    if mode & 0o170000 == 0o140000:
        return SOCKET
    return FILE


def name_matches(pattern: str, name: str) -> bool:
    """`*X*`, `X*`, `*X` or exact: all a secret pattern needs, without importing `re`."""
    lead, trail = pattern.startswith("*"), pattern.endswith("*") and len(pattern) > 1
    core = pattern.strip("*")
    if lead and trail:
        return core in name
    if lead:
        return name.endswith(core)
    if trail:
        return name.startswith(core)
    return name == core


def has_url_password(value: str) -> bool:
    """A `scheme://user:pass@host` anywhere in value: REDIS_URL, MONGODB_URI, a JDBC option.

    A database URL's name is anything (`REDIS_URL`, `CACHE_BACKEND`), so only
    its shape gives it away. The authority ends at the first `/`, `?`, `#` or
    blank, so `http://localhost:4873/@scope/pkg` is an address, not a login.
    """
    start = value.find("://")
    while start > 0:
        if value[start - 1].isalnum():
            rest = value[start + 3:]
            end = len(rest)
            for stop in "/?# \t\n":
                i = rest.find(stop)
                if 0 <= i < end:
                    end = i
            authority = rest[:end]
            at = authority.rfind("@")
            if at > 0:
                _user, colon, password = authority[:at].partition(":")
                if colon and password:
                    return True
        start = value.find("://", start + 3)
    return False


#: The variables that move pip's cache and that turn it off.
PIP_CACHE, PIP_NO_CACHE = "PIP_CACHE_DIR", "PIP_NO_CACHE_DIR"


def sandbox_env(
    host_env: Mapping[str, str],
    explicit: Mapping[str, str],
    secret_patterns: tuple[str, ...] | list[str] = DEFAULT_SECRET_ENV,
    *,
    backend: str,
) -> dict[str, str]:
    """The command's environment: the caller's, scrubbed, then what was passed explicitly.

    A variable passed explicitly is the caller's decision and is kept even
    when its name or value looks secret; inheriting one by accident is what
    the scrub prevents.
    """
    env: dict[str, str] = {}
    for name, value in host_env.items():
        upper = name.upper()
        if name.startswith(INJECTION_PREFIXES) and name not in PYTHON_HARMLESS:
            continue
        if name in INJECTION_NAMES:
            continue
        if name not in NOT_SECRET and any(name_matches(p.upper(), upper) for p in secret_patterns):
            continue
        if "://" in value and has_url_password(value):
            continue
        env[name] = value
    env.update(explicit)
    env["STOCKADE_SANDBOX"] = backend
    if declared(backend).confines:
        env["TMPDIR"] = "/tmp"
    return env


class Protected:
    """A path under a writable root that must stay read-only (or uncreatable)."""

    __slots__ = ("kind", "path")

    def __init__(self, path: str, kind: str) -> None:
        self.path = path
        self.kind = kind  # DIR or FILE when it exists, PIN, WATCH when missing, KEEP_LINK

    def __repr__(self) -> str:
        return f"Protected({self.path!r}, {self.kind!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Protected) and (self.path, self.kind) == (other.path, other.kind)

    def __hash__(self) -> int:
        return hash((self.path, self.kind))


class Profile:
    """Everything a driver needs, decided: paths are canonical, lists are final."""

    __slots__ = (
        "absent", "caches", "cwd", "env", "granted_sockets", "hidden", "home",
        "mask_other_homes", "max_file_size_mb", "max_memory_mb", "mode", "network",
        "private_around", "protected", "proxy_port", "proxy_secret", "proxy_socket",
        "publish", "read_extra", "read_roots", "read_scope", "runtime_dir", "session",
        "session_tmp", "shown",
        "sockets", "spawn_subprocess", "system_links", "tmp_size_mb", "workspace",
        "workspace_writable", "write_roots",
    )

    def __init__(
        self,
        *,
        mode: str,
        workspace: str,
        workspace_writable: bool,
        cwd: str,
        read_scope: str,
        read_roots: tuple[str, ...],
        read_extra: tuple[str, ...],
        system_links: tuple[tuple[str, str], ...],
        write_roots: tuple[str, ...],
        hidden: tuple[tuple[str, str], ...],
        sockets: tuple[str, ...],
        granted_sockets: tuple[str, ...],
        protected: tuple[Protected, ...],
        mask_other_homes: bool,
        runtime_dir: str,
        home: str,
        network: NetworkPolicy,
        session_tmp: str | None,
        max_memory_mb: int | None,
        env: dict[str, str],
        proxy_socket: str | None = None,
        proxy_port: int | None = None,
        proxy_secret: str | None = None,
        tmp_size_mb: int | None = None,
        max_file_size_mb: int | None = None,
        spawn_subprocess: bool = True,
        private_around: tuple[str, ...] = (),
        caches: tuple[tuple[str, str, str], ...] = (),
        shown: tuple[tuple[str, str], ...] = (),
        absent: tuple[str, ...] = (),
        publish: tuple[tuple[str, int, int], ...] = (),
        session: Session | None = None,
    ) -> None:
        for name, value in locals().items():
            if name != "self":
                object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        # A value: the driver that reads it must see what the pipeline
        # decided and audited, not what something changed in between.
        raise AttributeError(f"Profile is frozen: use replace({name}=...)")

    def replace(self, **changes: Any) -> Profile:
        """A copy with `changes` (keyword names are the fields)."""
        fields: dict[str, Any] = {name: getattr(self, name) for name in self.__slots__}
        fields.update(changes)
        return Profile(**fields)

    mode: str
    workspace: str
    workspace_writable: bool
    cwd: str
    read_scope: str
    read_roots: tuple[str, ...]
    read_extra: tuple[str, ...]
    system_links: tuple[tuple[str, str], ...]
    write_roots: tuple[str, ...]
    hidden: tuple[tuple[str, str], ...]
    #: Paths inside a hidden directory that come back read-only, after its
    #: mask (what toolchains read in `~/.config`, a grant inside `~/.aws`).
    shown: tuple[tuple[str, str], ...]
    #: Hidden names that do not exist yet: Landlock's rules leave room for
    #: them, so one the host makes while the command runs has no rule.
    absent: tuple[str, ...]
    #: stockade's own directories that hold the workspace (a provisioned
    #: session's): hidden whole, with the workspace shown inside.
    private_around: tuple[str, ...]
    #: (a toolchain cache, this session's private layer over it, the variable
    #: that moves it): bubblewrap lays the layer over the cache, the other
    #: backends point the variable at the layer's `upper` and keep the cache
    #: read-only.
    caches: tuple[tuple[str, str, str], ...]
    sockets: tuple[str, ...]
    granted_sockets: tuple[str, ...]
    protected: tuple[Protected, ...]
    mask_other_homes: bool
    runtime_dir: str
    home: str
    network: NetworkPolicy
    #: The session's managed-proxy endpoints on the host (network "hosts").
    proxy_socket: str | None
    proxy_port: int | None
    #: The password the proxy's TCP listener asks of this command (not on the unix socket).
    proxy_secret: str | None
    session_tmp: str | None
    #: Size of a fresh /tmp (a session's /tmp is a host directory, uncapped).
    tmp_size_mb: int | None
    #: RLIMIT_FSIZE: the largest file a command may write.
    max_file_size_mb: int | None
    max_memory_mb: int | None
    #: False: the command may not start processes (seccomp, after the init's own forks).
    spawn_subprocess: bool
    #: (host address, host port, sandbox port) forwarded while the command
    #: runs (publish.py): a backend without a network namespace refuses it.
    publish: tuple[tuple[str, int, int], ...]
    env: dict[str, str]
    #: The session the command runs in, which a driver keys its per-session
    #: state by; an identity, not a setting, so never in `to_json`.
    session: Session | None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            if name == "network":
                value = value.to_json()
            elif name == "protected":
                value = [[p.path, p.kind] for p in value]
            elif name in ("env", "session"):
                continue
            out[name] = value
        return out


def protected_under(root: str, kind: Callable[[str], str] = path_kind,
                    writable: tuple[str, ...] = (), home: str = "",
                    global_configs: tuple[str, ...] = ()) -> list[Protected]:
    """Protected metadata in one writable root, resolving `.git` pointer files.

    git itself must keep working in workspace-write -- objects, index and refs
    are written by every `git add` and `git commit` -- so a `.git` directory is
    not frozen whole: what makes git run code is (see `git_protection`).
    `writable` are all the roots the command may write; only what lies inside
    them needs (or gets) protection.

    A name that does not exist yet is WATCHed, not blocked: blocking it would
    need a placeholder on the host, which the person's git sees (`git add -A`
    fails on it), which another command starting meanwhile takes for the
    real thing, and whose removal detaches that command's mounts.
    """
    roots = writable or (root,)
    out: list[Protected] = []
    enclosing = _enclosing_repository(root, kind)
    if enclosing:
        # The workspace is a directory inside a repository (a package of a
        # monorepo): the host's git at the top obeys that repository's config
        # and enters its submodules, some of which may lie in here.
        top, gitdir = enclosing
        out.extend(git_protection(gitdir, top, kind, roots, home, 0, global_configs))
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
            out.extend(repository_protection(path, kind, roots, home, global_configs))
        elif k == MISSING:
            out.append(Protected(path, WATCH))
        else:
            out.append(Protected(path, k if k in (DIR, FILE) else FILE))
    return out


def repository_protection(path: str, kind: Callable[[str], str], roots: tuple[str, ...],
                          home: str = "", global_configs: tuple[str, ...] = ()
                          ) -> list[Protected]:
    """What must not change in the repository at `path`: a `.git` directory or
    `gitdir:` file, or a directory git takes for a git directory by its shape."""
    k = kind(path)
    if os.path.basename(path) != ".git":
        return git_protection(path, path, kind, roots, home, 0, global_configs) \
            if k == DIR else []
    worktree = os.path.dirname(path)
    if k == DIR:
        return git_protection(path, worktree, kind, roots, home, 0, global_configs)
    if k != FILE:
        return []
    gitdir = _read_gitdir_pointer(path)
    return [Protected(path, FILE)] + (
        git_protection(gitdir, worktree, kind, roots, home, 0, global_configs)
        if gitdir else [])


#: A directory that must stay where it is: writable inside, but a mount point,
#: so it cannot be renamed aside and replaced (`mv .git .old && mkdir .git`
#: would otherwise give a fresh .git whose hooks the host runs).
PIN = "pin"
#: A protected name that does not exist: the command may create it, and the
#: driver's guard neutralises what it leaves there once the command has ended
#: (see drivers/linux/guard.py).
WATCH = "watch"
#: A protected name that is a symbolic link (a dotfile kept in a dotfiles
#: repository): its target is protected where it lives, and the link itself
#: is put back after the run if the command replaced it.
KEEP_LINK = "link"

#: A real directory above a protected path, inside a writable root: bound onto
#: itself so it cannot be renamed aside and rebuilt (`mv sub sub.old; mkdir
#: sub; git init sub` would leave the read-only `sub/.git` mount behind in
#: `sub.old`). Writable inside; not itself protected.
HOLD = "hold"

#: git directories nested deeper than this (submodules of submodules of ...)
#: are not followed; the guard quarantines a created one past it.
MAX_GIT_DEPTH = 32


def git_protection(gitdir: str, worktree: str, kind: Callable[[str], str],
                   roots: tuple[str, ...], home: str = "", depth: int = 0,
                   global_configs: tuple[str, ...] = ()) -> list[Protected]:
    """What in one git directory (and what its config names) must not change.

    hooks, config, config.worktree and commondir are what make git run code
    or read config from elsewhere; `info` holds attributes and excludes.
    Beyond the directory itself: what its config points at inside a writable
    root (a `core.hooksPath` of `.husky/_`, an `include.path`, the script a
    `core.fsmonitor` names), the config of the commit-time runner its hooks
    call, its linked worktrees' pointers, and every repository git recurses
    into from here: `modules/*`, the commondir, and each gitlink in the index
    whose checkout has a `.git` (the submodules `git status` enters).
    """
    if depth > MAX_GIT_DEPTH:
        return []
    # A git directory outside every writable root is already read-only, but
    # what its config names may lie inside one (a linked worktree of a repo
    # whose core.hooksPath is `.husky/_`, a workspace inside a monorepo).
    inside = any(is_under(gitdir, r) for r in roots)
    if inside and _through_link(gitdir):
        # Named inside a writable root but reached through a link the command
        # planted (a gitlink `sub` with `sub -> ../victim`): a mount there
        # would bind the other repository read-write.
        return []
    out = [Protected(gitdir, PIN)] if inside else []

    def protect(path: str) -> None:
        if not any(is_under(path, r) for r in roots) or _through_link(path):
            return
        k = kind(path)
        if k == LINK:
            raise SandboxUnavailable(
                f"{path} is a symbolic link; stockade cannot keep it read-only in a writable "
                "workspace. Replace the link, or run in read-only mode."
            )
        out.append(Protected(path, WATCH if k == MISSING else k if k in (DIR, FILE) else FILE))

    # ... and a rebase or cherry-pick in progress: its todo list's `exec`
    # lines run at the person's next `git rebase --continue`.
    for name in ("hooks", "config", "config.worktree", "commondir", "rebase-merge",
                 "sequencer"):
        protect(os.path.join(gitdir, name))
    info = os.path.join(gitdir, "info")
    if inside and kind(info) == DIR:
        out.append(Protected(info, DIR))
    hook_dirs = [os.path.join(gitdir, "hooks")]
    configs = [os.path.join(gitdir, "config"), os.path.join(gitdir, "config.worktree"),
               *global_configs]
    for config in configs:
        for what, path in gitmeta.referenced_paths(config, worktree, home):
            protect(path)
            if what == "hooks":
                hook_dirs.append(path)
    for hooks in hook_dirs:
        for path in gitmeta.runner_files(hooks, worktree):
            protect(path)
    worktrees = os.path.join(gitdir, "worktrees")
    if kind(worktrees) == DIR:
        for entry in _listdir(worktrees):
            for name in ("commondir", "gitdir", "config.worktree"):
                path = os.path.join(worktrees, entry, name)
                if kind(path) in (FILE, LINK):
                    protect(path)
    common = os.path.join(gitdir, "commondir")
    if kind(common) == FILE:
        target = _read_first_line(common)
        if target:
            target = os.path.realpath(os.path.join(gitdir, target))
            if target != gitdir:
                out.extend(git_protection(target, worktree, kind, roots, home, depth + 1,
                                          global_configs))
    modules = os.path.join(gitdir, "modules")
    if kind(modules) == DIR:
        for entry in _listdir(modules):
            sub = os.path.join(modules, entry)
            if kind(sub) == DIR:
                out.extend(git_protection(sub, worktree, kind, roots, home, depth + 1,
                                          global_configs))
    for link in gitlinks(os.path.join(gitdir, "index")):
        checkout = os.path.join(worktree, link)
        dot_git = os.path.join(checkout, ".git")
        k = kind(dot_git)
        if k == DIR:
            out.extend(git_protection(dot_git, checkout, kind, roots, home, depth + 1,
                                      global_configs))
        elif k == FILE:
            protect(dot_git)
            pointed = _read_gitdir_pointer(dot_git)
            if pointed:
                out.extend(git_protection(pointed, checkout, kind, roots, home, depth + 1,
                                          global_configs))
    return out


def _through_link(path: str) -> bool:
    """Whether a directory on the way to `path` is a symbolic link.

    `kind` looks at the last name only (lstat follows every other one), and
    a mount of such a path lands wherever the link leads.
    """
    parent = os.path.dirname(path)
    return os.path.realpath(parent) != parent


def _enclosing_repository(root: str, kind: Callable[[str], str]) -> tuple[str, str] | None:
    """(top, git directory) of the repository holding `root`, if `root` is not its top.

    As git finds it: the nearest ancestor with a `.git`; a few stats up the
    path, never down the tree.
    """
    parent = os.path.dirname(root)
    while parent and parent != os.path.dirname(parent):
        dot_git = os.path.join(parent, ".git")
        k = kind(dot_git)
        if k == DIR:
            return parent, dot_git
        if k == FILE:
            pointed = _read_gitdir_pointer(dot_git)
            return (parent, pointed) if pointed else None
        parent = os.path.dirname(parent)
    return None


_GITLINKS: dict[str, tuple[tuple[int, int, int, int], list[str]]] = {}


def gitlinks(index: str) -> list[str]:
    """The index's gitlinks, parsed again only when the index changed.

    An index of 100,000 files is 10 MB; reading it for every command would
    cost more than the sandbox. An unreadable one gives none here: the
    guard's check after the run treats it as changed.
    """
    try:
        st = os.stat(index)
    except OSError:
        return []
    # ctime too: a command can put mtime back with `touch -d`, never ctime.
    key = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
    cached = _GITLINKS.get(index)
    if cached is not None and cached[0] == key:
        return cached[1]
    links = gitmeta.gitlinks_at(index) or []
    _GITLINKS[index] = (key, links)
    return links


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


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


def _read_first_line(path: str) -> str:
    """The first line of a small file the command may have written, never raising.

    Bytes a command chose (a pointer to `r\xe9`) must not crash the guard that
    was about to neutralise the rest: they decode as git reads them, bytes.
    """
    head = gitmeta.read_head(path)
    return head.split(b"\n", 1)[0].decode("utf-8", "surrogateescape").strip()


def _read_gitdir_pointer(path: str) -> str:
    """The git directory a `.git` file names, read as git reads it.

    git takes everything after `gitdir: ` and drops only the line ending: a
    name with a newline inside, or a trailing space, is part of the path.
    Reading only a stripped first line would check a decoy instead.
    """
    data = gitmeta.read_head(path)
    if not data.startswith(b"gitdir: "):
        return ""
    target = data[len(b"gitdir: "):].rstrip(b"\r\n").decode("utf-8", "surrogateescape")
    return os.path.realpath(os.path.join(os.path.dirname(path), target)) if target else ""


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


def _outermost(hidden: list[tuple[str, str]], shown: tuple[tuple[str, str], ...] = ()
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
               kind: Callable[[str], str], listdir: Callable[[str], list[str]]
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
            if child in inner or child in wanted or ck in (LINK, MISSING):
                continue
            todo.append((child, DIR if ck == DIR else FILE))
    dirs = {p for p, k in out if k == DIR}
    shown: dict[str, str] = {}
    # Resolved once per directory: the allowlist names some 200 paths in a
    # dozen directories, and resolving each alone cost more than the rest of
    # the profile (bench/hidden.py).
    resolved: dict[str, str] = {}
    for p in wanted:
        # The name as the area holds it; a link above it inside leads elsewhere.
        real = _in_real_parent(p, resolved)
        if not _below_any(real, dirs):
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


def _in_real_parent(path: str, resolved: dict[str, str]) -> str:
    """`path`'s name in its directory's real path (the name itself not followed),
    each directory resolved once in `resolved`."""
    head, name = os.path.split(path)
    if name in ("", ".", ".."):
        return os.path.realpath(path)
    if head not in resolved:
        resolved[head] = os.path.realpath(head)
    return os.path.join(resolved[head], name)


def _below_any(path: str, dirs: set[str]) -> bool:
    """True when a directory strictly above `path` (canonical) is one of `dirs`:
    a walk up its few components, not a comparison with each directory."""
    parent = os.path.dirname(path)
    while parent != path:
        if parent in dirs:
            return True
        path, parent = parent, os.path.dirname(parent)
    return False


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
    proxy_socket: str | None = None,
    proxy_port: int | None = None,
    proxy_secret: str | None = None,
    private: tuple[str, ...] | list[str] = (),
    tmp_size_mb: int | None = None,
    max_file_size_mb: int | None = None,
    listdir: Callable[[str], list[str]] = os.listdir,
    cache_dir: str | None = None,
    repositories: tuple[str, ...] = (),
    matched: tuple[str, ...] = (),
    platform: str = "",
) -> Profile:
    """Decide the boundary for one command. All paths in are canonical.

    `cache_dir`: the session's directory for its private layers over the
    toolchain caches (`hostpaths.caches`); without one they stay read-only.
    `repositories`: the person's repositories deeper in the workspace, as
    the driver found them (`Driver.repositories`). `matched`: the workspace's
    files `unreadable`'s patterns name (`Driver.matching`), hidden too.
    `platform`: whose home and per-user areas apply (default: the backend's OS).
    """
    from .paths import home_dir

    platform = platform or platform_for(backend)
    namespaces = declared(backend).namespaces
    writable_ws = mode != READ_ONLY and any(is_under(workspace, w) for w in capabilities.fs_write)
    home = home_dir(host_env, platform)
    granted = [os.path.realpath(p) for p in hostpaths.paths(list(granted_sockets), host_env)]

    write_roots: list[str] = []
    layers: list[tuple[str, str, str]] = []
    relocated: dict[str, str] = {}
    if mode != READ_ONLY:
        write_roots.extend(w for w in capabilities.fs_write if not is_under(w, workspace))
        for p in hostpaths.paths(list(writable), host_env):
            real = os.path.realpath(p)
            if kind(real) == DIR and (not home or real != os.path.realpath(home)):
                write_roots.append(real)
        if use_scratch and cache_dir:
            network = capabilities.network.kind != NetworkPolicy.NONE
            for p, var in hostpaths.caches(host_env, platform, network=network):
                real = os.path.realpath(p)
                if kind(real) != DIR or (home and real == os.path.realpath(home)):
                    continue
                layer = os.path.join(cache_dir, sha256_hex(real.encode())[:16])
                if namespaces:
                    layers.append((real, layer, var))  # an overlay at the cache's path
                elif var:
                    # No mount namespace to lay a layer over it: the cache stays
                    # read-only, and the toolchain is pointed at the private copy.
                    layers.append((real, layer, var))
                    write_roots.append(os.path.join(layer, "upper"))
                    relocated[var] = os.path.join(layer, "upper")
    write_roots = sorted(set(write_roots))
    without_cache: dict[str, str] = {}
    if mode != FULL_ACCESS and not any(var == PIP_CACHE for _c, _l, var in layers) \
            and not {PIP_CACHE, PIP_NO_CACHE} & set(command_env or {}):
        # No private layer over pip's cache (there is none yet, `scratch =
        # false`, read-only mode): pip is told to do without one. Root's pip
        # takes a read-only cache it owns for writable (it checks the owner,
        # not the mount), and a missing one it would make under a read-only
        # ~/.cache, so the wheel it had just built was lost to `Read-only
        # file system`.
        without_cache[PIP_NO_CACHE] = "1"

    # What is explicitly granted is never hidden: asking for fs_read of ~/.aws
    # (and being approved) is how a session gets it back.
    grants = capabilities.fs_read + capabilities.fs_write
    # A company's TLS-intercepting CA, named by the variables tools read:
    # without it every HTTPS request through that network fails to verify.
    ca_bundles = tuple(sorted({
        os.path.realpath(host_env[var]) for var in CA_BUNDLE_VARS
        if host_env.get(var, "").startswith("/") and kind(os.path.realpath(host_env[var]))
        in (FILE, DIR)}))
    hidden: list[tuple[str, str]] = []
    around: list[str] = []
    for p in private:
        # stockade's own records: the ledger holds every earlier command's
        # argv, the state directory every other session's /tmp. A private
        # directory that holds this workspace is hidden around it: left
        # visible for the workspace's sake, it showed every other session's
        # workspace beside it.
        real = os.path.realpath(p)
        k = kind(real)
        if k == MISSING:
            continue
        if is_under(workspace, real):
            if k == DIR and real != workspace:
                around.append(real)
        else:
            hidden.append((real, DIR if k == DIR else FILE))
    #: Credential stores that do not exist yet, watched where a command may create them.
    unborn: list[str] = []
    writable_here = (workspace, *capabilities.fs_write, *write_roots)
    hidden_paths, shown_paths = hostpaths.unreadable(unreadable, host_env, granted, listdir,
                                                     platform)
    for p in matched:
        # A link is hidden where it leads (`svc/.env -> ~/secrets/app.env`).
        k = kind(p)
        if k == LINK:
            p = os.path.realpath(p)
            k = kind(p)
        if k in (DIR, FILE):
            hidden.append((p, k))
    # The workspace's own write grant is not a request to see what is
    # hidden inside it: a workspace of ~ must not unmask ~/.aws.
    unmasking = [g for g in grants if g != "/" and not is_under(workspace, g)]
    resolved: dict[str, str] = {}
    for p in hidden_paths:
        # realpath(p), resolving each directory once: a few hundred
        # candidates live in a dozen directories (bench/hidden.py).
        real = _in_real_parent(p, resolved)
        k = kind(real)
        if k == LINK:
            real = os.path.realpath(real)
            k = kind(real)
        if any(is_under(real, g) for g in unmasking):
            continue
        if real != os.path.abspath(p) and any(is_under(w, real) for w in writable_here):
            # A link a command planted at a store's name (`ln -s ~ ~/.azure`)
            # made every later command mask the whole home it pointed to.
            continue
        if k != MISSING:
            hidden.append((real, DIR if k == DIR else FILE))
        else:
            unborn.append(real)
    for target, k in _linked_out([h for h, hk in hidden if hk == DIR], shown_paths, listdir,
                                 kind):
        # Not a target that holds a writable root (a link to ~ would mask the
        # home), nor, where only bubblewrap can mask inside one, one beneath it.
        if not any(is_under(w, target) for w in writable_here) and (
                namespaces or not any(is_under(target, w)
                                                   for w in writable_here)):
            hidden.append((target, k))
    # Granted paths, CA bundles and caches inside a hidden directory come back
    # after its mask, as the default's allowlist does.
    layered = tuple(cache for cache, _layer, _var in layers)
    wanted = [*shown_paths, *(g for g in grants if g != "/"), *ca_bundles, *layered]
    must = (workspace, *capabilities.fs_write,
            *(w for w in write_roots if w not in relocated.values()))
    hidden, shown = _show_back(hidden, wanted, must, kind, listdir)
    # Inside stockade's directory around the workspace only the workspace
    # shows: a mask there would make a mount point, a name, of what it hides.
    hidden = [(p, k) for p, k in hidden if not any(is_under(p, a) for a in around)]
    sockets = []
    for s in hostpaths.local_sockets(host_env):
        real = os.path.realpath(s)
        if real not in granted and kind(real) != MISSING:
            sockets.append(real)

    if read_scope == STRICT:
        roots = [p for p in SYSTEM_READ_PATHS if kind(p) == DIR]
        links = tuple((p, os.readlink(p)) for p in SYSTEM_READ_PATHS if kind(p) == LINK)
        roots.extend(interpreter_prefixes())
        roots.extend(capabilities.fs_read)
        roots.extend(extra_read)
        roots.extend(ca_bundles)
        roots.append(workspace)
        read_roots = tuple(sorted(set(roots)))
    else:
        read_roots, links = ("/",), ()

    protected: list[Protected] = []
    if writable_ws or write_roots:
        roots = ([workspace] if writable_ws else []) + list(capabilities.fs_write)
        writable_all = tuple(roots) + tuple(write_roots)
        xdg = host_env.get("XDG_CONFIG_HOME") or (os.path.join(home, ".config") if home else "")
        global_configs = tuple(p for p in (
            host_env.get("GIT_CONFIG_GLOBAL", ""), os.path.join(home, ".gitconfig") if home
            else "", os.path.join(xdg, "git", "config") if xdg else "") if p)
        for root in roots:
            if kind(root) == DIR and not any(is_under(root, d) for d, _ in hidden):
                protected.extend(protected_under(root, kind, writable_all, home,
                                                 global_configs))
        protected.extend(home_protection(home, kind, writable_all, hidden, platform,
                                         shown_paths))
        # A store that does not exist gets no mask, so a command in a workspace
        # of ~ wrote ~/.aws/config with a `credential_process`, ~/.kube/config
        # with an exec plugin, ~/.npmrc with `node-options`, and they stayed.
        protected.extend(Protected(p, WATCH) for p in unborn
                         if any(is_under(p, r) and p != r for r in writable_all if r != "/"))
        # What is hidden is hidden by path: a command that renamed the
        # directory above a mask (`mv ~/.docker ~/.docker-moved`, `mv
        # ~/.local/state ...` with a workspace of ~) carried the mask away
        # with it, and the next command found nothing to hide at the old
        # name -- the credential, the container runtime's socket, or the
        # guard's own baseline, whose loss left a planted ~/bin/git live.
        masked = [Protected(p, FILE) for p, _ in hidden] + [Protected(s, FILE) for s in sockets]
        protected.extend(hold_ancestors(protected + masked, writable_all, kind))
        # The person's repositories deeper in the tree (a vendored clone, a
        # bare fixture), which a walk of fixed names never reaches: held as
        # the top's are, but not their ancestors. A directory above one
        # renamed and rebuilt holds a repository the command made, which the
        # guard makes inert (drivers/linux/treewatch.py).
        known = {p.path for p in protected}
        for repo in repositories:
            if repo not in known and writable_ws and is_under(repo, workspace) \
                    and repo != workspace:
                protected.extend(repository_protection(repo, kind, writable_all, home,
                                                       global_configs))

    return Profile(
        mode=mode,
        workspace=workspace,
        workspace_writable=writable_ws,
        cwd=cwd,
        read_scope=read_scope,
        read_roots=read_roots,
        read_extra=tuple(p for p in capabilities.fs_read + tuple(extra_read) + ca_bundles
                         if p != "/"),
        system_links=links,
        write_roots=tuple(write_roots),
        hidden=_outermost(hidden, shown),
        shown=shown,
        absent=tuple(sorted(set(unborn))),
        private_around=tuple(sorted(set(around), key=lambda q: (q.count("/"), q))),
        sockets=tuple(sorted(set(sockets))),
        granted_sockets=tuple(g for g in granted if kind(g) == SOCKET),
        protected=tuple(dict.fromkeys(protected)),
        mask_other_homes=read_scope == HOST,
        runtime_dir=runtime_dir(host_env, kind),
        home=home,
        network=capabilities.network if mode != FULL_ACCESS else NetworkPolicy.allow_all(),
        session_tmp=session_tmp,
        proxy_socket=proxy_socket,
        proxy_port=proxy_port,
        proxy_secret=proxy_secret,
        tmp_size_mb=tmp_size_mb,
        max_file_size_mb=max_file_size_mb,
        max_memory_mb=capabilities.max_memory_mb,
        spawn_subprocess=capabilities.spawn_subprocess or mode == FULL_ACCESS,
        env={**sandbox_env(host_env, command_env or {}, secret_env, backend=backend),
             **{k: v for k, v in relocated.items() if k not in (command_env or {})},
             **without_cache},
        caches=tuple(layers),
    )
