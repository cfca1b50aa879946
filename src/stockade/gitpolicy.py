"""Which of git's files and keys run code, and what that asks of a sandbox.

The one owner of that knowledge. A sandboxed command writes the workspace
and the person's own git runs there next, so two sides need it: the profile
(`git_protection`: what in a repository must stay read-only while a command
runs) and the guard (`filter_config`, `merge_config`, `SAMPLE_SUFFIX`: what
a command left is made inert to). Reading git's files the way git does is
`gitmeta`'s; deciding what they mean is here.

`filter_config` keeps only keys on `INERT_KEYS`. It is an allowlist because
git's list of keys that start a program keeps growing (`core.fsmonitor`
arrived in 2.16, hooks from config in 2.46), and a denylist written today
would miss tomorrow's.
"""

from __future__ import annotations

import os

from . import gitmeta
from .capabilities import is_under
from .errors import SandboxUnavailable
from .fsroot import Root
from .profile import DIR, FILE, LINK, MISSING, PIN, WATCH, Protected

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from .gitmeta import Entry

#: What in a git directory git reads as its configuration.
CONFIG_NAMES = ("config", "config.worktree")
#: What in a git directory makes git run code or read config from elsewhere,
#: and a rebase or cherry-pick in progress: its todo list's `exec` lines run
#: at the person's next `git rebase --continue`.
CODE_NAMES = ("hooks", *CONFIG_NAMES, "commondir", "rebase-merge", "sequencer")
#: What of a linked worktree's `worktrees/<name>` git follows.
WORKTREE_NAMES = ("commondir", "gitdir", "config.worktree")

#: Keys a command may leave in a config it wrote: none of them makes git
#: start a program, read another file as config, or write outside the
#: repository (`core.worktree` is not here: a nested repository whose
#: worktree is ~ turns the person's next `git checkout` there into a write
#: of ~/.bashrc; nor `extensions.worktreeConfig`, which makes git read each
#: linked worktree's config.worktree, one outside the workspace included;
#: nor `core.sparseCheckout`, which without the patterns file
#: in read-only `info/` makes the person's next checkout empty the tree;
#: nor `remote.*.pushurl`, `.push` or `.mirror`, nor `branch.*.pushremote`
#: or `push.default` (`upstream` with a changed `branch.*.merge` pushes to
#: another branch), which turn the person's next plain `git push` into an
#: upload elsewhere or a deletion of branches).
#: `*` is a subsection.
INERT_KEYS = frozenset({
    "core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates",
    "core.ignorecase", "core.precomposeunicode", "core.symlinks", "core.autocrlf", "core.eol",
    "core.safecrlf", "core.quotepath", "core.compression", "core.loosecompression",
    "core.bigfilethreshold", "core.checkstat", "core.trustctime", "core.untrackedcache",
    "core.splitindex", "core.abbrev", "core.commentchar",
    "extensions.objectformat", "extensions.refstorage",
    "extensions.noop", "init.defaultbranch", "user.name", "user.email",
    "remote.*.url", "remote.*.fetch", "remote.*.tagopt", "remote.*.prune",
    "branch.*.remote", "branch.*.merge", "branch.*.rebase", "branch.*.description",
    "submodule.*.url", "submodule.*.active", "submodule.*.branch",
    "fetch.prune", "pull.rebase", "pull.ff", "merge.ff", "color.ui",
    "gc.auto",
})

#: Keys that say how the repository is stored: a command's `git init` writes
#: them, but a change to the person's makes their git refuse the repository.
FORMAT_KEYS = frozenset({"core.repositoryformatversion", "core.bare",
                         "extensions.objectformat", "extensions.refstorage"})

#: Keys whose value git runs as a command line. When the program it names
#: lies in a writable root, that file is as dangerous as a hook.
PROGRAM_KEYS = frozenset({
    "core.fsmonitor", "core.editor", "core.pager", "core.sshcommand", "core.askpass",
    "core.hookspath", "diff.external", "sequence.editor", "gpg.program",
    "credential.helper", "uploadpack.packobjectshook",
    "filter.*.clean", "filter.*.smudge", "filter.*.process", "diff.*.command",
    "diff.*.textconv", "merge.*.driver", "gpg.*.program", "credential.*.helper",
})

