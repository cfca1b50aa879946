"""What git reads as configuration or runs, read the way git does, without running git.

A sandboxed command writes the workspace, and the person's own git runs
there next: `git status` on every `cd`, `git commit`, `git pull`. Running
the host's git to ask it what it would do is the attack itself (the config
the command wrote names the program git starts), so these functions parse
the few files that decide it: a repository's config and its includes, its
hooks directory, and the index's gitlinks (the submodules `git status`
recurses into). They read small files and never walk a tree.

`filter_config` is the neutraliser for a config a command wrote: only keys
on `INERT_KEYS` survive. It is an allowlist because git's list of keys that
start a program keeps growing (`core.fsmonitor` arrived in 2.16, hooks from
config in 2.46), and a denylist written today would miss tomorrow's.
"""

from __future__ import annotations

import os

from .fsroot import Root, UnsafeName, check_name, head_of, read_file

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

#: Larger than any real repository config; a bigger one is not parsed, it
#: is replaced whole (git would still read all of it).
MAX_CONFIG_BYTES = 1 << 20
#: Include chains deeper than git's own limit (10) are not followed.
MAX_INCLUDE_DEPTH = 10

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


class Entry:
    """One variable of a config file: its normalised key, value and source lines."""

    __slots__ = ("key", "lines", "section_line", "start", "value")

    def __init__(self, key: str, value: str, lines: list[str], section_line: str,
                 start: int = 0) -> None:
        self.key = key
        self.value = value
        self.lines = lines
        self.section_line = section_line
        self.start = start  #: the index of its first line in the file


def _unquote(raw: str) -> str:
    """A config value as git reads it: quotes removed, escapes applied, comments cut,
    and whitespace around it dropped unless quoted."""
    out: list[str] = []
    quoted = False
    significant = 0  # the length of `out` up to its last quoted or non-blank character
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == '"':
            quoted = not quoted
        elif c == "\\" and i + 1 < len(raw):
            i += 1
            if raw[i] not in 'ntb"\\':
                raise ValueError(f"git rejects the escape \\{raw[i]}")
            out.append({"n": "\n", "t": "\t", "b": "\b"}.get(raw[i], raw[i]))
            significant = len(out)
        elif c in "#;" and not quoted:
            break
        elif quoted or c not in " \t" or out:
            out.append(c)
            if quoted or c not in " \t":
                significant = len(out)
        i += 1
    return "".join(out[:significant])


def _continues(text: str) -> bool:
    """Whether a variable line goes on to the next: it ends in a backslash that
    is neither escaped nor inside a comment (git ends the line at `#` or `;`
    outside quotes, backslash and all)."""
    quoted = False
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i == len(text) - 1:
                return True
            i += 2
            continue
        if c == '"':
            quoted = not quoted
        elif c in "#;" and not quoted:
            return False
        i += 1
    return False


def _section(header: str) -> str | None:
    """`[core]` -> core, `[remote "origin"]` -> remote.origin, `[a.b]` -> a.b; None if malformed."""
    inner = header.strip()[1:]
    end = inner.rfind("]")
    if end < 0:
        return None
    inner = inner[:end].strip()
    if '"' in inner:
        name, _, sub = inner.partition('"')
        if not sub.endswith('"'):
            return None
        return f"{name.strip().lower()}.{sub[:-1].replace(chr(92) + chr(34), chr(34))}"
    name, dot, sub = inner.partition(".")
    return f"{name.lower()}.{sub.lower()}" if dot else inner.lower()


def parse_config(text: str) -> list[Entry] | None:
    """The variables of a config file, in order; None when a line is not git config.

    A value continued with a trailing backslash is one entry. Anything git
    would reject makes the whole file unparsed, so the caller treats it as
    hostile rather than guessing what git makes of it.
    """
    entries: list[Entry] = []
    section = ""
    section_line = ""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        start = i
        i += 1
        if not stripped or stripped[0] in "#;":
            continue
        if stripped.startswith("["):
            close = stripped.find("]")
            if close < 0:
                return None
            parsed = _section(stripped[:close + 1])
            if parsed is None:
                return None
            section, section_line = parsed, stripped[:close + 1]
            stripped = stripped[close + 1:].strip()
            if not stripped or stripped[0] in "#;":
                continue
        if not section:
            return None
        block = [line]
        while _continues(stripped) and i < len(lines):
            stripped = stripped[:-1] + lines[i].strip()
            block.append(lines[i])
            i += 1
        name, eq, raw = stripped.partition("=")
        name = name.strip().lower()
        if not name or not all(c.isalnum() or c == "-" for c in name):
            return None
        try:
            value = _unquote(raw) if eq else "true"
        except ValueError:
            return None
        dot = section.find(".")
        key = (f"{section[:dot].lower()}.{section[dot + 1:]}.{name}" if dot >= 0
               else f"{section}.{name}")
        entries.append(Entry(key, value, block, section_line, start))
    return entries


