"""git's own files read the way git does, without running git.

A sandboxed command writes the workspace, and the person's own git runs
there next. Running the host's git to ask it what it would do is the attack
itself (the config the command wrote names the program git starts), so
these functions parse the few files that decide it: a repository's config
and its includes, a pointer file's head, and the index's gitlinks (the
submodules `git status` recurses into). They read small files and never
walk a tree; what the keys and names mean is `gitpolicy`'s.
"""

from __future__ import annotations

import os

from .fsroot import Root, UnsafeName, check_name, head_of, read_file

#: Larger than any real repository config; a bigger one is not parsed, it
#: is replaced whole (git would still read all of it).
MAX_CONFIG_BYTES = 1 << 20


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


def section_name(header: str) -> str | None:
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
            parsed = section_name(stripped[:close + 1])
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


def read_head(path: str, size: int = 1 << 16) -> bytes:
    """The first `size` bytes of a regular file a command may have written; b"" if there
    is none. Never follows a final symlink and never blocks on a FIFO planted at the name.
    """
    return head_of(path, size)


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