#: Commit-time runners: a hook that names the runner makes its config code
#: the host runs at the next `git commit` (pre-commit's `repo: local` entries
#: are arbitrary commands; husky runs `.husky/<hook>` through `.husky/_/h`).
RUNNERS = (
    ("pre-commit", (".pre-commit-config.yaml", ".pre-commit-config.yml")),
    ("husky", (".husky",)),
    ("lefthook", ("lefthook.yml", ".lefthook.yml", "lefthook-local.yml",
                  ".lefthook-local.yml", ".lefthook", ".config/lefthook.yml")),
)

#: The hooks git ships as examples; git never runs a `.sample`.
SAMPLE_SUFFIX = ".sample"


def _key_matches(key: str, patterns: frozenset[str]) -> bool:
    if key in patterns:
        return True
    section, _, rest = key.partition(".")
    sub, _, name = rest.rpartition(".")
    return bool(sub) and f"{section}.*.{name}" in patterns


#: Include chains deeper than git's own limit (10) are not followed.
MAX_INCLUDE_DEPTH = 10


def filter_config(entries: list[Entry], *, worktree_ok: Callable[[str], bool] | None = None
                  ) -> tuple[str, list[str]]:
    """(the config with only inert keys, the keys removed).

    `worktree_ok` may keep a `core.worktree` whose value it accepts: a
    submodule's git directory under `.git/modules` needs one, leading back
    into the workspace.
    """
    out: list[str] = []
    removed: list[str] = []
    current = None
    for entry in entries:
        keep_worktree = (entry.key == "core.worktree" and worktree_ok is not None
                         and worktree_ok(entry.value))
        if not keep_worktree and not _key_matches(entry.key, INERT_KEYS):
            removed.append(entry.key)
            continue
        if entry.section_line != current:
            out.append(entry.section_line)
            current = entry.section_line
        name = entry.lines[0].strip()
        if name.startswith("["):
            name = name[name.find("]") + 1:].strip()
        out.append("\t" + name)
        out.extend(entry.lines[1:])
    return "\n".join(out) + ("\n" if out else ""), removed


def merge_config(base: list[Entry], ours: list[Entry], host_text: str
                 ) -> tuple[str, list[str], list[str]] | None:
    """(`host_text` with the inert keys the command changed, those keys, the keys
    it changed that were dropped); None when `host_text` is not git config.

    `base` is the config the command was given and `ours` what it left: a
    key counts as changed when its list of values differs between them.
    Only that key's lines in the host's file are rewritten, so what the
    person or another command wrote meanwhile stays. A key that is not on
    INERT_KEYS -- or whose name this writer cannot spell back exactly -- is
    never written: git would run it on the host.
    """
    host = gitmeta.parse_config(host_text)
    if host is None:
        return None
    before, after = _values(base), _values(ours)
    changed = sorted(k for k in before.keys() | after.keys()
                     if before.get(k, []) != after.get(k, []))
    # A remote the person had stays as it was, and a branch of theirs follows
    # only remotes they had: a new URL, or their branch pointed at the
    # command's remote, would receive their next `git push`. What the command
    # added is its own. The repository's format stays too: a new one makes the
    # person's git refuse the repository.
    theirs = {k.rpartition(".")[0] for k in before if k.startswith("remote.")}
    remotes = {section[len("remote."):] for section in theirs}
    branches = {k.rpartition(".")[0] for k in before if k.startswith("branch.")}

    def redirects(key: str) -> bool:
        if key.startswith("remote.") and key.endswith(".fetch"):
            # Only into the remote's own namespace: `+refs/heads/*:refs/heads/*`
            # with prune made the person's next `git fetch --all` delete and
            # overwrite their branches and tags.
            own = "refs/remotes/" + key[len("remote."):-len(".fetch")] + "/"
            return not all(fetches_into(v, own) for v in after.get(key, []))
        return (key.endswith(".remote") and key.rpartition(".")[0] in branches
                and any(v not in remotes for v in after.get(key, [])))

    kept = [k for k in changed if _key_matches(k, INERT_KEYS) and _spelled(k) is not None
            and k.rpartition(".")[0] not in theirs and k not in FORMAT_KEYS
            and not redirects(k)]
    dropped = [k for k in changed if k not in kept]
    if not kept:
        return host_text, [], dropped
    gone: set[int] = set()
    headers: dict[int, str] = {}
    for entry in host:
        if entry.key in kept:
            gone.update(range(entry.start, entry.start + len(entry.lines)))
            if entry.lines[0].lstrip().startswith("["):
                headers[entry.start] = entry.section_line  # `[core] bare = true`
    emptied: set[str] = set()
    lines: list[str] = []
    section = ""
    for n, line in enumerate(host_text.split("\n")):
        if n in headers or n not in gone:
            lines.append(headers.get(n, line))
            section = _header_id(lines[-1]) or section
        else:
            emptied.add(section)
    new: dict[str, tuple[str, list[str]]] = {}
    for entry in ours:
        if entry.key in kept:
            header, name = _spelled(entry.key) or ("", "")
            new.setdefault(entry.key.rpartition(".")[0], (header, []))[1].append(
                f"\t{name} = {_quote(entry.value)}")
    return _placed(lines, new, emptied), kept, dropped