def read_config(root: Root, rel: str) -> list[Entry] | None:
    """`parse_config` of `rel` beneath `root`; [] when it is missing, None when it is
    not a regular file, unreadable or too large (the caller treats it as hostile)."""
    try:
        data = root.read(rel, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        return []
    except OSError:
        return None
    return parse_config_bytes(data)


def read_config_file(path: str) -> list[Entry] | None:
    """`read_config` for a config named by an absolute path (an include, ~/.gitconfig)."""
    try:
        data = read_file(path, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        return []
    except OSError:
        return None
    return parse_config_bytes(data)


def parse_config_bytes(data: bytes) -> list[Entry] | None:
    return parse_config(config_text(data))


def config_text(data: bytes) -> str:
    """A config file's bytes as `parse_config` and `merge_config` take them."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # git skips a UTF-8 byte-order mark
    return data.decode("utf-8", "surrogateescape")


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
    host = parse_config(host_text)
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
            return not all(_fetches_into(v, own) for v in after.get(key, []))
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


def _fetches_into(refspec: str, own: str) -> bool:
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
    return _section(stripped[:stripped.find("]") + 1]) if stripped.startswith("[") else None


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
    entries = read_config_file(config_path) or []
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


def read_head(path: str, size: int = 1 << 16) -> bytes:
    """The first `size` bytes of a regular file a command may have written; b"" if there
    is none. Never follows a final symlink and never blocks on a FIFO planted at the name.
    """
    return head_of(path, size)


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


#: Larger than the index of any repository stockade guards (100,000 files is
#: about 10 MiB); a larger one is unreadable, which the guard treats as hostile.
MAX_INDEX_BYTES = 256 << 20


class Index:
    """What stockade needs of a git index: its gitlinks, and the shared index it names."""

    __slots__ = ("links", "shared")

    def __init__(self, links: list[str], shared: str) -> None:
        self.links = links
        self.shared = shared


def parse_index(data: bytes) -> Index | None:
    """The gitlinks (submodules) an index records and the `sharedindex.<hash>` its
    `link` extension names; None if it is not an index git would read.

    `git status` recurses into each populated gitlink and runs its config, so
    a gitlink a command added is a repository the host's git will enter.
    Names that leave the worktree (`..`, absolute, `.git`, empty components)
    are dropped: git refuses to check them out, and joining one sent the
    guard to another repository on the machine.
    """
    if len(data) < 12 or data[:4] != b"DIRC":
        return None
    version = int.from_bytes(data[4:8], "big")
    if version not in (2, 3, 4):
        return None
    count = int.from_bytes(data[8:12], "big")
    pos = 12
    links: list[str] = []
    previous = b""
    try:
        for _ in range(count):
            mode = int.from_bytes(data[pos + 24:pos + 28], "big")
            flags = int.from_bytes(data[pos + 60:pos + 62], "big")
            start = pos + 62
            if version >= 3 and flags & 0x4000:
                start += 2
            length = flags & 0xFFF
            if version == 4:
                strip, start = _varint(data, start)
                if strip > len(previous):
                    return None
                end = data.index(b"\x00", start) if length == 0xFFF else start + length - (
                    len(previous) - strip)
                if end < start:
                    return None
                name = previous[:len(previous) - strip] + data[start:end]
                if data[end] != 0:
                    return None
                pos = end + 1
            else:
                # The name's length is in the flags, as git reads it: a NUL
                # planted inside a name must not shift every later entry.
                end = data.index(b"\x00", start) if length == 0xFFF else start + length
                if data[end] != 0:
                    return None
                name = data[start:end]
                pos = pos + ((end - pos + 8) // 8) * 8
            previous = name
            if mode & 0o170000 == 0o160000:
                text = name.decode("utf-8", "surrogateescape")
                try:
                    links.append(check_name(text, git=True))
                except UnsafeName:
                    pass
        shared = ""
        while pos + 8 <= len(data) - 20:
            sig, size = data[pos:pos + 4], int.from_bytes(data[pos + 4:pos + 8], "big")
            if sig == b"link" and size >= 20:
                # sha1 or sha256: the length of the hash is the extension's, less
                # its two bitmaps; both names are tried by the reader.
                shared = data[pos + 8:pos + 8 + min(size, 32)].hex()
            pos += 8 + size
    except (ValueError, IndexError):
        return None
    return Index(links, shared)


def index_gitlinks(root: Root, rel: str) -> list[str] | None:
    """The gitlinks of the index `rel` beneath `root` and of the shared index it
    names; [] when there is no index, None when it cannot be read.

    A split index (`git update-index --split-index`) keeps most entries in
    `sharedindex.<hash>`; reading only `index` would miss a gitlink there.
    Only the shared index git itself would read is read: the others are
    the command's decoys.
    """
    try:
        data = root.read(rel, MAX_INDEX_BYTES)
    except FileNotFoundError:
        return []
    except OSError:
        return None
    if data[:4] != b"DIRC":
        return None
    if b"\x00\x00\xe0\x00" not in data and b"link" not in data:
        return []  # no gitlink mode and no shared index: most indexes
    index = parse_index(data)
    if index is None:
        return None
    links = set(index.links)
    if index.shared:
        base = rel.rpartition("/")[0]
        for width in (40, 64):
            name = f"sharedindex.{index.shared[:width]}"
            shared_rel = f"{base}/{name}" if base else name
            try:
                shared = parse_index(root.read(shared_rel, MAX_INDEX_BYTES))
            except FileNotFoundError:
                continue
            except OSError:
                return None
            if shared is None:
                return None
            links.update(shared.links)
            break
    return sorted(links)


def gitlinks_at(index_path: str) -> list[str] | None:
    """`index_gitlinks` of an index named by its absolute path."""
    gitdir, _, name = index_path.rpartition("/")
    try:
        root = Root(gitdir or "/", os.open(gitdir or "/", os.O_RDONLY | os.O_DIRECTORY
                                            | os.O_NOFOLLOW | os.O_CLOEXEC))
    except FileNotFoundError:
        return []
    except OSError:
        return None
    with root:
        return index_gitlinks(root, name)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """git's offset varint (index v4): each continuation adds one before shifting."""
    byte = data[pos]
    value = byte & 0x7F
    pos += 1
    while byte & 0x80:
        byte = data[pos]
        pos += 1
        value = ((value + 1) << 7) | (byte & 0x7F)
    return value, pos