def fetches_into(refspec: str, own: str) -> bool:
    """Whether `refspec` writes only beneath `own`, read as git reads it (split at the
    last colon) and refused where git would refuse it: a refspec git rejects stops
    the person's `git status`, `fetch` and `push` until it is removed by hand."""
    spec = refspec[1:] if refspec.startswith("+") else refspec
    if spec.startswith("^"):
        return ":" not in spec  # a negative refspec names no destination
    _src, colon, dst = spec.rpartition(":")
    rest = dst[len(own):]
    return bool(colon and dst.startswith(own) and rest and all(
        part and not part.startswith(".") and not part.endswith((".", ".lock"))
        and not any(c in part for c in " ~^:?[\\\x7f") and all(ord(c) >= 32 for c in part)
        for part in rest.split("/")) and "@{" not in rest and rest.count("*") <= 1)


def _header_id(line: str) -> str | None:
    """The section `line` opens (`_section`'s spelling); None if it is no header."""
    stripped = line.strip()
    return (gitmeta.section_name(stripped[:stripped.find("]") + 1]) if stripped.startswith("[")
            else None)


def _placed(lines: list[str], new: dict[str, tuple[str, list[str]]], emptied: set[str]
            ) -> str:
    """`lines` with each section's `new` entries at the end of its last header's body
    (or in a block of their own), and the bare headers of `emptied` sections that
    were left with nothing under them dropped, as git's own writes would leave it."""
    starts = [n for n, line in enumerate(lines) if line.strip().startswith("[")]
    out = lines[:starts[0]] if starts else list(lines)
    sections = [_header_id(lines[n]) or "" for n in starts]
    last = {section: n for n, section in zip(starts, sections, strict=True)}
    for n, end, section in zip(starts, [*starts[1:], len(lines)], sections, strict=True):
        body = lines[n + 1:end]
        filled = len(body)
        while filled and not body[filled - 1].strip():
            filled -= 1
        added = new.pop(section, ("", []))[1] if last[section] == n else []
        bare = lines[n].strip().endswith("]")
        if added or filled or not bare or section not in emptied:
            out += [lines[n], *body[:filled], *added, *body[filled:]]
    text = "\n".join(out).rstrip("\n")
    blocks = [header + "\n" + "\n".join(body) for header, body in new.values()]
    return "\n".join(([text] if text else []) + blocks) + "\n"


def _values(entries: list[Entry]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for entry in entries:
        out.setdefault(entry.key, []).append(entry.value)
    return out


def _spelled(key: str) -> tuple[str, str] | None:
    """(section header, variable name) that `parse_config` reads back as `key`."""
    section, _, rest = key.partition(".")
    sub, dot, name = rest.rpartition(".")
    if not (_word(section) and _word(name)) or (dot and any(c in sub for c in '\\"\n\0')):
        return None
    return (f'[{section} "{sub}"]' if dot else f"[{section}]"), name


def _word(word: str) -> bool:
    return bool(word) and all(c.isalnum() or c == "-" for c in word)


def _quote(value: str) -> str:
    escaped = (value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
               .replace("\t", "\\t").replace("\b", "\\b"))
    return f'"{escaped}"'

def first_word(command: str) -> str:
    """The program a shell would run for `command`, quotes removed; "" if none."""
    command = command.strip()
    if command.startswith("!"):
        command = command[1:].strip()
    if not command:
        return ""
    if command[0] in "'\"":
        end = command.find(command[0], 1)
        return command[1:end] if end > 0 else command[1:]
    return command.split()[0]


def referenced_paths(config_path: str, worktree: str, home: str,
                     depth: int = 0) -> Iterator[tuple[str, str]]:
    """(kind, absolute path) of what a config makes git read or run, includes followed.

    kind is "include" (read as more config), "hooks" (core.hooksPath) or
    "program" (a command named by one of `PROGRAM_KEYS`). Relative include
    paths are relative to the including file; a relative program or hooks
    path to the worktree, where git runs them.
    """
    if depth > MAX_INCLUDE_DEPTH:
        return
    entries = gitmeta.read_config_file(config_path) or []
    base = os.path.dirname(config_path)
    for entry in entries:
        key = entry.key
        if key.endswith(".path") and (key == "include.path" or key.startswith("includeif.")):
            path = _expand(entry.value, base, home)
            if path:
                yield "include", path
                yield from referenced_paths(path, worktree, home, depth + 1)
        elif key == "core.hookspath":
            path = _expand(entry.value, worktree, home)
            if path:
                yield "hooks", path
        elif _key_matches(key, PROGRAM_KEYS):
            word = first_word(entry.value)
            if "/" in word:
                path = _expand(word, worktree, home)
                if path:
                    yield "program", path


def _expand(value: str, base: str, home: str) -> str:
    if not value:
        return ""
    if value == "~" or value.startswith("~/"):
        if not home:
            return ""
        value = home + value[1:]
    return os.path.normpath(os.path.join(base, value))

def runner_files(hooks_dir: str, worktree: str) -> list[str]:
    """Config files of the commit-time runners that this hooks directory calls.

    Reads the first 64 KiB of each real hook (never a `.sample`): a hook
    installed by a runner names it.
    """
    try:
        hooks = Root(hooks_dir, os.open(hooks_dir, os.O_RDONLY | os.O_DIRECTORY
                                        | os.O_NOFOLLOW | os.O_CLOEXEC))
    except OSError:
        return []
    found: list[str] = []
    with hooks:
        for name in hooks.listdir():
            if name.endswith(SAMPLE_SUFFIX):
                continue
            head = hooks.head(name)
            for runner, files in RUNNERS:
                if runner.encode() in head:
                    found += [os.path.join(worktree, f) for f in files]
    if os.path.basename(hooks_dir) == "_" and os.path.basename(
            os.path.dirname(hooks_dir)) == ".husky":
        found.append(os.path.dirname(hooks_dir))  # husky 9: core.hooksPath = .husky/_
    return sorted(set(found))

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
        out.extend(_held(path, kind, roots))

    # ... and a rebase or cherry-pick in progress: its todo list's `exec`
    # lines run at the person's next `git rebase --continue`.
    for name in CODE_NAMES:
        protect(os.path.join(gitdir, name))
    info = os.path.join(gitdir, "info")
    if inside and kind(info) == DIR:
        out.append(Protected(info, DIR))
    hook_dirs = [os.path.join(gitdir, "hooks")]
    configs = [os.path.join(gitdir, "config"), os.path.join(gitdir, "config.worktree"),
               *global_configs]
    for config in configs:
        for what, path in referenced_paths(config, worktree, home):
            protect(path)
            if what == "hooks":
                hook_dirs.append(path)
    for hooks in hook_dirs:
        for path in runner_files(hooks, worktree):
            protect(path)
    worktrees = os.path.join(gitdir, "worktrees")
    if kind(worktrees) == DIR:
        for entry in _listdir(worktrees):
            for name in WORKTREE_NAMES:
                path = os.path.join(worktrees, entry, name)
                if kind(path) in (FILE, LINK):
                    protect(path)
    return out + _entered(gitdir, worktree, kind, roots, home, depth + 1, global_configs)


def _entered(gitdir: str, worktree: str, kind: Callable[[str], str], roots: tuple[str, ...],
             home: str, depth: int, global_configs: tuple[str, ...]) -> list[Protected]:
    """`git_protection` of every repository git recurses into from `gitdir`: the
    commondir, `modules/*`, and each gitlink in the index whose checkout has a `.git`."""
    out: list[Protected] = []
    common = os.path.join(gitdir, "commondir")
    if kind(common) == FILE:
        target = _read_first_line(common)
        if target:
            target = os.path.realpath(os.path.join(gitdir, target))
            if target != gitdir:
                out.extend(git_protection(target, worktree, kind, roots, home, depth,
                                          global_configs))
    modules = os.path.join(gitdir, "modules")
    if kind(modules) == DIR:
        for entry in _listdir(modules):
            sub = os.path.join(modules, entry)
            if kind(sub) == DIR:
                out.extend(git_protection(sub, worktree, kind, roots, home, depth,
                                          global_configs))
    for link in gitlinks(os.path.join(gitdir, "index")):
        checkout = os.path.join(worktree, link)
        dot_git = os.path.join(checkout, ".git")
        k = kind(dot_git)
        if k == DIR:
            out.extend(git_protection(dot_git, checkout, kind, roots, home, depth,
                                      global_configs))
        elif k == FILE:
            out.extend(_held(dot_git, kind, roots))
            pointed = gitdir_pointer(dot_git)
            if pointed:
                out.extend(git_protection(pointed, checkout, kind, roots, home, depth,
                                          global_configs))
    return out


def _held(path: str, kind: Callable[[str], str], roots: tuple[str, ...]) -> list[Protected]:
    """`path` protected as it is, if it lies in a writable root and no link leads there."""
    if not any(is_under(path, r) for r in roots) or _through_link(path):
        return []
    k = kind(path)
    if k == LINK:
        raise SandboxUnavailable(
            f"{path} is a symbolic link; stockade cannot keep it read-only in a writable "
            "workspace. Replace the link, or run in read-only mode."
        )
    return [Protected(path, WATCH if k == MISSING else k if k in (DIR, FILE) else FILE)]


def _through_link(path: str) -> bool:
    """Whether a directory on the way to `path` is a symbolic link.

    `kind` looks at the last name only (lstat follows every other one), and
    a mount of such a path lands wherever the link leads.
    """
    parent = os.path.dirname(path)
    return os.path.realpath(parent) != parent


def global_configs(host_env: Mapping[str, str], home: str) -> tuple[str, ...]:
    """The configs git reads for every repository of the person's, in its order:
    what they name (a `core.hooksPath`, a program) runs in each."""
    xdg = host_env.get("XDG_CONFIG_HOME") or (os.path.join(home, ".config") if home else "")
    return tuple(p for p in (
        host_env.get("GIT_CONFIG_GLOBAL", ""), os.path.join(home, ".gitconfig") if home
        else "", os.path.join(xdg, "git", "config") if xdg else "") if p)


def enclosing_repository(root: str, kind: Callable[[str], str]) -> tuple[str, str] | None:
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
            pointed = gitdir_pointer(dot_git)
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
    gitdir = gitdir_pointer(path)
    return [Protected(path, FILE)] + (
        git_protection(gitdir, worktree, kind, roots, home, 0, global_configs)
        if gitdir else [])

def _read_first_line(path: str) -> str:
    """The first line of a small file the command may have written, never raising.

    Bytes a command chose (a pointer to `r\xe9`) must not crash the guard that
    was about to neutralise the rest: they decode as git reads them, bytes.
    """
    head = gitmeta.read_head(path)
    return head.split(b"\n", 1)[0].decode("utf-8", "surrogateescape").strip()


def gitdir_pointer(path: str) -> str:
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
